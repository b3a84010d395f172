//! [`Node`]: the node's life in a daemon process — start, restarts in place, shutdown — and
//! [`NodeHandle`], what an API adapter holds to reach whichever runtime runs now.
//!
//! What lives as long as the process: the state (see [`super::NodeStore`]), the parts the
//! controllers use ([`NodeParts`]), the event log ([`NodeEvents`], fed with config events
//! from the `ConfigHistory` for the whole life of the process, and with service events by
//! each runtime), and the restart signal every runtime's applier asks for restarts through.
//! What is new at each start: the [`Runtime`] (engine, supervisor, applier).
//!
//! A **restart in place** (what a `reboot` apply asks for) takes the runtime out of the
//! handle first — calls that need it meanwhile get a retryable "restarting" error — stops it,
//! and starts the next one, whose start makes the persisted config active. Everything that
//! reads the state keeps working across it: the store is not restarted, so a watch goes on
//! and sees the old runtime's services go and the new one's come.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cosi_core::{downcast_ref, Event, Registry, ResourceSpec, State, Watch, WatchKindOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::NodeError;
use super::events::{NodeEventKind, NodeEventReader, NodeEvents};
use super::families::{controller_outputs, controller_owners, NodeParts};
use super::runtime::Runtime;
use crate::config::restart::{RestartRequest, RestartSignal};
use crate::config::ConfigHistory;
use crate::services::SupervisorOptions;

/// How a [`Node`] runs.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    /// What the controllers use across restarts.
    pub parts: NodeParts,
    /// How each start's supervisor runs (its state directory, image resolver, reaping).
    pub supervisor: SupervisorOptions,
}

/// The node in a daemon process. See the module docs.
pub struct Node {
    state: Arc<dyn State>,
    options: NodeOptions,
    events: NodeEvents,
    current: watch::Sender<Option<Arc<Runtime>>>,
    signal: RestartSignal,
    requests: watch::Receiver<Option<RestartRequest>>,
    boots: u64,
    owners: BTreeSet<String>,
    outputs: BTreeMap<String, BTreeSet<String>>,
    history: JoinHandle<()>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("boots", &self.boots)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Publishes the definitions of `registry` (namespace `meta`, so clients resolve types
    /// and aliases), starts following the config history, and starts the runtime.
    pub async fn start(
        state: Arc<dyn State>,
        registry: &Registry,
        options: NodeOptions,
    ) -> Result<Node, NodeError> {
        registry.publish(&*state).await?;
        let events = NodeEvents::default();
        // Subscribed before the first start, which may itself record an entry.
        let entries = state
            .watch_kind(
                &ConfigHistory::kind(),
                WatchKindOptions {
                    bootstrap: true,
                    ..WatchKindOptions::default()
                },
            )
            .await?;
        let history = tokio::spawn(follow_history(entries, events.clone()));
        let (signal, requests) = RestartSignal::new();
        let runtime = match Runtime::start(
            state.clone(),
            &options.parts,
            options.supervisor.clone(),
            &events,
            Arc::new(signal.clone()),
            1,
        )
        .await
        {
            Ok(runtime) => runtime,
            Err(error) => {
                history.abort();
                return Err(error);
            }
        };
        let owners = controller_owners(runtime.engine());
        let outputs = controller_outputs(runtime.engine());
        Ok(Node {
            state,
            options,
            events,
            current: watch::Sender::new(Some(Arc::new(runtime))),
            signal,
            requests,
            boots: 1,
            owners,
            outputs,
            history,
        })
    }

    /// The node's state.
    pub fn state(&self) -> &Arc<dyn State> {
        &self.state
    }

    /// What an API adapter holds.
    pub fn handle(&self) -> NodeHandle {
        NodeHandle {
            current: self.current.subscribe(),
            events: self.events.clone(),
        }
    }

    /// The owners that are the runtime, not a user ([`controller_owners`]); the same at every
    /// start.
    pub fn controller_owners(&self) -> &BTreeSet<String> {
        &self.owners
    }

    /// The types the runtime writes, with their writers ([`controller_outputs`]); the same at
    /// every start.
    pub fn controller_outputs(&self) -> &BTreeMap<String, BTreeSet<String>> {
        &self.outputs
    }

    /// How many times the runtime started in this process.
    pub fn boots(&self) -> u64 {
        self.boots
    }

    /// Waits for the next restart request of an applier. Cancel-safe: a request that arrives
    /// while nobody waits is returned by the next call (a later one replaces it).
    pub async fn restart_requested(&mut self) -> RestartRequest {
        loop {
            if self.requests.changed().await.is_err() {
                // Unreachable while `self.signal` holds the sender; never resolve rather than spin.
                std::future::pending::<()>().await;
            }
            if let Some(request) = self.requests.borrow_and_update().clone() {
                return request;
            }
        }
    }

    /// Restarts the runtime in place (see the module docs). On an error the node has no
    /// runtime: every call through a handle is refused until the daemon gives up.
    pub async fn restart(&mut self) -> Result<(), NodeError> {
        let previous = self.current.send_replace(None);
        if let Some(previous) = previous {
            previous.stop().await;
        }
        self.boots += 1;
        let runtime = Runtime::start(
            self.state.clone(),
            &self.options.parts,
            self.options.supervisor.clone(),
            &self.events,
            Arc::new(self.signal.clone()),
            self.boots,
        )
        .await?;
        self.current.send_replace(Some(Arc::new(runtime)));
        Ok(())
    }

    /// Stops the runtime (services, dependents first, then the controllers) and the history
    /// follower. The state stays open: closing it is the caller's.
    pub async fn shutdown(self) {
        if let Some(runtime) = self.current.send_replace(None) {
            runtime.stop().await;
        }
        self.history.abort();
        let _ = self.history.await;
    }
}

/// What an API adapter holds: the runtime running now, and the event log. Cheap to clone.
#[derive(Clone, Debug)]
pub struct NodeHandle {
    current: watch::Receiver<Option<Arc<Runtime>>>,
    events: NodeEvents,
}

impl NodeHandle {
    /// The runtime running now; `None` while it restarts or after the node stopped.
    pub fn runtime(&self) -> Option<Arc<Runtime>> {
        self.current.borrow().clone()
    }

