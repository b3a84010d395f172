//! # The node: every family on one engine, in one daemon process
//!
//! The families of this crate ([`crate::config`], [`crate::services`], [`crate::network`],
//! [`crate::cluster`]) each own their resources and controllers; this module composes them
//! into a node a daemon runs, and is the part of the reference daemon (`examples`' `node`)
//! that does not speak the API. It does not depend on the API crate: a daemon joins the two
//! with a small adapter of its own.
//!
//! - [`NodeStore`] ([`store`]): the state, namespace by namespace on disk or in memory —
//!   `config` and `cluster` (the persisted config and the node identity) on disk, the rest
//!   in memory.
//! - [`register_types`], [`register_controllers`], [`graph`] ([`families`]): every type in
//!   one registry, every controller on one engine, and the graph without running it; with
//!   [`APPLY_ONLY_TYPES`], [`controller_owners`] and [`controller_outputs`] for the API's
//!   resource rules.
//! - [`Runtime`] ([`runtime`]): one start — the persisted config made active, the supervisor
//!   (which first kills what a killed daemon left running), the engine, the applier.
//! - [`Node`] and [`NodeHandle`] ([`lifecycle`]): the process's life — the definitions
//!   published, restarts in place for `reboot`, shutdown — and what an API adapter holds.
//! - [`NodeEvents`] ([`events`]): the event log operators read, fed by every runtime.
//! - [`MachineStatus`] ([`status`]): maintenance or running, and which start this is.
//!
//! A node, in a tokio runtime:
//!
//! ```
//! use std::sync::Arc;
//! use cosi_core::{Registry, ResourceSpec, StateExt};
//! use cosi_node::config::{ApplyMode, ApplyRequest};
//! use cosi_node::network::{Cmdline, MemoryBackend};
//! use cosi_node::node::{register_types, MachineStage, MachineStatus, Node, NodeOptions, NodeParts, NodeStore};
//! use cosi_node::services::SupervisorOptions;
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! let mut registry = Registry::new();
//! register_types(&mut registry).unwrap();
//! let registry = Arc::new(registry);
//! let store = NodeStore::open(dir.path(), registry.clone()).await.unwrap();
//!
//! let options = NodeOptions {
//!     parts: NodeParts {
//!         network: Arc::new(MemoryBackend::with_links(["lo", "eth0"])),
//!         cmdline: Cmdline::default(),
//!         registries: Vec::new(),
//!         default_hostname: Some("node-1".into()),
//!     },
//!     supervisor: SupervisorOptions {
//!         state_dir: Some(dir.path().join("services")),
//!         ..SupervisorOptions::default()
//!     },
//! };
//! let node = Node::start(store.state(), &registry, options).await.unwrap();
//!
//! // No config yet: maintenance. The first config applies live.
//! let runtime = node.handle().runtime().unwrap();
//! let config = "version: v1alpha1
//! machine: {type: worker, token: t0k3n}
//! cluster: {name: demo, controlPlane: {endpoint: 'https://192.0.2.1:6443'}}
//! ";
//! runtime.applier().apply(ApplyRequest::config(config, ApplyMode::Auto, "admin")).await.unwrap();
//! let pointer = MachineStatus::kind().pointer(MachineStatus::ID);
//! store.state().watch_for(&pointer, |r| {
//!     r.and_then(|r| cosi_core::downcast_ref::<MachineStatus>(r).ok())
//!         .is_some_and(|s| s.spec.stage == MachineStage::Running)
//! }).await.unwrap();
//!
//! node.shutdown().await;
//! drop(runtime);
//! assert!(store.close().await);
//! # });
//! ```

pub mod error;
pub mod events;
pub mod families;
pub mod lifecycle;
pub mod runtime;
pub mod status;
pub mod store;

pub use error::NodeError;
pub use events::{
    NodeEvent, NodeEventItem, NodeEventKind, NodeEventReader, NodeEvents, NODE_EVENT_RING,
};
pub use families::{
    controller_outputs, controller_owners, graph, register_controllers, register_types, GraphError,
    NodeParts, APPLY_ONLY_TYPES,
};
pub use lifecycle::{Node, NodeHandle, NodeOptions};
pub use runtime::Runtime;
pub use status::{MachineStage, MachineStatus, MachineStatusController};
pub use store::{NodeStore, DISK_NAMESPACES, MEMORY_NAMESPACES, STATE_FILE};
