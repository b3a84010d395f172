//! Per-controller counters and their publication as [`ControllerStatus`] resources, so that
//! `get`/`watch` show the runtime's health like any other state.
//!
//! Counters are updated in memory after every reconcile; a single [`Publisher`] task writes the
//! changed ones with [`StateExt::modify`], so a burst of reconciles costs at most one write per
//! controller per publishing round, and an unchanged status costs none.
//!
//! The publisher is reserved: no controller may be named [`STATUS_OWNER`] or declare
//! [`ControllerStatus`] as an output ([`refuse_reserved`], checked at registration), so
//! nothing else writes what it writes.
//!
//! A failure keeps its structure up to here ([`Failure`]: the `cosi_core::Error` a reconcile
//! returned, or a panic's message); it becomes text only in the published resource, which also
//! records its kind (`versionConflict`, `invalidArgument`, `panic`, ...).

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cosi_core::{
    Error, Resource, ResourceDefinition, ResourceSpec, State, StateExt, UpdateOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backoff::deadline_after;
use crate::wake::WakeSignal;
use crate::{Backoff, Output, RegistrationError};

/// The owner of published status resources. Reserved: no controller may be registered under
/// this name.
pub const STATUS_OWNER: &str = "cosi.engine";

/// Refuses a controller that would collide with the status publisher: one named
/// [`STATUS_OWNER`], or one declaring [`ControllerStatus`] as an output (reading statuses as an
/// input is allowed).
pub(crate) fn refuse_reserved(
    controller: &str,
    outputs: &[Output],
) -> Result<(), RegistrationError> {
    if controller == STATUS_OWNER {
        return Err(RegistrationError::ReservedName {
            name: controller.to_string(),
        });
    }
    if outputs
        .iter()
        .any(|o| &*o.resource_type == <ControllerStatus as ResourceSpec>::TYPE)
    {
        return Err(RegistrationError::ReservedOutput {
            controller: controller.to_string(),
            resource_type: <ControllerStatus as ResourceSpec>::TYPE.to_string(),
            owner: STATUS_OWNER.to_string(),
        });
    }
    Ok(())
}

/// The health of one controller, published as a resource with the controller's name as id.
/// Only the engine writes it: a controller declaring it as an output is refused at
/// registration ([`RegistrationError::ReservedOutput`]).
///
/// Counting rules: every reconcile (for queue controllers: every item reconcile) counts one in
/// `reconciles`; one that returns an error or panics also counts one in `errors`. `restarts`
/// counts restarts after a failure: a failed reconcile of a level-triggered controller, or a
/// failed start hook of a queue controller (a failed item is retried, not restarted).
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerStatus {
    /// Reconciles run.
    pub reconciles: u64,
    /// Reconciles that failed (error or panic).
    pub errors: u64,
    /// Restarts after a failure.
    pub restarts: u64,
    /// Duration of the last reconcile, in microseconds.
    pub last_duration_micros: u64,
    /// The message of the last failure, if any failed.
    pub last_error: Option<String>,
    /// What the last failure was: the error's kind ([`cosi_core::Error::kind_name`], e.g.
    /// `versionConflict`, `invalidArgument`) or `panic`.
    #[serde(default)]
    pub last_error_kind: Option<String>,
}

/// Why a reconcile (or a hook, a mapping) failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// It returned an error.
    Error(Error),
    /// It panicked, with this message.
    Panic(String),
}

impl Failure {
    /// The failure's kind, as status resources record it.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Failure::Error(error) => error.kind_name(),
            Failure::Panic(_) => "panic",
        }
    }

    /// The same failure, said to come from `step` (a hook, a mapping).
    pub(crate) fn during(self, step: &str) -> Failure {
        match self {
            Failure::Error(error) => Failure::Error(error),
            Failure::Panic(message) => Failure::Panic(format!("{step} panicked: {message}")),
        }
    }
}

/// Told of every failure of every controller as it happens, with the controller's name (a
/// failed reconcile, hook, mapping or subscription, and every access violation, even one the
/// controller goes on from): how the test harness fails a test on a failure it did not expect.
/// The engine has none unless the harness installs one.
pub(crate) type FailureSink = Arc<dyn Fn(&str, &Failure) + Send + Sync>;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Error(error) => error.fmt(f),
            Failure::Panic(message) => write!(f, "reconcile panicked: {message}"),
        }
    }
}

