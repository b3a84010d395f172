//! The operator layer: address specs that an API caller or a test states directly. They are
//! written into `network-config` with id `operator/<link>/<prefix>` and no owner, and merged
//! like every other layer. These functions check the input first and write nothing when it is
//! invalid.

use cosi_core::{CreateOptions, Error, Resource, ResourceSpec, Result, State, StateExt};
use ipnet::IpNet;

use crate::namespaces;
use crate::network::{AddressScope, AddressSpec, ConfigLayer};

/// States `address` on `link` in the operator layer (idempotent). Refuses an invalid link name
/// with an invalid-argument error naming the field.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use cosi_node::network::operator;
/// use cosi_state::{MemoryOptions, MemoryState};
/// let state = MemoryState::new(MemoryOptions::default());
/// operator::add_address(&state, "eth0", "192.0.2.7/24".parse().unwrap()).await.unwrap();
/// let err = operator::add_address(&state, "eth0/x", "192.0.2.7/24".parse().unwrap()).await.unwrap_err();
/// assert!(err.to_string().contains("spec.linkName"), "{err}");
/// # });
/// ```
pub async fn add_address(state: &dyn State, link: &str, address: IpNet) -> Result<()> {
    add_address_with_scope(state, link, address, AddressScope::Global).await
}

/// [`add_address`] with a scope.
pub async fn add_address_with_scope(
    state: &dyn State,
    link: &str,
    address: IpNet,
    scope: AddressScope,
) -> Result<()> {
    let spec = AddressSpec::new(link, address, ConfigLayer::Operator).with_scope(scope);
    let pointer = AddressSpec::kind_in(namespaces::NETWORK_CONFIG).pointer(spec.layered_id());
    spec.validate(&pointer.to_string())?;
    let resource = Resource::new_in(namespaces::NETWORK_CONFIG, spec.layered_id(), spec.clone());
    match state.get(&pointer).await {
        Err(e) if e.is_not_found() => {
            match state
                .create(resource.into_shared(), CreateOptions::default())
                .await
            {
                Err(e) if e.is_already_exists() => Ok(()),
                other => other.map(|_| ()),
            }
        }
        Err(e) => Err(e),
        Ok(_) => {
            state
                .modify(resource, Default::default(), |r| {
                    r.spec = spec.clone();
                    Ok(())
                })
                .await?;
            Ok(())
        }
    }
}

/// Withdraws an operator-layer address (a no-op if it is not there). The merged spec is torn
/// down, and the address leaves the link once the spec controller removed it.
pub async fn remove_address(state: &dyn State, link: &str, address: IpNet) -> Result<()> {
    let spec = AddressSpec::new(link, address, ConfigLayer::Operator);
    let pointer = AddressSpec::kind_in(namespaces::NETWORK_CONFIG).pointer(spec.layered_id());
    match state.destroy(&pointer, Default::default()).await {
        Err(e) if e.is_not_found() => Ok(()),
        Err(Error::PendingFinalizers { .. }) => state.teardown_and_destroy(&pointer, None).await,
        other => other,
    }
}
