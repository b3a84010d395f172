//! [`IdMap`]: a kind's live resources, found by id in constant time and listed in id order.
//!
//! Every write and every read of one resource looks its id up here, and most of them do nothing
//! else with the map; only `list`, bootstrap and catch-up need id order. So the map is an arena
//! of slots (a `Vec`), a hash index from id to slot, and, once needed, the id order kept apart.
//! A get, an update or a destroy is one hash probe, whatever the size of the kind — a search
//! tree walks from its root and compares ids at every level, which is what these operations
//! cost before (~900 instructions each at 100k resources). The index keeps each id's 32-bit
//! hash beside its slot number, so that growing the table reads no id (in a large kind each
//! would be two dependent cache misses).
//!
//! While every create's id sorts after all ids held (sequentially named resources), the arena
//! itself is in id order: such a create checks one comparison, skips the probe (nothing can
//! match an id beyond the last), and appends, and a list reads the arena front to back. The
//! first create out of order builds the order apart, as short sorted chunks of slot numbers:
//! then a create that sorts last appends to the last chunk, and any other finds its place by
//! binary search over the chunks and then within one, and inserts into a chunk of at most
//! [`CHUNK`] slot numbers, splitting it when full.
//!
//! A destroy leaves its slot in place, dead, keeping only the id: the order and the index stay
//! as they are, and a later create of the same id (a recreation) revives the slot. Dead slots
//! are dropped all at once when they outnumber the live ones (the arena rebuilt in id order, so
//! it needs no separate order again, and the index renumbered in place): amortized O(1) per
//! destroy, and never more than twice the live slots plus a constant.
//!
//! Ids compare bytewise, like `str`, eight bytes at a time ([`compare_ids`]): ids are short
//! and share long prefixes, so a `memcmp` call per comparison would cost more than the
//! comparison itself. The hash is foldhash, seeded per map: ids come from API callers, and a
//! per-process random seed keeps them from choosing colliding ids.

use std::cmp::Ordering;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::sync::Arc;

use hashbrown::HashTable;

/// The most slot numbers one chunk of the id order holds: an insert into a chunk moves at most
/// this many, and a list reads whole chunks.
const CHUNK: usize = 128;

/// Dead slots tolerated before they are dropped, however few live slots there are (so that a
/// small kind destroying and recreating does not rebuild on every destroy).
const MIN_DEAD: usize = 64;

/// A value that knows its id.
pub(crate) trait Identified {
    /// The id it is stored under.
    fn id(&self) -> &Arc<str>;
}

/// A slot of the arena: a live value, or the id of a destroyed one until the next rebuild.
#[derive(Debug)]
enum Slot<V> {
    Live(V),
    Dead(Arc<str>),
}

impl<V: Identified> Slot<V> {
    fn id(&self) -> &Arc<str> {
        match self {
            Slot::Live(value) => value.id(),
            Slot::Dead(id) => id,
        }
    }
}

/// Values by id, listed in id order.
#[derive(Debug)]
pub(crate) struct IdMap<V> {
    /// Every slot, live or dead; each id has at most one.
    slots: Vec<Slot<V>>,
    /// Every slot, live or dead, by the hash of its id: entries of a slot number and that hash
    /// (see `index_entry`).
    index: HashTable<u64>,
    /// Whether the arena itself is in id order (every create so far appended, or a rebuild
    /// sorted it): then `order` is empty and not needed.
    sorted: bool,
    /// Otherwise every slot number once, in id order: non-empty chunks of at most [`CHUNK`].
    order: Vec<Vec<u32>>,
    /// Live slots.
    live: usize,
    /// The slot of the id found last: a read-modify-write looks the same id up twice, and a
    /// walk in id order (a controller writing what it listed) looks up the next slot's. Both
    /// are checked by address before hashing (a probe of a large table is a cache miss).
    finger: AtomicU32,
    hasher: foldhash::fast::RandomState,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            slots: Vec::new(),
            index: HashTable::new(),
            sorted: true,
            order: Vec::new(),
            live: 0,
            finger: AtomicU32::new(0),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

/// Where [`IdMap::entry`] found an id.
pub(crate) enum Entry<'a, V> {
    /// The id has a live value.
    Occupied(OccupiedEntry<'a, V>),
    /// The id has no live value.
    Vacant(VacantEntry<'a, V>),
}

/// An id with a live value, found by [`IdMap::entry`].
pub(crate) struct OccupiedEntry<'a, V> {
    map: &'a mut IdMap<V>,
    slot: u32,
}

/// An id without a live value, found by [`IdMap::entry`]: inserting needs no second search.
pub(crate) struct VacantEntry<'a, V> {
    map: &'a mut IdMap<V>,
    hash: u32,
    /// The dead slot the id had, if any.
    dead: Option<u32>,
}

