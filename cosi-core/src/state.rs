//! The [`State`] trait every backend implements, and the options of its calls.
//!
//! The rules, which the conformance suite in `cosi-state` checks for every backend:
//! - `create` stores version 1 and fails with `AlreadyExists` if the id is taken; the owner comes
//!   from [`CreateOptions::owner`].
//! - `update` must carry the version it read; a different stored version is a `VersionConflict`
//!   (expected = the carried version, actual = the stored one). The writer must be the stored
//!   owner and the stored phase must be the expected one (running by default). The stored
//!   version becomes +1; owner, created timestamp and identity cannot be changed by an update.
//! - `destroy` checks the owner and fails with `PendingFinalizers` while any are left; it does
//!   not require tearing down first.
//! - `list` is sorted by id.
//! - `watch` starts with the current state (`Created`) or a `Destroyed` tombstone when absent.
//! - `watch_kind` follows the options in [`WatchKindOptions`].

use async_trait::async_trait;

use crate::{Bookmark, IdQuery, Kind, LabelQueries, Phase, Pointer, Result, SharedResource, Watch};

/// Options of [`State::list`].
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// Label filter (queries ORed, terms ANDed).
    pub labels: LabelQueries,
    /// Id filter.
    pub ids: Option<IdQuery>,
}

/// Options of [`State::create`].
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// The owning controller; `None` for user-owned resources.
    pub owner: Option<String>,
}

/// Options of [`State::update`].
#[derive(Clone, Debug)]
pub struct UpdateOptions {
    /// Must equal the stored owner.
    pub owner: Option<String>,
    /// The phase the stored resource must be in; `None` accepts any phase. Default: running.
    pub expected_phase: Option<Phase>,
}

impl Default for UpdateOptions {
    fn default() -> Self {
        UpdateOptions {
            owner: None,
            expected_phase: Some(Phase::Running),
        }
    }
}

impl UpdateOptions {
    /// Options for `owner`, expecting the running phase.
    pub fn owned_by(owner: Option<&str>) -> Self {
        UpdateOptions {
            owner: owner.map(str::to_string),
            ..Self::default()
        }
    }
}

/// Options of [`State::destroy`].
#[derive(Clone, Debug, Default)]
pub struct DestroyOptions {
    /// Must equal the stored owner.
    pub owner: Option<String>,
}

/// Options of [`State::watch`].
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// End the watch with [`crate::Error::WatchOverrun`] instead of catching up if it falls behind.
    pub strict: bool,
}

/// Options of [`State::watch_kind`].
///
/// Where the watch starts decides what it holds at first, which its events are relative to
/// (see [`crate::Event`]): nothing with `bootstrap` (the bootstrap then delivers the matching
/// contents); otherwise what matched the filters at its starting position — the head, the
/// `tail` position or the `since` bookmark.
///
/// A watcher that falls behind the backend's exact history window is not ended: it receives a
/// compacted catch-up relative to what it holds, exact under the filters too (a resource that
/// entered the filter meanwhile arrives as `Created`, one that left it or was destroyed as
/// `Destroyed`, one it never held and that does not match now not at all), or, when that
/// cannot be computed, a `Resync` and a bootstrap of the resources matching now — unless it is
/// `strict`.
///
/// ```
/// use cosi_core::{LabelOp, LabelQuery, LabelTerm, WatchKindOptions};
/// let web = LabelQuery::new().with(LabelTerm::new("app", LabelOp::Equal("web".into())));
/// let options = WatchKindOptions {
///     bootstrap: true,
///     labels: web.into(),
///     ..WatchKindOptions::default()
/// };
/// assert!(options.since.is_none());
/// ```
#[derive(Clone, Debug, Default)]
pub struct WatchKindOptions {
    /// First deliver a `Created` event per existing (matching) resource in id order, then
    /// `Bootstrapped`, then live events.
    pub bootstrap: bool,
    /// First deliver up to this many of the most recent events the history window holds.
    pub tail: Option<usize>,
    /// Resume after this bookmark: deliver every later event, or a catch-up if the window no
    /// longer holds them (or a resync, from a backend that cannot tell what a label-filtered
    /// watch held that far back: the in-memory and disk ones).
    pub since: Option<Bookmark>,
    /// Label filter; a change into or out of the filter arrives as `Created` / `Destroyed`,
    /// in a catch-up too.
    pub labels: LabelQueries,
    /// Id filter.
    pub ids: Option<IdQuery>,
    /// End the watch with an error instead of catching up if it falls behind.
    pub strict: bool,
}

