//! The [`Supervisor`]: a plain async component that runs one task per service and answers the
//! operator's questions about them. It knows no resources; the controllers in
//! [`super::controllers`] drive it from `ServiceSpec`s and mirror it into status resources.
//!
//! It composes one runner per service ([`super::runner`]) over the state they share
//! ([`super::table`], which says what each side may change); no runner imports it back.
//!
//! # What it guarantees
//!
//! - Every service process leads its own process group; a stop is SIGTERM to the group, then
//!   SIGKILL after the spec's stop timeout, and whatever is left of the group once the main
//!   process exits is SIGKILLed too. Direct children are reaped by their handles; orphans of a
//!   service group are reaped by the [`super::Reaper`] when
//!   [`SupervisorOptions::reap_orphans`] is on. Groups are recorded in the state directory
//!   from before their first process starts ([`super::ledger`]), so what a SIGKILLed daemon
//!   left running is killed when the next supervisor starts on that directory, before any
//!   service starts. Exec health probes run in groups of their own, recorded the same way; a
//!   stop (or a new health check) kills and reaps the probe in flight.
//! - A spec a process cannot be given (a NUL byte, an environment name with `=`) or with a
//!   zero health period or timeout fails its service with `Invalid spec: <field> ...` and is
//!   not retried until the spec changes.
//! - Dependencies: a service starts only when every dependency is *up* (running and healthy —
//!   or running with no health check — or skipped); its `Waiting` event says what it still
//!   waits for, updated as conditions are met. A deliberate stop (operator stop or restart, a
//!   spec change that needs a restart, removal, shutdown) first stops the services that depend
//!   on it, transitively, and waits for them to be down; they then wait for it to be up again.
//!   A dependency that crashes on its own does not stop its dependents (as in the original).
//! - Restarts follow the spec's policy with exponential backoff:
//!   [`SupervisorOptions::restart_backoff`] (default 500 ms doubling up to 30 s), reset once a
//!   process stayed up for [`SupervisorOptions::stable_after`] (default 10 s), and cut short by
//!   an operator start/restart or a spec change. During the backoff the newest event is the
//!   failure (`Process exited with code 1: <its last stderr line>`): it is what an operator
//!   reads first.
//! - Nothing a service does can block the supervisor: output is read continuously into bounded
//!   buffers ([`super::logs`]), every wait is a `select!` with the service's control channel, and
//!   the shared table's lock is never held across an `.await`.
//! - A process that left a service's group cannot pin the supervisor's output readers: a
//!   run's output is read for at most 2 s after its main process exited and its group was
//!   killed (only such a process can hold the pipes that long), then the readers are aborted
//!   and the pipes closed, so no reader outlives the run.
//! - Every follow of a removed service's logs ends as the service leaves the table (the runner
//!   closes its [`LogBook`] as it retires), whoever still holds the book.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::events::{Health, ServiceEvent, ServiceEventRecord, ServiceState};
use super::ledger::{Ledger, Leftover};
use super::log_file::{self, RotatingFile};
use super::logs::{LogBook, LogReader};
use super::options::SupervisorOptions;
use super::reaper::Reaper;
use super::runner;
use super::spec::ServiceSpec;
use super::table::{Desired, Entry, Record, Shared};

/// Why an operator's request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No service has this id.
    #[error("service {0:?} is not known on this node")]
    Unknown(String),
    /// The id cannot name a service.
    #[error("service id {id:?} is invalid: {reason}")]
    InvalidId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The supervisor is shut down.
    #[error("the service supervisor is shut down")]
    Closed,
    /// The state directory could not be used.
    #[error("service state directory {path}: {source}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One service as the supervisor sees it now.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceInfo {
    /// The service id.
    pub id: String,
    /// The spec it runs with.
    pub spec: ServiceSpec,
    /// Its state.
    pub state: ServiceState,
    /// Its health.
    pub health: Health,
    /// Why it is (un)healthy, from the last check.
    pub health_message: Option<String>,
    /// The main process, while there is one.
    pub pid: Option<u32>,
    /// Automatic restarts since the service was added.
    pub restarts: u32,
    /// Whether it is meant to run (false after an operator stop).
    pub enabled_by_operator: bool,
    /// Its last events, oldest first.
    pub events: Vec<ServiceEvent>,
}

