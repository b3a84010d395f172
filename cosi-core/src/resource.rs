//! Resources: a [`Metadata`] plus a spec. Typed resources are [`Resource<S>`]; the store holds them
//! type-erased as [`SharedResource`] (`Arc<dyn AnyResource>`), and hands out `Arc` clones.
//!
//! Stored values are immutable. A writer that wants to change one clones it, changes the copy and
//! writes that ([`Resource::clone`] is the copy-on-write step). Downcasting back to a typed
//! resource is checked and returns an error on a mismatch.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::spec_encode::{self, Exact};
use crate::{Error, Kind, Metadata, ResourceDefinition, Result};

/// A spec type with its static definition. Implement it for every resource type.
///
/// ```
/// use cosi_core::{Resource, ResourceSpec};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// struct Hostname { name: String }
///
/// impl ResourceSpec for Hostname {
///     const TYPE: &'static str = "Hostnames.net.cosi.dev";
///     const DEFAULT_NAMESPACE: &'static str = "network";
/// }
///
/// let r = Resource::new("hostname", Hostname { name: "node-1".into() });
/// assert_eq!(r.metadata.namespace(), "network");
/// assert_eq!(r.spec.name, "node-1");
/// ```
pub trait ResourceSpec:
    Clone + PartialEq + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Full type name, `PluralCamel.group.domain`.
    const TYPE: &'static str;
    /// Namespace used by [`Resource::new`].
    const DEFAULT_NAMESPACE: &'static str;
    /// Whether a spec from outside input (a user's document, a remote caller's write) may
    /// carry fields this type does not have. The default, [`UnknownFields::Reject`], makes
    /// such a field an error naming its path; [`UnknownFields::Accept`] skips it, for types
    /// that deliberately take extra fields. What a store or server of this project wrote is
    /// always read tolerantly (see [`spec_decode`](crate::spec_decode)).
    ///
    /// ```
    /// use cosi_core::{Metadata, Registry, ResourceSpec, UnknownFields};
    /// use cosi_core::spec_decode::Origin;
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Plugin { name: String }
    /// impl ResourceSpec for Plugin {
    ///     const TYPE: &'static str = "Plugins.ext.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "ext";
    ///     // Plugin settings are passed through to plugins this node does not know.
    ///     const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Accept;
    /// }
    /// let registry = Registry::new().with::<Plugin>().unwrap();
    /// let md = Metadata::new(Plugin::kind().pointer("p"));
    /// let spec = serde_json::json!({"name": "p", "colour": "red"});
    /// assert!(registry.decode_spec(md, spec, Origin::Input).is_ok());
    /// ```
    const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Reject;

    /// The full definition. Override to add aliases, print columns or sensitivity.
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
    }

    /// The kind in the default namespace.
    fn kind() -> Kind {
        Kind::new(Self::DEFAULT_NAMESPACE, Self::TYPE)
    }

    /// The kind in `namespace`.
    fn kind_in(namespace: &str) -> Kind {
        Kind::new(namespace, Self::TYPE)
    }
}

/// What a type does with a spec field from outside input that it does not have
/// ([`ResourceSpec::UNKNOWN_FIELDS`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum UnknownFields {
    /// An error naming the field's path (the default).
    #[default]
    Reject,
    /// Skipped: the type deliberately takes fields it does not declare.
    Accept,
}

/// A typed resource.
#[derive(Clone, PartialEq, Debug)]
pub struct Resource<S> {
    /// Identity and bookkeeping.
    pub metadata: Metadata,
    /// The typed payload.
    pub spec: S,
}

impl<S: ResourceSpec> Resource<S> {
    /// A resource in the spec's default namespace.
    pub fn new(id: impl Into<Arc<str>>, spec: S) -> Self {
        Self::with_metadata(Metadata::new(S::kind().pointer(id)), spec)
    }

    /// A resource in `namespace`.
    pub fn new_in(namespace: &str, id: impl Into<Arc<str>>, spec: S) -> Self {
        Self::with_metadata(Metadata::new(S::kind_in(namespace).pointer(id)), spec)
    }

    /// A resource from existing metadata (e.g. a copy being modified).
    pub fn with_metadata(metadata: Metadata, spec: S) -> Self {
        Resource { metadata, spec }
    }

    /// Moves the resource into shared, type-erased form.
    pub fn into_shared(self) -> SharedResource {
        Arc::new(self)
    }
}

