//! # Network addresses
//!
//! Addresses on the node's links, modelled the way Talos does: layered specs, merged, applied
//! to the OS by a spec controller that holds finalizers, observed back as statuses, and
//! summarised as node addresses.
//!
//! - [`AddressSpec`] in `network-config` with id `<layer>/<link>/<prefix>`. Layers, lowest
//!   first ([`ConfigLayer`]), and who writes them: default and cmdline
//!   ([`AddressConfigController`], from [`Cmdline`]); platform (no producer on this node);
//!   operator (an API caller or a test, through [`operator`]); configuration (the machine
//!   config's `machine.network.interfaces`, produced once the config family is wired in).
//! - [`AddressMergeController`] folds them into [`AddressSpec`] in `network` (id
//!   `<link>/<prefix>`), the highest layer winning per address.
//! - [`AddressSpecController`] applies those through a [`NetworkBackend`] ([`MemoryBackend`]
//!   for tests; `NetlinkBackend` on Linux with the `netlink` feature). An address it cannot
//!   apply yet (its link does not exist) gets a [`PendingAddress`] in `network` saying so, and
//!   a warning in the log.
//! - [`AddressStatusController`] mirrors what the backend reports into [`AddressStatus`].
//! - [`NodeAddressController`] derives [`NodeAddress`] `default`, `current`, `routed`,
//!   `accumulative` and their filtered variants ([`NodeAddressFilter`], e.g. `no-k8s`).
//!
//! [`register`] wires them all into an engine. This module touches the OS only through the
//! backend, and nothing outside `network-config` and `network`.

mod address;
mod backend;
mod cmdline;
pub mod controllers;
pub(crate) mod follow;
mod layer;
pub mod node_address;
pub mod operator;

use std::sync::Arc;

use cosi_controllers::{Engine, RegistrationError};
use cosi_core::Registry;

pub use address::{
    address_id, validate_link_name, AddressFamily, AddressScope, AddressSpec, AddressStatus,
    LinkNameError, PendingAddress, MAX_LINK_NAME,
};
#[cfg(all(target_os = "linux", feature = "netlink"))]
pub use backend::NetlinkBackend;
pub use backend::{
    AddressRequest, BackendError, BackendOperation, Changes, Link, MemoryBackend, NetworkBackend,
    ObservedAddress,
};
pub use cmdline::{Cmdline, CmdlineAddress, CmdlineError, MAX_CMDLINE};
pub use controllers::{
    AddressConfigController, AddressMergeController, AddressSpecController,
    AddressStatusController, NodeAddressController, NodeAddressFilterController,
};
pub use layer::{ConfigLayer, UnknownLayer};
pub use node_address::{derive_node_addresses, NodeAddress, NodeAddressFilter};

/// A read that may find nothing: `NotFound` becomes `None`, other errors stay errors.
pub(crate) fn found<T>(read: cosi_core::Result<T>) -> cosi_core::Result<Option<T>> {
    match read {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Registers every network resource type in `registry`.
pub fn register_types(registry: &mut Registry) -> cosi_core::Result<()> {
    registry.register::<AddressSpec>()?;
    registry.register::<AddressStatus>()?;
    registry.register::<PendingAddress>()?;
    registry.register::<NodeAddress>()?;
    registry.register::<NodeAddressFilter>()?;
    Ok(())
}

/// Registers the address controllers on `engine`: defaults and `cmdline` as producers, the
/// merge, the spec controller applying through `backend`, the status mirror, the `no-k8s`
/// filter (Kubernetes' default subnets) and the node addresses.
pub fn register(
    engine: &Engine,
    backend: Arc<dyn NetworkBackend>,
    cmdline: Cmdline,
) -> Result<(), RegistrationError> {
    engine.register(AddressConfigController::new(cmdline))?;
    engine.register(AddressMergeController)?;
    engine.register(AddressSpecController::new(backend.clone()))?;
    engine.register(AddressStatusController::new(backend))?;
    engine.register(NodeAddressFilterController::default())?;
    engine.register(NodeAddressController)?;
    Ok(())
}