impl<V: Identified> IdMap<V> {
    /// How many values are stored.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    fn hash(&self, id: &str) -> u32 {
        (self.hasher.hash_one(id) >> 32) as u32
    }

    /// The slot holding `id` (whose hash is `hash`), live or dead.
    fn find_hashed(&self, id: &str, hash: u32) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(spread(hash), |&entry| {
                entry_hash(entry) == hash && same_id(slots[entry_slot(entry)].id(), id)
            })
            .map(|&entry| entry_slot(entry) as u32)
    }

    /// The slot holding `id`, live or dead.
    fn find(&self, id: &str) -> Option<u32> {
        let found = self
            .near_finger(id)
            .or_else(|| self.find_hashed(id, self.hash(id)));
        if let Some(slot) = found {
            self.finger.store(slot, AtomicOrdering::Relaxed);
        }
        found
    }

    /// The slot at or just after the finger, if it holds `id` itself (the same shared string,
    /// not merely equal bytes: that check costs no read of the id).
    fn near_finger(&self, id: &str) -> Option<u32> {
        let finger = self.finger.load(AtomicOrdering::Relaxed);
        [finger, finger.wrapping_add(1)].into_iter().find(|&slot| {
            self.slots
                .get(slot as usize)
                .is_some_and(|s| same_string(s.id(), id))
        })
    }

    /// The id that sorts last of all slots (live or dead).
    fn last_id(&self) -> Option<&Arc<str>> {
        let slot = if self.sorted {
            self.slots.len().checked_sub(1)?
        } else {
            *self.order.last()?.last()? as usize
        };
        Some(self.slots[slot].id())
    }

    /// The value of `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&V> {
        match &self.slots[self.find(id)? as usize] {
            Slot::Live(value) => Some(value),
            Slot::Dead(_) => None,
        }
    }

    /// The value of `id` for changing (its id must stay the same).
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut V> {
        let slot = self.find(id)?;
        match &mut self.slots[slot as usize] {
            Slot::Live(value) => Some(value),
            Slot::Dead(_) => None,
        }
    }

    /// Whether `id` has a value.
    pub(crate) fn contains_key(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// Stores `value` under its id, returning the value it replaces.
    #[allow(dead_code)] // Used by durable backends rebuilding their contents.
    pub(crate) fn insert(&mut self, value: V) -> Option<V> {
        match self.entry(value.id()) {
            Entry::Occupied(mut slot) => Some(std::mem::replace(slot.get_mut(), value)),
            Entry::Vacant(slot) => {
                slot.insert(value);
                None
            }
        }
    }

    /// The slot of `id`, for checking and changing it with one search. The id is only looked
    /// up (no reference count taken): the value inserted carries its own.
    pub(crate) fn entry(&mut self, id: &str) -> Entry<'_, V> {
        let hash = self.hash(id);
        // An id sorting after every slot's has none: sequentially named creates skip the
        // probe (a cache miss in a large table).
        let appends = self
            .last_id()
            .is_none_or(|last| compare_ids(id.as_bytes(), last.as_bytes()) == Ordering::Greater);
        let found = if appends {
            None
        } else {
            self.near_finger(id).or_else(|| self.find_hashed(id, hash))
        };
        if let Some(slot) = found {
            *self.finger.get_mut() = slot;
        }
        match found {
            Some(slot) if matches!(self.slots[slot as usize], Slot::Live(_)) => {
                Entry::Occupied(OccupiedEntry { map: self, slot })
            }
            dead => Entry::Vacant(VacantEntry {
                map: self,
                hash,
                dead,
            }),
        }
    }

    /// Removes the value of `id`.
    #[allow(dead_code)] // Used by durable backends publishing a destroy.
    pub(crate) fn remove(&mut self, id: &Arc<str>) -> Option<V> {
        match self.entry(id) {
            Entry::Occupied(slot) => Some(slot.remove()),
            Entry::Vacant(_) => None,
        }
    }

    /// The values in id order.
    pub(crate) fn values(&self) -> Values<'_, V> {
        Values {
            slots: &self.slots,
            order: self.order.iter(),
            chunk: [].iter(),
            next_slot: if self.sorted { 0 } else { self.slots.len() },
            remaining: self.live,
        }
    }

    /// Files a new slot (the arena's last) into the id order.
    fn order_insert(&mut self, slot: u32) {
        let slots = &self.slots;
        let id_of = |s: u32| slots[s as usize].id().as_bytes();
        let id = id_of(slot);
        if self.sorted {
            let in_order = slot
                .checked_sub(1)
                .is_none_or(|before| compare_ids(id, id_of(before)) == Ordering::Greater);
            if in_order {
                return;
            }
            // The first create out of order: from now on the order is kept apart.
            self.sorted = false;
            let before: Vec<u32> = (0..slot).collect();
            self.order = before.chunks(CHUNK).map(new_chunk_from).collect();
        }
        let Some(last) = self.order.last_mut() else {
            self.order.push(new_chunk(slot));
            return;
        };
        // Sequentially named resources arrive in order: one comparison, then an append.
        if let Some(&tail) = last.last() {
            if compare_ids(id, id_of(tail)) == Ordering::Greater {
                if last.len() < CHUNK {
                    last.push(slot);
                } else {
                    self.order.push(new_chunk(slot));
                }
                return;
            }
        }
        // The first chunk whose last id sorts after `id` (one does: the last chunk's does).
        let at = self.order.partition_point(|chunk| {
            chunk
                .last()
                .is_some_and(|&s| compare_ids(id_of(s), id) == Ordering::Less)
        });
        let chunk = &mut self.order[at];
        let position = chunk.partition_point(|&s| compare_ids(id_of(s), id) == Ordering::Less);
        chunk.insert(position, slot);
        if chunk.len() > CHUNK {
            let upper = chunk.split_off(chunk.len() / 2);
            self.order.insert(at + 1, upper);
        }
    }

    /// Drops the dead slots once they outnumber the live ones: moves the live values to a new
    /// arena in id order (which then needs no separate order) and renumbers the index in place.
    fn compact_if_sparse(&mut self) {
        let dead = self.slots.len() - self.live;
        if dead <= self.live.max(MIN_DEAD) {
            return;
        }
        // Old slot number to new; `u32::MAX` for the dead.
        let renumber: Vec<u32> = if self.sorted {
            // Already in id order: drop the dead in place, one pass.
            let mut next = 0;
            let renumber = self
                .slots
                .iter()
                .map(|slot| match slot {
                    Slot::Live(_) => {
                        next += 1;
                        next - 1
                    }
                    Slot::Dead(_) => u32::MAX,
                })
                .collect();
            self.slots.retain(|slot| matches!(slot, Slot::Live(_)));
            if self.slots.capacity() > 4 * self.slots.len().max(MIN_DEAD) {
                self.slots.shrink_to(2 * self.slots.len());
            }
            renumber
        } else {
            // Move the live values to a new arena in id order.
            let mut old: Vec<Option<V>> = std::mem::take(&mut self.slots)
                .into_iter()
                .map(|slot| match slot {
                    Slot::Live(value) => Some(value),
                    Slot::Dead(_) => None,
                })
                .collect();
            let mut renumber = vec![u32::MAX; old.len()];
            let mut slots = Vec::with_capacity(self.live);
            for s in std::mem::take(&mut self.order).into_iter().flatten() {
                if let Some(value) = old[s as usize].take() {
                    renumber[s as usize] = u32::try_from(slots.len()).unwrap_or(u32::MAX);
                    slots.push(Slot::Live(value));
                }
            }
            self.slots = slots;
            renumber
        };
        // The arena is now in id order.
        self.sorted = true;
        *self.finger.get_mut() = 0;
        self.order = Vec::new();
        self.index.retain(|entry| {
            let slot = renumber[entry_slot(*entry)];
            *entry = index_entry(slot, entry_hash(*entry));
            slot != u32::MAX
        });
        if self.index.capacity() > 4 * self.live.max(MIN_DEAD) {
            self.index.shrink_to(2 * self.live, rehash);
        }
    }
}