impl ResourceSpec for ControllerStatus {
    const TYPE: &'static str = "ControllerStatuses.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "runtime";

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["cstatus"])
            .with_print_column("Reconciles", ".reconciles")
            .with_print_column("Errors", ".errors")
            .with_print_column("Restarts", ".restarts")
            .with_print_column("Last error", ".lastError")
    }
}

/// The live counters of one controller.
#[derive(Debug, Default)]
pub(crate) struct StatusCell {
    status: Mutex<ControllerStatus>,
    dirty: AtomicBool,
}

impl StatusCell {
    pub(crate) fn snapshot(&self) -> ControllerStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn record(&self, duration: Duration, failure: Option<&Failure>, restart: bool) {
        {
            let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
            s.reconciles += 1;
            s.last_duration_micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
            if let Some(failure) = failure {
                s.errors += 1;
                s.last_error = Some(failure.to_string());
                s.last_error_kind = Some(failure.kind().to_string());
            }
            if restart {
                s.restarts += 1;
            }
        }
        self.dirty.store(true, Ordering::SeqCst);
    }

    pub(crate) fn record_restart(&self, failure: &Failure) {
        {
            let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner());
            s.restarts += 1;
            s.errors += 1;
            s.last_error = Some(failure.to_string());
            s.last_error_kind = Some(failure.kind().to_string());
        }
        self.dirty.store(true, Ordering::SeqCst);
    }

    pub(crate) fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::SeqCst)
    }
}

/// Writes one controller's status resource. A write that fails is retried by the next round.
async fn publish(
    state: &dyn State,
    namespace: &str,
    controller: &str,
    cell: &StatusCell,
) -> cosi_core::Result<()> {
    let status = cell.snapshot();
    let template = Resource::new_in(namespace, controller.to_string(), status.clone());
    let result = state
        .modify(template, UpdateOptions::owned_by(Some(STATUS_OWNER)), |r| {
            r.spec = status.clone();
            Ok(())
        })
        .await;
    if result.is_err() {
        cell.dirty.store(true, Ordering::SeqCst);
    }
    result.map(drop)
}

/// Status cells by controller, shared by the engine and the publisher.
pub(crate) type StatusCells = Arc<Mutex<Vec<(Arc<str>, Arc<StatusCell>)>>>;

/// The task that writes changed statuses: one round per ring of its signal, until shutdown.
pub(crate) struct Publisher {
    pub(crate) state: Arc<dyn State>,
    pub(crate) namespace: String,
    pub(crate) cells: StatusCells,
    pub(crate) signal: Arc<WakeSignal>,
    /// Set while a round runs (the engine is not idle then).
    pub(crate) publishing: Arc<AtomicBool>,
    pub(crate) activity: Arc<AtomicU64>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Between attempts after a failed write (reset once a round publishes everything).
    pub(crate) backoff: Backoff,
}

impl Publisher {
    pub(crate) async fn run(mut self) {
        // When a failed write is tried again: a status left unpublished must not wait for the
        // next reconcile of its controller, which may never come.
        let mut retry_at: Option<Instant> = None;
        loop {
            self.publishing.store(true, Ordering::SeqCst);
            if self.signal.take() {
                let cells: Vec<_> = self.cells.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let mut failed = false;
                for (name, cell) in cells {
                    if !cell.take_dirty() {
                        continue;
                    }
                    if let Err(error) = publish(&*self.state, &self.namespace, &name, &cell).await {
                        tracing::warn!(controller = %name, %error, "publishing controller status failed");
                        failed = true;
                    }
                }
                retry_at = if failed {
                    Some(deadline_after(Instant::now(), self.backoff.next_delay()))
                } else {
                    self.backoff.reset();
                    None
                };
                self.activity.fetch_add(1, Ordering::SeqCst);
            }
            self.publishing.store(false, Ordering::SeqCst);
            if *self.shutdown.borrow() {
                return;
            }
            let retry = retry_at.unwrap_or_else(Instant::now);
            tokio::select! {
                _ = self.shutdown.changed() => {}
                _ = self.signal.rung() => {}
                _ = tokio::time::sleep_until(retry), if retry_at.is_some() => {
                    self.signal.wake();
                }
            }
        }
    }
}
