//! [`Runtime`]: one start of the node runtime — the engine with every family's controllers,
//! the service supervisor, and the config applier — from [`Runtime::start`] to
//! [`Runtime::stop`].
//!
//! A start, in order: the persisted config becomes active ([`load_at_start`]: a staged config
//! takes effect, a pending `try` is reverted); the supervisor starts on the services state
//! directory, killing whatever a killed daemon left running there before any service starts;
//! its events are forwarded to the node's event log; the controllers are registered and the
//! engine starts.
//!
//! A stop, in order: the applier is closed (an apply still running finishes, later ones are
//! refused, a pending try's rollback is cancelled: the next start reverts the try); the
//! services are stopped, dependents first; the controllers are stopped; the last service
//! events reach the log.

use std::sync::{Arc, Mutex};

use cosi_controllers::Engine;
use cosi_core::State;
use futures::FutureExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::error::NodeError;
use super::events::{NodeEventKind, NodeEvents};
use super::families::{register_controllers, NodeParts};
use crate::config::load_at_start;
use crate::config::restart::NodeRuntime;
use crate::config::ConfigApplier;
use crate::services::{EventItem, EventReader, Supervisor, SupervisorOptions};

/// One start of the node runtime. See the module docs.
pub struct Runtime {
    boot: u64,
    engine: Engine,
    supervisor: Supervisor,
    applier: ConfigApplier,
    forwarder: Mutex<Option<(oneshot::Sender<()>, JoinHandle<()>)>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("boot", &self.boot)
            .field("supervisor", &self.supervisor)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts the runtime's `boot`-th run over `state`. The applier asks `restarts` for a
    /// restart after a `reboot` apply.
    pub async fn start(
        state: Arc<dyn State>,
        parts: &NodeParts,
        supervisor: SupervisorOptions,
        events: &NodeEvents,
        restarts: Arc<dyn NodeRuntime>,
        boot: u64,
    ) -> Result<Runtime, NodeError> {
        let loaded = load_at_start(&*state).await?;
        tracing::info!(
            boot,
            active_version = ?loaded.active_version.map(|v| v.get()),
            changed = loaded.changed,
            "node runtime starting"
        );
        // Kills (and logs) what a killed daemon left running, before any service starts.
        let supervisor = Supervisor::new(supervisor)?;
        let (stop, stopped) = oneshot::channel();
        let forwarder = tokio::spawn(forward(supervisor.events(0), events.clone(), stopped));
        let engine = Engine::new(state.clone());
        register_controllers(&engine, parts, &supervisor, boot)?;
        let applier = ConfigApplier::new(state, restarts);
        engine.start();
        Ok(Runtime {
            boot,
            engine,
            supervisor,
            applier,
            forwarder: Mutex::new(Some((stop, forwarder))),
        })
    }

    /// Which start this is: 1 for the daemon's first, one more per restart in place.
    pub fn boot(&self) -> u64 {
        self.boot
    }

    /// The engine running the controllers.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The service supervisor (the operator's services, logs and events).
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// The one apply entry point of this run.
    pub fn applier(&self) -> &ConfigApplier {
        &self.applier
    }

    /// Stops the runtime (see the module docs). A second call only waits for nothing.
    pub async fn stop(&self) {
        self.applier.close().await;
        self.supervisor.shutdown().await;
        let report = self.engine.shutdown().await;
        if report.aborted > 0 {
            tracing::warn!(
                aborted = report.aborted,
                "controllers did not stop in time and were aborted"
            );
        }
        let forwarder = self
            .forwarder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((stop, task)) = forwarder {
            let _ = stop.send(());
            let _ = task.await;
        }
        tracing::info!(boot = self.boot, "node runtime stopped");
    }
}

/// Forwards the supervisor's events to the node's log until stopped, then forwards what is
/// already buffered (the last events of the services that were just stopped).
async fn forward(mut reader: EventReader, events: NodeEvents, mut stop: oneshot::Receiver<()>) {
    let record = |item: EventItem| match item {
        EventItem::Event(record) => {
            events.push(
                record.event.time,
                NodeEventKind::Service {
                    service: record.service,
                    state: record.event.state,
                    message: record.event.message,
                },
            );
        }
        // Forwarding is a push into a ring: falling behind means the runtime is starved.
        EventItem::Missed(n) => {
            tracing::warn!(
                missed = n,
                "service events were lost on the way to the node log"
            )
        }
    };
    loop {
        tokio::select! {
            biased;
            item = reader.next() => match item {
                Some(item) => record(item),
                None => return,
            },
            _ = &mut stop => break,
        }
    }
    while let Some(Some(item)) = reader.next().now_or_never() {
        record(item);
    }
}
