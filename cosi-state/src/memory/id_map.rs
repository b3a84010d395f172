//! [`IdMap`]: a kind's live resources in id order, with an id comparison made for short ids.
//!
//! Every write and every read of one resource searches this map, and the search is a run of
//! id comparisons. `str`'s ordering calls `memcmp` for each; ids are short (tens of bytes), so
//! the call and its setup cost more than the comparison. [`IdKey`] orders exactly like `str`
//! (bytewise lexicographic) but compares eight bytes at a time inline. Lookups by `&str` still
//! work (and order the same way); the in-memory hot paths look up by the pointer's shared id.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::btree_map::{self, BTreeMap};
use std::sync::Arc;

/// An id as a map key: a shared string ordered bytewise, like `str`.
#[derive(Clone, Debug)]
pub(crate) struct IdKey(Arc<str>);

impl PartialEq for IdKey {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for IdKey {}

impl PartialOrd for IdKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IdKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_ids(self.0.as_bytes(), other.0.as_bytes())
    }
}

// Lookups by `&str` use `str`'s ordering, which is the same order (`compare_ids` is bytewise
// lexicographic), as `Borrow` requires.
impl Borrow<str> for IdKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// Bytewise lexicographic order, as `<[u8]>::cmp`, eight bytes at a time.
fn compare_ids(a: &[u8], b: &[u8]) -> Ordering {
    let common = a.len().min(b.len());
    let (a_head, b_head) = (&a[..common], &b[..common]);
    if common >= 8 {
        let mut at = 0;
        while at + 8 <= common {
            let (x, y) = (word(&a_head[at..at + 8]), word(&b_head[at..at + 8]));
            if x != y {
                return x.cmp(&y);
            }
            at += 8;
        }
        if at < common {
            // The last word overlaps bytes already found equal, so only the new ones decide.
            let (x, y) = (
                word(&a_head[common - 8..common]),
                word(&b_head[common - 8..common]),
            );
            if x != y {
                return x.cmp(&y);
            }
        }
    } else if let Some((x, y)) = a_head.iter().zip(b_head).find(|(x, y)| x != y) {
        return x.cmp(y);
    }
    a.len().cmp(&b.len())
}

/// Eight bytes as a big-endian number: comparing those compares the bytes lexicographically.
fn word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes);
    u64::from_be_bytes(word)
}

/// Values by id, in id order.
#[derive(Debug)]
pub(crate) struct IdMap<V> {
    map: BTreeMap<IdKey, V>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            map: BTreeMap::new(),
        }
    }
}

impl<V> IdMap<V> {
    /// How many values are stored.
    #[allow(dead_code)] // Used by durable backends rebuilding their contents.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The value of `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&V> {
        self.map.get(id)
    }

    /// The value of `id`, searched with the fast comparison (costs a reference-count bump).
    pub(crate) fn get_shared(&self, id: &Arc<str>) -> Option<&V> {
        self.map.get(&IdKey(id.clone()))
    }

    /// The value of `id` for changing, searched with the fast comparison.
    pub(crate) fn get_mut_shared(&mut self, id: &Arc<str>) -> Option<&mut V> {
        self.map.get_mut(&IdKey(id.clone()))
    }

    /// Whether `id` has a value.
    pub(crate) fn contains_key(&self, id: &str) -> bool {
        self.map.contains_key(id)
    }

    /// Stores `value` under `id`, returning the value it replaces.
    #[allow(dead_code)] // Used by durable backends rebuilding their contents.
    pub(crate) fn insert(&mut self, id: Arc<str>, value: V) -> Option<V> {
        self.map.insert(IdKey(id), value)
    }

    /// The slot of `id`, for checking and changing it with one search.
    pub(crate) fn entry(&mut self, id: Arc<str>) -> btree_map::Entry<'_, IdKey, V> {
        self.map.entry(IdKey(id))
    }

    /// Removes the value of `id`, searched with the fast comparison.
    pub(crate) fn remove_shared(&mut self, id: &Arc<str>) -> Option<V> {
        self.map.remove(&IdKey(id.clone()))
    }

    /// The values in id order.
    pub(crate) fn values(&self) -> btree_map::Values<'_, IdKey, V> {
        self.map.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(id: &str) -> IdKey {
        IdKey(Arc::from(id))
    }

    proptest! {
        #[test]
        fn ids_order_exactly_like_str(a in "[a-c\\x00\\u{e9}-]{0,20}", b in "[a-c\\x00\\u{e9}-]{0,20}") {
            prop_assert_eq!(key(&a).cmp(&key(&b)), a.as_str().cmp(b.as_str()));
            prop_assert_eq!(key(&a) == key(&b), a == b);
        }

        #[test]
        fn ids_sharing_a_long_prefix_order_exactly_like_str(
            prefix in "[a-z]{0,17}",
            a in "[0-9]{0,10}",
            b in "[0-9]{0,10}",
        ) {
            let (a, b) = (format!("{prefix}{a}"), format!("{prefix}{b}"));
            prop_assert_eq!(key(&a).cmp(&key(&b)), a.as_str().cmp(b.as_str()));
        }
    }

    #[test]
    fn a_prefix_orders_before_its_extensions() {
        assert_eq!(key("item-0000").cmp(&key("item-00001")), Ordering::Less);
        assert_eq!(key("a").cmp(&key("a\u{0}")), Ordering::Less);
        assert_eq!(key("").cmp(&key("a")), Ordering::Less);
    }

    #[test]
    fn lookups_by_str_and_by_shared_id_find_the_same_value() {
        let mut map = IdMap::default();
        for i in (0..200).rev() {
            map.insert(Arc::from(format!("item-{i:07}")), i);
        }
        for i in 0..200 {
            let id: Arc<str> = Arc::from(format!("item-{i:07}"));
            assert_eq!(map.get(&id), Some(&i));
            assert_eq!(map.get_shared(&id), Some(&i));
        }
        let ordered: Vec<i32> = map.values().copied().collect();
        assert_eq!(ordered, (0..200).collect::<Vec<_>>());
        assert_eq!(map.remove_shared(&Arc::from("item-0000007")), Some(7));
        assert!(!map.contains_key("item-0000007"));
        assert_eq!(map.len(), 199);
    }
}
