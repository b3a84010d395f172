//! A service's states, its health, and the ring of its last events.
//!
//! Every state change and every health flip pushes one [`ServiceEvent`]; the ring keeps the
//! last [`EVENT_RING`] of them, newest last, because the newest event is what an operator
//! reads first. This module knows no process and no supervisor.

use std::collections::VecDeque;
use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// How many events a service keeps (as the original).
pub const EVENT_RING: usize = 64;

/// Where a service is in its life.
///
/// The names (and their order) are the original's: a service goes `Starting` → `Waiting` (for
/// its dependencies) → `Preparing` → `Running` → `Stopping` → `Finished` or `Failed`, or is
/// `Skipped`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
pub enum ServiceState {
    /// Known, not started yet.
    #[default]
    Initialized,
    /// Resolving the program and checking it can start.
    Preparing,
    /// Waiting for its dependencies (the event says for which).
    Waiting,
    /// The process runs.
    Running,
    /// The process is being stopped.
    Stopping,
    /// The process exited with code 0, or was stopped on request.
    Finished,
    /// The process exited with an error, was killed, or could not start.
    Failed,
    /// Not run by its spec; counts as up for dependents.
    Skipped,
    /// The run begins.
    Starting,
}

impl ServiceState {
    /// The state's name, as shown in tables and events (`Running`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceState::Initialized => "Initialized",
            ServiceState::Preparing => "Preparing",
            ServiceState::Waiting => "Waiting",
            ServiceState::Running => "Running",
            ServiceState::Stopping => "Stopping",
            ServiceState::Finished => "Finished",
            ServiceState::Failed => "Failed",
            ServiceState::Skipped => "Skipped",
            ServiceState::Starting => "Starting",
        }
    }
}

impl fmt::Display for ServiceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of a service's health checks.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No check result yet, or the service has no health check.
    #[default]
    Unknown,
    /// The last check passed.
    Ok,
    /// The last check failed (or the service stopped running).
    Failed,
}

impl Health {
    /// `ok`, `failed` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Ok => "ok",
            Health::Failed => "failed",
        }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of a service: the state it entered (or stayed in, for a health flip), why, its
/// health at that moment, and when.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ServiceEvent {
    /// The state after the event.
    pub state: ServiceState,
    /// Why, in words: `Process exited with code 1: unknown flag: --foo`.
    pub message: String,
    /// Health at the event.
    pub health: Health,
    /// Wall-clock time of the event.
    pub time: SystemTime,
}

/// The last [`EVENT_RING`] events of one service, oldest first.
///
/// ```
/// use cosi_node::services::{EventRing, Health, ServiceEvent, ServiceState, EVENT_RING};
/// let mut ring = EventRing::default();
/// for i in 0..100 {
///     ring.push(ServiceEvent {
///         state: ServiceState::Running,
///         message: format!("event {i}"),
///         health: Health::Unknown,
///         time: std::time::SystemTime::UNIX_EPOCH,
///     });
/// }
/// assert_eq!(ring.len(), EVENT_RING);
/// assert_eq!(ring.newest().unwrap().message, "event 99");
/// assert_eq!(ring.iter().next().unwrap().message, "event 36");
/// ```
#[derive(Clone, Debug, Default)]
pub struct EventRing {
    events: VecDeque<ServiceEvent>,
}

impl EventRing {
    /// Adds an event, dropping the oldest when full.
    pub fn push(&mut self, event: ServiceEvent) {
        if self.events.len() == EVENT_RING {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// The newest event.
    pub fn newest(&self) -> Option<&ServiceEvent> {
        self.events.back()
    }

    /// Events, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &ServiceEvent> + ExactSizeIterator {
        self.events.iter()
    }

    /// How many events are kept.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// An event of one service, on the supervisor-wide stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEventRecord {
    /// The service.
    pub service: String,
    /// The event.
    pub event: ServiceEvent,
}
