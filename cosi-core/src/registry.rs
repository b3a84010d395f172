//! The definitions registry: which resource types a process knows, the names they answer to, and
//! how to turn a dynamic spec back into a typed resource.
//!
//! A type answers, case-insensitively, to its full name (`MachineConfigs.config.cosi.dev`), its
//! plural (`MachineConfigs`), its singular (`MachineConfig`) and its aliases (`mc`). A full name
//! always wins; any other name that fits several types is an error naming every one of them.
//! Registration refuses a type registered twice and a name of one type that is the full name of
//! another (it could never be resolved). The YAML/JSON decoding built on the registry lives in
//! [`dynamic`](crate::dynamic); this module knows no text format. Each caller of
//! [`Registry::decode_spec`] says where the spec comes from ([`Origin`]): outside input is
//! decoded strictly, what this project wrote tolerantly ([`spec_decode`]
//! draws that line).

use std::collections::{BTreeMap, BTreeSet};

use crate::spec_decode::{self, Origin};
use crate::text::clipped;
use crate::{
    Error, ListOptions, Metadata, Resource, ResourceDefinition, ResourceSpec, Result,
    SharedResource, State, StateExt, UpdateOptions,
};

/// The owner of the definitions [`Registry::publish`] writes.
pub const PUBLISHER: &str = "cosi.registry";

/// How one type's resources are built from metadata and a spec: in dynamic form, or as JSON
/// text (the wire's form, decoded without the dynamic form on the way).
#[derive(Clone, Copy, Debug)]
struct SpecDecoders {
    value: fn(Metadata, serde_json::Value, Origin) -> Result<SharedResource>,
    json: fn(Metadata, &[u8], Origin) -> Result<SharedResource>,
}

#[derive(Clone, Debug)]
struct Entry {
    definition: ResourceDefinition,
    decode: SpecDecoders,
}

/// Known resource types, looked up by any of their names.
///
/// ```
/// use cosi_core::registry::Registry;
/// use cosi_core::{ResourceDefinition, ResourceSpec};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// struct MachineConfig { hostname: String }
///
/// impl ResourceSpec for MachineConfig {
///     const TYPE: &'static str = "MachineConfigs.config.cosi.dev";
///     const DEFAULT_NAMESPACE: &'static str = "config";
///     fn definition() -> ResourceDefinition {
///         ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
///             .with_aliases(["mc"])
///             .with_print_column("Hostname", ".hostname")
///     }
/// }
///
/// let mut registry = Registry::new();
/// registry.register::<MachineConfig>().unwrap();
/// for name in ["MachineConfigs.config.cosi.dev", "machineconfigs", "MachineConfig", "MC"] {
///     assert_eq!(registry.resolve(name).unwrap().resource_type, MachineConfig::TYPE);
/// }
/// let err = registry.resolve("mcs").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "\"mcs\": invalid resource type: no registered type has this full name, plural, singular or alias"
/// );
/// ```
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// By full type name.
    entries: BTreeMap<String, Entry>,
    /// Lowercased full type name → full type name.
    full_names: BTreeMap<String, String>,
    /// Lowercased plural, singular or alias → the full type names it belongs to.
    short_names: BTreeMap<String, BTreeSet<String>>,
}

impl Registry {
    /// An empty registry.
    ///
    /// ```
    /// let registry = cosi_core::Registry::new();
    /// assert!(registry.resolve("anything").is_err());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `S` (builder form of [`Registry::register`]).
    ///
    /// ```
    /// use cosi_core::{Registry, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// # struct Hostname(String);
    /// # impl ResourceSpec for Hostname {
    /// #     const TYPE: &'static str = "Hostnames.net.cosi.dev";
    /// #     const DEFAULT_NAMESPACE: &'static str = "network";
    /// # }
    /// let registry = Registry::new().with::<Hostname>()?;
    /// assert!(registry.contains("Hostnames.net.cosi.dev"));
    /// # Ok::<(), cosi_core::Error>(())
    /// ```
    pub fn with<S: ResourceSpec>(mut self) -> Result<Self> {
        self.register::<S>()?;
        Ok(self)
    }

