//! The dynamic form of resources: every resource as a `{metadata, spec}` document in YAML or JSON,
//! and the way back into typed resources through a [`Registry`].
//!
//! YAML goes through [`crate::yaml`], the crate's one YAML module: text is held to its
//! [`Limits`] before anything of it is decoded.
//!
//! # The document
//!
//! ```yaml
//! metadata:
//!   namespace: runtime
//!   type: Services.runtime.cosi.dev
//!   id: etcd
//!   version: 3
//!   owner: ServiceController          # absent for user-owned resources
//!   phase: running                    # or tearingDown
//!   created: 2026-01-02T03:04:05.123456789Z
//!   updated: 2026-01-02T03:04:06.000000000Z
//!   labels: {role: control-plane}     # labels, annotations and finalizers are
//!   annotations: {note: hand-made}    # left out when empty
//!   finalizers: [VolumeController]
//! spec:
//!   image: etcd:3.5
//! ```
//!
//! Timestamps are RFC 3339 in UTC with nanoseconds, so they round-trip exactly; times before
//! 1970 or after 9999 cannot be written and give an error, and a document's time after
//! 2262-04-11T23:47:16.854775807Z, the last [`Metadata`] keeps, is an error too, not read as
//! another time. Spec fields are written in key order
//! (the spec passes through [`serde_json::Value`]). A float spec field holding NaN or an infinity
//! cannot be written (JSON has no such numbers, and a `null` would not decode back): writing it
//! is an error naming the field, as storing it is (see [`spec_encode`](crate::spec_encode)),
//! and `.nan` or `.inf` in a document is refused on the way in. An integer beyond 64 bits is
//! refused in either form, naming its field, not read as the nearest float (see [`json`]); a
//! number written as a float stays a float, however large.
//!
//! # Decoding
//!
//! Decoding is strict: unknown fields in the document or its metadata are rejected, and a
//! malformed document gives [`Error::InvalidArgument`] whose field is the path of the offending
//! value (`metadata.version`, `spec.ports[1]`). The documents are taken as outside input
//! ([`Origin::Input`]): a spec field the registered type does not have is an error naming its
//! path (`spec.kubelet.extraArgz`), unless the type [accepts
//! them](crate::ResourceSpec::UNKNOWN_FIELDS); a decoder reading back what this project wrote
//! (an export, say) can [skip them](Decoder::origin) instead. `type` may be any name the registry
//! [resolves](Registry::resolve) (`mc`); the decoded resource carries the full type name. When
//! absent, `namespace` is the type's default namespace, `version` 0, `phase` running and the
//! timestamps the Unix epoch; `id` and `type` are required. A type the registry does not know is
//! an error, unless the [`Decoder`] is asked to keep it as a [`DynamicResource`]. Decoding a
//! stream is all or nothing: the first bad document fails the call.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::json;
use crate::spec_decode::{spec_field, Origin};
use crate::text::clipped;
use crate::yaml::{self, Limits};
use crate::{
    Annotations, AnyResource, DynamicResource, Error, Finalizers, Labels, Metadata, Phase, Pointer,
    Registry, Result, SharedResource, Version,
};

/// A resource's `{metadata, spec}` document, ready to serialize into any serde format with its
/// keys in the order [`to_yaml`] writes them. Embed it in a struct of your own with
/// `#[serde(flatten)]` to print keys around it (a CLI's `node:` and `event:`).
///
/// ```
/// use cosi_core::{dynamic, DynamicResource, Metadata, Pointer};
/// #[derive(serde::Serialize)]
/// struct Printed<'r> {
///     node: &'r str,
///     #[serde(flatten)]
///     document: dynamic::Document<'r>,
/// }
/// let r = DynamicResource {
///     metadata: Metadata::new(Pointer::new("ns", "Notes.test.cosi.dev", "n1")),
///     spec: serde_json::json!({"text": "hi"}),
/// };
/// let printed = Printed { node: "node-1", document: dynamic::document(&r).unwrap() };
/// let json = serde_json::to_string(&printed).unwrap();
/// assert!(json.starts_with(r#"{"node":"node-1","metadata":{"namespace":"ns","type":"#), "{json}");
/// ```
#[derive(Serialize)]
pub struct Document<'r> {
    metadata: MetadataOut<'r>,
    spec: serde_json::Value,
}

