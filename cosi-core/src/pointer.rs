//! Resource identity: [`Kind`] (namespace and type) and [`Pointer`] (a kind plus an id).
//!
//! Namespaces and type names are few and repeated on every resource, so kinds are interned:
//! every live `Kind` naming the same namespace and type is one pointer to one shared pair of
//! names, and cloning a `Kind` or a `Pointer` only bumps reference counts. Ids are per resource
//! and are not interned.
//!
//! Because every live `Kind` is interned, two kinds are equal exactly when they share their
//! pair: equality and hashing use its address (a store looks a kind up on every call), while
//! ordering compares the names.
//!
//! The interner holds kinds weakly: a pair lives as long as some `Kind` refers to it, and the
//! table sweeps out the dead ones as it grows. So naming kinds never grows memory by itself —
//! a remote caller naming a million random types leaves nothing behind once those kinds are
//! dropped — while the kinds a program keeps (in stores, controllers, caches) stay interned.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// The names of one kind: the single allocation every equal live [`Kind`] points to.
struct KindNames {
    namespace: Box<str>,
    resource_type: Box<str>,
}

/// How many kinds each thread remembers in front of the shared table.
const RECENT_KINDS: usize = 8;

thread_local! {
    /// The kinds this thread built last: a program builds kinds from a handful of names over
    /// and over, and a hit here skips the shared lock (and its cache-line traffic) and the
    /// hashing. Holding them strongly keeps at most this many kinds alive per thread.
    static RECENT: RefCell<Vec<Arc<KindNames>>> = const { RefCell::new(Vec::new()) };
}

/// Returns the shared pair for these names, allocating it the first time it is seen.
fn intern_kind(namespace: &str, resource_type: &str) -> Arc<KindNames> {
    // `try_with` fails only while the thread is being torn down; the shared table still works.
    let recent = RECENT.try_with(|recent| {
        let mut recent = recent.try_borrow_mut().ok()?;
        let known = recent
            .iter()
            .find(|known| *known.resource_type == *resource_type && *known.namespace == *namespace);
        if let Some(known) = known {
            return Some(known.clone());
        }
        let shared = INTERNER
            .get_or_init(Interner::default)
            .intern(namespace, resource_type);
        if recent.len() == RECENT_KINDS {
            recent.remove(0);
        }
        recent.push(shared.clone());
        Some(shared)
    });
    match recent {
        Ok(Some(shared)) => shared,
        _ => INTERNER
            .get_or_init(Interner::default)
            .intern(namespace, resource_type),
    }
}

static INTERNER: OnceLock<Interner> = OnceLock::new();

/// The process-wide table of live kinds: by a hash of the names, the kinds (weakly) with that
/// hash. Dead entries are swept when the table has doubled since the last sweep, so it holds at
/// most about twice the live kinds (amortized O(1) per new kind).
#[derive(Default)]
struct Interner {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    kinds: HashMap<u64, Vec<Weak<KindNames>>>,
    /// Entries (live or dead) in `kinds`.
    entries: usize,
    /// `entries` right after the last sweep.
    swept_at: usize,
    hasher: std::collections::hash_map::RandomState,
}

impl Interner {
    fn intern(&self, namespace: &str, resource_type: &str) -> Arc<KindNames> {
        // A poisoned lock only means another thread panicked while interning; the table is
        // still a valid cache of weak references.
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let hash = {
            let mut hasher = table.hasher.build_hasher();
            namespace.hash(&mut hasher);
            resource_type.hash(&mut hasher);
            hasher.finish()
        };
        // Strong references taken while looking are dropped after the lock is released: a drop
        // never runs code that needs the table, but keeping them is also what returns the match.
        let mut found = None;
        if let Some(bucket) = table.kinds.get(&hash) {
            for weak in bucket {
                if let Some(names) = weak.upgrade() {
                    if *names.namespace == *namespace && *names.resource_type == *resource_type {
                        found = Some(names);
                        break;
                    }
                }
            }
        }
        if let Some(names) = found {
            return names;
        }
        let names = Arc::new(KindNames {
            namespace: namespace.into(),
            resource_type: resource_type.into(),
        });
        table
            .kinds
            .entry(hash)
            .or_default()
            .push(Arc::downgrade(&names));
        table.entries += 1;
        if table.entries >= 2 * table.swept_at.max(64) {
            table.sweep();
        }
        names
    }

