//! [`SharedEncodings`]: the encoded form of the resources a server's watches sent last, shared
//! by all of them, so that an event every watcher of a kind receives is encoded once rather
//! than once per watcher (with ten watchers, encoding was most of the server's work per event).
//!
//! A stored resource is an immutable shared value, and every watch of the in-memory store
//! receives the same `Arc` for the same change, so the allocation's address names the resource
//! (a backend that hands each watch its own copy shares nothing here, and pays only the
//! lookups). An entry keeps a
//! weak reference to its resource: that keeps the allocation (not the value) alive, so no other
//! resource can take the address while the entry exists, and a hit is always the same resource.
//! The entries are bounded by their bytes — the encoding, and the allocation a weak reference
//! keeps after its resource is gone — and evicted oldest first: a watcher that falls further
//! behind than that encodes again what it sends, nothing worse.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use cosi_core::{AnyResource, Result, SharedResource};
use prost::bytes::Bytes;

/// The bytes the entries may hold, by default: at ~400 bytes per small resource (its encoding
/// and its allocation), the last ~10,000 resources sent, more than the watchers of one store
/// usually drift apart.
pub const DEFAULT_BUDGET: usize = 4 * 1024 * 1024;

/// What an entry costs beyond its encoding and its resource's allocation (key, queue slot, the
/// weak reference, the allocation's reference counts): counted so that many tiny resources are
/// bounded too.
const ENTRY_OVERHEAD: usize = 64;

/// The bytes an entry holds: its encoding, and the resource's allocation (which the weak
/// reference keeps; the resource's own heap data is freed with it).
fn cost(resource: &SharedResource, encoded: &Bytes) -> usize {
    encoded.len() + ENTRY_OVERHEAD + std::mem::size_of_val(&**resource)
}

/// Encoded resources shared by a service's watches.
pub(crate) struct SharedEncodings {
    budget: usize,
    inner: Mutex<Entries>,
}

/// The address of a resource's allocation, and whether its encoding has the YAML spec.
type Key = (usize, bool);

#[derive(Default)]
struct Entries {
    by_key: HashMap<Key, Entry, foldhash::fast::RandomState>,
    /// Insertion order, for eviction.
    order: VecDeque<Key>,
    /// The entries' [`cost`]s.
    held: usize,
}

struct Entry {
    /// Pins the address (see the module docs); never upgraded.
    _pin: Weak<dyn AnyResource>,
    encoded: Bytes,
    cost: usize,
}

impl SharedEncodings {
    /// Holds at most `budget` bytes of encodings (0: share nothing).
    pub(crate) fn new(budget: usize) -> Self {
        SharedEncodings {
            budget,
            inner: Mutex::new(Entries::default()),
        }
    }