#[derive(Serialize)]
struct MetadataOut<'r> {
    namespace: &'r str,
    #[serde(rename = "type")]
    resource_type: &'r str,
    id: &'r str,
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'r str>,
    phase: Phase,
    created: String,
    updated: String,
    #[serde(skip_serializing_if = "Labels::is_empty")]
    labels: &'r Labels,
    #[serde(skip_serializing_if = "Annotations::is_empty")]
    annotations: &'r Annotations,
    #[serde(skip_serializing_if = "Finalizers::is_empty")]
    finalizers: &'r Finalizers,
}

/// A string map in which a repeated key is an error rather than a silent overwrite.
pub(super) fn unique_keys<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<std::collections::BTreeMap<String, String>, D::Error> {
    struct UniqueKeys;
    impl<'de> serde::de::Visitor<'de> for UniqueKeys {
        type Value = std::collections::BTreeMap<String, String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of strings to strings")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = Self::Value::new();
            while let Some(key) = map.next_key::<String>()? {
                if entries.contains_key(&key) {
                    return Err(serde::de::Error::custom(format!(
                        "duplicate key {:?}",
                        clipped(&key)
                    )));
                }
                let value = map.next_value()?;
                entries.insert(key, value);
            }
            Ok(entries)
        }
    }
    deserializer.deserialize_map(UniqueKeys)
}

/// A spec in dynamic form, read strictly: a map with a repeated key, a float that JSON cannot
/// hold (NaN, infinities) or an integer beyond 64 bits is an error, saying so, instead of a
/// silently dropped or nulled value.
#[derive(Default)]
pub(super) struct SpecValue(serde_json::Value);

impl<'de> Deserialize<'de> for SpecValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SpecVisitor).map(SpecValue)
    }
}

struct SpecVisitor;

impl<'de> serde::de::Visitor<'de> for SpecVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a null, boolean, number, string, list or map with string keys")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    // YAML integers beyond 64 bits arrive here; a `serde_json::Value` cannot hold them.
    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Self::Value, E> {
        i64::try_from(v)
            .map(Into::into)
            .map_err(|_| beyond_64_bits(v))
    }
    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Self::Value, E> {
        u64::try_from(v)
            .map(Into::into)
            .map_err(|_| beyond_64_bits(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        serde_json::Number::from_f64(v)
            .map(serde_json::Value::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a number JSON can hold")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(SpecVisitor)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(SpecValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if entries.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate key {:?}",
                    clipped(&key)
                )));
            }
            let SpecValue(value) = map.next_value()?;
            entries.insert(key, value);
        }
        Ok(serde_json::Value::Object(entries))
    }
}

fn beyond_64_bits<E: serde::de::Error>(integer: impl std::fmt::Display) -> E {
    E::custom(format!(
        "integer {integer} is outside the 64-bit range a spec's integers are kept in"
    ))
}

