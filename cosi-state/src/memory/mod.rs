//! The in-memory backend: [`MemoryState`].
//!
//! Each kind lives in its own collection (a concurrent map of kinds, each with its own lock):
//! the live resources in id order, an exact history window of its latest changes, and destroy
//! markers. Stored values are `Arc`s; reads, lists and events hand out `Arc` clones.
//!
//! Stored values keep their Rust type, so this store could hold a spec its durable peers
//! cannot (a NaN or infinite float): it refuses it all the same
//! ([`AnyResource::check_spec`](cosi_core::AnyResource::check_spec), before the kind lock), so
//! that what a writer may store does not depend on the backend (`cosi_core::spec_encode`).
//!
//! # Sized by demand
//!
//! A kind's window starts at [`MemoryOptions::history_min`] changes and grows, doubling, up to
//! [`MemoryOptions::history`] while a live watcher has not read its oldest change; once its
//! watchers have caught up it shrinks back as the kind keeps changing (checked every 64
//! evictions: it halves while a quarter of it still holds everything unread). So every live
//! watcher within `history` changes of the head gets every event exactly, as with a fixed
//! window, while a kind whose watchers keep up — most kinds, most of the time — holds a few
//! changes and the old values they keep alive, instead of thousands. Destroy markers follow the
//! same rule: the newest `history_min` are kept, older ones only while a live watcher is behind
//! them, and never more than [`MemoryOptions::max_destroy_markers`]. Watchers publish their
//! position to their kind after each batch they take; writers read the positions only when a
//! decision depends on them (see `cursors`). A kind that stops changing keeps the window its last
//! changes needed. Positions no live watcher holds — a `tail`, a resume from a bookmark — are
//! served exactly from what the window holds then, and by a catch-up (or a resync) beyond it,
//! unless the backend supplies the missing changes from elsewhere: the disk backend reads them
//! from its durable log (`KindWatcher::of_kind_with_gap` and `fill_gap`).
//!
//! # Watch delivery
//!
//! Every change of a kind gets the next sequence number, which is its [`cosi_core::Bookmark`].
//! A watcher is a cursor into the window; writers append and wake waiting watchers, and never
//! wait for them. A watcher whose cursor fell out of the window is not ended: it receives a
//! compacted catch-up, one event per resource changed since its position, with the latest state
//! and `compacted: true`, relative to what its consumer holds — `Created` if it does not hold
//! the resource, `Updated { old: None }` if it does, `Destroyed` (last state) if it holds one
//! that is gone now; nothing for a resource created and destroyed within the gap. Then it
//! continues live.
//! To compute that, each live resource remembers the sequence of its creation and of its last
//! change, and each destruction leaves a marker (destroyed at, created at, last state). Markers
//! are exact per incarnation, so an id destroyed and recreated any number of times inside the
//! gap is still reported correctly (as `Updated` if some incarnation existed at the watcher's
//! position, else `Created`). The live resources changed since the position come from a scan of
//! all of them in id order, or — when the changes since the position are few next to the live
//! count (one per 32 live resources at most, which needs a kind of more than 32 × the window) —
//! from the change log, a bounded list of the ids of the latest changes, so a catch-up of a large
//! kind costs O(changed) rather than O(live). When markers the catch-up would need were evicted, the watcher
//! receives [`cosi_core::Event::Resync`] and a full bootstrap instead. Strict watchers receive
//! one `Errored { WatchOverrun }` and end.
//!
//! All events of a catch-up, a resync or a bootstrap carry the head bookmark at the time they
//! were computed: such a batch is resumable from its end, not from its middle.
//!
//! **Exact under filters.** Without a label filter, what the consumer holds is what existed (and
//! passes the id filter, which cannot change) at the watcher's position, which the creation
//! positions and the markers tell. A label filter can change with every write and the store
//! does not keep every past state, so a label-filtered watcher keeps the ids its consumer holds
//! (see `delivered`): it starts with what matched where it starts (nothing before a bootstrap;
//! for `tail` and `since`, what matched at that position, worked out from the window) and
//! follows every event it queues. Its catch-up is then exact: a resource that entered the filter
//! while it lagged arrives as `Created`, one that left it (or was destroyed) as `Destroyed`, an
//! update of one it holds that still matches as `Updated { old: None }`, and one it never held
//! that does not match now gets nothing. A `since` older than the window leaves what matched
//! there unknown: that watcher gets a resync. A resync under a filter bootstraps the resources
//! matching now, and the consumer's view (and the watcher's set) is replaced by them.
//!
//! # Reuse by other backends
//!
//! The machinery is synchronous and backend-neutral, in `pub(crate)` modules:
//! - [`write_rules`]: `prepare_create`, `check_update` + `stamp_update`, `check_destroy` — the
//!   rules of `State` as pure functions of the stored value and the write.
//! - [`Collection`] (one kind): `read()`/`write()` give the [`KindContents`] under the kind
//!   lock; its `apply_create`/`apply_update`/`apply_destroy` publish an already checked and
//!   stamped write (window, markers, sequence number); [`Collection::wake`] must follow the
//!   write guard's drop. `watch_kind`/`watch_pointer` return the [`KindWatcher`] event source,
//!   which serves bootstrap, tail, resume, filters, catch-up, resync and strict mode.
//!   [`Collection::resumed_at`] continues a persisted sequence, so bookmarks survive restarts.
//!
//! A durable backend serializes its writes per kind, checks each against `read()`, persists
//! it, then applies it under `write()` and wakes. The in-memory backend checks and applies
//! under one write lock instead, with one map lookup (`check_and_update`, `check_and_destroy`).
//!
//! # Costs
//!
//! Writers never wait for a consumer: they only contend for the kind lock, which a watcher
//! holds for one bounded batch (or one bootstrap/catch-up scan). Fan-out costs an `Arc` clone
//! per event per watcher. Memory is bounded by the live resources, the window (which keeps old
//! values alive), the destroy markers (which keep last states alive) and the change log (one
//! shared id per 32 live resources); a watcher holds only the batch it has not handed out yet,
//! and a label-filtered one also the ids its consumer holds (one shared `Arc<str>` each).