    /// Live interned kinds (for tests of the bound).
    #[cfg(test)]
    fn live(&self) -> usize {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .kinds
            .values()
            .flatten()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    #[cfg(test)]
    fn entries(&self) -> usize {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).entries
    }
}

impl Table {
    fn sweep(&mut self) {
        self.kinds.retain(|_, bucket| {
            bucket.retain(|weak| weak.strong_count() > 0);
            !bucket.is_empty()
        });
        self.kinds.shrink_to_fit();
        self.entries = self.kinds.values().map(Vec::len).sum();
        self.swept_at = self.entries;
    }
}

fn address<T: ?Sized>(shared: &Arc<T>) -> usize {
    Arc::as_ptr(shared).cast::<u8>() as usize
}

/// A namespace and a resource type: the unit of listing and watching.
///
/// ```
/// use cosi_core::Kind;
/// let kind = Kind::new("config", "MachineConfigs.config.cosi.dev");
/// assert_eq!(kind.namespace(), "config");
/// assert_eq!(kind.to_string(), "config/MachineConfigs.config.cosi.dev");
/// ```
#[derive(Clone)]
pub struct Kind {
    // Invariant: it comes from `intern_kind` (the only constructor is `Kind::new`), so live
    // kinds with equal names share this allocation. `PartialEq` and `Hash` rely on it.
    names: Arc<KindNames>,
}

impl PartialEq for Kind {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.names, &other.names)
    }
}

impl Eq for Kind {}

impl Hash for Kind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Equal live kinds share their allocation (see the field invariant), so the address is
        // a hash consistent with `eq`, without reading the names. (A map keyed by kinds keeps
        // them alive, so an address never changes under it.)
        state.write_usize(address(&self.names));
    }
}

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kind {
    fn cmp(&self, other: &Self) -> Ordering {
        if self == other {
            return Ordering::Equal;
        }
        (self.namespace(), self.resource_type()).cmp(&(other.namespace(), other.resource_type()))
    }
}

impl Kind {
    /// Builds a kind from a namespace and a type name.
    pub fn new(namespace: &str, resource_type: &str) -> Self {
        Kind {
            names: intern_kind(namespace, resource_type),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.names.namespace
    }

    /// The resource type name, e.g. `MachineConfigs.config.cosi.dev`.
    pub fn resource_type(&self) -> &str {
        &self.names.resource_type
    }

    /// A pointer to the resource `id` of this kind.
    pub fn pointer(&self, id: impl Into<Arc<str>>) -> Pointer {
        Pointer {
            kind: self.clone(),
            id: id.into(),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace(), self.resource_type())
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kind({self})")
    }
}

/// The identity of one resource: namespace, type and id.
///
/// ```
/// use cosi_core::Pointer;
/// let p = Pointer::new("runtime", "Services.runtime.cosi.dev", "kubelet");
/// assert_eq!(p.id(), "kubelet");
/// assert_eq!(p.to_string(), "runtime/Services.runtime.cosi.dev/kubelet");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pointer {
    kind: Kind,
    id: Arc<str>,
}

impl Pointer {
    /// Builds a pointer from its three parts.
    pub fn new(namespace: &str, resource_type: &str, id: impl Into<Arc<str>>) -> Self {
        Kind::new(namespace, resource_type).pointer(id)
    }

    /// The kind (namespace and type).
    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.kind.namespace()
    }

    /// The resource type name.
    pub fn resource_type(&self) -> &str {
        self.kind.resource_type()
    }

    /// The id, unique within the kind.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id as a shared string (cloning it does not allocate).
    pub fn shared_id(&self) -> &Arc<str> {
        &self.id
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.id)
    }
}