/// The input side of the document. Its own module so that serde's messages say
/// "expected struct Document" and "expected struct Metadata".
mod input {
    use super::{unique_keys, SpecValue};
    use crate::{Annotations, Finalizers, Labels, Phase};
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Document {
        pub(super) metadata: Metadata,
        #[serde(default)]
        pub(super) spec: SpecValue,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Metadata {
        #[serde(default)]
        pub(super) namespace: Option<String>,
        #[serde(rename = "type")]
        pub(super) resource_type: String,
        pub(super) id: String,
        #[serde(default)]
        pub(super) version: u64,
        #[serde(default)]
        pub(super) owner: Option<String>,
        #[serde(default)]
        pub(super) phase: Phase,
        #[serde(default)]
        pub(super) created: Option<String>,
        #[serde(default)]
        pub(super) updated: Option<String>,
        #[serde(default, deserialize_with = "unique_keys")]
        pub(super) labels: Labels,
        #[serde(default, deserialize_with = "unique_keys")]
        pub(super) annotations: Annotations,
        #[serde(default)]
        pub(super) finalizers: Finalizers,
    }
}

/// Seconds from the epoch to the first instant after year 9999: the end of what RFC 3339 writes.
const RFC3339_END_SECS: u64 = 253_402_300_800;

fn timestamp(resource: &dyn AnyResource, field: &str, time: SystemTime) -> Result<String> {
    let writable = time
        .duration_since(UNIX_EPOCH)
        .is_ok_and(|since| since < Duration::from_secs(RFC3339_END_SECS));
    if !writable {
        return Err(Error::invalid(
            resource.metadata().pointer().to_string(),
            field,
            format!("{time:?} is outside the years 1970 to 9999 that RFC 3339 can write"),
        ));
    }
    Ok(humantime::format_rfc3339_nanos(time).to_string())
}

/// The resource's [`Document`]; errors when a timestamp cannot be written (before 1970, after
/// 9999) or the spec cannot be put in dynamic form.
pub fn document(resource: &dyn AnyResource) -> Result<Document<'_>> {
    let md = resource.metadata();
    Ok(Document {
        metadata: MetadataOut {
            namespace: md.namespace(),
            resource_type: md.resource_type(),
            id: md.id(),
            version: md.version().get(),
            owner: md.owner(),
            phase: md.phase(),
            created: timestamp(resource, "metadata.created", md.created())?,
            updated: timestamp(resource, "metadata.updated", md.updated())?,
            labels: md.labels(),
            annotations: md.annotations(),
            finalizers: md.finalizers(),
        },
        spec: resource.spec_value()?,
    })
}

fn write_error(resource: &dyn AnyResource, format: &str, err: impl std::fmt::Display) -> Error {
    Error::invalid(
        resource.metadata().pointer().to_string(),
        "document",
        format!("cannot be written as {format}: {err}"),
    )
}

/// The resource as a `{metadata, spec}` JSON value (the form [`to_yaml`] and [`to_json`] write).
///
/// ```
/// use cosi_core::{dynamic, DynamicResource, Metadata, Pointer};
/// let r = DynamicResource {
///     metadata: Metadata::new(Pointer::new("ns", "Notes.test.cosi.dev", "n1")),
///     spec: serde_json::json!({"text": "hi"}),
/// };
/// let value = dynamic::to_value(&r).unwrap();
/// assert_eq!(value["metadata"]["type"], "Notes.test.cosi.dev");
/// assert_eq!(value["spec"]["text"], "hi");
/// ```
pub fn to_value(resource: &dyn AnyResource) -> Result<serde_json::Value> {
    serde_json::to_value(document(resource)?).map_err(|e| write_error(resource, "JSON", e))
}

/// The resource as one YAML document (without a leading `---`).
///
/// ```
/// use cosi_core::{dynamic, Resource, ResourceSpec};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// struct Service { image: String }
/// impl ResourceSpec for Service {
///     const TYPE: &'static str = "Services.runtime.cosi.dev";
///     const DEFAULT_NAMESPACE: &'static str = "runtime";
/// }
/// let mut r = Resource::new("etcd", Service { image: "etcd:3.5".into() });
/// r.metadata.labels_mut().insert("role".into(), "control-plane".into());
/// assert_eq!(dynamic::to_yaml(&r).unwrap(), "\
/// metadata:
///   namespace: runtime
///   type: Services.runtime.cosi.dev
///   id: etcd
///   version: 0
///   phase: running
///   created: 1970-01-01T00:00:00.000000000Z
///   updated: 1970-01-01T00:00:00.000000000Z
///   labels:
///     role: control-plane
/// spec:
///   image: etcd:3.5
/// ");
/// ```
pub fn to_yaml(resource: &dyn AnyResource) -> Result<String> {
    yaml::to_string(&document(resource)?).map_err(|e| write_error(resource, "YAML", e))
}

