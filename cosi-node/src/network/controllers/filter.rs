//! [`NodeAddressFilterController`]: writes the `no-k8s` [`NodeAddressFilter`], which leaves the
//! Kubernetes pod and service subnets out of the node addresses (a pod's address is not the
//! node's). The subnets are the cluster's; Kubernetes' defaults (pods `10.244.0.0/16`,
//! services `10.96.0.0/12`) until the machine config states others.

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceSpec, Result};
use ipnet::IpNet;

use crate::network::node_address::FILTER_NO_K8S;
use crate::network::NodeAddressFilter;

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
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<NodeAddressFilter>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let filter = NodeAddressFilter {
            include_subnets: Vec::new(),
            exclude_subnets: self
                .pod_subnets
                .iter()
                .chain(&self.service_subnets)
                .copied()
                .collect(),
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