impl<'a, V: Identified> OccupiedEntry<'a, V> {
    /// The value.
    pub(crate) fn get(&self) -> &V {
        match &self.map.slots[self.slot as usize] {
            Slot::Live(value) => value,
            // Invariant: an occupied entry is made only for a live slot, and holds the map.
            Slot::Dead(_) => unreachable!("an occupied entry's slot is live"),
        }
    }

    /// The value for changing (its id must stay the same).
    pub(crate) fn get_mut(&mut self) -> &mut V {
        match &mut self.map.slots[self.slot as usize] {
            Slot::Live(value) => value,
            Slot::Dead(_) => unreachable!("an occupied entry's slot is live"),
        }
    }

    /// Removes the value: its slot stays, dead, until dead slots outnumber live ones.
    pub(crate) fn remove(self) -> V {
        let slot = &mut self.map.slots[self.slot as usize];
        let id = slot.id().clone();
        let Slot::Live(value) = std::mem::replace(slot, Slot::Dead(id)) else {
            unreachable!("an occupied entry's slot is live")
        };
        self.map.live -= 1;
        self.map.compact_if_sparse();
        value
    }
}

impl<'a, V: Identified> VacantEntry<'a, V> {
    /// Stores `value`, whose id must be the entry's.
    pub(crate) fn insert(self, value: V) -> &'a mut V {
        debug_assert_eq!(
            self.map.hash(value.id()),
            self.hash,
            "the value's id is the entry's"
        );
        let map = self.map;
        map.live += 1;
        let slot = match self.dead {
            // A recreation: the dead slot already has the id's place in the order and index.
            Some(slot) => {
                map.slots[slot as usize] = Slot::Live(value);
                slot
            }
            None => {
                // Slot numbers are `u32` to keep the index and the order small: 4 billion
                // resources of one kind are far beyond what fits in memory.
                let slot = u32::try_from(map.slots.len()).unwrap_or(u32::MAX);
                map.slots.push(Slot::Live(value));
                map.index
                    .insert_unique(spread(self.hash), index_entry(slot, self.hash), rehash);
                map.order_insert(slot);
                slot
            }
        };
        match &mut map.slots[slot as usize] {
            Slot::Live(value) => value,
            Slot::Dead(_) => unreachable!("the slot was just filled"),
        }
    }
}

