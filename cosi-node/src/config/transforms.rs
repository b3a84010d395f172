//! The fan-out: transform controllers from the **active** [`MachineConfig`] to the small typed
//! resources other controllers read ([`MachineType`], [`Hostname`], [`NodeLabels`],
//! [`KubeletSpec`]), so that nobody else decodes the config. Each is a
//! [`cosi_controllers::Transform`]: an output follows its input, is written only when it
//! changes, and is torn down when the config (or the field it comes from) goes away.

use std::sync::Arc;

use cosi_controllers::{Engine, RegistrationError, Transform};
use cosi_core::Resource;

use super::resources::{Hostname, KubeletSpec, MachineConfig, MachineType, NodeLabels, ACTIVE};

/// The typed config of the active machine config, or `None` for any other id.
fn active(resource: &Resource<MachineConfig>) -> Option<&super::Config> {
    (resource.metadata.id() == ACTIVE).then(|| resource.spec.config())
}

/// `machine.type` → [`MachineType`] `machine-type` (none while the type is unset).
pub fn machine_type() -> Transform<MachineConfig, MachineType> {
    Transform::new("MachineTypeController", |mc| {
        let machine_type = active(mc)?.machine().machine_type?;
        Some((Arc::from(MachineType::ID), MachineType { machine_type }))
    })
}

/// `machine.network.hostname` → [`Hostname`] `hostname` (none without a hostname).
pub fn hostname() -> Transform<MachineConfig, Hostname> {
    Transform::new("HostnameConfigController", |mc| {
        let hostname = active(mc)?.machine().network.hostname.clone()?;
        Some((Arc::from(Hostname::ID), Hostname { hostname }))
    })
}

/// `machine.nodeLabels` → [`NodeLabels`] `node-labels` (maybe empty).
pub fn node_labels() -> Transform<MachineConfig, NodeLabels> {
    Transform::new("NodeLabelsController", |mc| {
        let labels = active(mc)?.machine().node_labels.clone();
        Some((Arc::from(NodeLabels::ID), NodeLabels { labels }))
    })
}

/// `machine.kubelet` → [`KubeletSpec`] `kubelet` (empty fields without a kubelet section).
pub fn kubelet() -> Transform<MachineConfig, KubeletSpec> {
    Transform::new("KubeletSpecController", |mc| {
        let kubelet = active(mc)?.machine().kubelet.clone().unwrap_or_default();
        Some((
            Arc::from(KubeletSpec::ID),
            KubeletSpec {
                image: kubelet.image,
                extra_args: kubelet.extra_args,
            },
        ))
    })
}

/// Registers every fan-out controller of this module.
pub fn register(engine: &Engine) -> Result<(), RegistrationError> {
    engine.register(machine_type())?;
    engine.register(hostname())?;
    engine.register(node_labels())?;
    engine.register(kubelet())?;
    Ok(())
}
