//! [`NodeAddressFilterController`]: writes the `no-k8s` [`NodeAddressFilter`], which leaves the
//! Kubernetes pod and service subnets out of the node addresses (a pod's address is not the
//! node's). The subnets are `cluster.network.podSubnets` and `serviceSubnets` of the active
//! machine config; without a config, or where it states none, the controller's defaults
//! (Kubernetes' `10.244.0.0/16` for pods and `10.96.0.0/12` for services unless given others).

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceSpec, Result, StateExt};
use ipnet::IpNet;

use crate::config::{MachineConfig, ACTIVE};
use crate::network::node_address::FILTER_NO_K8S;
use crate::network::{found, NodeAddressFilter};

/// Reads config subnets, skipping (with a warning) any that is not a CIDR.
fn subnets(texts: &[String], field: &str) -> Vec<IpNet> {
    texts
        .iter()
        .enumerate()
        .filter_map(|(i, text)| match text.parse::<IpNet>() {
            Ok(net) => Some(net.trunc()),
            Err(error) => {
                tracing::warn!(field = %format!("{field}[{i}]"), %error, "skipping a subnet");
                None
            }
        })
        .collect()
}

/// Writes the `no-k8s` filter. See the module docs.
#[derive(Debug, Clone)]
pub struct NodeAddressFilterController {
    pod_subnets: Vec<IpNet>,
    service_subnets: Vec<IpNet>,
}

impl Default for NodeAddressFilterController {
    fn default() -> Self {
        let parse = |s: &str| s.parse().expect("a valid default subnet");
        NodeAddressFilterController::new(vec![parse("10.244.0.0/16")], vec![parse("10.96.0.0/12")])
    }
}

impl NodeAddressFilterController {
    /// The controller's name (the owner of the filters).
    pub const NAME: &'static str = "NodeAddressFilterController";

    /// Excludes these pod and service subnets.
    pub fn new(pod_subnets: Vec<IpNet>, service_subnets: Vec<IpNet>) -> Self {
        NodeAddressFilterController {
            pod_subnets,
            service_subnets,
        }
    }
}

#[async_trait]
impl Controller for NodeAddressFilterController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<MachineConfig>().with_id(ACTIVE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<NodeAddressFilter>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let config = found(
            state
                .get_typed::<MachineConfig>(&MachineConfig::kind().pointer(ACTIVE))
                .await,
        )?;
        let (mut pods, mut services) = (Vec::new(), Vec::new());
        if let Some(config) = &config {
            let network = &config.spec.config().cluster().network;
            pods = subnets(&network.pod_subnets, "cluster.network.podSubnets");
            services = subnets(&network.service_subnets, "cluster.network.serviceSubnets");
        }
        if pods.is_empty() {
            pods.clone_from(&self.pod_subnets);
        }
        if services.is_empty() {
            services.clone_from(&self.service_subnets);
        }
        let filter = NodeAddressFilter {
            include_subnets: Vec::new(),
            exclude_subnets: pods.into_iter().chain(services).collect(),
        };
        state.start_tracking();
        state
            .modify_output(Resource::new(FILTER_NO_K8S, filter.clone()), |r| {
                r.spec = filter.clone();
                Ok(())
            })
            .await?;
        state.cleanup_outputs(&[NodeAddressFilter::kind()]).await?;
        Ok(Reconciled::Done)
    }
}
