//! [`KindMap`]: the concurrent map from a kind to its collection, with a hasher made for kinds.
//!
//! Every store call looks its kind up here. A [`Kind`] hashes as the two addresses of its
//! interned names, so a general-purpose keyed hash (SipHash) would spend more time than the
//! rest of the lookup; a multiply-and-fold mix of those two words spreads them just as well.
//! Kinds are created by the program, not by remote input, so flooding is not a concern.

use std::hash::{BuildHasherDefault, Hasher};

use cosi_core::Kind;
use dashmap::DashMap;

/// A concurrent map keyed by kind.
pub(crate) type KindMap<V> = DashMap<Kind, V, BuildHasherDefault<KindHasher>>;

/// A multiply-and-fold hasher for the few machine words a [`Kind`] writes.
#[derive(Default)]
pub(crate) struct KindHasher(u64);

/// An odd constant with well-spread bits (the 64-bit golden ratio).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl KindHasher {
    fn mix(&mut self, word: u64) {
        // The folded 128-bit product moves every input bit into both halves of the hash, so
        // the low bits (the table index) and the high bits (the shard and tag) both vary even
        // though aligned addresses end in zeros.
        let product = u128::from(self.0 ^ word) * u128::from(MIX);
        self.0 = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for KindHasher {
    fn finish(&self) -> u64 {
        // A final avalanche (splitmix64's): interned names sit at patterned, aligned addresses,
        // and the table index uses only the low bits, which must depend on every input bit.
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by `Kind`, but a correct fallback for anything else hashed with it.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn write_usize(&mut self, word: usize) {
        self.mix(word as u64);
    }

    fn write_u64(&mut self, word: u64) {
        self.mix(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn distinct_kinds_get_distinct_hashes_and_table_slots() {
        let build = BuildHasherDefault::<KindHasher>::default();
        let kinds: Vec<Kind> = (0..64)
            .map(|i| Kind::new("ns", &format!("Type{i}.test.cosi.dev")))
            .collect();
        let hashes: HashSet<u64> = kinds.iter().map(|k| build.hash_one(k)).collect();
        assert_eq!(hashes.len(), 64);
        // The low bits index the table: 64 kinds must not pile into a few slots of 64. A
        // uniform hash fills about 40 on average; fewer than 20 is eight standard deviations away.
        let slots: HashSet<u64> = hashes.iter().map(|h| h % 64).collect();
        assert!(slots.len() >= 20, "only {} of 64 slots used", slots.len());
    }

    #[test]
    fn equal_kinds_hash_equally() {
        let build = BuildHasherDefault::<KindHasher>::default();
        let a = Kind::new("ns", "Things.test.cosi.dev");
        let b = Kind::new(&String::from("ns"), &String::from("Things.test.cosi.dev"));
        assert_eq!(build.hash_one(&a), build.hash_one(&b));
    }

    #[test]
    fn a_kind_map_finds_what_it_stored() {
        let map: KindMap<u32> = KindMap::default();
        for i in 0..100 {
            map.insert(Kind::new("ns", &format!("T{i}.test.cosi.dev")), i);
        }
        for i in 0..100 {
            let kind = Kind::new("ns", &format!("T{i}.test.cosi.dev"));
            assert_eq!(map.get(&kind).map(|v| *v), Some(i));
        }
    }
}
