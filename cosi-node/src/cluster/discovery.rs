//! [`AffiliateDiscoveryController`]: connects one [`AffiliateRegistry`] to the state. It
//! publishes the local affiliate (`cluster/<nodeId>`) through the registry and mirrors the
//! registry's view of the other nodes into `cluster-raw` as `<registry>/<nodeId>`, with a
//! stale condition while the registry is unreachable. The registry's change notices wake it
//! (no timer); it never waits on the network itself.
//!
//! Once the node id is known, the controller narrows its input on `cluster` affiliates to the
//! local one (inputs may change at run time), so merged affiliates of other nodes do not wake
//! it.

use std::sync::Arc;

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceSpec, Result, StateExt};

use crate::cluster::{Affiliate, AffiliateRegistry, Condition, Identity, RegistryHealth, LOCAL};
use crate::namespaces;
use crate::network::follow::Follower;
use crate::network::found;

/// Publishes and discovers affiliates through a registry. See the module docs.
pub struct AffiliateDiscoveryController {
    name: String,
    registry: Arc<dyn AffiliateRegistry>,
    follower: Follower,
    narrowed_to: Option<String>,
}

impl std::fmt::Debug for AffiliateDiscoveryController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AffiliateDiscoveryController")
            .field("registry", &self.registry.name())
            .finish_non_exhaustive()
    }
}

impl AffiliateDiscoveryController {
    /// A controller for `registry`, named `AffiliateDiscoveryController.<registry>`.
    pub fn new(registry: Arc<dyn AffiliateRegistry>) -> Self {
        AffiliateDiscoveryController {
            name: format!("AffiliateDiscoveryController.{}", registry.name()),
            registry,
            follower: Follower::default(),
            narrowed_to: None,
        }
    }

    fn inputs_for(local: Option<&str>) -> Vec<Input> {
        let affiliates = Input::weak(Affiliate::kind());
        vec![
            Input::weak_of::<Identity>().with_id(LOCAL),
            match local {
                Some(id) => affiliates.with_id(id.to_string()),
                None => affiliates,
            },
        ]
    }
}

#[async_trait]
impl Controller for AffiliateDiscoveryController {
    fn name(&self) -> &str {
        &self.name
    }

    fn inputs(&self) -> Vec<Input> {
        Self::inputs_for(None)
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<Affiliate>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        if !self.follower.is_following() {
            self.follower
                .follow(state.waker(), self.registry.subscribe());
        }
        let local_id = found(
            state
                .get_typed::<Identity>(&Identity::kind().pointer(LOCAL))
                .await,
        )?
        .map(|identity| identity.spec.node_id.clone());
        if let Some(id) = &local_id {
            if self.narrowed_to.as_ref() != Some(id) {
                state.set_inputs(Self::inputs_for(Some(id))).await?;
                self.narrowed_to = Some(id.clone());
            }
        }
        let local = match &local_id {
            Some(id) => found(
                state
                    .get_typed::<Affiliate>(&Affiliate::kind().pointer(id.clone()))
                    .await,
            )?
            .map(|affiliate| affiliate.spec.clone()),
            None => None,
        };
        self.registry.publish(local);

        let view = self.registry.view();
        let stale = match &view.health {
            RegistryHealth::Unreachable { error } => Some(Condition::stale(format!(
                "registry {} unreachable: {error}",
                self.registry.name()
            ))),
            _ => None,
        };
        state.start_tracking();
        for (node_id, affiliate) in &view.affiliates {
            if Some(node_id) == local_id.as_ref() {
                continue;
            }
            let mut raw = affiliate.clone();
            raw.conditions = stale.iter().cloned().collect();
            let id = format!("{}/{node_id}", self.registry.name());
            state
                .modify_output(
                    Resource::new_in(namespaces::CLUSTER_RAW, id, raw.clone()),
                    |r| {
                        r.spec = raw.clone();
                        Ok(())
                    },
                )
                .await?;
        }
        state
            .cleanup_outputs(&[Affiliate::kind_in(namespaces::CLUSTER_RAW)])
            .await?;
        Ok(Reconciled::Done)
    }
}