/// A type-erased resource: what the store keeps, lists and sends in events.
pub trait AnyResource: Debug + Send + Sync + 'static {
    /// The metadata.
    fn metadata(&self) -> &Metadata;
    /// Mutable metadata (backends stamp versions and timestamps through it).
    fn metadata_mut(&mut self) -> &mut Metadata;
    /// The spec as `Any`, for checked downcasts.
    fn spec_any(&self) -> &dyn Any;
    /// The spec in dynamic form. A spec holding what that form cannot carry exactly (NaN, an
    /// infinity, an integer beyond 64 bits) is an error naming the field, not a `null`; see
    /// [`spec_encode`](crate::spec_encode).
    fn spec_value(&self) -> Result<serde_json::Value>;
    /// Refuses a spec its stored forms cannot carry exactly — a float that is NaN or infinite,
    /// an integer beyond 64 bits — with an [`Error::InvalidArgument`] naming the resource and
    /// the field ([`spec_encode`](crate::spec_encode) says why). Every store runs it, or an
    /// encoder that does the same, before it changes anything.
    ///
    /// ```
    /// use cosi_core::{AnyResource, Resource, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Load { ratio: f64 }
    /// impl ResourceSpec for Load {
    ///     const TYPE: &'static str = "Loads.test.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "test";
    /// }
    /// assert!(Resource::new("l", Load { ratio: 0.5 }).check_spec().is_ok());
    /// let err = Resource::new("l", Load { ratio: f64::NAN }).check_spec().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "test/Loads.test.cosi.dev/l: invalid spec.ratio: NaN cannot be stored; a spec's \
    ///      floats must be finite (JSON, the form stores and the remote API keep specs in, has \
    ///      no NaN or infinity)"
    /// );
    /// ```
    fn check_spec(&self) -> Result<()> {
        self.spec_value().map(drop)
    }
    /// Appends the spec as JSON to `out`: the JSON of [`spec_value`](Self::spec_value), written
    /// straight from the typed value where there is one (the wire form of a spec, without the
    /// cost of building the dynamic form first). Map keys come in the spec's own order.
    ///
    /// ```
    /// use cosi_core::{AnyResource, Resource, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Port { port: u16, name: String }
    /// impl ResourceSpec for Port {
    ///     const TYPE: &'static str = "Ports.net.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "network";
    /// }
    /// let mut out = Vec::new();
    /// Resource::new("http", Port { port: 80, name: "http".into() }).write_spec_json(&mut out).unwrap();
    /// assert_eq!(out, br#"{"port":80,"name":"http"}"#);
    /// ```
    fn write_spec_json(&self, out: &mut Vec<u8>) -> Result<()> {
        let value = self.spec_value()?;
        serde_json::to_writer(out, &value).map_err(|e| spec_write_error(self.metadata(), "JSON", e))
    }
    /// The spec as one YAML document (no leading `---`), written straight from the typed value
    /// where there is one. Map keys come in the spec's own order.
    ///
    /// ```
    /// use cosi_core::{AnyResource, Resource, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// # struct Port { port: u16, name: String }
    /// # impl ResourceSpec for Port {
    /// #     const TYPE: &'static str = "Ports.net.cosi.dev";
    /// #     const DEFAULT_NAMESPACE: &'static str = "network";
    /// # }
    /// let r = Resource::new("http", Port { port: 80, name: "http".into() });
    /// assert_eq!(r.spec_yaml().unwrap(), "port: 80\nname: http\n");
    /// ```
    fn spec_yaml(&self) -> Result<String> {
        let value = self.spec_value()?;
        crate::yaml::to_string(&value).map_err(|e| spec_write_error(self.metadata(), "YAML", e))
    }
    /// Whether both specs are equal (same type and equal values, or equal dynamic forms).
    fn spec_eq(&self, other: &dyn AnyResource) -> bool;
    /// A deep copy.
    fn clone_boxed(&self) -> Box<dyn AnyResource>;
    /// Self as `Any`, for downcasting the whole resource.
    fn as_any(&self) -> &dyn Any;
    /// The shared value as `Any`, for downcasting without copying.
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// A stored resource, shared between the store, readers and watchers.
pub type SharedResource = Arc<dyn AnyResource>;

impl<S: ResourceSpec> AnyResource for Resource<S> {
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }
    fn spec_any(&self) -> &dyn Any {
        &self.spec
    }
    fn spec_value(&self) -> Result<serde_json::Value> {
        serde_json::to_value(Exact(&self.spec)).map_err(|e| {
            spec_encode::refused_or(&self.metadata, &self.spec, || {
                Error::invalid(self.metadata.pointer().to_string(), "spec", e.to_string())
            })
        })
    }
    fn check_spec(&self) -> Result<()> {
        spec_encode::check_resource(&self.metadata, &self.spec)
    }
    fn write_spec_json(&self, out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        serde_json::to_writer(&mut *out, &Exact(&self.spec)).map_err(|e| {
            // What was written before the refusal is no spec.
            out.truncate(start);
            spec_encode::refused_or(&self.metadata, &self.spec, || {
                spec_write_error(&self.metadata, "JSON", e)
            })
        })
    }
    fn spec_yaml(&self) -> Result<String> {
        crate::yaml::to_string(&Exact(&self.spec)).map_err(|e| {
            spec_encode::refused_or(&self.metadata, &self.spec, || {
                spec_write_error(&self.metadata, "YAML", e)
            })
        })
    }
    fn spec_eq(&self, other: &dyn AnyResource) -> bool {
        match other.spec_any().downcast_ref::<S>() {
            Some(spec) => *spec == self.spec,
            None => matches!((self.spec_value(), other.spec_value()), (Ok(a), Ok(b)) if a == b),
        }
    }
    fn clone_boxed(&self) -> Box<dyn AnyResource> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// A resource whose spec is held in dynamic form: a type not known to this process (kept by