/// An entry of the index: a slot number and the 32-bit hash of its id. Keeping the hash there
/// lets the table move its entries when it grows without reading a single id (which would be
/// two dependent cache misses per entry in a large kind), and skips reading the slot of an
/// entry whose tag matched by chance.
fn index_entry(slot: u32, hash: u32) -> u64 {
    u64::from(hash) << 32 | u64::from(slot)
}

fn entry_slot(entry: u64) -> usize {
    (entry & 0xffff_ffff) as usize
}

fn entry_hash(entry: u64) -> u32 {
    (entry >> 32) as u32
}

/// The table's 64-bit hash of a 32-bit id hash: multiplying by an odd constant is one-to-one
/// and moves every bit into the high ones, which the table takes its tags from (its bucket
/// index comes from the low ones, which are the id hash's own).
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The table's hash of an entry, for moving it when the table resizes.
fn rehash(entry: &u64) -> u64 {
    spread(entry_hash(*entry))
}

fn new_chunk(slot: u32) -> Vec<u32> {
    new_chunk_from(&[slot])
}

fn new_chunk_from(slots: &[u32]) -> Vec<u32> {
    let mut chunk = Vec::with_capacity(CHUNK);
    chunk.extend_from_slice(slots);
    chunk
}

/// Whether a stored id is `id`: the same shared string (the common case: a pointer built from
/// the stored value) or equal bytes.
fn same_id(stored: &Arc<str>, id: &str) -> bool {
    same_string(stored, id) || **stored == *id
}

