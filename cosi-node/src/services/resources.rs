//! What the supervisor shows as resources in namespace `runtime`: a [`ServiceStatus`] per
//! service, and a [`Service`] per *running* service.
//!
//! Both are kept because they answer different readers. `ServiceStatus` is the operator's
//! view (`get servicestatuses` is `talosctl services`): state, health, pid, restarts, last
//! change and last event, for every service whatever its state. `Service` is the original's
//! resource, existing only while the service runs, so another controller can take "etcd is
//! up" as an input (it is created, updated on health flips, and destroyed when the service
//! leaves `Running`) without parsing states. The event history stays in the supervisor's ring,
//! not in resources.

use cosi_core::{ResourceDefinition, ResourceSpec};
use serde::{Deserialize, Serialize};

use super::events::{Health, ServiceState};
use crate::namespaces;

/// The state of one service, as an operator reads it. Id = service id.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// The service's state.
    pub state: ServiceState,
    /// `ok`, `failed` or `unknown`.
    pub health: Health,
    /// Why, from the last health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_message: Option<String>,
    /// The main process, while there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Automatic restarts since the service was added.
    pub restarts: u32,
    /// Stopped by an operator (it stays stopped until started again).
    pub stopped_by_operator: bool,
    /// When the newest event happened (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<String>,
    /// The newest event's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<String>,
}

impl ResourceSpec for ServiceStatus {
    const TYPE: &'static str = "ServiceStatuses.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::RUNTIME;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["svcstatus"])
            .with_print_column("State", ".state")
            .with_print_column("Health", ".health")
            .with_print_column("PID", ".pid")
            .with_print_column("Restarts", ".restarts")
            .with_print_column("Last Change", ".lastChange")
            .with_print_column("Last Event", ".lastEvent")
    }
}

/// A running service (the original's `Service`). Id = service id; exists only while the
/// service is `Running`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    /// Always true: the resource exists only while the service runs.
    pub running: bool,
    /// The last health check passed.
    pub healthy: bool,
    /// No health result (yet, or no health check).
    pub unknown: bool,
}

impl ResourceSpec for Service {
    const TYPE: &'static str = "Services.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::RUNTIME;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["svc"])
            .with_print_column("Running", ".running")
            .with_print_column("Healthy", ".healthy")
            .with_print_column("Health Unknown", ".unknown")
    }
}