/// The resource as pretty-printed JSON.
///
/// ```
/// use cosi_core::{dynamic, DynamicResource, Metadata, Pointer};
/// let r = DynamicResource {
///     metadata: Metadata::new(Pointer::new("ns", "Notes.test.cosi.dev", "n1")),
///     spec: serde_json::json!(null),
/// };
/// let json = dynamic::to_json(&r).unwrap();
/// assert!(json.starts_with("{\n  \"metadata\": {\n    \"namespace\": \"ns\","));
/// ```
pub fn to_json(resource: &dyn AnyResource) -> Result<String> {
    serde_json::to_string_pretty(&document(resource)?).map_err(|e| write_error(resource, "JSON", e))
}

/// What to do with a document whose type the registry does not know.
///
/// ```
/// use cosi_core::dynamic::{Decoder, UnknownTypes};
/// let registry = cosi_core::Registry::new();
/// let yaml = "metadata: {namespace: ns, type: Widgets.test.cosi.dev, id: w}";
/// assert!(Decoder::new(&registry).decode_yaml(yaml).is_err());
/// let kept = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic).decode_yaml(yaml).unwrap();
/// assert_eq!(kept[0].metadata().resource_type(), "Widgets.test.cosi.dev");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum UnknownTypes {
    /// Fail, naming the type (the default).
    #[default]
    Reject,
    /// Keep the document as a [`DynamicResource`]; its namespace must then be given.
    KeepDynamic,
}

/// Decodes `{metadata, spec}` documents into resources, with the types of a [`Registry`].
/// [`Registry::decode_yaml`] and [`Registry::decode_json`] are the shorthand for the default
/// decoder.
///
/// ```
/// use cosi_core::dynamic::{Decoder, UnknownTypes};
/// use cosi_core::{DynamicResource, Registry};
/// let registry = Registry::new();
/// let yaml = "metadata: {namespace: ns, type: Notes.test.cosi.dev, id: n1}\nspec: {text: hi}\n";
///
/// let err = registry.decode_yaml(yaml).unwrap_err();
/// assert_eq!(err.to_string(), "YAML document 1: invalid metadata.type: \
///     \"Notes.test.cosi.dev\": no registered type has this full name, plural, singular or alias");
///
/// let decoded = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic).decode_yaml(yaml).unwrap();
/// let note = decoded[0].as_any().downcast_ref::<DynamicResource>().unwrap();
/// assert_eq!(note.spec["text"], "hi");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Decoder<'r> {
    registry: &'r Registry,
    unknown_types: UnknownTypes,
    limits: Limits,
    origin: Origin,
}

impl<'r> Decoder<'r> {
    /// A decoder that rejects unknown types.
    ///
    /// ```
    /// let registry = cosi_core::Registry::new();
    /// let decoder = cosi_core::dynamic::Decoder::new(&registry);
    /// assert!(decoder.decode_yaml("").unwrap().is_empty());
    /// ```
    pub fn new(registry: &'r Registry) -> Self {
        Decoder {
            registry,
            unknown_types: UnknownTypes::Reject,
            limits: Limits::default(),
            origin: Origin::Input,
        }
    }

    /// Sets who wrote the documents ([`Origin::Input`] unless set): outside input refuses spec
    /// fields the registered type does not have; [`Origin::ReadBack`], for documents this
    /// project wrote (possibly a newer version of it), skips them.
    ///
    /// ```
    /// use cosi_core::dynamic::Decoder;
    /// use cosi_core::spec_decode::Origin;
    /// use cosi_core::{Registry, ResourceSpec};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Port { port: u16 }
    /// impl ResourceSpec for Port {
    ///     const TYPE: &'static str = "Ports.net.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "network";
    /// }
    /// let registry = Registry::new().with::<Port>().unwrap();
    /// let yaml = "metadata: {type: port, id: http}\nspec: {port: 80, weight: 2}\n";
    /// let err = Decoder::new(&registry).decode_yaml(yaml).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "network/Ports.net.cosi.dev/http: invalid spec.weight: \
    ///      unknown field: Ports.net.cosi.dev has no such field (check its spelling)"
    /// );
    /// assert!(Decoder::new(&registry).origin(Origin::ReadBack).decode_yaml(yaml).is_ok());
    /// ```
    pub fn origin(mut self, origin: Origin) -> Self {
        self.origin = origin;
        self
    }