mod change_log;
mod collection;
mod collections;
mod contents;
mod cursors;
mod delivered;
mod destroy_markers;
mod history;
mod id_map;
mod kind_map;
mod kind_watch;
mod shared_batches;
mod watch_filter;
pub(crate) mod write_rules;

#[cfg(test)]
mod start_model;
#[cfg(test)]
mod tests;

use cosi_core::{
    Call, CreateOptions, DestroyOptions, Kind, ListOptions, Pointer, Result, SharedResource, State,
    UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};

#[allow(unused_imports)] // Reused by the disk backend.
pub(crate) use collection::{check_watch_options, tombstone, Collection};
pub(crate) use collections::Collections;
#[allow(unused_imports)]
pub(crate) use contents::KindContents;
#[allow(unused_imports)]
pub(crate) use history::{Change, ChangeOp};
#[allow(unused_imports)]
pub(crate) use kind_map::KindMap;
#[allow(unused_imports)]
pub(crate) use kind_watch::{Gap, KindWatcher};
#[allow(unused_imports)]
pub(crate) use watch_filter::WatchFilter;

/// Sizing of the in-memory backend's watch machinery (also the disk backend's, which serves
/// reads and watches from the same in-memory collections).
///
/// Each kind keeps an exact history window of its latest changes, sized by demand: it starts at
/// `history_min` changes and doubles, up to `history`, while a live watcher has not read its
/// oldest change; once its watchers have caught up it shrinks back as the kind keeps changing.
/// So every live watcher within `history` changes of the head gets every event exactly, and a
/// kind whose watchers keep up holds a few changes (and the old values they keep alive) rather
/// than thousands. A kind that stops changing keeps what its last changes needed. A `tail`, or
/// a watch resumed from a bookmark, is served exactly from what the window holds when it
/// starts, and by a compacted catch-up beyond it (the disk backend reads such a watch's missed
/// changes back from its durable log instead). Destroy markers, which a catch-up needs to
/// report destructions, follow the same rule: the newest `history_min` are kept, older ones
/// only while a live watcher is behind them, never more than `max_destroy_markers`.
///
/// ```
/// use cosi_state::{MemoryOptions, MemoryState};
/// let state = MemoryState::new(MemoryOptions { history: 16_384, ..MemoryOptions::default() });
/// # let _ = state;
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryOptions {
    /// The most events per kind the exact history window holds (at least 1; 0 is read as 1).
    ///
    /// Default 4096: a live watcher may lag that many changes of one kind and still see every
    /// intermediate version; beyond that it gets a compacted catch-up, which is cheap and
    /// correct. The window grows to this only while a watcher lags; it holds `Arc`s of old
    /// values, so a full one costs the values it keeps alive (a few MiB per busy kind).
    pub history: usize,
    /// The fewest events per kind the window keeps, and the newest destroy markers kept when
    /// no live watcher needs them (at most `history`; 0 is read as 1).
    ///
    /// Default 8: what a `tail` or a resume from a bookmark can count on when no watcher holds
    /// the window open; beyond it they get a catch-up (from the in-memory backend; the disk
    /// backend reads what they missed back from its durable log). Raise it to keep more
    /// history in memory for watches that come and go.
    pub history_min: usize,
    /// The most destroy markers kept per kind to compute catch-ups.
    ///
    /// Default 65536: enough to cover the destruction of every resource of a large kind during
    /// one lag; a watcher that lagged past more destructions than this gets a resync. Markers
    /// beyond the newest `history_min` are kept only while a live watcher is behind them.
    pub max_destroy_markers: usize,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            history: 4096,
            history_min: 8,
            max_destroy_markers: 65_536,
        }
    }
}

