//! [`ControllerState`]: the state handle a controller works through. It implements
//! [`cosi_core::State`] (so every [`cosi_core::StateExt`] helper works on it) and enforces the
//! access rules at run time:
//!
//! - reads (`get`, `list`, `watch`, `watch_kind`) only of declared inputs and outputs;
//! - writes (`create`, `update`, `destroy`) only of declared output types, as the owner named
//!   after the controller;
//! - finalizer changes on other resources only on strong inputs.
//!
//! A violation is an [`Error::AccessDenied`] returned to the controller; nothing reaches the
//! store. The handle also tracks touched outputs, so a reconcile can clean up the ones it no
//! longer produces; the tracking belongs to one reconcile (every reconcile, and every item of a
//! queue controller, is handed a handle with tracking of its own).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use cosi_core::{
    AnyResource, Call, CreateOptions, DestroyOptions, Error, Kind, ListOptions, Pointer, Resource,
    ResourceSpec, Result, SharedResource, State, StateExt, UpdateOptions, Watch, WatchKindOptions,
    WatchOptions,
};

use crate::input_changes::{Changed, InputChanges};
use crate::status::{Failure, FailureSink};
use crate::{Input, InputStrength, Output};

/// Where a controller's run-time input changes go (the engine).
#[async_trait]
pub(crate) trait InputRegistry: Send + Sync {
    async fn set_inputs(&self, controller: &str, inputs: Vec<Input>) -> Result<()>;
}

#[derive(Debug, Default)]
pub(crate) struct Access {
    pub(crate) inputs: Vec<Input>,
    pub(crate) outputs: Vec<Output>,
}

/// The result of [`ControllerState::cleanup_outputs`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cleanup {
    /// Untouched outputs destroyed now.
    pub destroyed: usize,
    /// Untouched outputs torn down but still held by finalizers; they are destroyed by a later
    /// cleanup once the finalizers are gone (declare the output kind as a destroy-ready input
    /// to be woken at that moment).
    pub waiting: usize,
}

/// A controller's view of the state, with its access rules enforced.
///
/// It implements [`State`], so every [`StateExt`] helper works on it. The rules, checked on
/// every call before anything reaches the store:
///
/// - **reads** (`get`, `list`, `watch`, `watch_kind`) only of declared inputs (a single-id input
///   covers that id only) and of declared output types;
/// - **writes** (`create`, `update`, `destroy`) only of declared output types, as the owner named
///   after the controller ([`ControllerState::owned`], [`ControllerState::modify_output`]);
/// - **finalizer changes** on a resource that is not an output only on a strong input, and only
///   the finalizers (any other change of such a resource is refused).
///
/// A violation is an [`Error::AccessDenied`] naming the controller and the resource; nothing is
/// written. Output tracking ([`ControllerState::start_tracking`],
/// [`ControllerState::cleanup_outputs`]) belongs to the reconcile the handle was given to.
#[derive(Clone)]
pub struct ControllerState {
    /// What every reconcile of the controller shares: cloning a handle for a reconcile is one
    /// count on this controller's own allocation, not one on the store's and on each of these.
    shared: Arc<Shared>,
    /// The outputs written in this handle's reconcile. Shared by the clones a reconcile makes,
    /// never by two reconciles.
    tracked: Arc<Tracking>,
    /// A level-triggered controller's change record (see [`InputChanges`]).
    changes: Option<Arc<InputChanges>>,
}

/// The part of a [`ControllerState`] that is the same for every reconcile of its controller.
struct Shared {
    name: Arc<str>,
    inner: Arc<dyn State>,
    access: Arc<RwLock<Arc<Access>>>,
    /// The output types, fixed for the controller's lifetime: checked on every write without
    /// taking the access lock (only inputs change at run time).
    output_types: Arc<[Arc<str>]>,
    registry: Arc<dyn InputRegistry>,
    /// Schedules a reconcile of this controller (its scheduling state's resync).
    wake: Arc<dyn Fn() + Send + Sync>,
    /// Told of every access violation (the test harness).
    failures: Option<FailureSink>,
}

