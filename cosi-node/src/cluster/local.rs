//! The local affiliate: what this node publishes about itself. [`LocalNode`] (`cluster/local`)
//! carries the names and machine type — written by [`LocalNodeController`] from the config's
//! `Hostname` and `MachineType`, or directly by a node without a config — and
//! [`LocalAffiliateController`] combines it with the node id and the `routed-no-k8s` node
//! addresses into the [`Affiliate`] `cluster/<nodeId>`.

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceDefinition, ResourceSpec, Result, StateExt};
use serde::{Deserialize, Serialize};

use crate::cluster::{Affiliate, Identity, LOCAL};
use crate::config::{Hostname, MachineType};
use crate::namespaces;
use crate::network::found;
use crate::network::NodeAddress;

/// Id of the node addresses the local affiliate publishes.
pub const PUBLISHED_ADDRESSES: &str = "routed-no-k8s";

/// The node's names and role, `cluster/LocalNodes.cluster.cosi.dev/local`.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalNode {
    /// The hostname.
    pub hostname: String,
    /// The node name (the hostname when empty).
    #[serde(default)]
    pub nodename: String,
    /// `controlplane`, `worker` or `unknown`.
    #[serde(default)]
    pub machine_type: String,
}

impl ResourceSpec for LocalNode {
    const TYPE: &'static str = "LocalNodes.cluster.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::CLUSTER;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Hostname", ".hostname")
            .with_print_column("Machine Type", ".machineType")
    }
}

/// Builds the local affiliate. See the module docs.
#[derive(Debug, Clone)]
pub struct LocalAffiliateController {
    operating_system: String,
}

impl Default for LocalAffiliateController {
    fn default() -> Self {
        LocalAffiliateController {
            operating_system: format!("cosi-node ({})", env!("CARGO_PKG_VERSION")),
        }
    }
}

impl LocalAffiliateController {
    /// The controller's name (the owner of the local affiliate).
    pub const NAME: &'static str = "LocalAffiliateController";

    /// Publishes `operating_system` as the OS string instead of `cosi-node (<version>)`.
    pub fn with_operating_system(operating_system: impl Into<String>) -> Self {
        LocalAffiliateController {
            operating_system: operating_system.into(),
        }
    }
}

#[async_trait]
impl Controller for LocalAffiliateController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak_of::<Identity>().with_id(LOCAL),
            Input::weak_of::<LocalNode>().with_id(LOCAL),
            Input::weak_of::<NodeAddress>().with_id(PUBLISHED_ADDRESSES),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<Affiliate>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let identity = found(
            state
                .get_typed::<Identity>(&Identity::kind().pointer(LOCAL))
                .await,
        )?;
        let node = found(
            state
                .get_typed::<LocalNode>(&LocalNode::kind().pointer(LOCAL))
                .await,
        )?;
        let addresses = found(
            state
                .get_typed::<NodeAddress>(&NodeAddress::kind().pointer(PUBLISHED_ADDRESSES))
                .await,
        )?;
        state.start_tracking();
        if let (Some(identity), Some(node)) = (identity, node) {
            let node = &node.spec;
            let affiliate = Affiliate {
                node_id: identity.spec.node_id.clone(),
                addresses: addresses.map(|a| a.spec.ips()).unwrap_or_default(),
                hostname: node.hostname.clone(),
                nodename: if node.nodename.is_empty() {
                    node.hostname.clone()
                } else {
                    node.nodename.clone()
                },
                operating_system: self.operating_system.clone(),
                machine_type: if node.machine_type.is_empty() {
                    "unknown".to_string()
                } else {
                    node.machine_type.clone()
                },
                conditions: Vec::new(),
            };
            state
                .modify_output(
                    Resource::new(affiliate.node_id.clone(), affiliate.clone()),
                    |r| {
                        r.spec = affiliate.clone();
                        Ok(())
                    },
                )
                .await?;
        }
        state.cleanup_outputs(&[Affiliate::kind()]).await?;
        Ok(Reconciled::Done)
    }
}

/// Writes [`LocalNode`] from the config's [`Hostname`] and [`MachineType`] (the machine type is
/// `unknown` while the config names none). Without a hostname in the config the node uses its
/// default hostname, if it was given one (what a platform or the daemon's command line names
/// it, as Talos falls back to a platform hostname); with neither there is no local node.
#[derive(Debug, Default, Clone)]
pub struct LocalNodeController {
    default_hostname: Option<String>,
}

impl LocalNodeController {
    /// The controller's name (the owner of the local node).
    pub const NAME: &'static str = "LocalNodeController";

    /// A controller that falls back to `hostname` while the config names none.
    pub fn with_default_hostname(hostname: impl Into<String>) -> Self {
        LocalNodeController {
            default_hostname: Some(hostname.into()),
        }
    }
}

#[async_trait]
impl Controller for LocalNodeController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak_of::<Hostname>().with_id(Hostname::ID),
            Input::weak_of::<MachineType>().with_id(MachineType::ID),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<LocalNode>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let hostname = found(
            state
                .get_typed::<Hostname>(&Hostname::kind().pointer(Hostname::ID))
                .await,
        )?;
        let machine_type = found(
            state
                .get_typed::<MachineType>(&MachineType::kind().pointer(MachineType::ID))
                .await,
        )?;
        let hostname = hostname
            .map(|h| h.spec.hostname.clone())
            .or_else(|| self.default_hostname.clone());
        state.start_tracking();
        if let Some(hostname) = hostname {
            let node = LocalNode {
                hostname,
                nodename: String::new(),
                machine_type: machine_type
                    .map(|m| m.spec.machine_type.as_str().to_string())
                    .unwrap_or_else(|| "unknown".to_string()),
            };
            state
                .modify_output(Resource::new(LOCAL, node.clone()), |r| {
                    r.spec = node.clone();
                    Ok(())
                })
                .await?;
        }
        state.cleanup_outputs(&[LocalNode::kind()]).await?;
        Ok(Reconciled::Done)
    }
}