/// The in-memory [`State`] backend.
///
/// Dropping it ends its watches once they have delivered the events already stored.
///
/// ```
/// use cosi_core::{CreateOptions, Resource, ResourceSpec, State};
/// use cosi_state::{MemoryOptions, MemoryState};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct Hostname { name: String }
/// # impl ResourceSpec for Hostname {
/// #     const TYPE: &'static str = "Hostnames.net.cosi.dev";
/// #     const DEFAULT_NAMESPACE: &'static str = "network";
/// # }
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let state = MemoryState::new(MemoryOptions::default());
/// let res = Resource::new("hostname", Hostname { name: "node-1".into() });
/// let stored = state.create(res.into_shared(), CreateOptions::default()).await.unwrap();
/// assert_eq!(stored.metadata().version().get(), 1);
/// # });
/// ```
#[derive(Debug)]
pub struct MemoryState {
    collections: Collections,
    options: MemoryOptions,
}

impl MemoryState {
    /// An empty store.
    pub fn new(options: MemoryOptions) -> MemoryState {
        MemoryState {
            collections: Collections::new(options.clone(), crate::origin::fresh_origin()),
            options,
        }
    }

    /// The options it was built with.
    pub fn options(&self) -> &MemoryOptions {
        &self.options
    }
}

impl MemoryState {
    /// [`State::create`]: every call of this store completes without waiting.
    fn create_at_once(
        &self,
        resource: SharedResource,
        options: CreateOptions,
    ) -> Result<SharedResource> {
        // Before the lock: a spec the durable stores could not keep is refused here too.
        resource.check_spec()?;
        self.collections
            .with_resource(resource, |c, resource| c.create(resource, options))
    }

    /// [`State::update`].
    fn update_at_once(
        &self,
        resource: SharedResource,
        options: UpdateOptions,
    ) -> Result<SharedResource> {
        resource.check_spec()?;
        match self.collections.find(resource.metadata().kind()) {
            Some(collection) => collection.update(resource, options),
            None => Err(cosi_core::Error::NotFound {
                pointer: resource.metadata().pointer().clone(),
            }),
        }
    }
}

impl Default for MemoryState {
    fn default() -> Self {
        MemoryState::new(MemoryOptions::default())
    }
}

impl State for MemoryState {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        self.collections.get_call(pointer)
    }

    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        self.collections.list_call(kind, options)
    }

    fn create(&self, resource: SharedResource, options: CreateOptions) -> Call<'_, SharedResource> {
        crate::at_once(move || self.create_at_once(resource, options))
    }

    fn update(&self, resource: SharedResource, options: UpdateOptions) -> Call<'_, SharedResource> {
        crate::at_once(move || self.update_at_once(resource, options))
    }

    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
        crate::at_once(move || match self.collections.find(pointer.kind()) {
            Some(collection) => collection.destroy(pointer, &options),
            None => Err(cosi_core::Error::NotFound {
                pointer: pointer.clone(),
            }),
        })
    }

    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
        Call::done(Ok(self.collections.watch(pointer, options)))
    }

    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch> {
        Call::done(self.collections.watch_kind(kind, options))
    }
}