impl ServiceInfo {
    /// The newest event: what an operator reads first.
    pub fn last_event(&self) -> Option<&ServiceEvent> {
        self.events.last()
    }
}

/// What an event reader receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventItem {
    /// An event.
    Event(ServiceEventRecord),
    /// This many events went by while the reader was too slow (they are still in the
    /// services' rings).
    Missed(u64),
}

/// How many events the supervisor-wide stream buffers for a slow reader.
pub const EVENT_STREAM_BUFFER: usize = 1024;

/// Reads service events: a tail, then live events. See [`Supervisor::events`].
#[derive(Debug)]
pub struct EventReader {
    backlog: std::collections::VecDeque<ServiceEventRecord>,
    live: broadcast::Receiver<ServiceEventRecord>,
}

impl EventReader {
    /// The next item; `None` once the supervisor is gone.
    pub async fn next(&mut self) -> Option<EventItem> {
        if let Some(record) = self.backlog.pop_front() {
            return Some(EventItem::Event(record));
        }
        match self.live.recv().await {
            Ok(record) => Some(EventItem::Event(record)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(EventItem::Missed(n)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// The reader as a stream (for a server-streaming API).
    pub fn into_stream(self) -> impl futures::Stream<Item = EventItem> + Send + 'static {
        futures::stream::unfold(self, |mut reader| async move {
            let item = reader.next().await?;
            Some((item, reader))
        })
    }
}

/// The service supervisor. Cheap to clone: every clone drives the same services.
///
/// ```
/// use std::time::Duration;
/// use cosi_node::services::{Supervisor, SupervisorOptions, ServiceSpec, ServiceState, RestartPolicy};
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let supervisor = Supervisor::new(SupervisorOptions::default()).unwrap();
/// let spec = ServiceSpec::command("/bin/sh")
///     .with_args(["-c", "echo hello; exit 3"])
///     .with_restart(RestartPolicy::Never);
/// let mut events = supervisor.events(0);
/// supervisor.apply("hello", spec).unwrap();
/// // Wait for the event, never for time.
/// while let Some(item) = events.next().await {
///     if let cosi_node::services::EventItem::Event(e) = item {
///         if e.event.state == ServiceState::Failed {
///             assert_eq!(e.event.message, "Process exited with code 3");
///             break;
///         }
///     }
/// }
/// let logs: Vec<String> = supervisor.tail("hello", 10).unwrap().iter().map(|l| l.text.clone()).collect();
/// assert_eq!(logs, ["hello"]);
/// assert!(supervisor.start("nope").is_err());
/// supervisor.shutdown().await;
/// # });
/// ```
#[derive(Clone)]
pub struct Supervisor {
    /// What the runners share with the supervisor.
    shared: Arc<Shared>,
    /// What the start-up sweep killed.
    leftovers: Arc<[Leftover]>,
    /// Set by shutdown (under the table's lock): later applies are refused.
    closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("services", &self.ids())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor with no services. With a state directory, first kills what an earlier
    /// supervisor on that directory left running ([`Self::leftovers`] says what). Must be
    /// called within a tokio runtime.
    pub fn new(options: SupervisorOptions) -> Result<Self, ServiceError> {
        let state_error = |path: PathBuf| move |source| ServiceError::StateDir { path, source };
        let groups = options.state_dir.as_ref().map(|d| d.join("groups"));
        let ledger = Ledger::open(groups.as_deref())
            .map_err(state_error(groups.clone().unwrap_or_default()))?;
        let leftovers = ledger
            .sweep()
            .map_err(state_error(groups.clone().unwrap_or_default()))?;
        if let Some(dir) = &options.state_dir {
            let logs = dir.join("logs");
            std::fs::create_dir_all(&logs).map_err(state_error(logs.clone()))?;
        }
        let reaper = if options.reap_orphans {
            Some(Reaper::install().map_err(state_error(PathBuf::from("/proc")))?)
        } else {
            None
        };
        Ok(Supervisor {
            shared: Arc::new(Shared::new(options, ledger, reaper, EVENT_STREAM_BUFFER)),
            leftovers: leftovers.into(),
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// What the start-up sweep found left over by an earlier supervisor, and killed.
    pub fn leftovers(&self) -> &[Leftover] {
        &self.leftovers
    }

    // --- Specs (the controllers' side) ---

    /// Adds the service `id`, or gives it a new spec. A change of program, arguments,
    /// environment, working directory or `enabled` restarts it (its dependents first stop and
    /// then follow); any other change applies to the running process in place. Applying the
    /// spec it already has changes nothing.
    pub fn apply(&self, id: &str, spec: ServiceSpec) -> Result<(), ServiceError> {
        validate_id(id)?;
        let mut table = self.shared.table();
        if self.closed.load(Ordering::SeqCst) {
            return Err(ServiceError::Closed);
        }
        if let Some(entry) = table.services.get_mut(id) {
            let same = *entry.desired.borrow().spec == spec && !entry.desired.borrow().removed;
            if !same {
                entry.desired.send_modify(|d| {
                    d.spec = Arc::new(spec);
                    d.removed = false;
                });
            }
            return Ok(());
        }
        let spec = Arc::new(spec);
        let logs = Arc::new(self.open_logs(id));
        let (desired, receiver) = watch::channel(Desired {
            spec: spec.clone(),
            run: true,
            removed: false,
            kick: 0,
            restart: 0,
        });
        let task = tokio::spawn(runner::run(
            self.shared.clone(),
            id.to_string(),
            receiver,
            logs.clone(),
        ));
        table.services.insert(
            id.to_string(),
            Entry {
                desired,
                record: Record::new(spec),
                logs,
                task: Some(task),
            },
        );
        drop(table);
        self.shared.bump();
        Ok(())
    }

    /// Stops the service `id` (its dependents first) and forgets it. Returns at once; the
    /// service leaves [`Self::list`] once it is down.
    pub fn remove(&self, id: &str) -> Result<(), ServiceError> {
        self.with_desired(id, |d| d.removed = true)
    }

    /// The ids of every service, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.shared.table().services.keys().cloned().collect()
    }

    // --- The operator's surface ---

    /// Every service, sorted by id.
    pub fn list(&self) -> Vec<ServiceInfo> {
        let table = self.shared.table();
        table
            .services
            .iter()
            .map(|(id, entry)| info_of(id, entry))
            .collect()
    }

    /// One service.
    pub fn get(&self, id: &str) -> Result<ServiceInfo, ServiceError> {
        let table = self.shared.table();
        table
            .services
            .get(id)
            .map(|entry| info_of(id, entry))
            .ok_or_else(|| ServiceError::Unknown(id.to_string()))
    }

    /// Starts a stopped service, or one waiting out a restart backoff, now. A running service
    /// is left as it is.
    pub fn start(&self, id: &str) -> Result<(), ServiceError> {
        self.with_desired(id, |d| {
            d.run = true;
            d.kick += 1;
        })
    }

    /// Stops a service (its dependents first); it stays stopped until [`Self::start`] or
    /// [`Self::restart`], whatever its spec says.
    pub fn stop(&self, id: &str) -> Result<(), ServiceError> {
        self.with_desired(id, |d| d.run = false)
    }

    /// Stops the service if it runs (its dependents first) and starts it again.
    pub fn restart(&self, id: &str) -> Result<(), ServiceError> {
        self.with_desired(id, |d| {
            d.run = true;
            d.kick += 1;
            d.restart += 1;
        })
    }

    /// The last `n` lines of a service's output, oldest first.
    pub fn tail(&self, id: &str, n: usize) -> Result<Vec<Arc<super::LogLine>>, ServiceError> {
        Ok(self.log_book(id)?.tail(n))
    }

    /// A reader of a service's output: its last `tail` lines, then, with `follow`, every new
    /// line until the service is removed. A reader that falls behind skips lines (it is told
    /// how many); it never slows the service down.
    pub fn logs(&self, id: &str, tail: usize, follow: bool) -> Result<LogReader, ServiceError> {
        Ok(self.log_book(id)?.read(tail, follow))
    }

    /// Waits until every output line of `id` recorded so far is in its log file.
    pub async fn flush_logs(&self, id: &str) -> Result<(), ServiceError> {
        let book = self.log_book(id)?;
        book.flush().await;
        Ok(())
    }

    /// A reader of every service's events: the newest `tail` events (of all services, in the
    /// order they happened), then live ones.
    pub fn events(&self, tail: usize) -> EventReader {
        let table = self.shared.table();
        let mut backlog: Vec<ServiceEventRecord> = table
            .services
            .iter()
            .flat_map(|(id, entry)| {
                entry.record.events.iter().map(|event| ServiceEventRecord {
                    service: id.clone(),
                    event: event.clone(),
                })
            })
            .collect();
        backlog.sort_by_key(|r| r.event.time);
        let skip = backlog.len().saturating_sub(tail);
        let live = self.shared.events.subscribe();
        EventReader {
            backlog: backlog.into_iter().skip(skip).collect(),
            live,
        }
    }

    /// A receiver that changes whenever any service changes (its value means nothing).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    /// Stops every service, dependents before their dependencies, and waits for them. Later
    /// calls of [`Self::apply`] are refused.
    pub async fn shutdown(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut table = self.shared.table();
            self.closed.store(true, Ordering::SeqCst);
            table
                .services
                .values_mut()
                .filter_map(|entry| {
                    entry.desired.send_modify(|d| d.removed = true);
                    entry.task.take()
                })
                .collect()
        };
        for task in tasks {
            let _ = task.await;
        }
    }

    fn with_desired(
        &self,
        id: &str,
        change: impl FnOnce(&mut Desired),
    ) -> Result<(), ServiceError> {
        let table = self.shared.table();
        let entry = table
            .services
            .get(id)
            .ok_or_else(|| ServiceError::Unknown(id.to_string()))?;
        entry.desired.send_modify(change);
        Ok(())
    }

    fn log_book(&self, id: &str) -> Result<Arc<LogBook>, ServiceError> {
        let table = self.shared.table();
        table
            .services
            .get(id)
            .map(|e| e.logs.clone())
            .ok_or_else(|| ServiceError::Unknown(id.to_string()))
    }

    fn open_logs(&self, id: &str) -> LogBook {
        let options = &self.shared.options;
        let file = options.state_dir.as_ref().and_then(|dir| {
            let path = dir.join("logs").join(format!("{id}.log"));
            match RotatingFile::open(path.clone(), options.log_file.clone()) {
                Ok(file) => Some(log_file::spawn_writer(file)),
                Err(error) => {
                    tracing::warn!(service = %id, path = %path.display(), %error, "service log file unavailable; keeping logs in memory only");
                    None
                }
            }
        });
        LogBook::with_file(options.log_lines, file)
    }
}

fn info_of(id: &str, entry: &Entry) -> ServiceInfo {
    let record = &entry.record;
    ServiceInfo {
        id: id.to_string(),
        spec: (*record.spec).clone(),
        state: record.state,
        health: record.health,
        health_message: record.health_message.clone(),
        pid: record.pid,
        restarts: record.restarts,
        enabled_by_operator: entry.desired.borrow().run,
        events: record.events.iter().cloned().collect(),
    }
}

/// A service id names files (`logs/<id>.log`) and appears in messages: 1 to 63 characters of
/// `a-z A-Z 0-9 . _ -`, not starting with `.` or `-`.
fn validate_id(id: &str) -> Result<(), ServiceError> {
    let invalid = |reason| ServiceError::InvalidId {
        id: id.to_string(),
        reason,
    };
    if id.is_empty() || id.len() > 63 {
        return Err(invalid("it must be 1 to 63 characters long"));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid(
            "only letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    if id.starts_with(['.', '-']) {
        return Err(invalid("it must not start with '.' or '-'"));
    }
    Ok(())
}
