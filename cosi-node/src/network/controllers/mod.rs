//! The address controllers, in the order addresses flow through them:
//!
//! ```text
//! defaults, cmdline ─AddressConfigController─┐
//! operator (API, tests) ─────────────────────┤ AddressSpec[network-config/<layer>/<link>/<prefix>]
//!       ↓ AddressMergeController (highest layer wins; teardown through destroy-ready)
//! AddressSpec[network/<link>/<prefix>]   (finalizer: AddressSpecController)
//!       ↓ AddressSpecController (adds and removes through the NetworkBackend)   ── OS ──
//! OS addresses ─AddressStatusController→ AddressStatus[network/<link>/<prefix>]
//!       ↓ NodeAddressController (+ NodeAddressFilter `no-k8s` from NodeAddressFilterController)
//! NodeAddress[network/default, current, routed, accumulative, <kind>-<filter>]
//! ```

mod apply;
mod config;
mod filter;
mod merge;
mod node_address;
mod status;

pub use apply::AddressSpecController;
pub use config::{configuration_addresses, AddressConfigController};
pub use filter::NodeAddressFilterController;
pub use merge::AddressMergeController;
pub use node_address::NodeAddressController;
pub use status::AddressStatusController;

use cosi_controllers::ControllerState;
use cosi_core::{Error, Result};

use crate::network::follow::Follower;
use crate::network::{BackendError, NetworkBackend};

/// Makes sure `follower` follows the backend's change subscription, waking the controller of
/// `state` on every change.
pub(crate) async fn follow_changes(
    follower: &mut Follower,
    backend: &dyn NetworkBackend,
    state: &ControllerState,
) -> Result<()> {
    if follower.is_following() {
        return Ok(());
    }
    let changes = backend
        .subscribe()
        .await
        .map_err(|e| backend_error(backend.name(), e))?;
    follower.follow(state.waker(), changes);
    Ok(())
}

/// A backend failure as a runtime error: retryable, naming the backend and what was attempted.
pub(crate) fn backend_error(backend: &str, error: BackendError) -> Error {
    Error::Backend {
        subject: format!("network backend {backend}"),
        message: error.to_string(),
        retryable: true,
        source: None,
    }
}
