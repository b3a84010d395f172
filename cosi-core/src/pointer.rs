//! Resource identity: [`Kind`] (namespace and type) and [`Pointer`] (a kind plus an id).
//!
//! Namespaces and type names are few and repeated on every resource, so they are interned: every
//! `Kind` naming the same namespace shares one allocation, and cloning a `Kind` or a `Pointer` only
//! bumps reference counts. Ids are per resource and are not interned.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

/// Returns the shared copy of `name`, allocating it the first time it is seen.
fn intern(name: &str) -> Arc<str> {
    static NAMES: OnceLock<RwLock<HashSet<Arc<str>>>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked while inserting; the set is still valid.
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
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kind {
    namespace: Arc<str>,
    resource_type: Arc<str>,
}

impl Kind {
    /// Builds a kind from a namespace and a type name.
    pub fn new(namespace: &str, resource_type: &str) -> Self {
        Kind {
            namespace: intern(namespace),
            resource_type: intern(resource_type),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The resource type name, e.g. `MachineConfigs.config.cosi.dev`.
    pub fn resource_type(&self) -> &str {
        &self.resource_type
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
        write!(f, "{}/{}", self.namespace, self.resource_type)
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
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(Arc::ptr_eq(&a.resource_type, &b.resource_type));
        assert_eq!(a, b);
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
