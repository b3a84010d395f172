//! Resource definitions: the static description of a resource type (name, default namespace,
//! aliases, print columns, sensitivity) that tools use to find and display resources.
//!
//! A definition is itself a resource type, `ResourceDefinitions.meta.cosi.dev` (alias `rd`) in
//! the `meta` namespace, so a client discovers a node's types and their aliases with the same
//! `get` as everything else ([`crate::Registry::publish`] writes them).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::Kind;

/// Whether readers need a special role to see resources of a type.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Sensitivity {
    /// Anyone who can read the namespace can read it.
    #[default]
    Public,
    /// Hidden from readers without the sensitive-read role (keys, tokens, secrets).
    Sensitive,
}

/// A column in table output: a header and a dotted path into the spec (`.a.b`, `.list[0].c`).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct PrintColumn {
    /// The column header.
    pub name: String,
    /// The path into the spec, e.g. `.addresses[0]`.
    pub path: String,
}

/// The description of one resource type.
///
/// ```
/// use cosi_core::{ResourceDefinition, Sensitivity};
/// let def = ResourceDefinition::new("MachineConfigs.config.cosi.dev", "config")
///     .with_aliases(["mc"])
///     .with_print_column("Hostname", ".machine.hostname")
///     .with_sensitivity(Sensitivity::Sensitive);
/// assert_eq!(def.display_type(), "MachineConfig");
/// assert_eq!(def.aliases, vec!["mc".to_string()]);
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDefinition {
    /// Full type name, `PluralCamel.group.domain`.
    pub resource_type: String,
    /// Namespace used when the caller names none.
    pub default_namespace: String,
    /// Extra names the type answers to (besides the automatic singular and plural forms).
    pub aliases: Vec<String>,
    /// Columns shown by table output.
    pub print_columns: Vec<PrintColumn>,
    /// Read restrictions.
    pub sensitivity: Sensitivity,
}

impl ResourceDefinition {
    /// A definition with no aliases, no columns and public sensitivity.
    pub fn new(resource_type: impl Into<String>, default_namespace: impl Into<String>) -> Self {
        ResourceDefinition {
            resource_type: resource_type.into(),
            default_namespace: default_namespace.into(),
            aliases: Vec::new(),
            print_columns: Vec::new(),
            sensitivity: Sensitivity::Public,
        }
    }

    /// Adds aliases.
    pub fn with_aliases<I, S>(mut self, aliases: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.aliases.extend(aliases.into_iter().map(Into::into));
        self
    }

    /// Adds a print column.
    pub fn with_print_column(mut self, name: impl Into<String>, path: impl Into<String>) -> Self {
        self.print_columns.push(PrintColumn {
            name: name.into(),
            path: path.into(),
        });
        self
    }

    /// Sets the sensitivity.
    pub fn with_sensitivity(mut self, sensitivity: Sensitivity) -> Self {
        self.sensitivity = sensitivity;
        self
    }

    /// The kind of this type in its default namespace: where resources of a type found by name
    /// are listed and watched.
    ///
    /// ```
    /// use cosi_core::{Kind, ResourceDefinition};
    /// let definition = ResourceDefinition::new("MachineConfigs.config.cosi.dev", "config");
    /// assert_eq!(definition.kind(), Kind::new("config", "MachineConfigs.config.cosi.dev"));
    /// ```
    ///
    /// Definitions are resources too: their own kind, as a [`ResourceSpec`](crate::ResourceSpec),
    /// is `ResourceDefinition::definition().kind()`.
    pub fn kind(&self) -> Kind {
        Kind::new(&self.default_namespace, &self.resource_type)
    }

    /// The plural name: the type up to the first dot (`MachineConfigs`).
    pub fn plural(&self) -> &str {
        self.resource_type
            .split('.')
            .next()
            .unwrap_or(&self.resource_type)
    }

    /// The singular display name, from the plural by the English rules type names meet:
    /// `MachineConfigs` → `MachineConfig`, `ServiceStatuses` → `ServiceStatus`,
    /// `NodeAddresses` → `NodeAddress`, `Policies` → `Policy`, `Meshes` → `Mesh`.
    ///
    /// ```
    /// use cosi_core::ResourceDefinition;
    /// let singular = |t: &str| ResourceDefinition::new(t, "ns").display_type().into_owned();
    /// assert_eq!(singular("ServiceStatuses.v1.cosi.dev"), "ServiceStatus");
    /// assert_eq!(singular("NodeAddresses.net.cosi.dev"), "NodeAddress");
    /// assert_eq!(singular("Policies.sec.cosi.dev"), "Policy");
    /// assert_eq!(singular("Services.v1.cosi.dev"), "Service");
    /// ```
    pub fn display_type(&self) -> Cow<'_, str> {
        let plural = self.plural();
        if let Some(stem) = plural.strip_suffix("ies") {
            return Cow::Owned(format!("{stem}y"));
        }
        for suffix in ["sses", "uses", "xes", "ches", "shes"] {
            if plural.ends_with(suffix) {
                return Cow::Borrowed(&plural[..plural.len() - 2]);
            }
        }
        Cow::Borrowed(plural.strip_suffix('s').unwrap_or(plural))
    }
}

/// The namespace definitions are published in.
pub const META_NAMESPACE: &str = "meta";