/// A store of resources. Implemented by every backend; the derived helpers live in
/// [`crate::StateExt`].
#[async_trait]
pub trait State: Send + Sync + 'static {
    /// Reads one resource.
    async fn get(&self, pointer: &Pointer) -> Result<SharedResource>;

    /// Reads one resource at once, for a backend that can answer without waiting (the
    /// in-memory one, and those that serve reads from memory): `Some` holds exactly what
    /// [`State::get`] would return. `None` (the default) means "call `get`". Wrappers call it
    /// first to save `get`'s boxed future on hot paths; a wrapper that adds behaviour to
    /// `get` (checks, faults) must not forward it. A backend's async calls that complete at
    /// once still yield now and then (so a loop of them lets the worker's other tasks run); a
    /// caller of the calls at once in a loop should do the same (`cosi_state::cooperate`).
    fn get_now(&self, pointer: &Pointer) -> Option<Result<SharedResource>> {
        let _ = pointer;
        None
    }

    /// Lists the resources of a kind matching the options, sorted by id.
    async fn list(&self, kind: &Kind, options: &ListOptions) -> Result<Vec<SharedResource>>;

    /// Creates a resource; returns the stored value (version 1, timestamps set).
    async fn create(
        &self,
        resource: SharedResource,
        options: CreateOptions,
    ) -> Result<SharedResource>;

    /// Updates a resource from a value carrying the version it was read at; returns the stored
    /// value.
    async fn update(
        &self,
        resource: SharedResource,
        options: UpdateOptions,
    ) -> Result<SharedResource>;

    /// Creates at once, for a backend whose writes complete without waiting (the in-memory
    /// one): `Ok` holds exactly what [`State::create`] would return, with the same effects.
    /// `Err` hands the arguments back untouched, meaning "call `create`" (the default). Like
    /// [`State::get_now`], it saves a boxed future on hot paths (a controller's writes); a
    /// wrapper that adds behaviour to `create` must not forward it.
    ///
    /// ```
    /// use cosi_core::{CreateOptions, Resource, ResourceSpec, State};
    /// # #[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
    /// # struct Widget { size: u32 }
    /// # impl ResourceSpec for Widget {
    /// #     const TYPE: &'static str = "Widgets.test.cosi.dev";
    /// #     const DEFAULT_NAMESPACE: &'static str = "default";
    /// # }
    /// # async fn demo(state: &dyn State) -> cosi_core::Result<()> {
    /// let fresh = Resource::new("w1", Widget { size: 3 }).into_shared();
    /// let stored = match state.create_now(fresh, CreateOptions::default()) {
    ///     Ok(at_once) => at_once?,
    ///     Err((fresh, options)) => state.create(fresh, options).await?,
    /// };
    /// assert_eq!(stored.metadata().version().get(), 1);
    /// # Ok(()) }
    /// ```
    #[allow(clippy::type_complexity)]
    fn create_now(
        &self,
        resource: SharedResource,
        options: CreateOptions,
    ) -> std::result::Result<Result<SharedResource>, (SharedResource, CreateOptions)> {
        Err((resource, options))
    }

    /// [`State::update`] at once, as [`State::create_now`] is to `create`.
    ///
    /// ```
    /// use cosi_core::{SharedResource, State, UpdateOptions};
    /// # async fn demo(state: &dyn State, changed: SharedResource) -> cosi_core::Result<()> {
    /// // `changed` carries the version it was read at, like any update.
    /// let stored = match state.update_now(changed, UpdateOptions::default()) {
    ///     Ok(at_once) => at_once?,
    ///     Err((changed, options)) => state.update(changed, options).await?,
    /// };
    /// # let _ = stored;
    /// # Ok(()) }
    /// ```
    #[allow(clippy::type_complexity)]
    fn update_now(
        &self,
        resource: SharedResource,
        options: UpdateOptions,
    ) -> std::result::Result<Result<SharedResource>, (SharedResource, UpdateOptions)> {
        Err((resource, options))
    }

    /// Destroys a resource.
    async fn destroy(&self, pointer: &Pointer, options: DestroyOptions) -> Result<()>;

    /// Watches one resource: first its current state (or a tombstone), then every change.
    async fn watch(&self, pointer: &Pointer, options: WatchOptions) -> Result<Watch>;

    /// Watches every resource of a kind.
    async fn watch_kind(&self, kind: &Kind, options: WatchKindOptions) -> Result<Watch>;
}
