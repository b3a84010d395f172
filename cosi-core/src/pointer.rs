//! Resource identity: [`Kind`] (namespace and type) and [`Pointer`] (a kind plus an id).
//!
//! Namespaces and type names are few and repeated on every resource, so kinds are interned:
//! every `Kind` naming the same namespace and type is one pointer to one shared pair of names,
//! and cloning a `Kind` or a `Pointer` only bumps reference counts. Ids are per resource and
//! are not interned.
//!
//! Because every `Kind` is interned, two kinds are equal exactly when they share their pair:
//! equality and hashing use its address (a store looks a kind up on every call), while
//! ordering compares the names.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock, RwLock};

/// The names of one kind: the single allocation every equal [`Kind`] points to.
struct KindNames {
    namespace: Arc<str>,
    resource_type: Arc<str>,
}

/// How many kinds each thread remembers in front of the shared tables.
const RECENT_KINDS: usize = 8;

thread_local! {
    /// The kinds this thread built last: a program builds kinds from a handful of names over
    /// and over, and a hit here skips the shared locks (and their cache-line traffic) and the
    /// hashing.
    static RECENT: RefCell<Vec<Arc<KindNames>>> = const { RefCell::new(Vec::new()) };
}

/// Returns the shared pair for these names, allocating it the first time it is seen.
fn intern_kind(namespace: &str, resource_type: &str) -> Arc<KindNames> {
    // `try_with` fails only while the thread is being torn down; the shared tables still work.
    let recent = RECENT.try_with(|recent| {
        let mut recent = recent.try_borrow_mut().ok()?;
        let known = recent
            .iter()
            .find(|known| *known.resource_type == *resource_type && *known.namespace == *namespace);
        if let Some(known) = known {
            return Some(known.clone());
        }
        let shared = intern_kind_shared(namespace, resource_type);
        if recent.len() == RECENT_KINDS {
            recent.remove(0);
        }
        recent.push(shared.clone());
        Some(shared)
    });
    match recent {
        Ok(Some(shared)) => shared,
        _ => intern_kind_shared(namespace, resource_type),
    }
}

/// The process-wide table behind [`intern_kind`], keyed by the addresses of the interned names
/// (names are never dropped from their table, so an address names one string for good).
fn intern_kind_shared(namespace: &str, resource_type: &str) -> Arc<KindNames> {
    type Pairs = HashMap<(usize, usize), Arc<KindNames>>;
    static KINDS: OnceLock<RwLock<Pairs>> = OnceLock::new();
    let namespace = intern_name(namespace);
    let resource_type = intern_name(resource_type);
    let key = (address(&namespace), address(&resource_type));
    let kinds = KINDS.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked while inserting; the map is still valid.
    if let Some(found) = kinds.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return found.clone();
    }
    kinds
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_insert_with(|| {
            Arc::new(KindNames {
                namespace,
                resource_type,
            })
        })
        .clone()
}

fn address<T: ?Sized>(shared: &Arc<T>) -> usize {
    Arc::as_ptr(shared).cast::<u8>() as usize
}

/// Returns the shared copy of `name`, allocating it the first time it is seen.
fn intern_name(name: &str) -> Arc<str> {
    static NAMES: OnceLock<RwLock<HashSet<Arc<str>>>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    if let Some(found) = names.read().unwrap_or_else(|e| e.into_inner()).get(name) {
        return found.clone();
    }
    let mut names = names.write().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = names.get(name) {
        return found.clone();
    }
    let shared: Arc<str> = Arc::from(name);
    names.insert(shared.clone());
    shared
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
    // Invariant: it comes from `intern_kind` (the only constructor is `Kind::new`), so kinds
    // with equal names share this allocation. `PartialEq` and `Hash` rely on it.
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
        // Equal kinds share their allocation (see the field invariant), so the address is a
        // hash consistent with `eq`, without reading the names.
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
    fn kinds_with_equal_names_share_one_allocation_and_names_are_shared() {
        let a = Kind::new("ns", "T.x.dev");
        let b = Kind::new("ns", "T.x.dev");
        assert!(Arc::ptr_eq(&a.names, &b.names));
        let c = Kind::new("ns", "U.x.dev");
        assert!(Arc::ptr_eq(&a.names.namespace, &c.names.namespace));
        assert_eq!(a, b);
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
