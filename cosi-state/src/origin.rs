//! Store origins: the number each store instance puts into its bookmarks, so a bookmark handed
//! to a store that did not issue it is refused instead of misread.
//!
//! An in-memory store takes a fresh origin per instance (its positions mean nothing after a
//! restart); a disk store keeps one in its file (its positions survive restarts). Positions
//! count per kind, so each kind's bookmarks carry the store's origin mixed with the kind
//! ([`kind_origin`]): a bookmark of one kind handed to a watch of another is refused too.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use cosi_core::Kind;

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

/// The origin the bookmarks of `kind` carry in the store named `store`: the store's origin
/// mixed with the kind's namespace and type by a fixed function (64-bit FNV-1a), so that it is
/// the same in every process and after every restart, as a disk store's bookmarks must be
/// (`docs/disk-format.md`). Tools that read a store file's origin use it to name a position.
///
/// ```
/// use cosi_core::{Bookmark, Kind};
/// use cosi_state::origin::kind_origin;
/// let kind = Kind::new("ns", "Widgets.test.dev");
/// let other = Kind::new("ns", "Gadgets.test.dev");
/// // Position 5 of one kind is not position 5 of another.
/// let bookmark = Bookmark::at(kind_origin(42, &kind), 5);
/// assert_eq!(bookmark.position_in(kind_origin(42, &kind)), Some(5));
/// assert_eq!(bookmark.position_in(kind_origin(42, &other)), None);
/// ```
pub fn kind_origin(store: u64, kind: &Kind) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    // A separator no namespace contains keeps ("ab", "c") apart from ("a", "bc").
    let bytes = kind
        .namespace()
        .bytes()
        .chain([0xff])
        .chain(kind.resource_type().bytes());
    for byte in bytes {
        hash = (hash ^ u64::from(byte)).wrapping_mul(PRIME);
    }
    store ^ hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_one_store_have_distinct_origins_that_do_not_change() {
        let a = Kind::new("ns", "As.test.dev");
        let b = Kind::new("ns", "Bs.test.dev");
        let split = (Kind::new("ab", "c"), Kind::new("a", "bc"));
        assert_ne!(kind_origin(7, &a), kind_origin(7, &b));
        assert_ne!(kind_origin(7, &a), kind_origin(8, &a));
        assert_ne!(kind_origin(7, &split.0), kind_origin(7, &split.1));
        // Fixed across processes and builds: a disk store's bookmarks depend on it.
        assert_eq!(kind_origin(0, &a), 0xfab8_6464_8b8d_e802);
    }

    #[test]
    fn fresh_origins_differ_and_are_never_zero() {
        let origins: std::collections::HashSet<u64> = (0..1000).map(|_| fresh_origin()).collect();
        assert_eq!(origins.len(), 1000);
        assert!(!origins.contains(&0));
    }
}
