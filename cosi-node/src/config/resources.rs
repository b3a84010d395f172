//! The config family's resource types, all in namespace `config`: the machine config itself
//! ([`MachineConfig`], ids [`ACTIVE`] and [`PERSISTED`]), the small typed resources fanned out
//! of it ([`MachineType`], [`Hostname`], [`NodeLabels`], [`KubeletSpec`]) and the
//! [`ConfigHistory`] of applies. Plain types only: the controllers that write the fan-out live
//! in [`super::transforms`], the writer of the config and its history in [`super::apply`].

use std::collections::BTreeMap;
use std::sync::Arc;

use cosi_core::{Pointer, Registry, ResourceDefinition, ResourceSpec, Result, Sensitivity};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::document;
use super::error::ConfigErrors;
use super::schema::{Config, MachineRole};
use crate::namespaces::CONFIG;

/// Id of the config the node runs now.
pub const ACTIVE: &str = "active";
/// Id of the config the node starts with (kept on the disk backend).
pub const PERSISTED: &str = "persisted";

/// The machine config: the operator's multi-document YAML text and its typed, decoded form.
///
/// **Spec shape.** In dynamic form (`get mc -o yaml`, the disk record) the spec is *one YAML
/// string*, the multi-document config as the operator wrote it (comments included) or, after a
/// patch, its canonical encoding; `edit mc` and `patch mc` start from that text. In memory the
/// resource also holds the decoded [`Config`], so controllers read typed fields through
/// [`MachineConfig::config`] and never parse YAML. Reading the dynamic form back decodes the
/// string strictly (no semantic validation: what was stored was validated when applied).
///
/// Two specs are equal when their typed configs are: a change of comments or layout alone is
/// not a change of the config (no new version, no event).
///
/// ```
/// use cosi_node::config::MachineConfig;
/// let text = "version: v1alpha1\nmachine:\n  type: worker  # a comment\n";
/// let mc = MachineConfig::from_text(text).unwrap();
/// assert_eq!(mc.text(), text);
/// assert_eq!(mc.config().machine().machine_type.unwrap().as_str(), "worker");
/// assert_eq!(serde_json::to_value(&mc).unwrap(), serde_json::Value::String(text.into()));
/// ```
#[derive(Clone, Debug)]
pub struct MachineConfig {
    text: Arc<str>,
    config: Arc<Config>,
}

impl MachineConfig {
    /// Decodes `text` strictly (see [`super::document`]), keeping the text as written.
    pub fn from_text(text: &str) -> std::result::Result<Self, ConfigErrors> {
        let config = document::decode(text.as_bytes())?;
        Ok(MachineConfig {
            text: text.into(),
            config: Arc::new(config),
        })
    }

    /// A machine config whose text is the canonical encoding of `config`.
    pub fn from_config(config: Config) -> Self {
        MachineConfig {
            text: document::encode(&config).into(),
            config: Arc::new(config),
        }
    }

    /// The typed config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The config text as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The canonical text: what diffs compare (comments and layout do not count).
    pub fn canonical_text(&self) -> String {
        document::encode(&self.config)
    }

    /// The pointer of the machine config with id `id` ([`ACTIVE`] or [`PERSISTED`]).
    pub fn pointer(id: &str) -> Pointer {
        Self::kind().pointer(id)
    }
}

impl PartialEq for MachineConfig {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
    }
}

impl Serialize for MachineConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for MachineConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        MachineConfig::from_text(&text).map_err(serde::de::Error::custom)
    }
}

impl ResourceSpec for MachineConfig {
    const TYPE: &'static str = "MachineConfigs.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = CONFIG;
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["mc", "machineconfig"])
            .with_sensitivity(Sensitivity::Sensitive)
    }
}

/// The machine's role, from `machine.type` of the active config (id [`MachineType::ID`]).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct MachineType {
    /// `controlplane` or `worker`.
    #[serde(rename = "type")]
    pub machine_type: MachineRole,
}

impl MachineType {
    /// The one id.
    pub const ID: &'static str = "machine-type";
}

