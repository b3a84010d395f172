//! [`NodeStore`]: where the node keeps its state, namespace by namespace.
//!
//! | namespace        | backend | why |
//! |------------------|---------|-----|
//! | `config`         | disk    | the persisted config is what the node boots with; the history goes with it |
//! | `cluster`        | disk    | the node identity is generated once and kept for the node's life |
//! | `runtime`        | memory  | services and statuses describe this process's run |
//! | `network-config` | memory  | rebuilt from the config, the command line and operators' specs |
//! | `network`        | memory  | merged specs and what the backend reports |
//! | `cluster-raw`    | memory  | what the registries report now |
//! | `meta`           | memory  | the definitions, published at every start |
//!
//! Everything in `config` and `cluster` is written through to disk (every write durable
//! before it is acknowledged); the fan-out resources in `config` and the affiliates and
//! members in `cluster` are derived, so the controllers rewrite or remove whatever a restart
//! left there. A namespace not in the table is refused with an error naming the routed ones.
//!
//! The disk namespaces keep the last [`RETAINED_CHANGES`] changes of each kind (on disk and in
//! the in-memory window) for watches to resume from, not the library's default of 4,096: every
//! change holds the old and the new resource, and what the file keeps is loaded at every start.
//! Measured (release build, a 30 KB machine config applied 5,000 times): with 4,096 the file
//! grew to 411 MB and took 0.46 s to open; with 256, 82 MB and 38 ms. A watcher that resumes
//! from an older bookmark gets a catch-up, as from any store.
//!
//! The store outlives restarts of the node runtime: a restart in place keeps every namespace,
//! memory ones included, as a kernel keeps its state across a restart of the services on it;
//! only the daemon's exit ends the memory namespaces.

use std::path::Path;
use std::sync::Arc;

use cosi_core::{Registry, State};
use cosi_state::{DiskOptions, DiskState, MemoryState, NamespaceRouter};

use crate::namespaces;

/// The namespaces kept on disk.
pub const DISK_NAMESPACES: [&str; 2] = [namespaces::CONFIG, namespaces::CLUSTER];
/// The namespaces kept in memory.
pub const MEMORY_NAMESPACES: [&str; 5] = [
    namespaces::RUNTIME,
    namespaces::NETWORK_CONFIG,
    namespaces::NETWORK,
    namespaces::CLUSTER_RAW,
    namespaces::META,
];
/// The store file in the state directory.
pub const STATE_FILE: &str = "state.redb";
/// Changes per kind the disk namespaces keep for watches to resume from (see the module docs).
pub const RETAINED_CHANGES: usize = 256;

/// The node's state: one [`State`] routing each namespace to disk or memory.
///
/// ```
/// use std::sync::Arc;
/// use cosi_core::{CreateOptions, Resource, ResourceSpec, State, StateExt};
/// use cosi_node::cluster::{Identity, LOCAL};
/// use cosi_node::node::{register_types, NodeStore};
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let mut registry = cosi_core::Registry::new();
/// register_types(&mut registry).unwrap();
/// let registry = Arc::new(registry);
///
/// let store = NodeStore::open(dir.path(), registry.clone()).await.unwrap();
/// let identity = Identity { node_id: cosi_node::cluster::generate_node_id().unwrap() };
/// store.state()
///     .create(Resource::new(LOCAL, identity.clone()).into_shared(), CreateOptions::default())
///     .await
///     .unwrap();
/// assert!(store.close().await);
///
/// // The identity lives in `cluster`, on disk: it is there after a reopen.
/// let store = NodeStore::open(dir.path(), registry).await.unwrap();
/// let kept = store.state().get_typed::<Identity>(&Identity::kind().pointer(LOCAL)).await.unwrap();
/// assert_eq!(kept.spec, identity);
/// assert!(store.close().await);
/// # });
/// ```
pub struct NodeStore {
    state: Arc<dyn State>,
    disk: Arc<DiskState>,
}

impl std::fmt::Debug for NodeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStore")
            .field("file", &self.disk.path())
            .finish_non_exhaustive()
    }
}

impl NodeStore {
    /// Opens (or creates) the store in `dir`, `<dir>/state.redb` for the disk namespaces;
    /// `registry` decodes what the file holds. Fails with the store's error when the file is
    /// locked by another process, corrupt, or of a newer format.
    pub async fn open(dir: &Path, registry: Arc<Registry>) -> cosi_core::Result<NodeStore> {
        let options = DiskOptions {
            retained_changes: RETAINED_CHANGES,
            ..DiskOptions::default()
        };
        let disk = Arc::new(DiskState::open(dir.join(STATE_FILE), options, registry).await?);
        let memory: Arc<dyn State> = Arc::new(MemoryState::default());
        let routes = DISK_NAMESPACES
            .iter()
            .map(|ns| (*ns, disk.clone() as Arc<dyn State>))
            .chain(MEMORY_NAMESPACES.iter().map(|ns| (*ns, memory.clone())));
        let router = NamespaceRouter::new(routes, None)?;
        Ok(NodeStore {
            state: Arc::new(router),
            disk,
        })
    }

    /// The state (cheap to clone; every clone keeps the store open).
    pub fn state(&self) -> Arc<dyn State> {
        self.state.clone()
    }

    /// Finishes the accepted writes and releases the file. Returns false, leaving the file to
    /// be released when the last clone of [`Self::state`] goes, if a clone is still held.
    pub async fn close(self) -> bool {
        let NodeStore { state, disk } = self;
        drop(state);
        match Arc::try_unwrap(disk) {
            Ok(disk) => {
                disk.close().await;
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cosi_core::{Resource, ResourceSpec, StateExt, UpdateOptions, WatchKindOptions};

    use super::*;
    use crate::cluster::{Identity, LOCAL};

    /// Bounds every wait; only a broken build takes this long.
    const WAIT: Duration = Duration::from_secs(30);

    fn registry() -> Arc<Registry> {
        let mut registry = Registry::new();
        crate::node::register_types(&mut registry).unwrap();
        Arc::new(registry)
    }

    async fn set_node_id(state: &dyn State, node_id: String) {
        let identity = Resource::new(
            LOCAL,
            Identity {
                node_id: String::new(),
            },
        );
        state
            .modify(identity, UpdateOptions::default(), |r| {
                r.spec.node_id = node_id.clone();
                Ok(())
            })
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_store_holds_the_last_retained_changes_of_a_kind_and_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let store = NodeStore::open(dir.path(), registry()).await.unwrap();
        for i in 0..RETAINED_CHANGES + 44 {
            set_node_id(&*store.state(), format!("node-{i}")).await;
        }
        assert!(store.close().await);

        // After a restart, a watch asking for every past change gets the retained ones, then
        // the next live change.
        let store = NodeStore::open(dir.path(), registry()).await.unwrap();
        let state = store.state();
        let options = WatchKindOptions {
            tail: Some(10_000),
            ..WatchKindOptions::default()
        };
        let mut watch = state.watch_kind(&Identity::kind(), options).await.unwrap();
        set_node_id(&*state, "live".into()).await;
        let mut past = 0;
        loop {
            let event = tokio::time::timeout(WAIT, watch.recv())
                .await
                .expect("the live change arrives")
                .expect("the watch is open");
            let resource = event.resource().expect("a change event").clone();
            let identity = cosi_core::downcast::<Identity>(resource).unwrap();
            if identity.spec.node_id == "live" {
                break;
            }
            past += 1;
        }
        assert_eq!(past, RETAINED_CHANGES);
        drop(watch);
        drop(state);
        assert!(store.close().await);
    }
}
