//! [`NodeAddressController`]: derives the [`NodeAddress`] resources from the address statuses
//! and the node address filters ([`derive_node_addresses`] says how), and destroys the ones it
//! no longer derives (a filter that went away).

use std::collections::BTreeMap;

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{ListOptions, Resource, ResourceSpec, Result, StateExt};

use crate::network::node_address::{PreviousNodeAddresses, ACCUMULATIVE, DEFAULT};
use crate::network::{derive_node_addresses, found, AddressStatus, NodeAddress, NodeAddressFilter};

/// Derives node addresses. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct NodeAddressController;

impl NodeAddressController {
    /// The controller's name (the owner of what it writes).
    pub const NAME: &'static str = "NodeAddressController";
}

#[async_trait]
impl Controller for NodeAddressController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak_of::<AddressStatus>(),
            Input::weak_of::<NodeAddressFilter>(),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<NodeAddress>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let statuses: Vec<AddressStatus> = state
            .list_typed::<AddressStatus>(&AddressStatus::kind(), &ListOptions::default())
            .await?
            .iter()
            .map(|r| r.spec.clone())
            .collect();
        let filters: BTreeMap<String, NodeAddressFilter> = state
            .list_typed::<NodeAddressFilter>(&NodeAddressFilter::kind(), &ListOptions::default())
            .await?
            .iter()
            .map(|r| (r.metadata.id().to_string(), r.spec.clone()))
            .collect();
        let own = |id: &str| NodeAddress::kind().pointer(id.to_string());
        let previous = PreviousNodeAddresses {
            default: found(state.get_typed::<NodeAddress>(&own(DEFAULT)).await)?
                .and_then(|a| a.spec.addresses.first().copied()),
            accumulative: found(state.get_typed::<NodeAddress>(&own(ACCUMULATIVE)).await)?
                .map(|a| a.spec.addresses.clone())
                .unwrap_or_default(),
        };

        state.start_tracking();
        for (id, spec) in derive_node_addresses(&statuses, &filters, &previous) {
            state
                .modify_output(Resource::new(id, spec.clone()), |r| {
                    r.spec = spec.clone();
                    Ok(())
                })
                .await?;
        }
        state.cleanup_outputs(&[NodeAddress::kind()]).await?;
        Ok(Reconciled::Done)
    }
}
