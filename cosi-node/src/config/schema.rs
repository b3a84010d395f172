//! The typed machine config: the main `v1alpha1` document ([`MainDocument`]) and the named
//! documents beside it ([`ServiceConfig`]), gathered in a [`Config`].
//!
//! These are plain serde types with `deny_unknown_fields`, decoded strictly by
//! [`super::document`]; field names are camelCase as operators write them. Fields that a config
//! must have are `Option`s here, so a missing one is reported by [`super::validate`] together
//! with every other error instead of stopping the decoder at the first. This module holds no
//! rules beyond the shape: what a value must look like is validation's business.
//!
//! ```yaml
//! version: v1alpha1
//! machine:
//!   type: worker                      # controlplane | worker
//!   token: s3cr3t                     # secret: never printed by Debug
//!   install: {disk: /dev/sda, image: installer:v1, wipe: false}
//!   nodeLabels: {topology.kubernetes.io/zone: eu-1a}
//!   kubelet: {image: kubelet:v1.31, extraArgs: {max-pods: "110"}}
//!   network:
//!     hostname: node-1
//!     interfaces:
//!       - {interface: eth0, addresses: [192.0.2.10/24], mtu: 1500}
//!   sysctls: {net.ipv4.ip_forward: "1"}
//! cluster:
//!   name: demo
//!   controlPlane: {endpoint: https://192.0.2.1:6443}
//!   network: {podSubnets: [10.244.0.0/16], serviceSubnets: [10.96.0.0/12], cni: {name: flannel}}
//!   allowSchedulingOnControlPlanes: false
//! ---
//! apiVersion: v1alpha1
//! kind: ServiceConfig
//! name: web
//! command: /usr/bin/python3
//! args: [-m, http.server, "8080"]
//! environment: {PYTHONUNBUFFERED: "1"}
//! dependsOn: [db]
//! restart: on-failure                 # always | on-failure | never
//! healthCheck: {http: "http://127.0.0.1:8080/", period: 5s, timeout: 1s}
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The whole machine config: one main document and the named documents, the services sorted
/// by name (so two configs that differ only in document order are equal).
#[derive(Clone, PartialEq, Debug)]
pub struct Config {
    /// The `version: v1alpha1` document.
    pub main: MainDocument,
    /// The `kind: ServiceConfig` documents, sorted by name, names unique.
    services: Vec<ServiceConfig>,
}

impl Config {
    /// A config from its documents; services are sorted by name. Duplicate service names are
    /// the caller's to avoid ([`super::document::decode`] rejects them); here the last wins.
    pub fn new(main: MainDocument, services: impl IntoIterator<Item = ServiceConfig>) -> Self {
        let mut by_name = BTreeMap::new();
        for service in services {
            by_name.insert(service.name.clone(), service);
        }
        Config {
            main,
            services: by_name.into_values().collect(),
        }
    }

    /// The `machine` section of the main document.
    pub fn machine(&self) -> &Machine {
        &self.main.machine
    }

    /// The `cluster` section of the main document.
    pub fn cluster(&self) -> &Cluster {
        &self.main.cluster
    }

    /// The service documents, sorted by name.
    pub fn services(&self) -> &[ServiceConfig] {
        &self.services
    }

    /// The service document named `name`.
    pub fn service(&self, name: &str) -> Option<&ServiceConfig> {
        self.services
            .binary_search_by(|s| s.name.as_str().cmp(name))
            .ok()
            .map(|at| &self.services[at])
    }
}

/// The main document's `version`: only `v1alpha1` exists.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub enum ConfigVersion {
    /// `v1alpha1`.
    #[default]
    #[serde(rename = "v1alpha1")]
    V1Alpha1,
}

/// The main document.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MainDocument {
    /// Always `v1alpha1`.
    pub version: ConfigVersion,
    /// What this machine is and how it runs.
    #[serde(default, skip_serializing_if = "is_default")]
    pub machine: Machine,
    /// The cluster the machine belongs to.
    #[serde(default, skip_serializing_if = "is_default")]
    pub cluster: Cluster,
}

/// A machine's role in the cluster.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MachineRole {
    /// Runs the control plane.
    ControlPlane,
    /// Runs workloads only.
    Worker,
}