/// Whether `id` is the stored string itself.
fn same_string(stored: &Arc<str>, id: &str) -> bool {
    std::ptr::eq(stored.as_ptr(), id.as_ptr()) && stored.len() == id.len()
}

/// The values of an [`IdMap`] in id order.
pub(crate) struct Values<'a, V> {
    slots: &'a [Slot<V>],
    order: std::slice::Iter<'a, Vec<u32>>,
    chunk: std::slice::Iter<'a, u32>,
    /// While the arena is in id order (`order` empty), the next slot to read.
    next_slot: usize,
    /// Live values not yet returned: the walk stops after the last one.
    remaining: usize,
}

impl<'a, V> Iterator for Values<'a, V> {
    type Item = &'a V;

    fn next(&mut self) -> Option<&'a V> {
        while self.remaining > 0 {
            let slot = if self.next_slot < self.slots.len() {
                self.next_slot += 1;
                self.next_slot - 1
            } else {
                match self.chunk.next() {
                    Some(&s) => s as usize,
                    None => {
                        self.chunk = self.order.next()?.iter();
                        continue;
                    }
                }
            };
            if let Slot::Live(value) = &self.slots[slot] {
                self.remaining -= 1;
                return Some(value);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<V> ExactSizeIterator for Values<'_, V> {}

/// Bytewise lexicographic order, as `<[u8]>::cmp`, eight bytes at a time.
pub(crate) fn compare_ids(a: &[u8], b: &[u8]) -> Ordering {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A test value: its id and a number.
    #[derive(Clone, Debug, PartialEq)]
    struct Item(Arc<str>, u32);

    impl Identified for Item {
        fn id(&self) -> &Arc<str> {
            &self.0
        }
    }

    fn item(id: &str, n: u32) -> Item {
        Item(Arc::from(id), n)
    }

    /// One step of a random history.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(String, u32),
        Remove(String),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct ids, so that recreations, removals of absent ids and chunk splits all
        // happen; sometimes long runs of ascending ids (the append path).
        let id = prop_oneof!["[a-d]{0,3}", (0u32..400).prop_map(|i| format!("n{i:04}"))];
        prop_oneof![
            3 => (id.clone(), any::<u32>()).prop_map(|(id, n)| Op::Insert(id, n)),
            1 => id.prop_map(Op::Remove),
        ]
    }

    fn check_against_model(map: &IdMap<Item>, model: &BTreeMap<String, u32>) {
        assert_eq!(map.len(), model.len());
        let listed: Vec<(&str, u32)> = map.values().map(|v| (&*v.0, v.1)).collect();
        let expected: Vec<(&str, u32)> = model.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(listed, expected);
        assert_eq!(map.values().len(), model.len());
        for (id, n) in model {
            assert_eq!(map.get(id).map(|v| v.1), Some(*n));
        }
        // Looked up by the stored strings themselves, in id order (the finger's cases).
        let stored: Vec<Arc<str>> = map.values().map(|v| v.0.clone()).collect();
        for id in &stored {
            assert_eq!(map.get(id).map(|v| &v.0), Some(id));
        }
        assert!(map.order.iter().all(|c| !c.is_empty() && c.len() <= CHUNK));
        assert!(map.slots.len() - map.live <= map.live.max(MIN_DEAD));
    }

    proptest! {
        #[test]
        fn ids_order_exactly_like_str(a in "[a-c\\x00\\u{e9}-]{0,20}", b in "[a-c\\x00\\u{e9}-]{0,20}") {
            prop_assert_eq!(compare_ids(a.as_bytes(), b.as_bytes()), a.as_str().cmp(b.as_str()));
        }

        #[test]
        fn ids_sharing_a_long_prefix_order_exactly_like_str(
            prefix in "[a-z]{0,17}",
            a in "[0-9]{0,10}",
            b in "[0-9]{0,10}",
        ) {
            let (a, b) = (format!("{prefix}{a}"), format!("{prefix}{b}"));
            prop_assert_eq!(compare_ids(a.as_bytes(), b.as_bytes()), a.as_str().cmp(b.as_str()));
        }

        #[test]
        fn the_map_finds_and_lists_what_an_ordered_map_would(
            ops in proptest::collection::vec(op(), 0..1500),
        ) {
            let mut map = IdMap::default();
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(id, n) => {
                        let replaced = map.insert(item(&id, n)).map(|v| v.1);
                        prop_assert_eq!(replaced, model.insert(id, n));
                    }
                    Op::Remove(id) => {
                        // By the stored string when there is one (found at the finger, or
                        // hashed), else by a fresh one.
                        let key = map.get(&id).map_or_else(|| Arc::from(id.as_str()), |v| v.0.clone());
                        let removed = map.remove(&key).map(|v| v.1);
                        prop_assert_eq!(removed, model.remove(&id));
                    }
                }
            }
            check_against_model(&map, &model);
        }
    }