    /// Registers `S`: its [`definition`](ResourceSpec::definition) and how to decode its spec.
    ///
    /// Fails, registering nothing, when the type is already registered (compared
    /// case-insensitively), when a name of `S` is another type's full name or the other way
    /// round, when the type name or an alias is empty or contains whitespace, a character a
    /// terminal shows escaped ([`crate::text::shown_escaped`]) or `/`, when the default
    /// namespace is empty, when a print column path does not parse, or when the definition's
    /// type is not `S::TYPE`.
    ///
    /// ```
    /// use cosi_core::registry::Registry;
    /// use cosi_core::ResourceSpec;
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// # struct Hostname(String);
    /// # impl ResourceSpec for Hostname {
    /// #     const TYPE: &'static str = "Hostnames.net.cosi.dev";
    /// #     const DEFAULT_NAMESPACE: &'static str = "network";
    /// # }
    /// let mut registry = Registry::new();
    /// registry.register::<Hostname>().unwrap();
    /// let err = registry.register::<Hostname>().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "Hostnames.net.cosi.dev: invalid resource type: already registered as Hostnames.net.cosi.dev"
    /// );
    /// ```
    pub fn register<S: ResourceSpec>(&mut self) -> Result<()> {
        let definition = S::definition();
        if definition.resource_type != S::TYPE {
            return Err(Error::invalid(
                S::TYPE,
                "resource type",
                format!(
                    "the definition names type {:?}, the spec declares {:?}",
                    definition.resource_type,
                    S::TYPE
                ),
            ));
        }
        let decoders = SpecDecoders {
            value: spec_decode::typed_from_value::<S>,
            json: spec_decode::typed_from_json::<S>,
        };
        self.insert(definition, decoders)
    }

    fn insert(&mut self, definition: ResourceDefinition, decode: SpecDecoders) -> Result<()> {
        let full = definition.resource_type.clone();
        let invalid = |field: &str, message: String| Error::invalid(full.as_str(), field, message);
        check_name(&full).map_err(|m| invalid("resource type", m))?;
        // Documents of the type without a namespace take this one; no store accepts "".
        if definition.default_namespace.is_empty() {
            return Err(invalid("defaultNamespace", "must not be empty".into()));
        }
        if definition.plural().is_empty() {
            return Err(invalid(
                "resource type",
                "the plural (the part before the first '.') is empty".into(),
            ));
        }
        for (i, alias) in definition.aliases.iter().enumerate() {
            check_name(alias).map_err(|m| invalid(&format!("aliases[{i}]"), m))?;
        }
        for (i, column) in definition.print_columns.iter().enumerate() {
            crate::columns::check_path(&column.path)
                .map_err(|m| invalid(&format!("printColumns[{i}].path"), m))?;
        }

        let full_lower = full.to_lowercase();
        if let Some(existing) = self.full_names.get(&full_lower) {
            return Err(invalid(
                "resource type",
                format!("already registered as {existing}"),
            ));
        }
        if let Some(owners) = self.short_names.get(&full_lower) {
            return Err(invalid(
                "resource type",
                format!("the name is already a name of {}", join(owners)),
            ));
        }
        let short = short_names(&definition);
        for name in &short {
            if let Some(other) = self.full_names.get(name) {
                return Err(invalid(
                    "aliases",
                    format!("{name:?} is the full name of {other}, so it could never resolve here"),
                ));
            }
        }

        for name in short {
            self.short_names
                .entry(name)
                .or_default()
                .insert(full.clone());
        }
        self.full_names.insert(full_lower, full.clone());
        self.entries.insert(full, Entry { definition, decode });
        Ok(())
    }