    /// The encoding of `resource` (with or without YAML specs), from `encode` the first time.
    /// `encode` runs without the lock held, so two watches that miss together both encode.
    pub(crate) fn get_or_encode(
        &self,
        resource: &SharedResource,
        yaml: bool,
        encode: impl FnOnce() -> Result<Bytes>,
    ) -> Result<Bytes> {
        let key = (Arc::as_ptr(resource).cast::<()>() as usize, yaml);
        if let Some(entry) = self.lock().by_key.get(&key) {
            return Ok(entry.encoded.clone());
        }
        let encoded = encode()?;
        let cost = cost(resource, &encoded);
        if cost > self.budget {
            return Ok(encoded);
        }
        let mut entries = self.lock();
        if entries.by_key.contains_key(&key) {
            return Ok(encoded);
        }
        // Evicted entries are dropped after the lock is released (dropping a weak reference
        // may free an allocation).
        let mut evicted = Vec::new();
        while entries.held + cost > self.budget {
            let Some(oldest) = entries.order.pop_front() else {
                break;
            };
            if let Some(entry) = entries.by_key.remove(&oldest) {
                entries.held -= entry.cost;
                evicted.push(entry);
            }
        }
        entries.by_key.insert(
            key,
            Entry {
                _pin: Arc::downgrade(resource),
                encoded: encoded.clone(),
                cost,
            },
        );
        entries.order.push_back(key);
        entries.held += cost;
        drop(entries);
        drop(evicted);
        Ok(encoded)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Poisoned only if a thread panicked while holding it; the entries are still valid
        // (every change above keeps `by_key`, `order` and `held` consistent before it can panic).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let entries = self.lock();
        (entries.by_key.len(), entries.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{Resource, ResourceSpec};
    use serde::{Deserialize, Serialize};
    use std::cell::Cell;

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Note {
        text: String,
    }
    impl ResourceSpec for Note {
        const TYPE: &'static str = "Notes.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }

    fn note(id: &str) -> SharedResource {
        Resource::new(id, Note { text: id.into() }).into_shared()
    }

    /// Encodes as `text`, counting the calls.
    fn counting<'a>(calls: &'a Cell<usize>, text: &'a str) -> impl FnOnce() -> Result<Bytes> + 'a {
        move || {
            calls.set(calls.get() + 1);
            Ok(Bytes::copy_from_slice(text.as_bytes()))
        }
    }

    #[test]
    fn a_resource_is_encoded_once_for_every_watch_that_sends_it() {
        let shared = SharedEncodings::new(DEFAULT_BUDGET);
        let resource = note("a");
        let calls = Cell::new(0);
        for _ in 0..10 {
            let bytes = shared
                .get_or_encode(&resource.clone(), false, counting(&calls, "a"))
                .unwrap();
            assert_eq!(bytes, "a");
        }
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn with_and_without_yaml_are_separate_encodings() {
        let shared = SharedEncodings::new(DEFAULT_BUDGET);
        let resource = note("a");
        let calls = Cell::new(0);
        let plain = shared
            .get_or_encode(&resource, false, counting(&calls, "plain"))
            .unwrap();
        let yaml = shared
            .get_or_encode(&resource, true, counting(&calls, "yaml"))
            .unwrap();
        assert_eq!(
            (plain, yaml, calls.get()),
            ("plain".into(), "yaml".into(), 2)
        );
    }

    #[test]
    fn an_equal_resource_in_another_allocation_is_encoded_on_its_own() {
        let shared = SharedEncodings::new(DEFAULT_BUDGET);
        let calls = Cell::new(0);
        shared
            .get_or_encode(&note("a"), false, counting(&calls, "first"))
            .unwrap();
        // The first resource is dropped here: its entry pins its address, so the second can
        // never be mistaken for it even if the allocator would have reused the memory.
        let second = shared
            .get_or_encode(&note("a"), false, counting(&calls, "second"))
            .unwrap();
        assert_eq!((second, calls.get()), ("second".into(), 2));
    }

    #[test]
    fn entries_beyond_the_budget_evict_the_oldest() {
        let resources: Vec<_> = ["a", "b", "c", "d"].map(note).into();
        let budget = 3 * cost(&resources[0], &Bytes::from_static(b"x"));
        let shared = SharedEncodings::new(budget);
        let calls = Cell::new(0);
        for r in &resources {
            shared
                .get_or_encode(r, false, counting(&calls, "x"))
                .unwrap();
        }
        assert_eq!(shared.held(), (3, budget));
        // "a" was evicted, "d" is held.
        shared
            .get_or_encode(&resources[3], false, counting(&calls, "x"))
            .unwrap();
        assert_eq!(calls.get(), 4);
        shared
            .get_or_encode(&resources[0], false, counting(&calls, "x"))
            .unwrap();
        assert_eq!(calls.get(), 5);
    }

    #[test]
    fn an_encoding_larger_than_the_budget_is_returned_but_not_held() {
        let resource = note("a");
        let shared = SharedEncodings::new(cost(&resource, &Bytes::from_static(b"ab")));
        let calls = Cell::new(0);
        let bytes = shared
            .get_or_encode(&resource, false, counting(&calls, "abc"))
            .unwrap();
        assert_eq!((bytes, shared.held()), ("abc".into(), (0, 0)));
    }

    #[test]
    fn an_encoding_error_is_returned_and_not_held() {
        let shared = SharedEncodings::new(DEFAULT_BUDGET);
        let error = shared
            .get_or_encode(&note("a"), false, || {
                Err(cosi_core::Error::invalid("test/a", "spec", "cannot encode"))
            })
            .unwrap_err();
        assert_eq!(error.to_string(), "test/a: invalid spec: cannot encode");
        assert_eq!(shared.held(), (0, 0));
    }
}
