//! Affiliate registries: where nodes publish their local affiliate and read everyone else's.
//! [`AffiliateRegistry`] is what the discovery controller needs; two implementations:
//! [`DirectoryRegistry`] (a directory shared by the nodes of one machine, for the demo) and,
//! with the `etcd` feature, `EtcdRegistry` (a lease per node on a real etcd); and
//! [`MemoryRegistry`] for controller tests.
//!
//! A registry runs its own background task (connect, publish, keep alive, watch, reconnect)
//! and never makes its caller wait on the network: [`AffiliateRegistry::publish`] hands the
//! value over, [`AffiliateRegistry::view`] returns the last known view at once, with its
//! health. While the registry is unreachable the view keeps what it last saw, marked
//! [`RegistryHealth::Unreachable`], so members go stale visibly instead of vanishing or
//! blocking the node.

mod directory;
#[cfg(feature = "etcd")]
mod etcd;
mod memory;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::cluster::Affiliate;

pub use directory::{DirectoryRegistry, DirectoryRegistryOptions};
#[cfg(feature = "etcd")]
pub use etcd::{EtcdRegistry, EtcdRegistryOptions};
pub use memory::MemoryRegistry;

/// The most affiliates a registry view holds; further ones are refused with a warning, so a
/// flood of published entries cannot grow a node's memory without bound.
pub const MAX_AFFILIATES: usize = 1024;

/// Whether a registry's view is current.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub enum RegistryHealth {
    /// Not connected yet: the view is empty.
    #[default]
    Connecting,
    /// Connected: the view is current.
    Healthy,
    /// Lost: the view is what was last seen.
    Unreachable {
        /// Why.
        error: String,
    },
}

/// What a registry knows right now.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct RegistryView {
    /// The published affiliates by node id (this node's own included, if published).
    pub affiliates: BTreeMap<String, Affiliate>,
    /// Whether the view is current.
    pub health: RegistryHealth,
}

/// Notices that a registry's view changed; any number of changes coalesce into one.
#[derive(Debug)]
pub struct ViewChanges {
    receiver: watch::Receiver<u64>,
}

impl ViewChanges {
    /// Waits for the next change; `None` when the registry has stopped.
    pub async fn changed(&mut self) -> Option<()> {
        self.receiver.changed().await.ok()
    }
}

/// A place where nodes publish affiliates. See the module docs.
pub trait AffiliateRegistry: Send + Sync + 'static {
    /// The registry's name, the first part of raw affiliate ids (`directory`, `etcd`).
    fn name(&self) -> &str;

    /// Publishes this node's affiliate (replacing what was published), or withdraws it
    /// (`None`). Returns at once; the registry's task does the work and keeps it alive.
    fn publish(&self, local: Option<Affiliate>);

    /// The current view, at once.
    fn view(&self) -> RegistryView;

    /// Notices of view changes.
    fn subscribe(&self) -> ViewChanges;
}

/// The state a registry's task and its callers share.
#[derive(Debug)]
pub(crate) struct RegistryShared {
    local: watch::Sender<Option<Affiliate>>,
    view: Mutex<RegistryView>,
    notice: watch::Sender<u64>,
}

impl Default for RegistryShared {
    fn default() -> Self {
        RegistryShared {
            local: watch::Sender::new(None),
            view: Mutex::new(RegistryView::default()),
            notice: watch::Sender::new(0),
        }
    }
}

impl RegistryShared {
    pub(crate) fn publish(&self, local: Option<Affiliate>) {
        self.local.send_if_modified(|current| {
            if *current == local {
                return false;
            }
            *current = local;
            true
        });
    }

    pub(crate) fn local(&self) -> watch::Receiver<Option<Affiliate>> {
        self.local.subscribe()
    }

    pub(crate) fn view(&self) -> RegistryView {
        self.view.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn subscribe(&self) -> ViewChanges {
        ViewChanges {
            receiver: self.notice.subscribe(),
        }
    }

    /// Changes the view; notifies only if it changed.
    pub(crate) fn update(&self, change: impl FnOnce(&mut RegistryView)) {
        let changed = {
            let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
            let before = view.clone();
            change(&mut view);
            *view != before
        };
        if changed {
            self.notice.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Marks the view unreachable, keeping what it holds.
    pub(crate) fn unreachable(&self, error: String) {
        self.update(|view| view.health = RegistryHealth::Unreachable { error });
    }
}

/// Keeps at most [`MAX_AFFILIATES`] entries, warning once per refusal round.
pub(crate) fn insert_bounded(
    registry: &str,
    affiliates: &mut BTreeMap<String, Affiliate>,
    affiliate: Affiliate,
) {
    if affiliates.len() >= MAX_AFFILIATES && !affiliates.contains_key(&affiliate.node_id) {
        tracing::warn!(registry, node_id = %affiliate.node_id, "refusing an affiliate: the registry view is full ({MAX_AFFILIATES})");
        return;
    }
    affiliates.insert(affiliate.node_id.clone(), affiliate);
}

/// A handle that ends a registry's task when the last clone of the registry goes.
#[derive(Debug)]
pub(crate) struct TaskGuard(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(crate) type Shared = Arc<RegistryShared>;
