//! Store origins: the number each store instance puts into its bookmarks, so a bookmark handed
//! to a store that did not issue it is refused instead of misread.
//!
//! An in-memory store takes a fresh origin per instance (its positions mean nothing after a
//! restart); a disk store keeps one in its file (its positions survive restarts).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A new origin, distinct from every other one this process made and, with overwhelming
/// likelihood, from those of other processes. Never 0 (0 names stores without an origin, such
/// as disk files written before origins existed).
pub(crate) fn fresh_origin() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // `RandomState` is seeded from the OS once per process; the counter and the clock make each
    // call distinct within it.
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    hasher.write_u64(nanos);
    hasher.write_u32(std::process::id());
    hasher.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_origins_differ_and_are_never_zero() {
        let origins: std::collections::HashSet<u64> = (0..1000).map(|_| fresh_origin()).collect();
        assert_eq!(origins.len(), 1000);
        assert!(!origins.contains(&0));
    }
}
