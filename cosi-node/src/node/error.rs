//! [`NodeError`]: why the node runtime could not start.

use cosi_controllers::RegistrationError;

use crate::config::ApplyError;
use crate::services::ServiceError;

/// Why the node (or a start of its runtime) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The state failed (publishing the definitions, following the config history).
    #[error("node state: {0}")]
    State(#[from] cosi_core::Error),
    /// Loading the persisted config at the start failed.
    #[error("loading the persisted config: {0}")]
    Config(#[from] ApplyError),
    /// The service supervisor could not start (its state directory is unusable).
    #[error("starting the service supervisor: {0}")]
    Services(#[from] ServiceError),
    /// A controller was refused by the engine.
    #[error("registering the node's controllers: {0}")]
    Registration(#[from] RegistrationError),
}