    /// Sets what happens to documents of types the registry does not know (see
    /// [`UnknownTypes`] for an example).
    pub fn unknown_types(mut self, unknown_types: UnknownTypes) -> Self {
        self.unknown_types = unknown_types;
        self
    }

    /// Sets the limits YAML text is held to ([`Limits::default`] unless set): text over a
    /// limit is refused before anything of it is decoded. JSON is held to the same nesting,
    /// so that what one form accepts the other can carry.
    ///
    /// ```
    /// use cosi_core::dynamic::Decoder;
    /// use cosi_core::yaml::Limits;
    /// let registry = cosi_core::Registry::new();
    /// let tiny = Decoder::new(&registry).limits(Limits { max_bytes: 8, ..Limits::default() });
    /// let err = tiny.decode_yaml("metadata: {}").unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "YAML document 1: invalid document: the YAML text is 12 bytes, more than the 8 accepted"
    /// );
    /// ```
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Decodes a YAML stream: one or more documents separated by `---`; empty documents are
    /// skipped. Errors name the document (`YAML document 2`, counting from 1) or, once its
    /// identity is known, the resource. Text over the decoder's [limits](Self::limits) and
    /// text that is not YAML are reported by line and column; a value that does not fit by its
    /// path.
    ///
    /// ```
    /// use cosi_core::dynamic::{Decoder, UnknownTypes};
    /// let registry = cosi_core::Registry::new();
    /// let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    /// let yaml = "metadata: {namespace: a, type: T.x.dev, id: '1'}\n---\nmetadata: {namespace: a, type: T.x.dev, id: '2'}\n";
    /// let ids: Vec<_> = decoder.decode_yaml(yaml).unwrap().iter().map(|r| r.metadata().id().to_string()).collect();
    /// assert_eq!(ids, ["1", "2"]);
    ///
    /// let err = decoder.decode_yaml("metadata: {namespace: a, type: T.x.dev, id: '1', version: x}").unwrap_err();
    /// assert!(err.to_string().starts_with("YAML document 1: invalid metadata.version: "), "{err}");
    /// ```
    pub fn decode_yaml(&self, text: &str) -> Result<Vec<SharedResource>> {
        let mut resources = Vec::new();
        yaml::read_documents(text, &self.limits, |index, read| {
            let subject = format!("YAML document {}", index + 1);
            let parsed: Option<input::Document> = read.map_err(|err| read_error(&subject, err))?;
            if let Some(parsed) = parsed {
                resources.push(self.build(&subject, parsed)?);
            }
            Ok::<_, Error>(())
        })?;
        Ok(resources)
    }

    /// Decodes JSON: one or more document objects one after another (JSON Lines works). Errors
    /// name the document (`JSON document 2`, counting from 1) or, once its identity is known,
    /// the resource.
    ///
    /// ```
    /// use cosi_core::dynamic::{Decoder, UnknownTypes};
    /// let registry = cosi_core::Registry::new();
    /// let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    /// let json = r#"{"metadata": {"namespace": "a", "type": "T.x.dev", "id": "1"}, "spec": [1, 2]}"#;
    /// let decoded = decoder.decode_json(json).unwrap();
    /// assert_eq!(decoded[0].spec_value().unwrap(), serde_json::json!([1, 2]));
    /// ```
    pub fn decode_json(&self, text: &str) -> Result<Vec<SharedResource>> {
        check_json_limits(text, &self.limits)?;
        // First pass: the syntax of the whole stream, and how many values it holds.
        let mut count = 0usize;
        let stream = serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>();
        for value in stream {
            value.map_err(|e| {
                Error::invalid(
                    format!("JSON document {}", count + 1),
                    format!("line {} column {}", e.line(), e.column()),
                    e.to_string(),
                )
            })?;
            count += 1;
        }
        // Second pass on one deserializer, so positions in messages count from the start.
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let mut resources = Vec::with_capacity(count);
        for i in 1..=count {
            let subject = format!("JSON document {i}");
            let parsed: input::Document = serde_path_to_error::deserialize(&mut deserializer)
                .map_err(|err| {
                    let path = err.path().to_string();
                    let field = if path == "." { "document".into() } else { path };
                    Error::invalid(subject.as_str(), field, err.into_inner().to_string())
                })?;
            resources.push(self.build(&subject, parsed)?);
        }
        Ok(resources)
    }