    /// Registers a type known only by its definition — a client that learnt a node's types from
    /// its published definitions (`get rd`) — so that it resolves by every name like a type
    /// registered with [`Registry::register`]. Its resources decode as [`DynamicResource`]s.
    ///
    /// Fails, registering nothing, for the reasons [`Registry::register`] gives.
    ///
    /// [`DynamicResource`]: crate::DynamicResource
    ///
    /// ```
    /// use cosi_core::{Registry, ResourceDefinition};
    /// let mut registry = Registry::new();
    /// registry
    ///     .register_definition(ResourceDefinition::new("Members.cluster.cosi.dev", "cluster"))
    ///     .unwrap();
    /// assert_eq!(registry.resolve("member").unwrap().default_namespace, "cluster");
    /// ```
    pub fn register_definition(&mut self, definition: ResourceDefinition) -> Result<()> {
        let decoders = SpecDecoders {
            value: dynamic_from_value,
            json: dynamic_from_json,
        };
        self.insert(definition, decoders)
    }

    /// Whether a type is registered under exactly this full type name.
    ///
    /// ```
    /// assert!(!cosi_core::Registry::new().contains("Hostnames.net.cosi.dev"));
    /// ```
    pub fn contains(&self, resource_type: &str) -> bool {
        self.entries.contains_key(resource_type)
    }

    /// The definition of a type named by outside input (a remote caller, a file), by its exact
    /// full name: the check to make before anything is built or kept for that name.
    ///
    /// ```
    /// let err = cosi_core::Registry::new().require("Nopes.test.cosi.dev").unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "Nopes.test.cosi.dev: invalid type: not a registered resource type (list the \
    ///      registered ones with `get rd`)"
    /// );
    /// ```
    pub fn require(&self, resource_type: &str) -> Result<&ResourceDefinition> {
        self.get(resource_type).ok_or_else(|| {
            Error::invalid(
                resource_type,
                "type",
                "not a registered resource type (list the registered ones with `get rd`)",
            )
        })
    }

    /// The definition registered under exactly this full type name.
    ///
    /// ```
    /// use cosi_core::registry::Registry;
    /// assert!(Registry::new().get("Hostnames.net.cosi.dev").is_none());
    /// ```
    pub fn get(&self, resource_type: &str) -> Option<&ResourceDefinition> {
        self.entries.get(resource_type).map(|e| &e.definition)
    }

    /// Finds the one type `name` refers to: a full name, plural, singular or alias, any case.
    ///
    /// Errors ([`Error::InvalidArgument`], field `resource type`) name `name` and say whether no
    /// type or several types (listed) answer to it.
    ///
    /// ```
    /// use cosi_core::{Registry, ResourceDefinition, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// # struct A;
    /// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// # struct B;
    /// impl ResourceSpec for A {
    ///     const TYPE: &'static str = "Members.cluster.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "cluster";
    ///     fn definition() -> ResourceDefinition {
    ///         ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE).with_aliases(["m"])
    ///     }
    /// }
    /// impl ResourceSpec for B {
    ///     const TYPE: &'static str = "MachineStatuses.runtime.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "runtime";
    ///     fn definition() -> ResourceDefinition {
    ///         ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE).with_aliases(["m"])
    ///     }
    /// }
    /// let mut registry = Registry::new();
    /// registry.register::<A>().unwrap();
    /// registry.register::<B>().unwrap();
    /// assert_eq!(registry.resolve("member").unwrap().resource_type, A::TYPE);
    /// assert_eq!(
    ///     registry.resolve("m").unwrap_err().to_string(),
    ///     "\"m\": invalid resource type: ambiguous, it names \
    ///      MachineStatuses.runtime.cosi.dev, Members.cluster.cosi.dev"
    /// );
    /// ```
    pub fn resolve(&self, name: &str) -> Result<&ResourceDefinition> {
        let lower = name.to_lowercase();
        let full = match self.full_names.get(&lower) {
            Some(full) => full,
            None => match self.short_names.get(&lower) {
                Some(owners) if owners.len() == 1 => {
                    // Non-empty by the guard.
                    owners.iter().next().expect("one owner")
                }
                Some(owners) => {
                    return Err(Error::invalid(
                        format!("{name:?}"),
                        "resource type",
                        format!("ambiguous, it names {}", join(owners)),
                    ))
                }
                None => {
                    return Err(Error::invalid(
                        format!("{name:?}"),
                        "resource type",
                        "no registered type has this full name, plural, singular or alias",
                    ))
                }
            },
        };
        // Every name in the indexes belongs to a registered entry.
        Ok(&self.entries[full].definition)
    }

