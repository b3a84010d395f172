//! The [`Engine`]: registers controllers into the dependency graph, runs each in its own task,
//! shares one kind watch per watched kind between them, publishes their status, and shuts them
//! down gracefully.
//!
//! The engine composes the pieces and owns none of their logic: the runners (`level`, `queue`)
//! drive controllers through the contract in `runner`, the feeds share kind watches, the status
//! publisher writes counters; what a controller may read and write is decided by
//! [`crate::ControllerState`], how it reconciles by the controller itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use cosi_core::{ResourceSpec, Result, State};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::access::{Access, InputRegistry};
use crate::feed::KindFeeds;
use crate::level::LevelActivity;
use crate::runner::{deadline_after, FeedTarget, IdleProbe, Signals, TaskContext, Watched};
use crate::status::{refuse_reserved, FailureSink, Publisher, StatusCell, StatusCells};
use crate::wake::WakeSignal;
use crate::work_queue::WorkQueue;
use crate::{
    Backoff, Controller, ControllerState, ControllerStatus, DependencyGraph, Input,
    QueueController, RegistrationError,
};

/// Tuning of an [`Engine`].
///
/// The defaults ([`Engine::new`] and the test harness use them):
///
/// | option | default |
/// |---|---|
/// | [`restart_backoff`](Self::restart_backoff) | 100 ms, doubling up to 30 s ([`Backoff::default`]) |
/// | [`status_namespace`](Self::status_namespace) | `Some("runtime")`: one [`ControllerStatus`] per controller in `runtime` |
/// | [`shutdown_timeout`](Self::shutdown_timeout) | 30 s |
///
/// ```
/// use std::time::Duration;
/// use cosi_controllers::{Backoff, EngineOptions};
/// let defaults = EngineOptions::default();
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30));
/// assert_eq!(defaults.restart_backoff, backoff);
/// assert_eq!(defaults.status_namespace.as_deref(), Some("runtime"));
/// assert_eq!(defaults.shutdown_timeout, Duration::from_secs(30));
///
/// // Faster restarts, no status resources:
/// let options = EngineOptions {
///     restart_backoff: Backoff::new(Duration::from_millis(10), Duration::from_secs(1)),
///     status_namespace: None,
///     ..EngineOptions::default()
/// };
/// # let _ = options;
/// ```
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Backoff between restarts of a failing controller (and between retries of a failing
    /// queue item, or of a status the store refused). Reset after a success. Default: 100 ms
    /// doubling up to 30 s.
    pub restart_backoff: Backoff,
    /// Namespace of the published [`ControllerStatus`] resources; `None` publishes none.
    /// Default: `runtime`.
    pub status_namespace: Option<String>,
    /// How long [`Engine::shutdown`] waits for running reconciles before aborting them.
    /// Default: 30 s.
    pub shutdown_timeout: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            restart_backoff: Backoff::default(),
            status_namespace: Some(
                <ControllerStatus as ResourceSpec>::DEFAULT_NAMESPACE.to_string(),
            ),
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// What [`Engine::shutdown`] observed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ShutdownReport {
    /// Controller tasks that stopped on their own.
    pub stopped: usize,
    /// Controller tasks aborted because they did not stop within the timeout.
    pub aborted: usize,
}

pub(crate) type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
pub(crate) type Launcher = Box<dyn FnOnce(TaskContext) -> TaskFuture + Send>;

/// One registered controller, as the engine sees it.
pub(crate) struct Slot {
    pub(crate) id: usize,
    pub(crate) name: Arc<str>,
    pub(crate) access: Arc<RwLock<Arc<Access>>>,
    pub(crate) target: Arc<dyn FeedTarget>,
    /// Whether its inputs are watched; its runner and its changes of inputs take turns here.
    pub(crate) watched: Arc<Watched>,
    pub(crate) probe: Arc<dyn IdleProbe>,
    pub(crate) status: Arc<StatusCell>,
}

pub(crate) struct Shared {
    state: Arc<dyn State>,
    options: EngineOptions,
    graph: Mutex<DependencyGraph>,
    slots: Mutex<Vec<Arc<Slot>>>,
    statuses: StatusCells,
    feeds: Arc<KindFeeds>,
    shutdown_tx: watch::Sender<bool>,
    started: AtomicBool,
    next_id: AtomicUsize,
    activity: Arc<AtomicU64>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    waiting: Mutex<Vec<(Arc<Slot>, Launcher)>>,
    status_signal: Arc<WakeSignal>,
    publishing: Arc<AtomicBool>,
    failures: Mutex<Option<FailureSink>>,
}

impl Shared {
    fn signals(&self) -> Signals {
        let status = self
            .options
            .status_namespace
            .is_some()
            .then(|| self.status_signal.clone());
        Signals::new(self.activity.clone(), status)
    }

