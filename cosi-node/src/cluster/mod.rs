//! # Cluster members
//!
//! How nodes find each other, modelled on Talos's discovery:
//!
//! ```text
//! NodeIdentityController → Identity[cluster/local]            (generated once, kept)
//! config Hostname + MachineType ─LocalNodeController→ LocalNode[cluster/local]
//! Identity + LocalNode + NodeAddress[routed-no-k8s]
//!        ─LocalAffiliateController→ Affiliate[cluster/<nodeId>]
//! Affiliate[cluster/<local>] ⇄ AffiliateDiscoveryController.<registry> ⇄ registry (directory, etcd)
//!        → Affiliate[cluster-raw/<registry>/<nodeId>]          (other nodes, stale while unreachable)
//! Affiliate[cluster-raw/*] ─AffiliateMergeController→ Affiliate[cluster/<nodeId>]
//! Affiliate[cluster/*]     ─MemberController→ Member[cluster/<nodename>]
//! ```
//!
//! [`register`] wires the controllers for a set of registries. This module writes only the
//! `cluster` and `cluster-raw` namespaces, and reads the node addresses of `network`.

mod affiliate;
mod discovery;
mod identity;
mod local;
mod member;
mod merge;
mod registry;

use std::sync::Arc;

use cosi_controllers::{Engine, RegistrationError};
use cosi_core::Registry;

pub use affiliate::{
    decode_remote, encode_remote, Affiliate, AffiliateError, Condition, MAX_ADDRESSES,
    MAX_AFFILIATE_BYTES, MAX_NAME,
};
pub use discovery::AffiliateDiscoveryController;
pub use identity::{
    encode_node_id, generate_node_id, validate_node_id, Identity, NodeIdentityController, LOCAL,
    NODE_ID_BYTES, NODE_ID_LEN,
};
pub use local::{LocalAffiliateController, LocalNode, LocalNodeController, PUBLISHED_ADDRESSES};
pub use member::{Member, MemberController};
pub use merge::AffiliateMergeController;
pub use registry::{
    AffiliateRegistry, DirectoryRegistry, DirectoryRegistryOptions, MemoryRegistry, RegistryHealth,
    RegistryView, ViewChanges, MAX_AFFILIATES,
};
#[cfg(feature = "etcd")]
pub use registry::{EtcdRegistry, EtcdRegistryOptions};

/// Registers every cluster resource type in `registry`.
pub fn register_types(registry: &mut Registry) -> cosi_core::Result<()> {
    registry.register::<Identity>()?;
    registry.register::<LocalNode>()?;
    registry.register::<Affiliate>()?;
    registry.register::<Member>()?;
    Ok(())
}

/// Registers the cluster controllers on `engine`, with one discovery controller per registry.
/// The [`LocalNode`] is someone else's to write: [`register_with_config`] adds its producer.
pub fn register(
    engine: &Engine,
    registries: Vec<Arc<dyn AffiliateRegistry>>,
) -> Result<(), RegistrationError> {
    engine.register(NodeIdentityController)?;
    engine.register(LocalAffiliateController::default())?;
    for registry in registries {
        engine.register(AffiliateDiscoveryController::new(registry))?;
    }
    engine.register(AffiliateMergeController)?;
    engine.register(MemberController)?;
    Ok(())
}

/// [`register`], plus [`LocalNodeController`]: the local node follows the machine config.
pub fn register_with_config(
    engine: &Engine,
    registries: Vec<Arc<dyn AffiliateRegistry>>,
) -> Result<(), RegistrationError> {
    engine.register(LocalNodeController::default())?;
    register(engine, registries)
}
