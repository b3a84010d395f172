//! [`AffiliateMergeController`]: folds the raw affiliates of `cluster-raw` (one per registry
//! that reports a node, id `<registry>/<nodeId>`) into one [`Affiliate`] per node id in
//! `cluster`. Oldest first, with [`Affiliate::merge`]: addresses are unioned, every other field
//! comes from the freshest report that has it. The merged affiliate is stale only when every
//! registry reporting the node is stale. Raw affiliates naming this node are skipped: the local
//! affiliate is written by [`crate::cluster::LocalAffiliateController`].

use std::collections::BTreeMap;

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{ListOptions, Resource, ResourceSpec, Result, StateExt};

use crate::cluster::{validate_node_id, Affiliate, Identity, LOCAL};
use crate::namespaces;
use crate::network::found;

/// Merges raw affiliates by node id. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct AffiliateMergeController;

impl AffiliateMergeController {
    /// The controller's name (the owner of the merged affiliates).
    pub const NAME: &'static str = "AffiliateMergeController";
}

#[async_trait]
impl Controller for AffiliateMergeController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak(Affiliate::kind_in(namespaces::CLUSTER_RAW)),
            Input::weak_of::<Identity>().with_id(LOCAL),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<Affiliate>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let local = found(
            state
                .get_typed::<Identity>(&Identity::kind().pointer(LOCAL))
                .await,
        )?
        .map(|identity| identity.spec.node_id.clone());
        let mut raw = state
            .list_typed::<Affiliate>(
                &Affiliate::kind_in(namespaces::CLUSTER_RAW),
                &ListOptions::default(),
            )
            .await?;
        raw.sort_by_key(|r| r.metadata.updated());
        let mut merged: BTreeMap<String, (Affiliate, bool)> = BTreeMap::new();
        for resource in &raw {
            let spec = &resource.spec;
            if validate_node_id(&spec.node_id).is_err() || local.as_ref() == Some(&spec.node_id) {
                continue;
            }
            let (into, all_stale) = merged.entry(spec.node_id.clone()).or_insert_with(|| {
                (
                    Affiliate {
                        node_id: spec.node_id.clone(),
                        ..Default::default()
                    },
                    true,
                )
            });
            into.merge(spec);
            if spec.is_stale() {
                for condition in &spec.conditions {
                    if !into.conditions.contains(condition) {
                        into.conditions.push(condition.clone());
                    }
                }
            }
            *all_stale &= spec.is_stale();
        }
        state.start_tracking();
        for (node_id, (mut affiliate, all_stale)) in merged {
            if !all_stale {
                affiliate.conditions.clear();
            }
            state
                .modify_output(Resource::new(node_id, affiliate.clone()), |r| {
                    r.spec = affiliate.clone();
                    Ok(())
                })
                .await?;
        }
        state.cleanup_outputs(&[Affiliate::kind()]).await?;
        Ok(Reconciled::Done)
    }
}