impl ResourceSpec for MachineType {
    const TYPE: &'static str = "MachineTypes.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = CONFIG;
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["mt"])
            .with_print_column("Type", ".type")
    }
}

/// The hostname the config asks for, from `machine.network.hostname` (id [`Hostname::ID`];
/// absent when the config names none).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Hostname {
    /// The hostname.
    pub hostname: String,
}

impl Hostname {
    /// The one id.
    pub const ID: &'static str = "hostname";
}

impl ResourceSpec for Hostname {
    const TYPE: &'static str = "Hostnames.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = CONFIG;
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Hostname", ".hostname")
    }
}

/// The Kubernetes node labels, from `machine.nodeLabels` (id [`NodeLabels::ID`]; present, maybe
/// empty, whenever there is an active config).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
pub struct NodeLabels {
    /// Label key → value.
    pub labels: BTreeMap<String, String>,
}

impl NodeLabels {
    /// The one id.
    pub const ID: &'static str = "node-labels";
}

impl ResourceSpec for NodeLabels {
    const TYPE: &'static str = "NodeLabels.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = CONFIG;
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["labels"])
            .with_print_column("Labels", ".labels")
    }
}

/// What the kubelet runs with, from `machine.kubelet` (id [`KubeletSpec::ID`]; present
/// whenever there is an active config, with empty fields when it has no `kubelet` section).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletSpec {
    /// The kubelet image (or program).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Extra flags, by name without dashes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_args: BTreeMap<String, String>,
}

impl KubeletSpec {
    /// The one id.
    pub const ID: &'static str = "kubelet";

    /// The extra flags as command-line arguments, in name order: `--max-pods=110`.
    pub fn args(&self) -> Vec<String> {
        self.extra_args
            .iter()
            .map(|(k, v)| format!("--{k}={v}"))
            .collect()
    }
}

impl ResourceSpec for KubeletSpec {
    const TYPE: &'static str = "KubeletSpecs.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = CONFIG;
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Image", ".image")
            .with_print_column("Args", ".extraArgs")
    }
}

/// One applied change of the machine config: the history an operator reads with
/// `get confighistory`. Ids are the sequence number, zero-padded so that id order is time
/// order (`000042`); only the last [`super::HISTORY_LIMIT`] entries are kept.
///
/// The entry is not sensitive: it names the changed fields but never their values.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigHistory {
    /// Position in the node's history, from 1.
    pub sequence: u64,
    /// When it was applied (RFC 3339, UTC).
    pub time: String,
    /// The mode it took effect in (`no-reboot`, `staged`, `try`, `reboot`, ...), or `rollback`
    /// and `start` for the changes the node made by itself.
    pub mode: String,
    /// Who applied it (the API caller's identity, or the node itself).
    pub actor: String,
    /// The active config's version after it (absent when there is none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_version: Option<u64>,
    /// The persisted config's version after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persisted_version: Option<u64>,
    /// One line: `+3 -1: machine.nodeLabels.zone, machine.kubelet`.
    pub summary: String,
    /// The changed field paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Lines added in the canonical text.
    pub lines_added: usize,
    /// Lines removed from the canonical text.
    pub lines_removed: usize,
}

impl ResourceSpec for ConfigHistory {
    const TYPE: &'static str = "ConfigHistories.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = CONFIG;
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["history", "ch"])
            .with_print_column("Time", ".time")
            .with_print_column("Mode", ".mode")
            .with_print_column("Actor", ".actor")
            .with_print_column("Active", ".activeVersion")
            .with_print_column("Persisted", ".persistedVersion")
            .with_print_column("Changes", ".summary")
    }
}

/// Registers every type of the config family.
pub fn register_types(registry: &mut Registry) -> Result<()> {
    registry.register::<MachineConfig>()?;
    registry.register::<MachineType>()?;
    registry.register::<Hostname>()?;
    registry.register::<NodeLabels>()?;
    registry.register::<KubeletSpec>()?;
    registry.register::<ConfigHistory>()?;
    Ok(())
}