/// Output tracking of one reconcile. Most reconciles never track: a write then costs one
/// atomic load here, not a lock.
#[derive(Default)]
struct Tracking {
    active: AtomicBool,
    /// One insert per write while active: a fast hasher.
    touched: Mutex<foldhash::HashSet<Pointer>>,
}

impl Tracking {
    fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    fn touched(&self) -> std::sync::MutexGuard<'_, foldhash::HashSet<Pointer>> {
        self.touched.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Wakes one controller from outside the state: a kernel subscription, a remote watch, a
/// child process exiting. Obtained from [`ControllerState::waker`]; cheap to clone.
///
/// A wake-up coalesces with every other pending one, exactly like an input change: a burst of
/// outside events costs one reconcile of a level-triggered controller (a queue controller
/// re-lists its primary items). The controller reads what changed from its source in that
/// reconcile; the waker carries no data, so nothing can pile up behind a slow controller.
#[derive(Clone)]
pub struct Waker {
    wake: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker").finish_non_exhaustive()
    }
}

impl Waker {
    /// Schedules a reconcile (coalesced with any pending one).
    pub fn wake(&self) {
        (self.wake)();
    }
}

impl std::fmt::Debug for ControllerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerState")
            .field("controller", &self.shared.name)
            .finish_non_exhaustive()
    }
}

impl ControllerState {
    pub(crate) fn new(
        name: Arc<str>,
        inner: Arc<dyn State>,
        access: Arc<RwLock<Arc<Access>>>,
        registry: Arc<dyn InputRegistry>,
        wake: Arc<dyn Fn() + Send + Sync>,
        failures: Option<FailureSink>,
    ) -> Self {
        let output_types = access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .outputs
            .iter()
            .map(|o| o.resource_type.clone())
            .collect();
        ControllerState {
            shared: Arc::new(Shared {
                name,
                inner,
                access,
                output_types,
                registry,
                wake,
                failures,
            }),
            tracked: Arc::new(Tracking::default()),
            changes: None,
        }
    }

    /// A handle that wakes this controller from outside the state (see [`Waker`]): give it to
    /// the task that follows the controller's outside source.
    pub fn waker(&self) -> Waker {
        Waker {
            wake: self.shared.wake.clone(),
        }
    }

    /// The same handle, reading the changes of a level-triggered controller from `changes`.
    pub(crate) fn with_input_changes(mut self, changes: &Arc<InputChanges>) -> ControllerState {
        // A reused handle already reads them.
        if self.changes.is_none() {
            self.changes = Some(changes.clone());
        }
        self
    }

    /// The input changes delivered since the last reconcile took them ([`Changed::Everything`]
    /// for a controller without a record, and the first time); until the next take, more than
    /// `limit` distinct changes are recorded as "everything".
    pub(crate) fn take_input_changes(&self, limit: usize) -> Changed {
        match &self.changes {
            Some(changes) => changes.take_up_to(limit),
            None => Changed::Everything,
        }
    }

    /// The same handle with tracking of its own, for one reconcile (two items of a queue
    /// controller reconciled at once must not see each other's touched outputs): `spare`, the
    /// handle of a finished reconcile of the same controller, when nothing holds it any more
    /// (no allocation per reconcile), else a new one.
    pub(crate) fn for_reconcile(&self, spare: Option<ControllerState>) -> ControllerState {
        if let Some(mut spare) = spare {
            debug_assert!(Arc::ptr_eq(&spare.shared, &self.shared));
            if let Some(tracking) = Arc::get_mut(&mut spare.tracked) {
                *tracking.active.get_mut() = false;
                tracking
                    .touched
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
                return spare;
            }
        }
        ControllerState {
            shared: self.shared.clone(),
            tracked: Arc::new(Tracking::default()),
            changes: None,
        }
    }

    /// The controller's name: the owner of everything it writes.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The controller's name as the shared string its writes carry as their owner (an
    /// ownership check that meets the same string compares addresses, not bytes).
    pub fn owner(&self) -> &Arc<str> {
        &self.shared.name
    }

    /// The current inputs.
    pub fn inputs(&self) -> Vec<Input> {
        self.snapshot().inputs.clone()
    }

    /// The outputs.
    pub fn outputs(&self) -> Vec<Output> {
        self.snapshot().outputs.clone()
    }