    fn spawn(self: &Arc<Self>, slot: Arc<Slot>, launcher: Launcher) {
        let failures = self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let state = ControllerState::new(
            slot.name.clone(),
            self.state.clone(),
            slot.access.clone(),
            self.clone(),
            {
                let target = slot.target.clone();
                Arc::new(move || target.resync())
            },
            failures.clone(),
        );
        let cx = TaskContext {
            id: slot.id,
            name: slot.name.clone(),
            status: slot.status.clone(),
            state,
            raw: self.state.clone(),
            feeds: self.feeds.clone(),
            watched: slot.watched.clone(),
            signals: self.signals(),
            restart_backoff: self.options.restart_backoff.clone(),
            shutdown: self.shutdown_tx.subscribe(),
            failures,
        };
        let handle = tokio::spawn(launcher(cx));
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
    }

    fn slot(&self, name: &str) -> Option<Arc<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|s| &*s.name == name)
            .cloned()
    }
}

#[async_trait]
impl InputRegistry for Shared {
    async fn set_inputs(&self, controller: &str, inputs: Vec<Input>) -> Result<()> {
        let slot = self
            .slot(controller)
            .ok_or_else(|| RegistrationError::UnknownController {
                name: controller.into(),
            })?;
        // The runner subscribing meanwhile (again, after the inputs were lost) would read the
        // inputs before this changes them and leave them watched beside the new ones: it waits
        // for its turn, and then finds them watched.
        let watched = slot.watched.lock().await;
        let previous = slot
            .access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.graph
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_inputs(controller, &inputs)?;
        let mut change = Change {
            graph: &self.graph,
            feeds: &self.feeds,
            slot: &slot,
            previous: &previous.inputs,
            watched,
            finished: false,
        };
        self.feeds.unsubscribe(slot.id);
        if let Err(error) = self
            .feeds
            .subscribe(slot.id, &inputs, slot.target.clone())
            .await
        {
            // Put everything back as it was, so the controller can simply try again.
            self.graph
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .set_inputs(controller, &previous.inputs)?;
            match self
                .feeds
                .subscribe(slot.id, &previous.inputs, slot.target.clone())
                .await
            {
                Ok(()) => change.finish(true),
                Err(restore) => {
                    // The old inputs are declared again but watched no more: the runner
                    // subscribes to them again, with backoff, before the controller runs on.
                    tracing::warn!(controller, error = %error, restore_error = %restore, "changing inputs failed and so did watching the old ones again; the runner watches them again before the controller runs on");
                    change.finish(false);
                    slot.target.unsubscribed();
                }
            }
            return Err(error);
        }
        change.finish(true);
        *slot.access.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Access {
            inputs,
            outputs: previous.outputs.clone(),
        });
        // The new inputs may hold state the controller has not seen yet.
        slot.target.resync();
        Ok(())
    }
}

/// A change of one controller's inputs under way, holding its turn ([`Watched`]). Dropped
/// before it finished (its caller stopped waiting: a timeout, a `select!`), it puts the
/// controller back as it was: the old inputs declared, and, as the feeds may then hold part of
/// either set or nothing, none of them watched, its runner told to watch them again.
struct Change<'a> {
    graph: &'a Mutex<DependencyGraph>,
    feeds: &'a KindFeeds,
    slot: &'a Slot,
    previous: &'a [Input],
    watched: tokio::sync::MutexGuard<'a, bool>,
    finished: bool,
}

impl Change<'_> {
    /// Records whether the controller's inputs are watched now.
    fn finish(&mut self, watched: bool) {
        *self.watched = watched;
        self.finished = true;
    }
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let name = &self.slot.name;
        // Cannot fail: the graph held these inputs before.
        if let Err(error) = self
            .graph
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_inputs(name, self.previous)
        {
            tracing::error!(controller = %name, %error, "declaring the old inputs again failed");
        }
        self.feeds.unsubscribe(self.slot.id);
        *self.watched = false;
        tracing::warn!(controller = %name, "a change of inputs was given up half-way; the runner watches the old inputs again before the controller runs on");
        self.slot.target.unsubscribed();
    }
}