impl fmt::Debug for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pointer({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_with_equal_names_share_one_allocation() {
        let a = Kind::new("ns", "T.x.dev");
        let b = Kind::new("ns", "T.x.dev");
        assert!(Arc::ptr_eq(&a.names, &b.names));
        assert_eq!(a, b);
    }

    #[test]
    fn a_kind_interned_again_after_it_died_equals_its_new_copies() {
        let name = "Ephemerals.x.dev";
        drop(Kind::new("ns", name));
        // Flush this thread's cache so the next lookups go to the table.
        for i in 0..RECENT_KINDS {
            drop(Kind::new("ns", &format!("Filler{i}.x.dev")));
        }
        let again = Kind::new("ns", name);
        assert_eq!(again, Kind::new("ns", name));
    }

    #[test]
    fn naming_a_million_kinds_leaves_only_the_live_ones_interned() {
        let keep = Kind::new("ns", "Kept.x.dev");
        for i in 0..1_000_000 {
            drop(Kind::new("ns", &format!("Random{i}.x.dev")));
        }
        let interner = INTERNER.get().expect("used above");
        // The kept kind, this thread's recent cache, other tests' kinds: far from a million.
        assert!(interner.live() < 1000, "{} live", interner.live());
        assert!(
            interner.entries() < 10_000,
            "{} entries",
            interner.entries()
        );
        assert_eq!(keep, Kind::new("ns", "Kept.x.dev"));
    }

    #[test]
    fn kinds_are_equal_exactly_when_their_names_are() {
        let a = Kind::new("ns", "T.x.dev");
        let (namespace, resource_type) = (format!("n{}", "s"), format!("T.{}.dev", "x"));
        assert_eq!(a, Kind::new(&namespace, &resource_type));
        assert_ne!(a, Kind::new("ns", "U.x.dev"));
        assert_ne!(a, Kind::new("other", "T.x.dev"));
        assert_eq!(a.cmp(&Kind::new("ns", "T.x.dev")), Ordering::Equal);
    }

    #[test]
    fn equal_kinds_hash_equally() {
        use std::collections::hash_map::RandomState;
        use std::hash::BuildHasher;
        let hasher = RandomState::new();
        let a = Kind::new("ns", "T.x.dev");
        // Names from fresh heap strings, not the literals' addresses.
        let (namespace, resource_type) = (format!("n{}", "s"), format!("T.{}.dev", "x"));
        let b = Kind::new(&namespace, &resource_type);
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&b));
    }

    #[test]
    fn kinds_order_by_namespace_then_type() {
        let mut v = vec![
            Kind::new("b", "A"),
            Kind::new("a", "B"),
            Kind::new("a", "A"),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                Kind::new("a", "A"),
                Kind::new("a", "B"),
                Kind::new("b", "A")
            ]
        );
    }

    #[test]
    fn interning_from_many_threads_yields_one_allocation() {
        // More names than a thread remembers, so the shared table is exercised too.
        let names: Vec<String> = (0..3 * RECENT_KINDS)
            .map(|i| format!("Type{i}.x.dev"))
            .collect();
        let per_thread: Vec<Vec<Kind>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| names.iter().map(|n| Kind::new("ns", n)).collect()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for kinds in &per_thread[1..] {
            for (a, b) in kinds.iter().zip(&per_thread[0]) {
                assert!(Arc::ptr_eq(&a.names, &b.names));
            }
        }
    }

    #[test]
    fn pointers_order_by_namespace_then_type_then_id() {
        let a = Pointer::new("a", "T", "2");
        let b = Pointer::new("a", "T", "10");
        let c = Pointer::new("b", "A", "1");
        let mut v = vec![c.clone(), a.clone(), b.clone()];
        v.sort();
        assert_eq!(v, vec![b, a, c]);
    }
}