    /// The node's events: the newest `tail` (`usize::MAX`: all kept), then live ones.
    pub fn events(&self, tail: usize) -> NodeEventReader {
        self.events.read(tail)
    }
}

/// Puts every new `ConfigHistory` entry into the event log. Entries are numbered, so the
/// contents a resync delivers again are not logged twice.
async fn follow_history(mut entries: Watch, events: NodeEvents) {
    let mut last = 0;
    while let Some(event) = entries.recv().await {
        let resource = match event {
            Event::Created { resource, .. } => resource,
            Event::Errored { error } => {
                tracing::warn!(%error, "the config history watch failed; config events stop");
                return;
            }
            _ => continue,
        };
        let Ok(entry) = downcast_ref::<ConfigHistory>(&*resource) else {
            continue;
        };
        let spec = &entry.spec;
        if spec.sequence <= last {
            continue;
        }
        last = spec.sequence;
        // The moment the change took effect (before its writes, so before any reaction to it);
        // an entry whose time does not read as one falls back to when it was recorded.
        let time = humantime::parse_rfc3339_weak(&spec.time)
            .ok()
            .filter(|&t| t <= entry.metadata.created())
            .unwrap_or_else(|| entry.metadata.created());
        events.push(
            time,
            NodeEventKind::Config {
                mode: spec.mode.clone(),
                actor: spec.actor.clone(),
                // What the change made current: the persisted config for the modes that
                // write only it, the active one otherwise.
                version: if matches!(spec.mode.as_str(), "staged" | "reboot") {
                    spec.persisted_version
                } else {
                    spec.active_version.or(spec.persisted_version)
                },
                summary: spec.summary.clone(),
            },
        );
    }
}
