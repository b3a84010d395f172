//! [`Collections`]: the per-kind collections of a store, created on first use, and the reads
//! every store in this crate serves from them (the in-memory backend, and the disk backend whose
//! committer is their only writer).

use std::ops::Deref;
use std::sync::Arc;

use cosi_core::{Error, Kind, ListOptions, Pointer, Result, SharedResource};

use super::{Collection, KindMap, MemoryOptions, WatchFilter};

/// The collections of a store, by kind.
#[derive(Debug)]
pub(crate) struct Collections {
    kinds: KindMap<Arc<Collection>>,
    options: MemoryOptions,
    /// Names this store instance in its bookmarks.
    origin: u64,
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
        f(&collection)
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

    /// Every collection.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Arc<Collection>> + '_ {
        self.kinds.iter().map(|entry| entry.value().clone())
    }
}