    fn build(&self, subject: &str, document: input::Document) -> Result<SharedResource> {
        let input::Document {
            metadata: md,
            spec: SpecValue(spec),
        } = document;
        let invalid = |field: &str, message: String| Error::invalid(subject, field, message);

        let (resource_type, default_namespace) = match self.registry.resolve(&md.resource_type) {
            Ok(definition) => (
                definition.resource_type.as_str(),
                Some(definition.default_namespace.as_str()),
            ),
            Err(_)
                if self.unknown_types == UnknownTypes::KeepDynamic
                    && !self.registry.knows_name(&md.resource_type)
                    && !md.resource_type.is_empty() =>
            {
                (md.resource_type.as_str(), None)
            }
            Err(Error::InvalidArgument { message, .. }) => {
                return Err(invalid(
                    "metadata.type",
                    format!("{:?}: {message}", clipped(&md.resource_type)),
                ))
            }
            Err(other) => return Err(other),
        };
        let namespace = match (md.namespace.as_deref(), default_namespace) {
            (Some(""), _) => return Err(invalid("metadata.namespace", "must not be empty".into())),
            (Some(namespace), _) | (None, Some(namespace)) => namespace,
            (None, None) => {
                return Err(invalid(
                    "metadata.namespace",
                    format!(
                        "required: {:?} is not a registered type, so it has no default namespace",
                        clipped(resource_type)
                    ),
                ))
            }
        };
        if md.id.is_empty() {
            return Err(invalid("metadata.id", "must not be empty".into()));
        }

        let mut metadata = Metadata::new(Pointer::new(namespace, resource_type, md.id));
        metadata.set_version(Version::new(md.version));
        metadata.set_owner(md.owner.map(std::sync::Arc::from));
        metadata.set_phase(md.phase);
        let created = parse_timestamp(subject, "metadata.created", md.created.as_deref())?;
        let updated = parse_timestamp(subject, "metadata.updated", md.updated.as_deref())?;
        metadata.set_timestamps(created, updated);
        // Metadata keeps times to 2262 (see `Metadata`), RFC 3339 writes them to 9999: a later
        // one would read back as another time, silently.
        let kept = [
            ("metadata.created", &md.created, created, metadata.created()),
            ("metadata.updated", &md.updated, updated, metadata.updated()),
        ];
        for (field, text, time, kept) in kept {
            if kept != time {
                return Err(invalid(
                    field,
                    format!(
                        "{:?} is after {}, the last time metadata keeps",
                        clipped(text.as_deref().unwrap_or_default()),
                        humantime::format_rfc3339_nanos(kept)
                    ),
                ));
            }
        }
        *metadata.labels_mut() = md.labels;
        *metadata.annotations_mut() = md.annotations;
        *metadata.finalizers_mut() = md.finalizers;

        if default_namespace.is_none() {
            return Ok(std::sync::Arc::new(DynamicResource { metadata, spec }));
        }
        self.registry
            .decode_spec(metadata, spec, self.origin)
            .map_err(|err| match err {
                // Already names the resource and the spec path.
                Error::InvalidArgument { .. } => err,
                other => invalid(&spec_field("."), other.to_string()),
            })
    }
}

