//! Every family on one engine: the types a node stores ([`register_types`]), the controllers
//! one start of the node runtime runs ([`register_controllers`]), and what the API's resource
//! rules need to know about them ([`APPLY_ONLY_TYPES`], [`controller_owners`],
//! [`controller_outputs`]).
//!
//! The families know nothing of each other beyond the resources they read; this is the one
//! place that puts them side by side. What outlives a restart of the runtime (the network
//! backend — the "kernel" — and the member registries) comes in as [`NodeParts`]; the
//! supervisor is the runtime's own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cosi_controllers::{
    ControllerStatus, DependencyGraph, Engine, RegistrationError, STATUS_OWNER,
};
use cosi_core::{Registry, ResourceDefinition, ResourceSpec};

use super::status::{MachineStatus, MachineStatusController};
use crate::cluster::{self, AffiliateRegistry, LocalNodeController};
use crate::config::{self, ConfigHistory, MachineConfig};
use crate::network::{self, Cmdline, NetworkBackend};
use crate::services::{self, ServiceSpecController, ServiceStatusController, Supervisor};

/// What the node's controllers use that lives longer than one start of the runtime.
#[derive(Clone)]
pub struct NodeParts {
    /// Where addresses go: the kernel (netlink) or an in-memory network.
    pub network: Arc<dyn NetworkBackend>,
    /// The kernel command line's `ip=` addresses (the `cmdline` address layer).
    pub cmdline: Cmdline,
    /// Where the node publishes itself and finds the others.
    pub registries: Vec<Arc<dyn AffiliateRegistry>>,
    /// The hostname while the config names none (the platform's, or the daemon's flag).
    pub default_hostname: Option<String>,
}

impl std::fmt::Debug for NodeParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let registries: Vec<&str> = self.registries.iter().map(|r| r.name()).collect();
        f.debug_struct("NodeParts")
            .field("network", &self.network.name())
            .field("cmdline", &self.cmdline)
            .field("registries", &registries)
            .field("default_hostname", &self.default_hostname)
            .finish()
    }
}

/// The types of every family, the engine's controller status and the node's status, so the
/// disk backend decodes what it loads and the API's codec knows every type.
///
/// ```
/// let mut registry = cosi_core::Registry::new();
/// cosi_node::node::register_types(&mut registry).unwrap();
/// assert_eq!(registry.resolve("mc").unwrap().resource_type, "MachineConfigs.config.cosi.dev");
/// assert_eq!(registry.resolve("members").unwrap().resource_type, "Members.cluster.cosi.dev");
/// ```
pub fn register_types(registry: &mut Registry) -> cosi_core::Result<()> {
    config::register_types(registry)?;
    services::register_types(registry)?;
    network::register_types(registry)?;
    cluster::register_types(registry)?;
    registry.register::<ControllerStatus>()?;
    registry.register::<MachineStatus>()
}

/// Registers every controller of the node on `engine`, for the runtime's `boot`-th start:
/// the config fan-out, the services (from the config, and the two between the resources and
/// `supervisor`), the addresses, the members, and the node's status.
pub fn register_controllers(
    engine: &Engine,
    parts: &NodeParts,
    supervisor: &Supervisor,
    boot: u64,
) -> Result<(), RegistrationError> {
    config::transforms::register(engine)?;
    services::register_config_controllers(engine)?;
    engine.register(ServiceSpecController::new(supervisor.clone()))?;
    engine.register(ServiceStatusController::new(supervisor.clone()))?;
    network::register(engine, parts.network.clone(), parts.cmdline.clone())?;
    engine.register(match &parts.default_hostname {
        Some(hostname) => LocalNodeController::with_default_hostname(hostname.clone()),
        None => LocalNodeController::default(),
    })?;
    cluster::register(engine, parts.registries.clone())?;
    engine.register(MachineStatusController::new(boot))
}

/// The types only the apply entry point writes: the machine config and its history. The API
/// refuses every other write of them, so validation cannot be bypassed.
pub const APPLY_ONLY_TYPES: [&str; 2] = [MachineConfig::TYPE, ConfigHistory::TYPE];

/// Every owner that is the runtime rather than a user: the engine's controllers, the
/// engine's status publisher, and the publisher of definitions. The API never writes what
/// they own.
pub fn controller_owners(engine: &Engine) -> BTreeSet<String> {
    engine
        .controllers()
        .iter()
        .map(|name| name.to_string())
        .chain([
            STATUS_OWNER.to_string(),
            cosi_core::registry::PUBLISHER.to_string(),
        ])
        .collect()
}

/// Every type the runtime writes, with its writers: each controller's outputs (exclusive or
/// shared), the engine's controller statuses and the published definitions. The API writes
/// none of them: a resource an admin put there would meet the controller's own.
pub fn controller_outputs(engine: &Engine) -> BTreeMap<String, BTreeSet<String>> {
    let graph = engine.graph();
    let mut outputs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let runtime = [
        (ControllerStatus::TYPE, STATUS_OWNER),
        (ResourceDefinition::TYPE, cosi_core::registry::PUBLISHER),
    ];
    let declared = graph.controllers().into_iter().flat_map(|name| {
        graph
            .outputs(&name)
            .unwrap_or_default()
            .into_iter()
            .map(move |output| (output.resource_type, Arc::clone(&name)))
    });
    for (resource_type, writer) in declared {
        outputs
            .entry(resource_type.to_string())
            .or_default()
            .insert(writer.to_string());
    }
    for (resource_type, writer) in runtime {
        outputs
            .entry(resource_type.to_string())
            .or_default()
            .insert(writer.to_string());
    }
    outputs
}

/// The controller graph of a node with these parts, without running anything (an engine over
/// an empty in-memory state, a supervisor with no service). Must be called inside a tokio
/// runtime (the supervisor needs one).
///
/// ```
/// use std::sync::Arc;
/// use cosi_node::cluster::MemoryRegistry;
/// use cosi_node::network::{Cmdline, MemoryBackend};
/// use cosi_node::node::{graph, NodeParts};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let parts = NodeParts {
///     network: Arc::new(MemoryBackend::with_links(["lo"])),
///     cmdline: Cmdline::default(),
///     registries: vec![Arc::new(MemoryRegistry::named("directory"))],
///     default_hostname: None,
/// };
/// let text = graph(&parts).unwrap().to_text();
/// assert!(text.contains("AffiliateDiscoveryController.directory\n"));
/// assert!(text.contains("node.MachineStatusController\n"));
/// # });
/// ```
pub fn graph(parts: &NodeParts) -> Result<DependencyGraph, GraphError> {
    let engine = Engine::new(Arc::new(cosi_state::MemoryState::default()));
    let supervisor = Supervisor::new(services::SupervisorOptions::default())?;
    register_controllers(&engine, parts, &supervisor, 1)?;
    Ok(engine.graph())
}

/// Why [`graph`] could not build the graph.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// A controller was refused (a duplicate name, a second writer of a type).
    #[error(transparent)]
    Registration(#[from] RegistrationError),
    /// The supervisor could not be created.
    #[error(transparent)]
    Supervisor(#[from] services::ServiceError),
}