    /// Whether `name` is any name of any registered type (even an ambiguous one).
    pub(crate) fn knows_name(&self, name: &str) -> bool {
        let lower = name.to_lowercase();
        self.full_names.contains_key(&lower) || self.short_names.contains_key(&lower)
    }

    /// Every registered definition, ordered by type name.
    ///
    /// ```
    /// use cosi_core::registry::Registry;
    /// assert_eq!(Registry::new().definitions().count(), 0);
    /// ```
    pub fn definitions(&self) -> impl Iterator<Item = &ResourceDefinition> {
        self.entries.values().map(|e| &e.definition)
    }

    /// Builds the typed resource of `metadata`'s type from a spec in dynamic form (the value
    /// [`AnyResource::spec_value`](crate::AnyResource::spec_value) gives). `origin` says who
    /// wrote the spec: for outside input ([`Origin::Input`]: an API write, a user's document)
    /// a field the type does not have is an error, unless the type
    /// [accepts them](ResourceSpec::UNKNOWN_FIELDS); for what this project's own store or
    /// server wrote ([`Origin::ReadBack`]: backends loading records, clients reading replies)
    /// it is skipped, so a newer writer's fields do not break an older reader.
    ///
    /// Errors when the type is not registered (exact full name) or the spec does not decode;
    /// the error names the resource and its field is the path into the spec, e.g.
    /// `spec.ports[1]`.
    ///
    /// ```
    /// use cosi_core::registry::Registry;
    /// use cosi_core::spec_decode::Origin;
    /// use cosi_core::{downcast_ref, Metadata, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Port { port: u16 }
    /// impl ResourceSpec for Port {
    ///     const TYPE: &'static str = "Ports.net.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "network";
    /// }
    ///
    /// let mut registry = Registry::new();
    /// registry.register::<Port>().unwrap();
    /// let md = Metadata::new(Port::kind().pointer("http"));
    /// let r = registry.decode_spec(md.clone(), serde_json::json!({"port": 80}), Origin::Input).unwrap();
    /// assert_eq!(downcast_ref::<Port>(&*r).unwrap().spec, Port { port: 80 });
    ///
    /// let err = registry.decode_spec(md.clone(), serde_json::json!({"port": 70000}), Origin::Input).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "network/Ports.net.cosi.dev/http: invalid spec.port: \
    ///      invalid value: integer `70000`, expected u16"
    /// );
    ///
    /// let typo = serde_json::json!({"port": 80, "protocl": "tcp"});
    /// let err = registry.decode_spec(md.clone(), typo.clone(), Origin::Input).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "network/Ports.net.cosi.dev/http: invalid spec.protocl: \
    ///      unknown field: Ports.net.cosi.dev has no such field (check its spelling)"
    /// );
    /// // What a newer version of this program stored: its extra field is skipped.
    /// assert!(registry.decode_spec(md, typo, Origin::ReadBack).is_ok());
    /// ```
    pub fn decode_spec(
        &self,
        metadata: Metadata,
        spec: serde_json::Value,
        origin: Origin,
    ) -> Result<SharedResource> {
        match self.entries.get(metadata.resource_type()) {
            Some(entry) => (entry.decode.value)(metadata, spec, origin),
            None => Err(not_registered(&metadata)),
        }
    }