/// A YAML reading error as an invalid argument of `subject`: a limit or a document that is not
/// YAML at all is reported at its line and column; a value that does not fit at its path
/// (or its position, where the path says nothing).
fn read_error(subject: &str, err: yaml::ReadError) -> Error {
    let at = |location: Option<yaml::Location>| match location {
        Some(at) => format!("line {} column {}", at.line, at.column),
        None => "document".to_string(),
    };
    match err {
        yaml::ReadError::Limit(limit) => Error::invalid(subject, at(limit.location), limit.message),
        yaml::ReadError::Unreadable {
            location, message, ..
        } => Error::invalid(subject, at(location), message),
        yaml::ReadError::Value {
            path,
            location,
            message,
            ..
        } => {
            // A path of `.` or one ending in `?` names nothing: the position says more.
            let field = if path == "." || path.ends_with('?') {
                at(location)
            } else {
                path
            };
            Error::invalid(subject, field, message)
        }
    }
}

fn parse_timestamp(subject: &str, field: &str, text: Option<&str>) -> Result<SystemTime> {
    let Some(text) = text else {
        return Ok(UNIX_EPOCH);
    };
    humantime::parse_rfc3339(text).map_err(|e| {
        Error::invalid(
            subject,
            field,
            format!(
                "{:?} is not an RFC 3339 UTC timestamp like 2026-01-02T03:04:05.123456789Z: {e}",
                clipped(text)
            ),
        )
    })
}

impl Registry {
    /// Decodes a YAML stream with the default [`Decoder`] (unknown types are errors).
    ///
    /// ```
    /// use cosi_core::{dynamic, Registry, Resource, ResourceSpec, same_content};
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Port { port: u16 }
    /// impl ResourceSpec for Port {
    ///     const TYPE: &'static str = "Ports.net.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "network";
    /// }
    /// let mut registry = Registry::new();
    /// registry.register::<Port>().unwrap();
    ///
    /// let original = Resource::new("http", Port { port: 80 });
    /// let yaml = dynamic::to_yaml(&original).unwrap();
    /// let decoded = registry.decode_yaml(&yaml).unwrap();
    /// assert!(same_content(&*decoded[0], &original));
    ///
    /// let err = registry.decode_yaml("metadata: {type: ports, id: x, version: -1}").unwrap_err();
    /// assert!(err.to_string().starts_with("YAML document 1: invalid metadata.version: invalid type: integer `-1`, expected u64"));
    /// let err = registry.decode_yaml("metadata: {type: port, id: x}\nspec: {port: high}").unwrap_err();
    /// assert!(err.to_string().starts_with("network/Ports.net.cosi.dev/x: invalid spec.port: invalid type: string \"high\""));
    /// ```
    pub fn decode_yaml(&self, text: &str) -> Result<Vec<SharedResource>> {
        Decoder::new(self).decode_yaml(text)
    }

    /// Decodes JSON documents with the default [`Decoder`] (unknown types are errors).
    ///
    /// ```
    /// use cosi_core::Registry;
    /// let err = Registry::new().decode_json(r#"{"metadata": {"type": "x", "id": "a", "colour": 1}}"#).unwrap_err();
    /// assert!(err.to_string().starts_with("JSON document 1: invalid metadata.colour: unknown field `colour`"), "{err}");
    /// ```
    pub fn decode_json(&self, text: &str) -> Result<Vec<SharedResource>> {
        Decoder::new(self).decode_json(text)
    }
}

/// Holds JSON text to the YAML nesting limit (how deep its lists and objects nest) and its
/// integers to 64 bits, both found by [`json::scan`] before anything is parsed (see the
/// [`json`] module for why).
fn check_json_limits(text: &str, limits: &Limits) -> Result<()> {
    match json::scan(text.as_bytes(), limits.max_depth) {
        None => Ok(()),
        Some(json::Finding::TooDeep {
            document,
            line,
            column,
        }) => Err(Error::invalid(
            format!("JSON document {document}"),
            format!("line {line} column {column}"),
            format!("more than {} levels of nesting", limits.max_depth),
        )),
        Some(json::Finding::WideInteger(document, wide)) => {
            let field = match wide.path.as_str() {
                "." => "document".to_string(),
                path => path.to_string(),
            };
            Err(Error::invalid(
                format!("JSON document {document}"),
                field,
                wide.to_string(),
            ))
        }
    }
}
