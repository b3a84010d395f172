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

use std::sync::Arc;

use crate::{Bookmark, Call, IdQuery, Kind, LabelQueries, Phase, Pointer, SharedResource, Watch};

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
    pub owner: Option<Arc<str>>,
}

/// Options of [`State::update`].
#[derive(Clone, Debug)]
pub struct UpdateOptions {
    /// Must equal the stored owner.
    pub owner: Option<Arc<str>>,
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
            owner: owner.map(Arc::from),
            ..Self::default()
        }
    }
}

/// Options of [`State::destroy`].
#[derive(Clone, Debug, Default)]
pub struct DestroyOptions {
    /// Must equal the stored owner.
    pub owner: Option<Arc<str>>,
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
///
/// Every method returns a [`Call`]: await it for the result. A backend that answers without
/// waiting (the in-memory one; the disk one's reads) returns its result done, with no
/// allocation; one that waits returns a pending future. A done call did its work when the
/// method was called, so a call dropped unawaited may still have written. Backends whose calls
/// complete at once still yield now and then — a call returns pending when the task's tokio
/// budget is due (see `cosi_state::cooperate`) — so a loop of them lets the worker's other
/// tasks run.
///
/// A backend that waits writes its methods as `Call::pending(async move { ... })`:
///
/// ```
/// use cosi_core::{
///     Call, CreateOptions, DestroyOptions, Error, Kind, ListOptions, Pointer, SharedResource,
///     State, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
/// };
///
/// /// A store that holds nothing and refuses every write.
/// struct Empty;
///
/// fn refused(resource: &SharedResource) -> Error {
///     Error::invalid(resource.metadata().pointer().to_string(), "", "this store is read-only")
/// }
///
/// impl State for Empty {
///     fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
///         Call::done(Err(Error::NotFound { pointer: pointer.clone() }))
///     }
///     fn list<'a>(&'a self, _: &'a Kind, _: &'a ListOptions) -> Call<'a, Vec<SharedResource>> {
///         Call::done(Ok(Vec::new()))
///     }
///     fn create(&self, resource: SharedResource, _: CreateOptions) -> Call<'_, SharedResource> {
///         Call::done(Err(refused(&resource)))
///     }
///     fn update(&self, resource: SharedResource, _: UpdateOptions) -> Call<'_, SharedResource> {
///         Call::done(Err(refused(&resource)))
///     }
///     fn destroy<'a>(&'a self, pointer: &'a Pointer, _: DestroyOptions) -> Call<'a, ()> {
///         Call::done(Err(Error::NotFound { pointer: pointer.clone() }))
///     }
///     fn watch<'a>(&'a self, pointer: &'a Pointer, _: WatchOptions) -> Call<'a, Watch> {
///         // What waits is written as an async block.
///         Call::pending(async move {
///             Err(Error::Unsupported { subject: pointer.to_string(), message: "watch".into() })
///         })
///     }
///     fn watch_kind<'a>(&'a self, kind: &'a Kind, _: WatchKindOptions) -> Call<'a, Watch> {
///         Call::done(Err(Error::Unsupported { subject: kind.to_string(), message: "watch".into() }))
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let pointer = Pointer::new("ns", "Things.test.cosi.dev", "x");
/// assert!(matches!(Empty.get(&pointer).await, Err(Error::NotFound { .. })));
/// # });
/// ```
pub trait State: Send + Sync + 'static {
    /// Reads one resource.
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource>;

    /// Lists the resources of a kind matching the options, sorted by id.
    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>>;

    /// Creates a resource; returns the stored value (version 1, timestamps set).
    fn create(&self, resource: SharedResource, options: CreateOptions) -> Call<'_, SharedResource>;

    /// Updates a resource from a value carrying the version it was read at; returns the stored
    /// value.
    fn update(&self, resource: SharedResource, options: UpdateOptions) -> Call<'_, SharedResource>;

    /// Destroys a resource.
    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()>;

    /// Watches one resource: first its current state (or a tombstone), then every change.
    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch>;

    /// Watches every resource of a kind.
    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch>;
}