/// The controller runtime. Cheap to clone (all clones drive the same engine).
///
/// ```
/// use std::sync::Arc;
/// use cosi_controllers::Engine;
/// # async fn demo(state: Arc<dyn cosi_core::State>) {
/// let engine = Engine::new(state);
/// // engine.register(MyController)?;
/// engine.start();
/// // ... until a signal:
/// let report = engine.shutdown().await;
/// assert_eq!(report.aborted, 0);
/// # }
/// ```
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("controllers", &self.controllers())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine over `state` with default options.
    pub fn new(state: Arc<dyn State>) -> Self {
        Self::with_options(state, EngineOptions::default())
    }

    /// An engine over `state`.
    pub fn with_options(state: Arc<dyn State>, options: EngineOptions) -> Self {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let activity = Arc::new(AtomicU64::new(0));
        Engine {
            shared: Arc::new(Shared {
                feeds: Arc::new(KindFeeds::new(state.clone(), shutdown_rx, activity.clone())),
                state,
                options,
                graph: Mutex::new(DependencyGraph::default()),
                slots: Mutex::new(Vec::new()),
                statuses: Arc::new(Mutex::new(Vec::new())),
                shutdown_tx,
                started: AtomicBool::new(false),
                next_id: AtomicUsize::new(0),
                activity,
                tasks: Mutex::new(Vec::new()),
                waiting: Mutex::new(Vec::new()),
                status_signal: Arc::new(WakeSignal::default()),
                publishing: Arc::new(AtomicBool::new(false)),
                failures: Mutex::new(None),
            }),
        }
    }

    /// The state the engine runs on (without access rules).
    pub fn state(&self) -> &Arc<dyn State> {
        &self.shared.state
    }

    /// Registers a level-triggered controller. Allowed before and after [`Engine::start`]; a
    /// controller registered after start begins running at once.
    ///
    /// Refused with a [`RegistrationError`], with nothing registered, when the wiring is wrong
    /// (see [`DependencyGraph::add_controller`]) or collides with the engine's own status
    /// publisher: a controller named [`crate::STATUS_OWNER`], or declaring [`ControllerStatus`]
    /// as an output. Reading statuses as an input is allowed (by id: a controller whose input
    /// covers its own status is woken by every one of its reconciles).
    ///
    /// A [`QueueController`] goes to [`Engine::register_queue`]; giving one to `register` does
    /// not compile, and the compiler's note says so:
    ///
    /// ```compile_fail,E0277
    /// use cosi_controllers::{ControllerState, Engine, Input, Output, QueueController, Reconciled};
    /// use cosi_core::{Pointer, Result};
    /// struct PerItem;
    /// impl QueueController for PerItem {
    ///     fn name(&self) -> &str { "PerItem" }
    ///     fn primary(&self) -> Input { Input::weak(cosi_core::Kind::new("ns", "Items.test.cosi.dev")) }
    ///     fn outputs(&self) -> Vec<Output> { Vec::new() }
    ///     async fn reconcile(&self, _: &ControllerState, _: &Pointer) -> Result<Reconciled> {
    ///         Ok(Reconciled::Done)
    ///     }
    /// }
    /// # fn register(engine: &Engine) {
    /// engine.register(PerItem).unwrap(); // note: register it with `register_queue`
    /// # }
    /// ```
    pub fn register<C: Controller>(&self, controller: C) -> Result<(), RegistrationError> {
        let name: Arc<str> = controller.name().into();
        let inputs = controller.inputs();
        let outputs = controller.outputs();
        let activity = Arc::new(LevelActivity::default());
        let launcher_activity = activity.clone();
        self.add(
            name,
            inputs,
            outputs,
            activity.clone(),
            activity,
            Box::new(move |cx| {
                Box::pin(crate::level::run(
                    Box::new(controller),
                    launcher_activity,
                    cx,
                ))
            }),
        )
    }

    /// Registers a queue controller (see [`QueueController`]); refused as [`Engine::register`]
    /// says.
    pub fn register_queue<Q: QueueController>(
        &self,
        controller: Q,
    ) -> Result<(), RegistrationError> {
        let name: Arc<str> = controller.name().into();
        let mut inputs = vec![controller.primary()];
        inputs.extend(controller.secondary());
        let outputs = controller.outputs();
        let queue = Arc::new(WorkQueue::new(controller.primary()));
        let launcher_queue = queue.clone();
        self.add(
            name,
            inputs,
            outputs,
            queue.clone(),
            queue,
            Box::new(move |cx| {
                Box::pin(crate::queue::run(Arc::new(controller), launcher_queue, cx))
            }),
        )
    }

    fn add(
        &self,
        name: Arc<str>,
        inputs: Vec<Input>,
        outputs: Vec<crate::Output>,
        target: Arc<dyn FeedTarget>,
        probe: Arc<dyn IdleProbe>,
        launcher: Launcher,
    ) -> Result<(), RegistrationError> {
        let shared = &self.shared;
        // The status publisher is the engine's own writer (whether or not it publishes).
        refuse_reserved(&name, &outputs)?;
        shared
            .graph
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add_controller(&name, &inputs, &outputs)?;
        let status = Arc::new(StatusCell::default());
        let slot = Arc::new(Slot {
            id: shared.next_id.fetch_add(1, Ordering::SeqCst),
            name: name.clone(),
            access: Arc::new(RwLock::new(Arc::new(Access { inputs, outputs }))),
            target,
            watched: Arc::default(),
            probe,
            status: status.clone(),
        });
        shared
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot.clone());
        shared
            .statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, status));
        if shared.started.load(Ordering::SeqCst) {
            shared.spawn(slot, launcher);
        } else {
            shared
                .waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((slot, launcher));
        }
        shared.activity.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Starts every registered controller (idempotent). Must be called inside a tokio runtime.
    pub fn start(&self) {
        let shared = &self.shared;
        if shared.started.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(namespace) = shared.options.status_namespace.clone() {
            let publisher = Publisher {
                state: shared.state.clone(),
                namespace,
                cells: shared.statuses.clone(),
                signal: shared.status_signal.clone(),
                publishing: shared.publishing.clone(),
                activity: shared.activity.clone(),
                shutdown: shared.shutdown_tx.subscribe(),
                backoff: shared.options.restart_backoff.clone(),
            };
            let handle = tokio::spawn(publisher.run());
            shared
                .tasks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(handle);
        }
        let waiting =
            std::mem::take(&mut *shared.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        for (slot, launcher) in waiting {
            shared.spawn(slot, launcher);
        }
    }

    /// Starts the engine, runs until `signal` completes, then shuts down gracefully.
    pub async fn run_until(&self, signal: impl Future<Output = ()>) -> ShutdownReport {
        self.start();
        signal.await;
        self.shutdown().await
    }

    /// Stops every controller: no new reconcile starts, running ones finish, bounded by
    /// [`EngineOptions::shutdown_timeout`]; tasks still running then are aborted. The shared
    /// kind watches have ended too when it returns.
    pub async fn shutdown(&self) -> ShutdownReport {
        let shared = &self.shared;
        shared.shutdown_tx.send_replace(true);
        let tasks = std::mem::take(&mut *shared.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        let deadline = deadline_after(Instant::now(), shared.options.shutdown_timeout);
        let mut report = ShutdownReport::default();
        for mut task in tasks {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(_) => report.stopped += 1,
                Err(_) => {
                    task.abort();
                    // Resolves once the task is dropped, with what it held.
                    let _ = task.await;
                    report.aborted += 1;
                }
            }
        }
        // The shared kind watches end on the same signal; once they have, the engine holds
        // the state only through its own handle, so the caller can close the store.
        for mut feed in shared.feeds.take_tasks() {
            if tokio::time::timeout_at(deadline, &mut feed).await.is_err() {
                feed.abort();
                let _ = feed.await;
            }
        }
        report
    }

    /// The registered controller names, sorted.
    pub fn controllers(&self) -> Vec<Arc<str>> {
        self.graph().controllers()
    }

    /// A copy of the dependency graph (for DOT or text export).
    pub fn graph(&self) -> DependencyGraph {
        self.shared
            .graph
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A controller's live counters (also published as a resource).
    pub fn status(&self, controller: &str) -> Option<ControllerStatus> {
        self.shared.slot(controller).map(|s| s.status.snapshot())
    }

    /// Whether every controller is idle (no pending wake-up, no running reconcile, nothing due
    /// now) and every status is published. Watch events still in flight are not visible here:
    /// the test harness (`testing::Harness::settle`, feature `testing`) combines this with
    /// scheduler quiescence.
    pub fn is_idle(&self) -> bool {
        let shared = &self.shared;
        // Before start and after shutdown nothing runs, whatever is pending.
        if !shared.started.load(Ordering::SeqCst) || *shared.shutdown_tx.borrow() {
            return true;
        }
        let now = Instant::now();
        let slots = shared
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        slots.iter().all(|s| s.probe.is_idle(now))
            && !shared.status_signal.is_pending()
            && !shared.publishing.load(Ordering::SeqCst)
    }

    /// A counter that moves whenever the engine makes progress (events fanned out, reconciles
    /// started or finished, statuses published).
    pub fn activity(&self) -> u64 {
        self.shared.activity.load(Ordering::SeqCst)
    }

    /// Tells `sink` of every controller failure from now on (controllers started later; the
    /// harness installs it before anything starts).
    #[cfg(feature = "testing")]
    pub(crate) fn on_failure(&self, sink: FailureSink) {
        *self
            .shared
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(sink);
    }

    /// The inputs the shared watches deliver to `controller`, one entry per subscription;
    /// `None` for an unknown controller.
    #[cfg(feature = "testing")]
    pub(crate) fn subscribed_inputs(&self, controller: &str) -> Option<Vec<Input>> {
        let slot = self.shared.slot(controller)?;
        Some(self.shared.feeds.inputs_of(slot.id))
    }

    /// The kinds the engine watches (one shared watch each).
    pub fn watched_kinds(&self) -> Vec<cosi_core::Kind> {
        self.shared.feeds.kinds()
    }
}