    /// Builds the typed resource of `metadata`'s type from a spec written as JSON, decoded
    /// straight into the type (no dynamic form on the way; the wire's path). Unknown fields
    /// and errors as in [`Registry::decode_spec`]; JSON that does not parse is an error whose
    /// message says so, with its position.
    ///
    /// ```
    /// use cosi_core::registry::Registry;
    /// use cosi_core::spec_decode::Origin;
    /// use cosi_core::{downcast_ref, Metadata, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Port { port: u16 }
    /// impl ResourceSpec for Port {
    ///     const TYPE: &'static str = "Ports.net.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "network";
    /// }
    /// let registry = Registry::new().with::<Port>().unwrap();
    /// let md = Metadata::new(Port::kind().pointer("http"));
    /// let r = registry.decode_spec_json(md.clone(), br#"{"port": 80}"#, Origin::Input).unwrap();
    /// assert_eq!(downcast_ref::<Port>(&*r).unwrap().spec, Port { port: 80 });
    /// let err = registry.decode_spec_json(md, br#"{"port": 80, "prot": 1}"#, Origin::Input).unwrap_err();
    /// assert!(err.to_string().starts_with("network/Ports.net.cosi.dev/http: invalid spec.prot: unknown field"));
    /// ```
    pub fn decode_spec_json(
        &self,
        metadata: Metadata,
        json: &[u8],
        origin: Origin,
    ) -> Result<SharedResource> {
        match self.entries.get(metadata.resource_type()) {
            Some(entry) => (entry.decode.json)(metadata, json, origin),
            None => Err(not_registered(&metadata)),
        }
    }
}

fn not_registered(metadata: &Metadata) -> Error {
    Error::invalid(
        metadata.pointer().to_string(),
        "metadata.type",
        format!(
            "type {:?} is not registered",
            clipped(metadata.resource_type())
        ),
    )
}

// Here rather than with the definition: resources depend on definitions, not the reverse.
impl ResourceSpec for ResourceDefinition {
    const TYPE: &'static str = "ResourceDefinitions.meta.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = crate::META_NAMESPACE;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["rd", "rds"])
            .with_print_column("Aliases", ".aliases")
            .with_print_column("Default Namespace", ".defaultNamespace")
    }
}

impl Registry {
    /// Publishes every registered definition, and the definition of definitions itself, as a
    /// [`ResourceDefinition`] resource in the `meta` namespace (id = the type name, owner
    /// [`PUBLISHER`]), so clients can discover the types and aliases with `get rd`. Definitions
    /// it published earlier for types no longer registered are destroyed. Writes nothing for a
    /// definition that is already current.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// use cosi_core::{ListOptions, Registry, ResourceDefinition, ResourceSpec, State};
    /// # let state = cosi_state::MemoryState::default();
    /// let registry = Registry::new();
    /// registry.publish(&state).await.unwrap();
    /// let published = state.list(&ResourceDefinition::definition().kind(), &ListOptions::default()).await.unwrap();
    /// assert_eq!(published[0].metadata().id(), "ResourceDefinitions.meta.cosi.dev");
    /// # });
    /// ```
    pub async fn publish(&self, state: &dyn State) -> Result<()> {
        let own = ResourceDefinition::definition();
        let definitions = self
            .definitions()
            .filter(|d| d.resource_type != own.resource_type)
            .chain(std::iter::once(&own));
        let options = UpdateOptions::owned_by(Some(PUBLISHER));
        for definition in definitions {
            let template = Resource::new(definition.resource_type.as_str(), definition.clone());
            state
                .modify(template, options.clone(), |r| {
                    r.spec = definition.clone();
                    Ok(())
                })
                .await?;
        }
        for stale in state.list(&own.kind(), &ListOptions::default()).await? {
            let metadata = stale.metadata();
            let id = metadata.id();
            if metadata.owner() == Some(PUBLISHER) && id != own.resource_type && !self.contains(id)
            {
                state
                    .destroy(
                        metadata.pointer(),
                        crate::DestroyOptions {
                            owner: Some(PUBLISHER.into()),
                        },
                    )
                    .await?;
            }
        }
        Ok(())
    }
}

fn dynamic_from_value(
    metadata: Metadata,
    spec: serde_json::Value,
    _: Origin,
) -> Result<SharedResource> {
    Ok(std::sync::Arc::new(crate::DynamicResource {
        metadata,
        spec,
    }))
}

