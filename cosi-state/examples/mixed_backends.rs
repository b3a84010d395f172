//! Mixing backends: the `config` namespace on disk, the `runtime` namespace in memory, behind one
//! `State` ([`cosi_state::NamespaceRouter`]). After a restart the configuration is still there;
//! the runtime state starts empty, as it should on a node that just booted.
//!
//! Run it with `cargo run -p cosi-state --example mixed_backends [STORE_PATH]`.

use std::path::Path;
use std::sync::Arc;

use cosi_core::{CreateOptions, Kind, ListOptions, Resource, ResourceSpec, State, StateExt};
use cosi_state::{DiskOptions, DiskState, MemoryState, NamespaceRouter};
use serde::{Deserialize, Serialize};

/// Durable configuration: survives restarts.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Hostname {
    name: String,
}
impl ResourceSpec for Hostname {
    const TYPE: &'static str = "Hostnames.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "config";
}

/// Runtime state: rebuilt after every start.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct ServiceStatus {
    running: bool,
}
impl ResourceSpec for ServiceStatus {
    const TYPE: &'static str = "ServiceStatuses.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "runtime";
}

/// Builds the node's state: `config` on disk at `path`, `runtime` in memory.
async fn node_state(path: &Path) -> cosi_core::Result<(Arc<DiskState>, NamespaceRouter)> {
    let types = std::sync::Arc::new(cosi_core::Registry::new().with::<Hostname>().unwrap());
    let disk = Arc::new(DiskState::open(path, DiskOptions::default(), types).await?);
    let memory: Arc<dyn State> = Arc::new(MemoryState::default());
    let config: Arc<dyn State> = disk.clone();
    let router = NamespaceRouter::new([("config", config), ("runtime", memory)], None)?;
    Ok((disk, router))
}

async fn count(state: &dyn State, kind: Kind) -> cosi_core::Result<usize> {
    Ok(state.list(&kind, &ListOptions::default()).await?.len())
}

#[tokio::main]
async fn main() -> cosi_core::Result<()> {
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let path = match std::env::args().nth(1) {
        Some(path) => path.into(),
        None => scratch.path().join("node.redb"),
    };

    // First boot: write configuration and runtime state through the same router.
    let (disk, state) = node_state(&path).await?;
    let hostname = Resource::new(
        "hostname",
        Hostname {
            name: "node-1".into(),
        },
    );
    state
        .create(hostname.into_shared(), CreateOptions::default())
        .await?;
    let status = Resource::new("kubelet", ServiceStatus { running: true });
    state
        .create(status.into_shared(), CreateOptions::default())
        .await?;
    println!(
        "first boot: {} config resource(s) on disk, {} runtime resource(s) in memory",
        count(&state, Hostname::kind()).await?,
        count(&state, ServiceStatus::kind()).await?
    );

    // Shut down: release the store file (the router still holds the store; later writes to it
    // would fail), then drop the in-memory state with the router.
    disk.close().await;
    drop(state);

    // Second boot: configuration is back from disk, runtime state starts empty.
    let (_disk, state) = node_state(&path).await?;
    let hostname = state
        .get_typed::<Hostname>(&Hostname::kind().pointer("hostname"))
        .await?;
    let runtime = count(&state, ServiceStatus::kind()).await?;
    println!(
        "second boot: hostname {:?} (version {}), {runtime} runtime resource(s)",
        hostname.spec.name,
        hostname.metadata.version()
    );
    assert_eq!(hostname.spec.name, "node-1");
    assert_eq!(runtime, 0);
    Ok(())
}