/// durable backends and decoded by tools that work without the Rust type).
#[derive(Clone, PartialEq, Debug)]
pub struct DynamicResource {
    /// Identity and bookkeeping.
    pub metadata: Metadata,
    /// The spec as a JSON value.
    pub spec: serde_json::Value,
}

impl AnyResource for DynamicResource {
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }
    fn spec_any(&self) -> &dyn Any {
        &self.spec
    }
    fn spec_value(&self) -> Result<serde_json::Value> {
        Ok(self.spec.clone())
    }
    fn check_spec(&self) -> Result<()> {
        // A `serde_json::Value` holds only finite floats and 64-bit integers.
        Ok(())
    }
    fn write_spec_json(&self, out: &mut Vec<u8>) -> Result<()> {
        serde_json::to_writer(out, &self.spec)
            .map_err(|e| spec_write_error(&self.metadata, "JSON", e))
    }
    fn spec_yaml(&self) -> Result<String> {
        crate::yaml::to_string(&self.spec).map_err(|e| spec_write_error(&self.metadata, "YAML", e))
    }
    fn spec_eq(&self, other: &dyn AnyResource) -> bool {
        match other.spec_any().downcast_ref::<serde_json::Value>() {
            Some(spec) => *spec == self.spec,
            None => matches!(other.spec_value(), Ok(v) if v == self.spec),
        }
    }
    fn clone_boxed(&self) -> Box<dyn AnyResource> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn into_any_arc(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

fn spec_write_error(metadata: &Metadata, format: &str, err: impl std::fmt::Display) -> Error {
    Error::invalid(
        metadata.pointer().to_string(),
        "spec",
        format!("cannot be written as {format}: {err}"),
    )
}

/// Whether two resources are equal for the no-op rule: metadata ignoring timestamps, and spec.
pub fn same_content(a: &dyn AnyResource, b: &dyn AnyResource) -> bool {
    a.metadata().eq_ignoring_timestamps(b.metadata()) && a.spec_eq(b)
}

/// Gives mutable access to a shared resource, copying it only when others hold it too.
/// Backends use it to stamp versions on values handed to them.
pub fn make_mut(resource: &mut SharedResource) -> &mut dyn AnyResource {
    if Arc::get_mut(resource).is_none() {
        *resource = Arc::from(resource.clone_boxed());
    }
    // Invariant: `resource` was just replaced by a fresh Arc if it was shared, so it is unique.
    Arc::get_mut(resource).expect("a freshly allocated Arc is unique")
}

fn mismatch<S: ResourceSpec>(resource: &dyn AnyResource) -> Error {
    let pointer = resource.metadata().pointer();
    if resource.as_any().is::<DynamicResource>() && pointer.resource_type() == S::TYPE {
        // A store that keeps data (disk, etcd, a remote one) could not decode it as `S`.
        return Error::invalid(
            pointer.to_string(),
            "spec",
            format!(
                "loaded as a dynamic resource: register {} in the Registry the store was \
                 opened with (or check that its stored spec still decodes as {})",
                S::TYPE,
                std::any::type_name::<S>()
            ),
        );
    }
    Error::invalid(
        pointer.to_string(),
        "spec",
        format!(
            "resource does not hold a {} spec ({})",
            S::TYPE,
            std::any::type_name::<S>()
        ),
    )
}

/// Checked downcast of a borrowed shared resource.
///
/// ```
/// use cosi_core::{downcast_ref, Resource, ResourceSpec};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// # struct A(u32);
/// # impl ResourceSpec for A { const TYPE: &'static str = "As.test.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "t"; }
/// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// # struct B(u32);
/// # impl ResourceSpec for B { const TYPE: &'static str = "Bs.test.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "t"; }
/// let shared = Resource::new("x", A(7)).into_shared();
/// assert_eq!(downcast_ref::<A>(&*shared).unwrap().spec, A(7));
/// assert!(downcast_ref::<B>(&*shared).is_err());
/// ```
pub fn downcast_ref<S: ResourceSpec>(resource: &dyn AnyResource) -> Result<&Resource<S>> {
    resource
        .as_any()
        .downcast_ref::<Resource<S>>()
        .ok_or_else(|| mismatch::<S>(resource))
}

/// Checked downcast of a shared resource without copying it.
pub fn downcast<S: ResourceSpec>(resource: SharedResource) -> Result<Arc<Resource<S>>> {
    if !resource.as_any().is::<Resource<S>>() {
        return Err(mismatch::<S>(&*resource));
    }
    // Invariant: the value is a `Resource<S>` (checked above), so the downcast succeeds.
    Ok(resource
        .into_any_arc()
        .downcast::<Resource<S>>()
        .unwrap_or_else(|_| unreachable!("checked to be a Resource<S>")))
}