fn dynamic_from_json(metadata: Metadata, json: &[u8], origin: Origin) -> Result<SharedResource> {
    let spec = spec_decode::value_from_json(&metadata, json)?;
    dynamic_from_value(metadata, spec, origin)
}

/// The lowercased plural, singular and aliases of a definition. Never the empty name (the
/// singular of the plural `s`): an empty type names no type.
fn short_names(definition: &ResourceDefinition) -> BTreeSet<String> {
    [definition.plural(), &definition.display_type()]
        .into_iter()
        .chain(definition.aliases.iter().map(String::as_str))
        .filter(|name| !name.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    // Whatever a terminal shows escaped too: a name is printed in every listing and error, and
    // one from a remote node's definitions could otherwise steer a terminal that shows it,
    // reorder the line or pass for another name.
    if let Some(c) = name
        .chars()
        .find(|&c| c.is_whitespace() || crate::text::shown_escaped(c) || c == '/')
    {
        return Err(format!(
            "{:?} contains {c:?}: names have no whitespace, control characters, \
             bidirectional controls, invisible spaces or '/'",
            clipped(name)
        ));
    }
    Ok(())
}

fn join(names: &BTreeSet<String>) -> String {
    names.iter().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    macro_rules! spec {
        ($name:ident, $type:literal, [$($alias:literal),*]) => {
            #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
            struct $name;
            impl ResourceSpec for $name {
                const TYPE: &'static str = $type;
                const DEFAULT_NAMESPACE: &'static str = "ns";
                fn definition() -> ResourceDefinition {
                    ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
                        .with_aliases(Vec::<String>::from([$($alias.to_string()),*]))
                }
            }
        };
    }

    spec!(MachineConfig, "MachineConfigs.config.cosi.dev", ["mc"]);
    spec!(MemberCount, "MemberCounts.cluster.cosi.dev", ["mc"]);
    spec!(MachineConfigOther, "MachineConfigs.other.cosi.dev", []);
    spec!(
        Shadow,
        "Shadows.test.cosi.dev",
        ["memberCounts.cluster.cosi.dev"]
    );
    spec!(Upper, "MACHINECONFIGS.CONFIG.COSI.DEV", []);
    spec!(Spaced, "Bad Types.test.cosi.dev", []);
    spec!(Escaped, "Bad\u{1b}]0;t\u{7}.test.cosi.dev", []);

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register::<MachineConfig>().unwrap();
        r.register::<MemberCount>().unwrap();
        r
    }

    #[test]
    fn ambiguous_alias_is_an_error_naming_every_candidate() {
        let err = registry().resolve("MC").unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"MC\": invalid resource type: ambiguous, it names \
             MachineConfigs.config.cosi.dev, MemberCounts.cluster.cosi.dev"
        );
    }

    #[test]
    fn same_plural_in_two_groups_is_ambiguous_but_full_names_resolve() {
        let mut r = registry();
        r.register::<MachineConfigOther>().unwrap();
        assert!(r.resolve("machineconfig").is_err());
        assert_eq!(
            r.resolve("machineconfigs.other.cosi.dev")
                .unwrap()
                .resource_type,
            MachineConfigOther::TYPE
        );
    }

    #[test]
    fn registering_a_type_twice_or_in_other_case_fails() {
        let mut r = registry();
        assert!(r.register::<MachineConfig>().is_err());
        let err = r.register::<Upper>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "MACHINECONFIGS.CONFIG.COSI.DEV: invalid resource type: \
             already registered as MachineConfigs.config.cosi.dev"
        );
    }

    #[test]
    fn alias_equal_to_another_full_name_fails_and_registers_nothing() {
        let mut r = registry();
        let err = r.register::<Shadow>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "Shadows.test.cosi.dev: invalid aliases: \"membercounts.cluster.cosi.dev\" is the \
             full name of MemberCounts.cluster.cosi.dev, so it could never resolve here"
        );
        assert!(r.get(Shadow::TYPE).is_none());
        assert!(r.resolve("shadows").is_err());
    }

    #[test]
    fn type_name_with_whitespace_is_rejected() {
        let err = Registry::new().register::<Spaced>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "Bad Types.test.cosi.dev: invalid resource type: \"Bad Types.test.cosi.dev\" \
             contains ' ': names have no whitespace, control characters, \
             bidirectional controls, invisible spaces or '/'"
        );
    }

    #[test]
    fn type_name_with_a_control_character_is_rejected() {
        let err = Registry::new().register::<Escaped>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "Bad\u{1b}]0;t\u{7}.test.cosi.dev: invalid resource type: \"Bad\\u{1b}]0;t\\u{7}.test.cosi.dev\" \
             contains '\\u{1b}': names have no whitespace, control characters, \
             bidirectional controls, invisible spaces or '/'"
        );
    }

    #[test]
    fn names_with_a_character_shown_escaped_are_rejected() {
        // A remote node's definitions: a right-to-left override makes the rest of a listing's
        // line read backwards, a zero-width space makes two types look the same.
        let err = Registry::new()
            .register_definition(ResourceDefinition::new("Ser\u{202e}vices.x.dev", "ns"))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Ser\u{202e}vices.x.dev: invalid resource type: \"Ser\\u{202e}vices.x.dev\" \
             contains '\\u{202e}': names have no whitespace, control characters, \
             bidirectional controls, invisible spaces or '/'"
        );
        let err = Registry::new()
            .register_definition(
                ResourceDefinition::new("Services.x.dev", "ns").with_aliases(["s\u{200b}vc"]),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Services.x.dev: invalid aliases[0]: \"s\\u{200b}vc\" contains '\\u{200b}': \
             names have no whitespace, control characters, bidirectional controls, invisible \
             spaces or '/'"
        );
    }

    #[test]
    fn a_definition_without_a_default_namespace_is_rejected() {
        // Its resources would be decoded into the empty namespace, which no store accepts and
        // a document may not name (`metadata.namespace: must not be empty`).
        let mut r = Registry::new();
        let err = r
            .register_definition(ResourceDefinition::new("Things.x.dev", ""))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Things.x.dev: invalid defaultNamespace: must not be empty"
        );
        assert!(r.resolve("things").is_err());
    }

    #[test]
    fn the_empty_name_resolves_to_no_type() {
        // The plural "s" has the empty singular.
        let mut r = Registry::new();
        r.register_definition(ResourceDefinition::new("s.x.dev", "ns"))
            .unwrap();
        assert_eq!(r.resolve("s").unwrap().resource_type, "s.x.dev");
        assert_eq!(
            r.resolve("").unwrap_err().to_string(),
            "\"\": invalid resource type: no registered type has this full name, plural, \
             singular or alias"
        );
    }

    #[test]
    fn unknown_type_in_decode_spec_is_an_error_naming_it() {
        let md = Metadata::new(crate::Pointer::new("ns", "Nopes.test.cosi.dev", "x"));
        let err = registry()
            .decode_spec(md, serde_json::Value::Null, Origin::Input)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "ns/Nopes.test.cosi.dev/x: invalid metadata.type: type \"Nopes.test.cosi.dev\" is not registered"
        );
    }

    #[test]
    fn an_integer_beyond_64_bits_in_a_definition_only_json_spec_is_refused_at_its_path() {
        let mut registry = Registry::new();
        registry
            .register_definition(ResourceDefinition::new("Blobs.test.cosi.dev", "ns"))
            .unwrap();
        let md = Metadata::new(crate::Pointer::new("ns", "Blobs.test.cosi.dev", "b"));
        let err = registry
            .decode_spec_json(md, br#"{"n": [18446744073709551616]}"#, Origin::ReadBack)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "ns/Blobs.test.cosi.dev/b: invalid spec.n[0]: integer 18446744073709551616 is outside \
             the 64-bit range a spec's integers are kept in at line 1 column 8"
        );
    }
}