    #[test]
    fn a_prefix_orders_before_its_extensions() {
        let cmp = |a: &str, b: &str| compare_ids(a.as_bytes(), b.as_bytes());
        assert_eq!(cmp("item-0000", "item-00001"), Ordering::Less);
        assert_eq!(cmp("a", "a\u{0}"), Ordering::Less);
        assert_eq!(cmp("", "a"), Ordering::Less);
    }

    #[test]
    fn ids_inserted_in_any_order_list_in_id_order() {
        let mut map = IdMap::default();
        let mut model = BTreeMap::new();
        // Odd ids descending, then even ones ascending between them: every insert but the first
        // goes through the search, and chunks split.
        for i in (0..1000u32).rev().step_by(2).chain((0..1000).step_by(2)) {
            let id = format!("item-{i:07}");
            map.insert(item(&id, i));
            model.insert(id, i);
        }
        check_against_model(&map, &model);
    }

    #[test]
    fn an_entry_reports_a_live_id_occupied_and_a_destroyed_one_vacant() {
        let mut map = IdMap::default();
        map.insert(item("a", 1));
        let Entry::Occupied(slot) = map.entry("a") else {
            panic!("a is stored")
        };
        assert_eq!(slot.remove(), item("a", 1));
        assert!(matches!(map.entry("a"), Entry::Vacant(_)));
        assert_eq!(map.get("a"), None);
        let Entry::Vacant(slot) = map.entry("a") else {
            panic!("a was removed")
        };
        slot.insert(item("a", 2));
        assert_eq!(map.get("a"), Some(&item("a", 2)));
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn an_arena_filled_in_id_order_needs_no_separate_order_until_a_create_out_of_order() {
        let mut map = IdMap::default();
        for i in 0..300u32 {
            map.insert(item(&format!("item-{i:07}"), i));
        }
        assert!(map.sorted && map.order.is_empty());
        map.insert(item("a", 0));
        assert!(!map.sorted);
        assert_eq!(map.order.iter().map(Vec::len).sum::<usize>(), 301);
        let listed: Vec<u32> = map.values().map(|v| v.1).collect();
        assert_eq!(listed[0], 0);
        assert_eq!(listed[1..], (0..300).collect::<Vec<_>>());
    }

    #[test]
    fn removing_most_values_drops_their_slots() {
        let mut map = IdMap::default();
        for i in 0..10_000u32 {
            map.insert(item(&format!("item-{i:07}"), i));
        }
        for i in 0..9_990u32 {
            assert!(map.remove(&Arc::from(format!("item-{i:07}"))).is_some());
        }
        assert_eq!(map.len(), 10);
        assert!(
            map.slots.len() <= 10 + MIN_DEAD,
            "{} slots",
            map.slots.len()
        );
        let listed: Vec<u32> = map.values().map(|v| v.1).collect();
        assert_eq!(listed, (9_990..10_000).collect::<Vec<_>>());
    }
}
