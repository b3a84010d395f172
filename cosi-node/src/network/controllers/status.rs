//! [`AddressStatusController`]: mirrors every address the OS reports into an
//! [`AddressStatus`] in `network` (id `<link>/<prefix>`), and destroys the statuses of
//! addresses that are gone. It has no resource inputs: the backend's change subscription
//! (netlink multicast groups on Linux) wakes it, never a timer.

use std::sync::Arc;

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceSpec, Result};

use super::backend_error;
use crate::network::follow::Follower;
use crate::network::{AddressStatus, NetworkBackend};

/// Mirrors OS addresses into statuses. See the module docs.
pub struct AddressStatusController {
    backend: Arc<dyn NetworkBackend>,
    follower: Follower,
}

impl std::fmt::Debug for AddressStatusController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressStatusController")
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl AddressStatusController {
    /// The controller's name (the owner of what it writes).
    pub const NAME: &'static str = "AddressStatusController";

    /// Mirrors the addresses of `backend`.
    pub fn new(backend: Arc<dyn NetworkBackend>) -> Self {
        AddressStatusController {
            backend,
            follower: Follower::default(),
        }
    }
}

#[async_trait]
impl Controller for AddressStatusController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<AddressStatus>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let backend = self.backend.name().to_string();
        // Subscribe before reading, so no change after the read goes unnoticed.
        super::follow_changes(&mut self.follower, &*self.backend, state).await?;
        let observed = self
            .backend
            .addresses()
            .await
            .map_err(|e| backend_error(&backend, e))?;
        state.start_tracking();
        for address in observed {
            let status = AddressStatus {
                address: address.address,
                local: address.local,
                broadcast: address.broadcast,
                link_index: address.link_index,
                link_name: address.link_name,
                family: address.family,
                scope: address.scope,
                flags: address.flags,
            };
            state
                .modify_output(Resource::new(status.id(), status.clone()), |r| {
                    r.spec = status.clone();
                    Ok(())
                })
                .await?;
        }
        state.cleanup_outputs(&[AddressStatus::kind()]).await?;
        Ok(Reconciled::Done)
    }
}
