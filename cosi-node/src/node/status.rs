//! [`MachineStatus`] (`runtime/MachineStatuses.runtime.cosi.dev/machine`): where the node is in
//! its life, as an operator reads it — in maintenance (no config yet) or running, which start
//! of the node runtime this is, and the active config's version. Written by
//! [`MachineStatusController`] from the active machine config; it reads nothing else.

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceDefinition, ResourceSpec, Result, StateExt};
use serde::{Deserialize, Serialize};

use crate::config::{MachineConfig, ACTIVE};
use crate::namespaces;
use crate::network::found;

/// The node's stage.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MachineStage {
    /// No active config: the API accepts only a configuration, over server-only TLS.
    #[default]
    Maintenance,
    /// An active config: the node runs it, and the API is served over mutual TLS.
    Running,
}

/// The node's status. See the module docs.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Maintenance or running.
    pub stage: MachineStage,
    /// Which start of the node runtime this is in the daemon process: 1 at the daemon's
    /// start, one more after each restart in place (`reboot`).
    pub boot: u64,
    /// The active config's version (absent in maintenance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_version: Option<u64>,
}

impl MachineStatus {
    /// The id of the one status.
    pub const ID: &'static str = "machine";
}

impl ResourceSpec for MachineStatus {
    const TYPE: &'static str = "MachineStatuses.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::RUNTIME;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["ms"])
            .with_print_column("Stage", ".stage")
            .with_print_column("Boot", ".boot")
            .with_print_column("Config Version", ".configVersion")
    }
}

/// Writes [`MachineStatus`] for one start of the node runtime.
#[derive(Debug, Clone)]
pub struct MachineStatusController {
    boot: u64,
}

impl MachineStatusController {
    /// The controller's name (the owner of the status).
    pub const NAME: &'static str = "node.MachineStatusController";

    /// The controller of the runtime's `boot`-th start.
    pub fn new(boot: u64) -> Self {
        MachineStatusController { boot }
    }
}

#[async_trait]
impl Controller for MachineStatusController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<MachineConfig>().with_id(ACTIVE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<MachineStatus>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let active = found(
            state
                .get_typed::<MachineConfig>(&MachineConfig::pointer(ACTIVE))
                .await,
        )?;
        let status = MachineStatus {
            stage: if active.is_some() {
                MachineStage::Running
            } else {
                MachineStage::Maintenance
            },
            boot: self.boot,
            config_version: active.map(|a| a.metadata.version().get()),
        };
        state
            .modify_output(Resource::new(MachineStatus::ID, status.clone()), |r| {
                r.spec = status.clone();
                Ok(())
            })
            .await?;
        Ok(Reconciled::Done)
    }
}
