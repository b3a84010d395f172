//! [`Collections`]: the per-kind collections of a store, created on first use, and the reads
//! every store in this crate serves from them (the in-memory backend, and the disk backend whose
//! committer is their only writer).
//!
//! A watch of a kind nobody ever wrote needs a collection to wait on. Such collections are
//! swept once nothing holds them any more (the watch ended) and they are still empty with no
//! change in their history, whenever the map has doubled since the last sweep: watching a
//! million made-up kinds leaves nothing behind. A swept collection had issued only bookmark 0,
//! which a new one issues again, so no bookmark changes meaning.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cosi_core::{
    Call, Error, Kind, ListOptions, Pointer, Result, SharedResource, Watch, WatchKindOptions,
    WatchOptions,
};

use super::kind_watch::Gap;
use super::{Collection, KindMap, KindWatcher, MemoryOptions, WatchFilter};

/// The collections of a store, by kind.
#[derive(Debug)]
pub(crate) struct Collections {
    kinds: KindMap<Arc<Collection>>,
    options: MemoryOptions,
    /// Names this store instance in its bookmarks.
    origin: u64,
    /// The number of collections right after the last sweep.
    swept_at: AtomicUsize,
}

impl Drop for Collections {
    fn drop(&mut self) {
        // Watches hold their collection, not the store: without this they would wait forever
        // for changes that can no longer come. Every store that owns collections (memory, and
        // disk once its committer has stopped) ends its watches this way.
        for collection in self.iter() {
            collection.close();
        }
    }
}

impl Collections {
    /// No collections yet; each one made later is sized by `options` and issues bookmarks
    /// of the store named `origin`.
    pub(crate) fn new(options: MemoryOptions, origin: u64) -> Self {
        Collections {
            kinds: KindMap::default(),
            options,
            origin,
            swept_at: AtomicUsize::new(0),
        }
    }

    /// The store instance its bookmarks name.
    #[cfg(test)]
    pub(crate) fn origin(&self) -> u64 {
        self.origin
    }

    /// Adds a collection rebuilt elsewhere (the disk backend's recovery), replacing any other.
    pub(crate) fn insert(&self, kind: Kind, collection: Arc<Collection>) {
        self.kinds.insert(kind, collection);
    }

    /// The kind's collection, if it has one. The map's shard stays read-locked while the
    /// result lives: use it for one call, and never across an `.await`.
    pub(crate) fn find(&self, kind: &Kind) -> Option<impl Deref<Target = Arc<Collection>> + '_> {
        self.kinds.get(kind)
    }

    /// Runs `f` on the kind's collection, creating it if needed.
    pub(crate) fn with<T>(&self, kind: &Kind, f: impl FnOnce(&Arc<Collection>) -> T) -> T {
        if let Some(collection) = self.kinds.get(kind) {
            return f(&collection);
        }
        let collection = self
            .kinds
            .entry(kind.clone())
            .or_insert_with(|| Arc::new(Collection::new(kind.clone(), &self.options, self.origin)))
            .clone();
        let result = f(&collection);
        drop(collection);
        self.sweep_if_grown();
        result
    }

    /// [`Collections::with`] for a call that moves `resource` into its kind's collection: the
    /// kind is looked up without taking a reference count on it (an atomic write per call).
    pub(crate) fn with_resource<T>(
        &self,
        resource: SharedResource,
        f: impl FnOnce(&Arc<Collection>, SharedResource) -> T,
    ) -> T {
        if let Some(collection) = self.kinds.get(resource.metadata().kind()) {
            return f(&collection, resource);
        }
        let kind = resource.metadata().kind().clone();
        self.with(&kind, move |collection| f(collection, resource))
    }

    /// Drops the collections nobody holds that never held anything, once the map has doubled
    /// since the last sweep (amortized O(1) per new collection).
    fn sweep_if_grown(&self) {
        let swept_at = self.swept_at.load(Ordering::Relaxed);
        if self.kinds.len() < 2 * swept_at.max(64) {
            return;
        }
        // The map holds one reference; anything else (a watcher, a writer) keeps it.
        self.kinds.retain(|_, collection| {
            Arc::strong_count(collection) > 1 || !collection.read().is_pristine()
        });
        self.swept_at.store(self.kinds.len(), Ordering::Relaxed);
    }

    /// The kind's collection, created if needed.
    pub(crate) fn get_or_create(&self, kind: &Kind) -> Arc<Collection> {
        self.with(kind, Arc::clone)
    }

    /// [`cosi_core::State::get`]: a kind never written has nothing to find.
    pub(crate) fn get_resource(&self, pointer: &Pointer) -> Result<SharedResource> {
        match self.find(pointer.kind()) {
            Some(collection) => collection.get(pointer),
            None => Err(Error::NotFound {
                pointer: pointer.clone(),
            }),
        }
    }

    /// [`cosi_core::State::get`] as the call of a store that answers from these collections.
    pub(crate) fn get_call<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        crate::at_once(move || self.get_resource(pointer))
    }

    /// [`cosi_core::State::list`] as the call of a store that answers from these collections.
    pub(crate) fn list_call<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        crate::at_once(move || Ok(self.list(kind, options)))
    }

    /// [`cosi_core::State::list`]: a kind never written lists empty.
    pub(crate) fn list(&self, kind: &Kind, options: &ListOptions) -> Vec<SharedResource> {
        match self.find(kind) {
            Some(collection) => {
                let filter = WatchFilter::new(options.ids.as_ref(), &options.labels);
                collection.read().list(&filter)
            }
            None => Vec::new(),
        }
    }

    /// [`cosi_core::State::watch`]: the current state (or a tombstone), then every change.
    pub(crate) fn watch(&self, pointer: &Pointer, options: WatchOptions) -> Watch {
        self.with(pointer.kind(), |c| {
            Watch::new(KindWatcher::of_pointer(c, pointer, options.strict))
        })
    }

    /// [`cosi_core::State::watch_kind`].
    pub(crate) fn watch_kind(&self, kind: &Kind, options: WatchKindOptions) -> Result<Watch> {
        self.with(kind, |c| KindWatcher::of_kind(c, options).map(Watch::new))
    }

    /// [`cosi_core::State::watch_kind`] for a backend that keeps older changes than the window:
    /// the watcher, and the changes it needs from there (see [`KindWatcher::fill_gap`]).
    pub(crate) fn watch_kind_with_gap(
        &self,
        kind: &Kind,
        options: WatchKindOptions,
    ) -> Result<(KindWatcher, Option<Gap>)> {
        self.with(kind, |c| KindWatcher::of_kind_with_gap(c, options))
    }

    /// Every collection.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Arc<Collection>> + '_ {
        self.kinds.iter().map(|entry| entry.value().clone())
    }
}
