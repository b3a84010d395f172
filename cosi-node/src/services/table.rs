//! The contract between the [`super::Supervisor`] and its runners: the state they share.
//!
//! The supervisor composes runners; neither imports the other's internals, both depend on
//! this module. What it holds, and who may change what:
//!
//! - [`Desired`]: what a runner is asked to do. Only the supervisor writes it (through the
//!   [`Entry::desired`] sender); a runner only reads its receiver.
//! - [`Record`]: what is known of a service now. A runner changes **its own** record only,
//!   through [`Shared::transition`] (a change with an event) or [`Shared::update`] (without
//!   one), or under [`Shared::table`]'s lock when a check and a change must be one critical
//!   section (the `alive` mark after its dependencies were found up). It may read every
//!   record (dependencies, dependents). The supervisor creates records and only reads them.
//! - [`Table`]: the records and desired senders by id, behind one lock that is never held
//!   across an `.await`. The supervisor adds entries; a runner removes its own, once, through
//!   [`Shared::retire`] when it was asked to stop and forget the service; that closes the
//!   service's [`LogBook`], so its log follows end.
//! - [`Shared`]: the table with what every runner reads (the options, the process group
//!   ledger) and the two signals out: the change counter (dependency waits and the status
//!   mirror follow it) and the event stream.
//!
//! It must not start processes or decide anything about a service's life: that is the
//! runner's business.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::events::{EventRing, Health, ServiceEvent, ServiceEventRecord, ServiceState};
use super::ledger::Ledger;
use super::logs::LogBook;
use super::options::SupervisorOptions;
use super::reaper::Reaper;
use super::spec::ServiceSpec;

/// What the runner of a service is asked to do. Changed by the supervisor, read by the runner.
#[derive(Clone, Debug)]
pub(super) struct Desired {
    pub(super) spec: Arc<ServiceSpec>,
    /// Meant to run (false after an operator stop).
    pub(super) run: bool,
    /// Stop and forget the service.
    pub(super) removed: bool,
    /// Bumped by start and restart: start now if not running (cuts a backoff short).
    pub(super) kick: u64,
    /// Bumped by restart: restart the running process.
    pub(super) restart: u64,
}

/// What is known of a service now (under the table's lock).
#[derive(Debug)]
pub(super) struct Record {
    pub(super) spec: Arc<ServiceSpec>,
    pub(super) state: ServiceState,
    pub(super) health: Health,
    pub(super) health_message: Option<String>,
    pub(super) pid: Option<u32>,
    pub(super) restarts: u32,
    pub(super) events: EventRing,
    /// A process of the service exists (from just before spawning until it is reaped).
    pub(super) alive: bool,
    /// The service is being stopped on purpose: it is not up, and its dependents must stop.
    pub(super) draining: bool,
}

impl Record {
    /// The record of a service just added with `spec`.
    pub(super) fn new(spec: Arc<ServiceSpec>) -> Self {
        Record {
            spec,
            state: ServiceState::Initialized,
            health: Health::Unknown,
            health_message: None,
            pid: None,
            restarts: 0,
            events: EventRing::default(),
            alive: false,
            draining: false,
        }
    }

    /// Up, for its dependents: skipped, or running, not being stopped, and healthy (or with
    /// no health check).
    pub(super) fn is_up(&self) -> bool {
        match self.state {
            ServiceState::Skipped => true,
            ServiceState::Running => {
                !self.draining && (self.spec.health.is_none() || self.health == Health::Ok)
            }
            _ => false,
        }
    }
}

/// One service in the table.
pub(super) struct Entry {
    /// The supervisor's side of the runner's [`Desired`] channel.
    pub(super) desired: watch::Sender<Desired>,
    pub(super) record: Record,
    pub(super) logs: Arc<LogBook>,
    /// The runner's task, until shutdown takes it to wait for it.
    pub(super) task: Option<JoinHandle<()>>,
}

/// Every service, by id.
#[derive(Default)]
pub(super) struct Table {
    pub(super) services: BTreeMap<String, Entry>,
}

/// The state shared by the supervisor handle and the runners.
pub(super) struct Shared {
    pub(super) options: SupervisorOptions,
    table: Mutex<Table>,
    /// Bumped on every change of any service: dependency waits and the status mirror follow it.
    pub(super) changes: watch::Sender<u64>,
    pub(super) events: broadcast::Sender<ServiceEventRecord>,
    pub(super) ledger: Ledger,
    /// Lives as long as any runner does: orphans of service groups are reaped while a service
    /// can still leave them.
    _reaper: Option<Reaper>,
}

impl Shared {
    /// An empty table; `events` buffers this many events for slow readers.
    pub(super) fn new(
        options: SupervisorOptions,
        ledger: Ledger,
        reaper: Option<Reaper>,
        events: usize,
    ) -> Self {
        let (changes, _) = watch::channel(0);
        let (events, _) = broadcast::channel(events);
        Shared {
            options,
            table: Mutex::new(Table::default()),
            changes,
            events,
            ledger,
            _reaper: reaper,
        }
    }

    /// The table, locked. Never hold the guard across an `.await`.
    pub(super) fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the record of `id` and pushes an event (state, message, health after the
    /// change). Does nothing if the service is gone.
    pub(super) fn transition(
        &self,
        id: &str,
        state: ServiceState,
        message: impl Into<String>,
        change: impl FnOnce(&mut Record),
    ) {
        let message = message.into();
        let mut table = self.table();
        let Some(entry) = table.services.get_mut(id) else {
            return;
        };
        let record = &mut entry.record;
        change(record);
        record.state = state;
        let event = ServiceEvent {
            state,
            message,
            health: record.health,
            time: SystemTime::now(),
        };
        tracing::info!(service = %id, state = %state, message = %event.message, "service event");
        record.events.push(event.clone());
        // Sent under the lock, so the stream's order is the rings' order.
        let _ = self.events.send(ServiceEventRecord {
            service: id.to_string(),
            event,
        });
        drop(table);
        self.bump();
    }

    /// Changes the record of `id` without an event.
    pub(super) fn update(&self, id: &str, change: impl FnOnce(&mut Record)) {
        let mut table = self.table();
        if let Some(entry) = table.services.get_mut(id) {
            change(&mut entry.record);
        }
        drop(table);
        self.bump();
    }

    /// Tells every follower that something changed.
    pub(super) fn bump(&self) {
        self.changes.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// The runner of `id` is done: forget the service if it was removed (and not re-added),
    /// and close its log book, so whoever follows its logs reads the end.
    pub(super) fn retire(&self, id: &str) -> bool {
        let mut table = self.table();
        let removed = table
            .services
            .get(id)
            .is_some_and(|e| e.desired.borrow().removed);
        if removed {
            if let Some(entry) = table.services.remove(id) {
                entry.logs.close();
            }
        }
        drop(table);
        self.bump();
        removed
    }
}
