//! [`MaintenanceMachine`]: the machine service a node serves in maintenance — an apply while
//! the node has no active config, and nothing once it has one.
//!
//! A maintenance caller is not authenticated (server-only TLS; it pins the node's key): it may
//! give a node its first config, never change a configured node's. Stopping the maintenance
//! server once a config is active is not enough to ensure that: the stop ends at once the calls
//! whose request is still arriving ([`LEFT_MAINTENANCE`]), but a call whose request arrived
//! before it (between the apply that made the config active and the stop, or queued behind
//! that apply) is still served, and without this gate it would replace the config, or read the
//! secret one back in a dry run's diff. Applies are taken one at a time, so of two callers
//! racing to configure the node only the first does; the second is refused.

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

/// What a maintenance caller whose call is still open is told when the node leaves
/// maintenance: the call ends with `Unavailable` and this message.
pub const LEFT_MAINTENANCE: &str = "the node left maintenance mode; connect with mutual TLS";

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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use cosi_core::{CreateOptions, Resource};
    use cosi_state::{MemoryOptions, MemoryState};

    use super::*;

    /// A machine that counts the applies it is given and accepts every one.
    #[derive(Default)]
    struct Counting {
        applies: AtomicUsize,
    }

    #[async_trait]
    impl Machine for Counting {
        async fn apply_configuration(&self, _request: ApplyRequest) -> Result<ApplyOutcome> {
            self.applies.fetch_add(1, Ordering::SeqCst);
            Ok(ApplyOutcome::default())
        }
        async fn services(&self) -> Result<Vec<ServiceStatus>> {
            unreachable!("the gate passes only applies")
        }
        async fn service_action(&self, _id: &str, _action: ServiceAction) -> Result<String> {
            unreachable!("the gate passes only applies")
        }
        async fn logs(&self, _request: LogRequest) -> Result<LogStream> {
            unreachable!("the gate passes only applies")
        }
        async fn events(&self, _tail: EventTail) -> Result<EventStream> {
            unreachable!("the gate passes only applies")
        }
        async fn version(&self) -> Result<VersionInfo> {
            unreachable!("the gate passes only applies")
        }
    }

    const CONFIG: &str = "version: v1alpha1
machine:
  type: worker
  token: t0k3n
cluster:
  name: demo
  controlPlane:
    endpoint: https://127.0.0.1:6443
";

    #[tokio::test]
    async fn a_maintenance_apply_to_a_configured_node_is_refused_and_changes_nothing() {
        // Given a node whose config is active
        let state: Arc<dyn State> = Arc::new(MemoryState::new(MemoryOptions::default()));
        let active = MachineConfig::from_text(CONFIG).unwrap();
        state
            .create(
                Resource::new(ACTIVE, active).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
        let machine = Arc::new(Counting::default());
        let gate = MaintenanceMachine::new(machine.clone(), state);

        // When a maintenance caller applies a config
        let refused = gate
            .apply_configuration(ApplyRequest {
                data: CONFIG.as_bytes().to_vec(),
                ..ApplyRequest::default()
            })
            .await;

        // Then it is refused, saying why, and the node never sees it
        match refused {
            Err(Error::AccessDenied { subject, message }) => assert_eq!(
                (subject.as_str(), message.as_str()),
                ("apply configuration", CONFIGURED_REFUSAL)
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(machine.applies.load(Ordering::SeqCst), 0);
    }
}