    /// Replaces the controller's inputs at run time. When it returns, changes of the new inputs
    /// wake the controller and the controller is scheduled to run once more (so it sees the
    /// current state of the new inputs). Rejected (with nothing changed) if the inputs repeat.
    ///
    /// If the new inputs cannot be watched, the error is returned and the old inputs are kept
    /// (declared and watched), so the controller can simply try again. Should watching the old
    /// ones again fail too, the controller is deaf to its inputs until they are watched again:
    /// the engine then subscribes it to its (old) inputs after the restart backoff, before the
    /// controller reconciles again (retrying, each failure a restart), and reconciles it once
    /// they are watched (a queue controller: relists its items; the items it had queued still
    /// run meanwhile).
    ///
    /// Changes of inputs made at once (by several items of a queue controller, or by a task of
    /// the controller's own holding a clone of this handle) take turns, with each other and
    /// with the engine's subscribing them again: the inputs watched are always the inputs
    /// declared, those of the last change that succeeded. A change dropped before it returns
    /// (its caller stopped waiting) is undone: the old inputs stay declared, and are watched
    /// again as after a failed restore.
    pub async fn set_inputs(&self, inputs: Vec<Input>) -> Result<()> {
        self.shared
            .registry
            .set_inputs(&self.shared.name, inputs)
            .await
    }