impl MachineRole {
    /// The name as written in the config (`controlplane`, `worker`).
    pub fn as_str(self) -> &'static str {
        match self {
            MachineRole::ControlPlane => "controlplane",
            MachineRole::Worker => "worker",
        }
    }
}

impl fmt::Display for MachineRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A secret string: written in the config text, but `Debug` never shows it.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// `machine`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Machine {
    /// `controlplane` or `worker` (required).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub machine_type: Option<MachineRole>,
    /// The token that joins the machine to the cluster (required, secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// Where and what to install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<Install>,
    /// Labels of the Kubernetes node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// The kubelet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Kubelet>,
    /// Hostname and interfaces.
    #[serde(default, skip_serializing_if = "is_default")]
    pub network: MachineNetwork,
    /// Kernel parameters (`net.ipv4.ip_forward: "1"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
}

/// `machine.install`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Install {
    /// The install disk, an absolute device path (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
    /// The installer image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Wipe the disk before installing.
    #[serde(default, skip_serializing_if = "is_default")]
    pub wipe: bool,
}

/// `machine.kubelet`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Kubelet {
    /// The kubelet image (or program) to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Extra flags, by flag name without dashes (`max-pods: "110"` → `--max-pods=110`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_args: BTreeMap<String, String>,
}

/// `machine.network`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MachineNetwork {
    /// The hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Interfaces, each named once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
}

/// `machine.network.interfaces[]`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Interface {
    /// The link name, e.g. `eth0` (required; the key strategic patches merge by).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Addresses in CIDR form (`192.0.2.10/24`); see [`super::Cidr`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The link MTU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
}

/// `cluster`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cluster {
    /// The cluster name (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where the control plane is reached.
    #[serde(default, skip_serializing_if = "is_default")]
    pub control_plane: ControlPlane,
    /// Pod and service networks and the CNI.
    #[serde(default, skip_serializing_if = "is_default")]
    pub network: ClusterNetwork,
    /// Whether workloads may run on control-plane machines.
    #[serde(default, skip_serializing_if = "is_default")]
    pub allow_scheduling_on_control_planes: bool,
}

/// `cluster.controlPlane`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControlPlane {
    /// The API endpoint, an `https://host:port` URL (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// `cluster.network`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterNetwork {
    /// Pod networks in CIDR form (a strategic patch replaces this list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_subnets: Vec<String>,
    /// Service networks in CIDR form (a strategic patch replaces this list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_subnets: Vec<String>,
    /// The CNI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cni: Option<Cni>,
}

/// `cluster.network.cni`.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Cni {
    /// The CNI's name (`flannel`, `none`, ...).
    pub name: String,
}

/// A `kind: ServiceConfig` document: an extra process service. Its document also carries
/// `apiVersion: v1alpha1` and `kind: ServiceConfig`, which identify it and are not fields here.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceConfig {
    /// The service name, unique among service documents (a DNS label).
    pub name: String,
    /// The program to run, an absolute path (required).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments (a strategic patch replaces this list: a command line is one value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// The working directory, an absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// Services that must be up before this one starts (by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// When the process is restarted after it exits.
    #[serde(default, skip_serializing_if = "is_default")]
    pub restart: RestartPolicy,
    /// How the service is checked once running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// How long a stop waits after SIGTERM before SIGKILL (`10s`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_text"
    )]
    pub stop_timeout: Option<Duration>,
}

/// `restart` of a [`ServiceConfig`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// Restart whenever the process exits.
    #[default]
    Always,
    /// Restart only after a non-zero exit.
    OnFailure,
    /// Never restart.
    Never,
}

/// `healthCheck` of a [`ServiceConfig`]: exactly one probe, and its timing.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HealthCheck {
    /// Run this command (argv); healthy when it exits 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<Vec<String>>,
    /// Connect to this `host:port`; healthy when it accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    /// GET this `http://` URL; healthy on a 2xx answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// Wait this long after start before the first check.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_text"
    )]
    pub initial_delay: Option<Duration>,
    /// Time between checks.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_text"
    )]
    pub period: Option<Duration>,
    /// How long one check may take.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "duration_text"
    )]
    pub timeout: Option<Duration>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Durations written as humantime text (`1m 30s`, `500ms`).
mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("{text:?} is not a duration: {e}")))
    }
}
