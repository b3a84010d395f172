//! [`AddressSpecController`]: applies the merged [`AddressSpec`]s of `network` to the OS.
//!
//! It holds a strong input on the specs and puts its finalizer on every running one *before*
//! adding the address, so a spec can never be destroyed while its address is still on a link.
//! For a spec tearing down it removes the address from the OS and then releases the finalizer.
//! It touches only addresses that have specs: an address someone added by hand is never
//! removed by it.
//!
//! An address already on its link with another scope than the spec states is removed and added
//! again. A spec whose link does not exist yet waits: the backend's change subscription wakes the
//! controller when links come and go (and when an applied address disappears, which it puts
//! back). A waiting address is not silent — a typo in a link name would otherwise look like an
//! address that never came: it has a [`PendingAddress`] (its only output) saying which link it
//! waits for, destroyed when the wait ends, and a warning is logged when it starts waiting
//! (once, not at every pass), an info line when the wait ends. One failing address does not
//! hold up the others; the first failure is returned after all were tried, so the controller
//! retries with backoff.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Error, ListOptions, Phase, Resource, ResourceSpec, Result, StateExt};
use ipnet::IpNet;

use super::backend_error;
use crate::namespaces;
use crate::network::follow::Follower;
use crate::network::{
    AddressRequest, AddressScope, AddressSpec, BackendError, NetworkBackend, PendingAddress,
};

/// Applies address specs through a [`NetworkBackend`]. See the module docs.
pub struct AddressSpecController {
    backend: Arc<dyn NetworkBackend>,
    follower: Follower,
    /// The addresses waiting for their link at the last pass, so each wait is logged once.
    waiting: BTreeSet<(String, IpNet)>,
}

impl std::fmt::Debug for AddressSpecController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpecController")
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl AddressSpecController {
    /// The controller's name, which is also its finalizer on the specs.
    pub const NAME: &'static str = "AddressSpecController";

    /// Applies specs through `backend`.
    pub fn new(backend: Arc<dyn NetworkBackend>) -> Self {
        AddressSpecController {
            backend,
            follower: Follower::default(),
            waiting: BTreeSet::new(),
        }
    }

    /// Adds the address of `spec`; one present with another scope is removed first (the
    /// kernel cannot change an address's scope in place).
    async fn apply(&self, spec: &AddressSpec, replace: bool) -> Result<(), BackendError> {
        if replace {
            self.backend
                .remove_address(&spec.link_name, &spec.address)
                .await?;
        }
        let request = AddressRequest {
            link_name: spec.link_name.clone(),
            address: spec.address,
            scope: spec.scope,
        };
        self.backend.add_address(&request).await
    }
}

#[async_trait]
impl Controller for AddressSpecController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::strong(AddressSpec::kind_in(namespaces::NETWORK))]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<PendingAddress>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        // Subscribe before reading, so no change after the read goes unnoticed.
        super::follow_changes(&mut self.follower, &*self.backend, state).await?;
        let backend = self.backend.name().to_string();
        let specs = state
            .list_typed::<AddressSpec>(
                &AddressSpec::kind_in(namespaces::NETWORK),
                &ListOptions::default(),
            )
            .await?;
        let links: BTreeSet<String> = self
            .backend
            .links()
            .await
            .map_err(|e| backend_error(&backend, e))?
            .into_iter()
            .map(|l| l.name)
            .collect();
        let present: BTreeMap<(String, IpNet), AddressScope> = self
            .backend
            .addresses()
            .await
            .map_err(|e| backend_error(&backend, e))?
            .into_iter()
            .map(|a| ((a.link_name, a.address), a.scope))
            .collect();

        let mut first_error: Option<Error> = None;
        let mut waiting = BTreeSet::new();
        state.start_tracking();
        for resource in specs {
            let pointer = resource.metadata.pointer();
            let spec = &resource.spec;
            let held = resource.metadata.finalizers().contains(Self::NAME);
            let key = (spec.link_name.clone(), spec.address);
            let outcome = match resource.metadata.phase() {
                Phase::Running => {
                    if !held {
                        state.add_finalizer(pointer, &[Self::NAME]).await?;
                    }
                    match present.get(&key) {
                        _ if !links.contains(&spec.link_name) => {
                            let pending =
                                PendingAddress::waiting_for_link(&spec.link_name, spec.address);
                            if !self.waiting.contains(&key) {
                                tracing::warn!(
                                    spec = %pointer,
                                    "address {}: {}", spec.address, pending.reason
                                );
                            }
                            state
                                .modify_output(Resource::new(pending.id(), pending.clone()), |r| {
                                    r.spec = pending.clone();
                                    Ok(())
                                })
                                .await?;
                            waiting.insert(key);
                            Ok(())
                        }
                        // Already applied as stated.
                        Some(scope) if *scope == spec.scope => Ok(()),
                        applied => self.apply(spec, applied.is_some()).await,
                    }
                }
                Phase::TearingDown => {
                    if !held {
                        continue;
                    }
                    let removed = if present.contains_key(&key) {
                        self.backend
                            .remove_address(&spec.link_name, &spec.address)
                            .await
                    } else {
                        Ok(())
                    };
                    if removed.is_ok() {
                        state.remove_finalizer(pointer, &[Self::NAME]).await?;
                    }
                    removed
                }
            };
            if let Err(error) = outcome {
                tracing::warn!(spec = %pointer, %error, "applying an address failed");
                first_error.get_or_insert(backend_error(&backend, error));
            }
        }
        state.cleanup_outputs(&[PendingAddress::kind()]).await?;
        for (link, address) in self.waiting.difference(&waiting) {
            tracing::info!("address {address} no longer waits for link {link:?}");
        }
        self.waiting = waiting;
        match first_error {
            Some(error) => Err(error),
            None => Ok(Reconciled::Done),
        }
    }
}
