//! [`MemoryRegistry`]: a registry held in memory, for controller tests. A test sets what the
//! "other nodes" published and whether the registry is reachable, and reads what this node
//! published.

use std::sync::Arc;

use super::{AffiliateRegistry, RegistryHealth, RegistryShared, RegistryView, ViewChanges};
use crate::cluster::Affiliate;

/// An in-memory registry. Cheap to clone; clones share one registry.
#[derive(Debug, Clone)]
pub struct MemoryRegistry {
    name: Arc<str>,
    shared: Arc<RegistryShared>,
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryRegistry {
    /// A reachable registry named `memory` with nothing published.
    pub fn new() -> Self {
        Self::named("memory")
    }

    /// A reachable registry with another name (two registries of one node need two names).
    pub fn named(name: &str) -> Self {
        let registry = MemoryRegistry {
            name: name.into(),
            shared: Arc::new(RegistryShared::default()),
        };
        registry
            .shared
            .update(|view| view.health = RegistryHealth::Healthy);
        registry
    }

    /// Another node publishes (or replaces) its affiliate.
    pub fn put(&self, affiliate: Affiliate) {
        self.shared.update(|view| {
            view.affiliates.insert(affiliate.node_id.clone(), affiliate);
        });
    }

    /// Another node's affiliate expires.
    pub fn expire(&self, node_id: &str) {
        self.shared.update(|view| {
            view.affiliates.remove(node_id);
        });
    }

    /// The registry becomes unreachable (its view is kept) or reachable again.
    pub fn set_reachable(&self, reachable: bool) {
        self.shared.update(|view| {
            view.health = if reachable {
                RegistryHealth::Healthy
            } else {
                RegistryHealth::Unreachable {
                    error: "connection refused".to_string(),
                }
            }
        });
    }

    /// What this node last published.
    pub fn published(&self) -> Option<Affiliate> {
        self.shared.local().borrow().clone()
    }
}

impl AffiliateRegistry for MemoryRegistry {
    fn name(&self) -> &str {
        &self.name
    }

    fn publish(&self, local: Option<Affiliate>) {
        self.shared.publish(local);
    }

    fn view(&self) -> RegistryView {
        self.shared.view()
    }

    fn subscribe(&self) -> ViewChanges {
        self.shared.subscribe()
    }
}
