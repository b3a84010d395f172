//! [`MaintenanceMachine`]: the machine service a node serves in maintenance — an apply while
//! the node has no active config, and nothing once it has one.
//!
//! A maintenance caller is not authenticated (server-only TLS; it pins the node's key): it may
//! give a node its first config, never change a configured node's. Stopping the maintenance
//! server once a config is active is not enough to ensure that: a call the server took in
//! before then (its request still arriving, or queued behind the first apply) is still served,
//! and without this gate it would replace the config, or read the secret one back in a dry
//! run's diff. Applies are taken one at a time, so of two callers racing to configure the
//! node only the first does; the second is refused.

use std::sync::Arc;

use async_trait::async_trait;
use cosi_api::auth::MAINTENANCE_REFUSAL;
use cosi_api::machine::{
    ApplyOutcome, ApplyRequest, EventStream, EventTail, LogRequest, LogStream, Machine,
    ServiceAction, ServiceStatus, VersionInfo,
};
use cosi_core::{Error, Result, State};
use cosi_node::config::{MachineConfig, ACTIVE};
use tokio::sync::Mutex;

/// What a configured node answers a maintenance caller's apply.
pub const CONFIGURED_REFUSAL: &str = "the node is configured: it accepts a configuration only \
     over mutual TLS, from a client certificate with the admin role";

/// The machine service of a node in maintenance. See the module docs.
pub struct MaintenanceMachine {
    machine: Arc<dyn Machine>,
    state: Arc<dyn State>,
    applying: Mutex<()>,
}

impl MaintenanceMachine {
    /// Applies through `machine` while `state` holds no active machine config.
    pub fn new(machine: Arc<dyn Machine>, state: Arc<dyn State>) -> Self {
        MaintenanceMachine {
            machine,
            state,
            applying: Mutex::new(()),
        }
    }
}

fn refused(subject: &str, message: &str) -> Error {
    Error::AccessDenied {
        subject: subject.to_string(),
        message: message.to_string(),
    }
}

#[async_trait]
impl Machine for MaintenanceMachine {
    async fn apply_configuration(&self, request: ApplyRequest) -> Result<ApplyOutcome> {
        // Held across the apply: the check and the apply are one step for every caller.
        let _one_at_a_time = self.applying.lock().await;
        match self.state.get(&MachineConfig::pointer(ACTIVE)).await {
            Ok(_) => return Err(refused("apply configuration", CONFIGURED_REFUSAL)),
            Err(error) if error.is_not_found() => {}
            Err(error) => return Err(error),
        }
        self.machine.apply_configuration(request).await
    }

    // The server's method table refuses these to maintenance callers before they get here;
    // they are refused here too, so this type alone never serves more than an apply.

    async fn services(&self) -> Result<Vec<ServiceStatus>> {
        Err(refused("services", MAINTENANCE_REFUSAL))
    }

    async fn service_action(&self, id: &str, _action: ServiceAction) -> Result<String> {
        Err(refused(id, MAINTENANCE_REFUSAL))
    }

    async fn logs(&self, request: LogRequest) -> Result<LogStream> {
        Err(refused(&request.service, MAINTENANCE_REFUSAL))
    }

    async fn events(&self, _tail: EventTail) -> Result<EventStream> {
        Err(refused("events", MAINTENANCE_REFUSAL))
    }

    async fn version(&self) -> Result<VersionInfo> {
        Err(refused("version", MAINTENANCE_REFUSAL))
    }
}
