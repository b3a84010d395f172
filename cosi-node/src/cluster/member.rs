//! [`Member`]: a node of the cluster as an operator lists it, keyed by node name, and the
//! [`MemberController`] that derives members from the merged affiliates in `cluster` (the
//! local one included). Affiliates without a node name are not members. Two affiliates that
//! claim one node name (a reinstalled machine whose old identity has not expired yet, or a
//! peer posing as another node) yield one member, and a warning is logged: this node's own
//! affiliate always keeps its node name; between others, the fresh one over a stale one, then
//! the one this node has known longest (its `created` time here), then the lower node id.
//! Node ids are self-chosen, so a newcomer cannot take a node name by picking a low one.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{ListOptions, Resource, ResourceDefinition, ResourceSpec, Result, StateExt};
use serde::{Deserialize, Serialize};

use crate::cluster::{Affiliate, Condition, LocalAffiliateController};
use crate::namespaces;

/// A cluster member, `cluster/Members.cluster.cosi.dev/<nodename>`.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// The node id.
    pub node_id: String,
    /// Its addresses.
    pub addresses: Vec<IpAddr>,
    /// Its hostname.
    pub hostname: String,
    /// `controlplane`, `worker` or `unknown`.
    pub machine_type: String,
    /// Its operating system.
    pub operating_system: String,
    /// Conditions that hold, e.g. stale while its registry is unreachable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl ResourceSpec for Member {
    const TYPE: &'static str = "Members.cluster.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::CLUSTER;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Hostname", ".hostname")
            .with_print_column("Machine Type", ".machineType")
            .with_print_column("OS", ".operatingSystem")
            .with_print_column("Addresses", ".addresses")
    }
}

/// Derives members from merged affiliates. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct MemberController;

impl MemberController {
    /// The controller's name (the owner of the members).
    pub const NAME: &'static str = "MemberController";
}

#[async_trait]
impl Controller for MemberController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<Affiliate>()]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<Member>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let affiliates = state
            .list_typed::<Affiliate>(&Affiliate::kind(), &ListOptions::default())
            .await?;
        let mut chosen: BTreeMap<String, Arc<Resource<Affiliate>>> = BTreeMap::new();
        for affiliate in affiliates {
            let spec = &affiliate.spec;
            if spec.nodename.is_empty() || spec.nodename.contains('/') {
                continue;
            }
            match chosen.get(&spec.nodename) {
                Some(held) if claim(held) <= claim(&affiliate) => {
                    tracing::warn!(nodename = %spec.nodename, kept = %held.spec.node_id, skipped = %spec.node_id, "two affiliates claim one node name");
                }
                Some(held) => {
                    tracing::warn!(nodename = %spec.nodename, kept = %spec.node_id, skipped = %held.spec.node_id, "two affiliates claim one node name");
                    chosen.insert(spec.nodename.clone(), affiliate.clone());
                }
                None => {
                    chosen.insert(spec.nodename.clone(), affiliate.clone());
                }
            }
        }
        state.start_tracking();
        for (nodename, affiliate) in chosen {
            let a = &affiliate.spec;
            let member = Member {
                node_id: a.node_id.clone(),
                addresses: a.addresses.clone(),
                hostname: a.hostname.clone(),
                machine_type: a.machine_type.clone(),
                operating_system: a.operating_system.clone(),
                conditions: a.conditions.clone(),
            };
            state
                .modify_output(Resource::new(nodename, member.clone()), |r| {
                    r.spec = member.clone();
                    Ok(())
                })
                .await?;
        }
        state.cleanup_outputs(&[Member::kind()]).await?;
        Ok(Reconciled::Done)
    }
}

/// How strongly an affiliate claims its node name, the strongest first: this node's own
/// affiliate, then a fresh one over a stale one, then the one this node has known longest
/// (node ids are chosen by the nodes, so a lower one earns nothing), then the node id (only
/// to make ties stable).
fn claim(affiliate: &Resource<Affiliate>) -> (bool, bool, SystemTime, &str) {
    (
        affiliate.metadata.owner() != Some(LocalAffiliateController::NAME),
        affiliate.spec.is_stale(),
        affiliate.metadata.created(),
        &affiliate.spec.node_id,
    )
}