    /// Reads one resource ([`State::get`] with the access checks). A controller's reads are
    /// its hottest path: from a backend that answers at once, the call is done, with no
    /// allocation.
    pub fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        Call::after(self.check_read(pointer.kind(), Some(pointer.id())), |()| {
            self.shared.inner.get(pointer)
        })
    }

    /// Lists a kind ([`State::list`] with the access checks).
    pub fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        Call::after(self.check_read(kind, None), |()| {
            self.shared.inner.list(kind, options)
        })
    }

    /// Creates a resource ([`State::create`] with the access checks; an output is marked
    /// touched when tracking).
    pub fn create(
        &self,
        resource: SharedResource,
        options: CreateOptions,
    ) -> Call<'_, SharedResource> {
        let check = self.check_write(resource.metadata().pointer(), options.owner.as_ref());
        Call::after(check, |()| {
            let touched = self.to_touch(&*resource);
            self.touching(touched, self.shared.inner.create(resource, options))
        })
    }

    /// Updates a resource ([`State::update`] with the access checks; an output is marked
    /// touched when tracking).
    pub fn update(
        &self,
        resource: SharedResource,
        options: UpdateOptions,
    ) -> Call<'_, SharedResource> {
        let is_output = self.is_output_type(resource.metadata().pointer().resource_type());
        if is_output && self.is_self(options.owner.as_ref()) {
            let touched = self.to_touch(&*resource);
            return self.touching(touched, self.shared.inner.update(resource, options));
        }
        let pointer = resource.metadata().pointer();
        if is_output && !self.is_strong_input(pointer) {
            return Call::done(Err(self.owner_denied(pointer, options.owner.as_deref())));
        }
        Call::pending(async move {
            self.check_finalizer_update(&*resource).await?;
            // A finalizer change is allowed in any phase, as the stored owner.
            self.shared.inner.update(resource, options).await
        })
    }

    /// `write`, marking `touched` once it succeeded.
    fn touching<'a>(
        &'a self,
        touched: Option<Pointer>,
        write: Call<'a, SharedResource>,
    ) -> Call<'a, SharedResource> {
        match touched {
            None => write,
            Some(pointer) => write.map(move |stored| {
                if stored.is_ok() {
                    self.touch(&pointer);
                }
                stored
            }),
        }
    }

    /// Update options that write as this controller.
    pub fn owned(&self) -> UpdateOptions {
        UpdateOptions {
            owner: Some(self.shared.name.clone()),
            ..UpdateOptions::default()
        }
    }

    /// Creates or updates an output owned by this controller through `change`, writing nothing
    /// when the result equals what is stored ([`StateExt::modify`]). Marks the output touched
    /// when tracking.
    pub async fn modify_output<S, F>(
        &self,
        template: Resource<S>,
        change: F,
    ) -> Result<Arc<Resource<S>>>
    where
        S: ResourceSpec,
        F: FnMut(&mut Resource<S>) -> Result<()> + Send,
    {
        let pointer = template.metadata.pointer().clone();
        self.check_write(&pointer, Some(self.owner()))?;
        let stored = self.modify(template, self.owned(), change).await?;
        self.touch(&pointer);
        Ok(stored)
    }

    /// Tears an owned output down and destroys it if no finalizers hold it. Returns whether it
    /// is gone.
    pub async fn teardown_output(&self, pointer: &Pointer) -> Result<bool> {
        match self.teardown(pointer, Some(&self.shared.name)).await {
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) => Err(e),
            Ok(false) => Ok(false),
            Ok(true) => match self.destroy(pointer, self.destroy_options()).await {
                Ok(()) => Ok(true),
                Err(e) if e.is_not_found() => Ok(true),
                Err(Error::PendingFinalizers { .. }) => Ok(false),
                Err(e) => Err(e),
            },
        }
    }

    /// Destroys an output this controller owns; one that is already gone is not an error, so a
    /// reconcile that runs again (a queue item retried or requeued after its primary went
    /// away) can destroy what it would have destroyed without checking first. An output that
    /// others hold finalizers on is not destroyed ([`Error::PendingFinalizers`]): tear those
    /// down with [`Self::teardown_output`], which destroys them once the finalizers are gone.
    ///
    /// ```
    /// # use cosi_controllers::ControllerState;
    /// # use cosi_core::{ResourceSpec, Result};
    /// # #[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct LinkStatus { up: bool }
    /// # impl ResourceSpec for LinkStatus { const TYPE: &'static str = "LinkStatuses.net.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "network"; }
    /// // In a queue controller's reconcile, when the item's primary is gone:
    /// async fn forget(state: &ControllerState, id: &str) -> Result<()> {
    ///     state.destroy_output(&LinkStatus::kind().pointer(id.to_string())).await
    /// }
    /// ```
    pub async fn destroy_output(&self, pointer: &Pointer) -> Result<()> {
        match self.destroy(pointer, self.destroy_options()).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// The pointers of every resource `input` covers, in id order: the whole kind, or the one
    /// id of a single-id input (whether it exists or not). It is what a queue controller's
    /// [`map_input`](crate::QueueController::map_input) returns when a change of a secondary
    /// input concerns every item:
    ///
    /// ```
    /// # use cosi_controllers::{ControllerState, Input, Output, QueueController, Reconciled};
    /// # use cosi_core::{Pointer, ResourceSpec, Result, SharedResource};
    /// # #[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Link { up: bool }
    /// # impl ResourceSpec for Link { const TYPE: &'static str = "Links.net.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "network"; }
    /// # #[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct LinkConfig { mtu: u32 }
    /// # impl ResourceSpec for LinkConfig { const TYPE: &'static str = "LinkConfigs.net.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "network"; }
    /// struct LinkController;
    ///
    /// impl QueueController for LinkController {
    ///     fn name(&self) -> &str { "LinkController" }
    ///     fn primary(&self) -> Input { Input::weak_of::<Link>() }
    ///     fn secondary(&self) -> Vec<Input> { vec![Input::weak_of::<LinkConfig>()] }
    ///     fn outputs(&self) -> Vec<Output> { Vec::new() }
    ///     async fn map_input(&self, state: &ControllerState, _: &SharedResource) -> Result<Vec<Pointer>> {
    ///         // Any change of the config concerns every link.
    ///         state.items_of(&self.primary()).await
    ///     }
    ///     async fn reconcile(&self, _: &ControllerState, _: &Pointer) -> Result<Reconciled> {
    ///         Ok(Reconciled::Done)
    ///     }
    /// }
    /// ```
    pub async fn items_of(&self, input: &Input) -> Result<Vec<Pointer>> {
        if let Some(id) = &input.id {
            return Ok(vec![input.kind.pointer(id.clone())]);
        }
        let resources = self.list(&input.kind, &ListOptions::default()).await?;
        Ok(resources
            .iter()
            .map(|r| r.metadata().pointer().clone())
            .collect())
    }

    /// Starts tracking the outputs this reconcile touches (creates, updates and
    /// [`Self::modify_output`] calls, including no-op ones), forgetting earlier marks.
    pub fn start_tracking(&self) {
        let mut touched = self.tracked.touched();
        touched.clear();
        self.tracked.active.store(true, Ordering::Release);
    }

    /// Marks an output touched without writing it.
    pub fn touch(&self, pointer: &Pointer) {
        if self.tracked.is_active() {
            self.tracked.touched().insert(pointer.clone());
        }
    }

    /// The pointer of a resource about to be written, kept for [`Self::touch`] only while
    /// tracking (a write would otherwise copy it for nothing).
    fn to_touch(&self, resource: &dyn AnyResource) -> Option<Pointer> {
        self.tracked
            .is_active()
            .then(|| resource.metadata().pointer().clone())
    }

    /// Ends tracking: every resource of `kinds` owned by this controller and not touched since
    /// [`Self::start_tracking`] is torn down, and destroyed once it has no finalizers.
    /// Fails with `InvalidArgument` if tracking was not started.
    pub async fn cleanup_outputs(&self, kinds: &[Kind]) -> Result<Cleanup> {
        if !self.tracked.active.swap(false, Ordering::AcqRel) {
            return Err(Error::invalid(
                self.shared.name.to_string(),
                "cleanup_outputs",
                "output tracking was not started in this reconcile",
            ));
        }
        let touched = std::mem::take(&mut *self.tracked.touched());
        let mut report = Cleanup::default();
        for kind in kinds {
            for resource in self.list(kind, &ListOptions::default()).await? {
                let metadata = resource.metadata();
                if metadata.owner() != Some(&*self.shared.name)
                    || touched.contains(metadata.pointer())
                {
                    continue;
                }
                if self.teardown_output(metadata.pointer()).await? {
                    report.destroyed += 1;
                } else {
                    report.waiting += 1;
                }
            }
        }
        Ok(report)
    }

    /// Puts this controller's finalizer on `input`, a strong input it has just read. Returns
    /// the stored value when it was written in one update from exactly the value read (so it
    /// differs from `input` by the finalizer alone); `None` when the finalizer was already
    /// there, or when the input had moved on and the write went the long way.
    ///
    /// The change is built here from the value read and touches the finalizers only, so it is
    /// written in one update carrying the version read, without the read-back that checks an
    /// arbitrary finalizer change ([`StateExt::add_finalizer`] through this handle reads the
    /// input, changes it, and has the update read it again to compare). On a version conflict
    /// it takes that checked path.
    pub(crate) async fn hold_own_finalizer<S: ResourceSpec>(
        &self,
        input: &Resource<S>,
    ) -> Result<Option<SharedResource>> {
        if input.metadata.finalizers().contains(&*self.shared.name) {
            return Ok(None);
        }
        let pointer = input.metadata.pointer();
        if !self.is_strong_input(pointer) {
            return Err(self.denied(
                pointer,
                "may not write it: not a declared output, and finalizers may only be changed on strong inputs",
            ));
        }
        let mut next = Resource::clone(input);
        next.metadata
            .finalizers_mut()
            .insert(self.shared.name.to_string());
        // Finalizers are not the owner's business: written as the stored owner, in any phase.
        let options = UpdateOptions {
            owner: input.metadata.shared_owner().cloned(),
            expected_phase: None,
        };
        match self.shared.inner.update(next.into_shared(), options).await {
            Ok(stored) => Ok(Some(stored)),
            Err(e) if e.is_version_conflict() => {
                self.add_finalizer(pointer, &[&self.shared.name]).await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn destroy_options(&self) -> DestroyOptions {
        DestroyOptions {
            owner: Some(self.shared.name.clone()),
        }
    }

    fn snapshot(&self) -> Arc<Access> {
        self.shared
            .access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn denied(&self, subject: impl ToString, message: impl std::fmt::Display) -> Error {
        let error = Error::AccessDenied {
            subject: subject.to_string(),
            message: format!("controller {:?} {message}", &*self.shared.name),
        };
        if let Some(sink) = &self.shared.failures {
            sink(&self.shared.name, &Failure::Error(error.clone()));
        }
        error
    }

    fn is_output_type(&self, resource_type: &str) -> bool {
        self.shared
            .output_types
            .iter()
            .any(|t| &**t == resource_type)
    }

    fn check_read(&self, kind: &Kind, id: Option<&str>) -> Result<()> {
        if self.is_output_type(kind.resource_type()) {
            return Ok(());
        }
        let as_input = self
            .shared
            .access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .inputs
            .iter()
            .any(|i| &i.kind == kind && id.map_or(i.id.is_none(), |id| i.covers_id(id)));
        if as_input {
            return Ok(());
        }
        let subject = match id {
            Some(id) => kind.pointer(id).to_string(),
            None => kind.to_string(),
        };
        Err(self.denied(subject, "may not read it: not a declared input or output"))
    }

    fn check_write(&self, pointer: &Pointer, owner: Option<&Arc<str>>) -> Result<()> {
        if !self.is_output_type(pointer.resource_type()) {
            return Err(self.denied(pointer, "may not write it: not a declared output"));
        }
        if !self.is_self(owner) {
            return Err(self.owner_denied(pointer, owner.map(|o| &**o)));
        }
        Ok(())
    }

    /// Whether `owner` names this controller: by address when it is the name's own string.
    fn is_self(&self, owner: Option<&Arc<str>>) -> bool {
        let name = &self.shared.name;
        owner.is_some_and(|o| Arc::ptr_eq(o, name) || o == name)
    }

    fn owner_denied(&self, pointer: &Pointer, owner: Option<&str>) -> Error {
        self.denied(
            pointer,
            format_args!(
                "must write its outputs as owner {:?}, not {}",
                &*self.shared.name,
                owner.map_or("no owner".to_string(), |o| format!("{o:?}"))
            ),
        )
    }

    fn is_strong_input(&self, pointer: &Pointer) -> bool {
        let access = self.shared.access.read().unwrap_or_else(|e| e.into_inner());
        access.inputs.iter().any(|i| {
            &i.kind == pointer.kind()
                && i.covers_id(pointer.id())
                && i.strength == InputStrength::Strong
        })
    }

    /// An update of something that is not an output: allowed only as a finalizer change on a
    /// strong input.
    async fn check_finalizer_update(&self, proposed: &dyn AnyResource) -> Result<()> {
        let pointer = proposed.metadata().pointer();
        if !self.is_strong_input(pointer) {
            return Err(self.denied(
                pointer,
                "may not write it: not a declared output, and finalizers may only be changed on strong inputs",
            ));
        }
        let stored = self.shared.inner.get(pointer).await?;
        if stored.metadata().version() != proposed.metadata().version() {
            // The store will reject it as a version conflict (the caller re-reads and
            // retries); comparing against another version would misjudge the change. When the
            // versions match, the store accepts the write only if that version is still the
            // stored one, so the check below is against exactly what gets replaced.
            return Ok(());
        }
        let mut expected = proposed.metadata().clone();
        expected.set_version(stored.metadata().version());
        *expected.finalizers_mut() = stored.metadata().finalizers().clone();
        if !expected.eq_ignoring_timestamps(stored.metadata()) || !proposed.spec_eq(&*stored) {
            return Err(self.denied(
                pointer,
                "may only change finalizers of its strong input, not other fields",
            ));
        }
        Ok(())
    }
}

impl State for ControllerState {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        ControllerState::get(self, pointer)
    }

    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        ControllerState::list(self, kind, options)
    }

    fn create(&self, resource: SharedResource, options: CreateOptions) -> Call<'_, SharedResource> {
        ControllerState::create(self, resource, options)
    }

    fn update(&self, resource: SharedResource, options: UpdateOptions) -> Call<'_, SharedResource> {
        ControllerState::update(self, resource, options)
    }

    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
        Call::after(self.check_write(pointer, options.owner.as_ref()), |()| {
            self.shared.inner.destroy(pointer, options)
        })
    }

    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
        Call::after(self.check_read(pointer.kind(), Some(pointer.id())), |()| {
            self.shared.inner.watch(pointer, options)
        })
    }

    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch> {
        Call::after(self.check_read(kind, None), |()| {
            self.shared.inner.watch_kind(kind, options)
        })
    }
}
