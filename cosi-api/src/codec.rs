//! Resources on the wire: [`Codec`] turns a stored resource into the protocol's `Resource`
//! message and back, through the [`Registry`] (types) and per-type [`SpecCodec`]s (the spec's
//! binary form).
//!
//! The message carries the spec twice: `proto_spec`, the type's binary encoding, and
//! `yaml_spec`, for generic clients. This project's types are serde types, so their binary
//! encoding is JSON ([`JsonSpec`], the default); a type that has a protobuf form (a peer's type,
//! say) registers its own [`SpecCodec`]. Decoding reads `proto_spec` with the type's codec and
//! falls back to `yaml_spec` when `proto_spec` is empty or is not in the codec's form (a generic
//! client may send only YAML). For the JSON default both directions skip the spec's dynamic
//! form (`serde_json::Value`): the spec is written from its typed value and read straight into
//! its registered type (decoding a small resource takes less than half the instructions it
//! took, encoding two thirds; benches/README.md, W8). A type with a codec of its own goes
//! through the dynamic form.
//!
//! Decoding is strict about identity and metadata — every malformed field is an
//! [`Error::InvalidArgument`] naming the resource and the field — and otherwise depends on who
//! reads ([`Reader`]). A server reads a caller's write, which is outside input: it refuses a
//! type its registry does not know (the interner must not grow from outside names) and a spec
//! field the type does not have (naming its path, `spec.kubelet.extraArgz`), so a typo is an
//! `InvalidArgument` rather than a silently dropped setting. A client reads what a server of
//! this project wrote, possibly a newer version: it keeps an unknown type as a
//! [`DynamicResource`] and skips spec fields its type does not have, so an older client keeps
//! working against a newer node (see `cosi_core::spec_decode` for where that line is drawn).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cosi_core::spec_decode::Origin;
use cosi_core::{
    AnyResource, DynamicResource, Error, Kind, Metadata, Phase, Pointer, Registry,
    ResourceDefinition, ResourceSpec, Result, SharedResource, Version,
};
use prost::bytes::Bytes;

use crate::proto::resource as pb;
use crate::resource_wire::{MetadataView, ResourceParts, ResourceView, SpecView, TimestampView};
use crate::yaml;

/// The wire text of version 0 (a resource that was never stored, a tombstone).
pub const UNDEFINED_VERSION: &str = "undefined";

/// How one type's spec is written into, and read from, `proto_spec`.
pub trait SpecCodec: Send + Sync + 'static {
    /// The spec (in dynamic form) as bytes.
    fn encode(&self, spec: &serde_json::Value) -> std::result::Result<Vec<u8>, String>;
    /// Bytes back into the dynamic form.
    fn decode(&self, bytes: &[u8]) -> std::result::Result<serde_json::Value, String>;
}

/// The default [`SpecCodec`]: the spec as JSON. An integer beyond 64 bits does not decode (as
/// in YAML): serde_json would read it as the nearest float.
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonSpec;

impl SpecCodec for JsonSpec {
    fn encode(&self, spec: &serde_json::Value) -> std::result::Result<Vec<u8>, String> {
        serde_json::to_vec(spec).map_err(|e| e.to_string())
    }

    fn decode(&self, bytes: &[u8]) -> std::result::Result<serde_json::Value, String> {
        cosi_core::json::check_integers(bytes).map_err(|wide| format!("{}: {wide}", wide.path))?;
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// Who decodes a message, which decides what it refuses (see the [module docs](self)).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reader {
    /// A server reading a caller's write: a type the registry does not know is refused, naming
    /// the type, and so is a spec field the type does not have, naming its path (unless the
    /// type [accepts them](cosi_core::ResourceSpec::UNKNOWN_FIELDS)).
    Server,
    /// A client reading a server's reply: a type the registry does not know is kept as a
    /// [`DynamicResource`], a spec field the type does not have is skipped.
    Client,
}

impl Reader {
    fn origin(self) -> Origin {
        match self {
            Reader::Server => Origin::Input,
            Reader::Client => Origin::ReadBack,
        }
    }
}

/// What [`Codec::decode_bytes`] makes of a tombstone: a resource that was never stored
/// (version 0) and has no spec, such as the last state of a destroyed resource in a watch event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tombstones {
    /// A [`DynamicResource`] with a null spec, whatever its type (a watch event's resource).
    Dynamic,
    /// Like any other resource (decoded into its type, refused as the [`Reader`] says).
    Typed,
}

/// Converts resources to and from the protocol's messages.
///
/// ```
/// use std::sync::Arc;
/// use cosi_api::codec::{Codec, Reader};
/// use cosi_core::{Registry, Resource, ResourceSpec};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// struct Hostname { name: String }
/// impl ResourceSpec for Hostname {
///     const TYPE: &'static str = "Hostnames.net.cosi.dev";
///     const DEFAULT_NAMESPACE: &'static str = "network";
/// }
/// let mut registry = Registry::new();
/// registry.register::<Hostname>().unwrap();
/// let codec = Codec::new(Arc::new(registry));
///
/// let wire = codec.encode(&Resource::new("h", Hostname { name: "node-1".into() }), true).unwrap();
/// assert_eq!(wire.spec.as_ref().unwrap().yaml_spec, "name: node-1\n");
/// let back = codec.decode(wire, Reader::Server).unwrap();
/// assert_eq!(cosi_core::downcast_ref::<Hostname>(&*back).unwrap().spec.name, "node-1");
/// ```
#[derive(Clone)]
pub struct Codec {
    registry: Arc<Registry>,
    specs: HashMap<String, Arc<dyn SpecCodec>>,
}

impl fmt::Debug for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Codec")
            .field("types", &self.registry.definitions().count())
            .field("spec_codecs", &self.specs.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Codec {
    /// A codec for the registry's types, every spec as JSON. The type of the definitions
    /// themselves (`ResourceDefinitions.meta.cosi.dev`, which `Registry::publish` writes so
    /// clients can discover the types with `get rd`) is always known.
    pub fn new(registry: Arc<Registry>) -> Self {
        let registry = if registry.contains(ResourceDefinition::TYPE) {
            registry
        } else {
            let mut extended = (*registry).clone();
            // Invariant: the type is not registered yet, and its definition is valid.
            extended
                .register::<ResourceDefinition>()
                .expect("the definition type registers in a registry without it");
            Arc::new(extended)
        };
        Codec {
            registry,
            specs: HashMap::new(),
        }
    }

    /// Uses `codec` for the spec of `resource_type`.
    pub fn with_spec_codec(
        mut self,
        resource_type: impl Into<String>,
        codec: impl SpecCodec,
    ) -> Self {
        self.specs.insert(resource_type.into(), Arc::new(codec));
        self
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    fn spec_codec(&self, resource_type: &str) -> &dyn SpecCodec {
        match self.specs.get(resource_type) {
            Some(codec) => &**codec,
            None => &JsonSpec,
        }
    }

    /// The kind named by outside input, after checking that the type is registered (so names
    /// from the network never reach the kind interner unchecked).
    pub fn kind(&self, namespace: &str, resource_type: &str) -> Result<Kind> {
        self.check_type(resource_type)?;
        if namespace.is_empty() {
            return Err(Error::invalid(
                resource_type,
                "namespace",
                "must not be empty",
            ));
        }
        Ok(Kind::new(namespace, resource_type))
    }

    /// The pointer named by outside input (type checked as in [`Codec::kind`]).
    pub fn pointer(&self, namespace: &str, resource_type: &str, id: &str) -> Result<Pointer> {
        let kind = self.kind(namespace, resource_type)?;
        if id.is_empty() {
            return Err(Error::invalid(kind.to_string(), "id", "must not be empty"));
        }
        Ok(kind.pointer(id))
    }

    /// Fails unless `resource_type` is registered under exactly this full name.
    pub fn check_type(&self, resource_type: &str) -> Result<()> {
        if resource_type.is_empty() {
            return Err(Error::invalid("request", "type", "must not be empty"));
        }
        if self.registry.get(resource_type).is_none() {
            return Err(Error::invalid(
                format!("{resource_type:?}"),
                "type",
                "not a registered resource type (full names only, e.g. Services.runtime.cosi.dev)",
            ));
        }
        Ok(())
    }

    /// A resource as a message; `yaml` adds the YAML spec (generic clients need it, this
    /// project's client does not).
    pub fn encode(&self, resource: &dyn AnyResource, yaml: bool) -> Result<pb::Resource> {
        let (proto_spec, yaml_spec) = self.encode_spec(resource, yaml)?;
        Ok(pb::Resource {
            metadata: Some(encode_metadata(resource.metadata())),
            spec: Some(pb::Spec {
                proto_spec,
                yaml_spec,
            }),
        })
    }

    /// A resource as the bytes of its `Resource` message: [`Codec::encode`], encoded. Written
    /// straight from the resource (the message's strings are borrowed, not copied).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cosi_api::codec::{Codec, Reader, Tombstones};
    /// use cosi_core::{Registry, Resource, ResourceSpec};
    /// use prost::Message;
    /// # use serde::{Deserialize, Serialize};
    /// #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    /// struct Hostname { name: String }
    /// impl ResourceSpec for Hostname {
    ///     const TYPE: &'static str = "Hostnames.net.cosi.dev";
    ///     const DEFAULT_NAMESPACE: &'static str = "network";
    /// }
    /// let mut registry = Registry::new();
    /// registry.register::<Hostname>().unwrap();
    /// let codec = Codec::new(Arc::new(registry));
    ///
    /// let hostname = Resource::new("h", Hostname { name: "node-1".into() });
    /// let bytes = codec.encode_bytes(&hostname, false).unwrap();
    /// assert_eq!(bytes, codec.encode(&hostname, false).unwrap().encode_to_vec());
    /// let back = codec.decode_bytes(&bytes, Reader::Client, Tombstones::Typed).unwrap();
    /// assert_eq!(cosi_core::downcast_ref::<Hostname>(&*back).unwrap().spec.name, "node-1");
    /// ```
    pub fn encode_bytes(&self, resource: &dyn AnyResource, yaml: bool) -> Result<Bytes> {
        let (proto_spec, yaml_spec) = self.encode_spec(resource, yaml)?;
        let md = resource.metadata();
        let version = encode_version(md.version());
        let phase = md.phase().to_string();
        let parts = ResourceParts {
            namespace: md.namespace(),
            resource_type: md.resource_type(),
            id: md.id(),
            version: &version,
            owner: md.owner().unwrap_or_default(),
            phase: &phase,
            created: timestamp_view(encode_time(md.created())),
            updated: timestamp_view(encode_time(md.updated())),
            finalizers: md.finalizers(),
            labels: md.labels(),
            annotations: md.annotations(),
            proto_spec: &proto_spec,
            yaml_spec: &yaml_spec,
        };
        Ok(Bytes::from(parts.encode()))
    }

    /// The spec's two wire forms: `proto_spec` and, if `yaml`, `yaml_spec`.
    fn encode_spec(&self, resource: &dyn AnyResource, yaml: bool) -> Result<(Vec<u8>, String)> {
        let md = resource.metadata();
        match self.specs.get(md.resource_type()) {
            Some(codec) => encode_through_value(&**codec, resource, yaml),
            None => {
                // Straight from the typed value: building the dynamic form first cost as much
                // again. The room is a typical small spec's, so writing rarely grows it.
                let mut json = Vec::with_capacity(128);
                resource.write_spec_json(&mut json)?;
                if json == b"null" {
                    // Tombstones and empty specs: nothing to encode (peers would try to decode
                    // "null").
                    Ok((Vec::new(), String::new()))
                } else {
                    let text = if yaml {
                        resource.spec_yaml()?
                    } else {
                        String::new()
                    };
                    Ok((json, text))
                }
            }
        }
    }

    /// A message back into a resource: a typed one for registered types. What is refused
    /// depends on the [`Reader`].
    pub fn decode(&self, resource: pb::Resource, reader: Reader) -> Result<SharedResource> {
        let metadata = resource
            .metadata
            .ok_or_else(|| Error::invalid("resource", "metadata", "missing"))?;
        let spec = resource.spec.unwrap_or_default();
        self.decode_view(
            &metadata_view(&metadata),
            SpecView {
                proto_spec: &spec.proto_spec,
                yaml_spec: &spec.yaml_spec,
            },
            reader,
        )
    }

    /// A resource from the bytes of its `Resource` message: as [`Codec::decode`] of the
    /// decoded message, and a tombstone (version 0, no spec) as `tombstones` says. The message
    /// is read in place: its strings are borrowed from `bytes` until the resource takes what
    /// it keeps. See [`Codec::encode_bytes`] for an example.
    pub fn decode_bytes(
        &self,
        bytes: &[u8],
        reader: Reader,
        tombstones: Tombstones,
    ) -> Result<SharedResource> {
        let view = ResourceView::parse(bytes)
            .map_err(|e| Error::invalid("resource", "message", e.to_string()))?;
        let metadata = view
            .metadata
            .ok_or_else(|| Error::invalid("resource", "metadata", "missing"))?;
        let spec = view.spec.unwrap_or_default();
        let tombstone = tombstones == Tombstones::Dynamic
            && decode_version(metadata.version) == Ok(Version::UNSET)
            && spec.proto_spec.is_empty()
            && spec.yaml_spec.is_empty();
        if tombstone {
            return Ok(Arc::new(DynamicResource {
                metadata: metadata_from_view(&metadata)?,
                spec: serde_json::Value::Null,
            }));
        }
        self.decode_view(&metadata, spec, reader)
    }

    fn decode_view(
        &self,
        metadata: &MetadataView<'_>,
        spec: SpecView<'_>,
        reader: Reader,
    ) -> Result<SharedResource> {
        let known = self.registry.get(metadata.resource_type).is_some();
        if !known && reader == Reader::Server {
            self.check_type(metadata.resource_type)?;
        }
        let md = metadata_from_view(metadata)?;
        let json_spec = !spec.proto_spec.is_empty() && !self.specs.contains_key(md.resource_type());
        if known && json_spec {
            // Straight from the JSON into the type. A generic client may have sent a
            // `proto_spec` of its own making beside the YAML: that YAML is the fallback.
            let decoded = if spec.yaml_spec.is_empty() {
                self.registry
                    .decode_spec_json(md, spec.proto_spec, reader.origin())
            } else {
                match self
                    .registry
                    .decode_spec_json(md.clone(), spec.proto_spec, reader.origin())
                {
                    Ok(resource) => Ok(resource),
                    Err(_) => {
                        let value = self.decode_yaml_spec(&md, spec.yaml_spec)?;
                        self.registry.decode_spec(md, value, reader.origin())
                    }
                }
            };
            return decoded;
        }
        let value = self.decode_spec(&md, spec)?;
        if known {
            self.registry.decode_spec(md, value, reader.origin())
        } else {
            Ok(Arc::new(DynamicResource {
                metadata: md,
                spec: value,
            }))
        }
    }

    fn decode_spec(&self, md: &Metadata, spec: SpecView<'_>) -> Result<serde_json::Value> {
        let subject = || md.pointer().to_string();
        if !spec.proto_spec.is_empty() {
            match self.spec_codec(md.resource_type()).decode(spec.proto_spec) {
                Ok(value) => return Ok(value),
                Err(e) if spec.yaml_spec.is_empty() => {
                    return Err(Error::invalid(subject(), "spec.proto_spec", e))
                }
                Err(_) => {}
            }
        }
        if spec.yaml_spec.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        self.decode_yaml_spec(md, spec.yaml_spec)
    }

    fn decode_yaml_spec(&self, md: &Metadata, text: &str) -> Result<serde_json::Value> {
        yaml::from_str(text)
            .map_err(|e| Error::invalid(md.pointer().to_string(), "spec.yaml_spec", e))
    }
}

/// The spec through its dynamic form, for a type with a [`SpecCodec`] of its own.
fn encode_through_value(
    codec: &dyn SpecCodec,
    resource: &dyn AnyResource,
    yaml: bool,
) -> Result<(Vec<u8>, String)> {
    let spec = resource.spec_value()?;
    if spec.is_null() {
        return Ok((Vec::new(), String::new()));
    }
    let subject = || resource.metadata().pointer().to_string();
    let bytes = codec
        .encode(&spec)
        .map_err(|e| Error::invalid(subject(), "spec", format!("cannot encode: {e}")))?;
    let text = if yaml {
        yaml::to_string(&spec)
            .map_err(|e| Error::invalid(subject(), "spec", format!("cannot write as YAML: {e}")))?
    } else {
        String::new()
    };
    Ok((bytes, text))
}

/// Metadata as a message.
pub fn encode_metadata(md: &Metadata) -> pb::Metadata {
    pb::Metadata {
        namespace: md.namespace().to_string(),
        r#type: md.resource_type().to_string(),
        id: md.id().to_string(),
        version: encode_version(md.version()),
        owner: md.owner().unwrap_or_default().to_string(),
        phase: md.phase().to_string(),
        created: Some(encode_time(md.created())),
        updated: Some(encode_time(md.updated())),
        finalizers: md.finalizers().iter().cloned().collect(),
        labels: md.labels().clone(),
        annotations: md.annotations().clone(),
    }
}

/// A message back into metadata; every malformed field is an error naming it.
pub fn decode_metadata(md: pb::Metadata) -> Result<Metadata> {
    metadata_from_view(&metadata_view(&md))
}

/// The generated message's fields, borrowed.
fn metadata_view(md: &pb::Metadata) -> MetadataView<'_> {
    let timestamp = |t: &Option<prost_types::Timestamp>| t.map(timestamp_view);
    MetadataView {
        namespace: &md.namespace,
        resource_type: &md.r#type,
        id: &md.id,
        version: &md.version,
        owner: &md.owner,
        phase: &md.phase,
        created: timestamp(&md.created),
        updated: timestamp(&md.updated),
        finalizers: md.finalizers.iter().map(String::as_str).collect(),
        labels: entries(&md.labels),
        annotations: entries(&md.annotations),
    }
}

fn entries(
    map: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<&str, &str> {
    map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn timestamp_view(t: prost_types::Timestamp) -> TimestampView {
    TimestampView {
        seconds: t.seconds,
        nanos: t.nanos,
    }
}

fn metadata_from_view(md: &MetadataView<'_>) -> Result<Metadata> {
    // Built only for an error: formatting it for every message was a tenth of a watch's cost.
    let invalid = |field: &str, message: String| {
        let subject = format!("{}/{}/{}", md.namespace, md.resource_type, md.id);
        Error::invalid(subject, field, message)
    };
    for (field, value) in [
        ("metadata.namespace", md.namespace),
        ("metadata.type", md.resource_type),
        ("metadata.id", md.id),
    ] {
        if value.is_empty() {
            return Err(invalid(field, "must not be empty".into()));
        }
    }
    let time = |t: Option<TimestampView>| {
        let t = t.map(|t| prost_types::Timestamp {
            seconds: t.seconds,
            nanos: t.nanos,
        });
        decode_time(t.as_ref())
    };
    let version = decode_version(md.version).map_err(|m| invalid("metadata.version", m))?;
    let phase = decode_phase(md.phase).map_err(|m| invalid("metadata.phase", m))?;
    let created = time(md.created).map_err(|m| invalid("metadata.created", m))?;
    let updated = time(md.updated).map_err(|m| invalid("metadata.updated", m))?;
    let mut out = Metadata::new(Pointer::new(md.namespace, md.resource_type, md.id));
    out.set_version(version);
    out.set_phase(phase);
    out.set_owner(Some(md.owner).filter(|o| !o.is_empty()).map(Arc::from));
    out.set_timestamps(created, updated);
    // Metadata keeps times from 1677 to 2262 (nanoseconds in an `i64`). A later one would be
    // read as the last it keeps, silently: refused. An earlier one reads as the first it keeps
    // — Go's zero time (year 1), which Go clients send for a time never set, among them.
    for (field, sent, kept) in [
        ("metadata.created", created, out.created()),
        ("metadata.updated", updated, out.updated()),
    ] {
        if sent > kept {
            return Err(invalid(
                field,
                format!(
                    "{} is after {}, the last time metadata keeps",
                    describe_time(sent),
                    humantime::format_rfc3339_nanos(kept)
                ),
            ));
        }
    }
    if !md.finalizers.is_empty() {
        out.finalizers_mut()
            .extend(md.finalizers.iter().map(|f| f.to_string()));
    }
    // The view has folded the entries as the generated message does (a later entry wins).
    if !md.labels.is_empty() {
        let labels = out.labels_mut();
        for (key, value) in &md.labels {
            labels.insert(key.to_string(), value.to_string());
        }
    }
    if !md.annotations.is_empty() {
        let annotations = out.annotations_mut();
        for (key, value) in &md.annotations {
            annotations.insert(key.to_string(), value.to_string());
        }
    }
    Ok(out)
}

/// A version as wire text.
pub fn encode_version(version: Version) -> String {
    if version == Version::UNSET {
        UNDEFINED_VERSION.to_string()
    } else {
        version.to_string()
    }
}

/// Wire text back into a version: decimal, `undefined` or empty (both 0).
pub fn decode_version(text: &str) -> std::result::Result<Version, String> {
    if text.is_empty() || text == UNDEFINED_VERSION {
        return Ok(Version::UNSET);
    }
    text.parse::<u64>()
        .map(Version::new)
        .map_err(|_| format!("{text:?} is not a decimal version or {UNDEFINED_VERSION:?}"))
}

/// A phase back from wire text (`running`, `tearingDown`; empty is running).
pub fn decode_phase(text: &str) -> std::result::Result<Phase, String> {
    match text {
        "" | "running" => Ok(Phase::Running),
        "tearingDown" => Ok(Phase::TearingDown),
        other => Err(format!("{other:?} is not a phase (running, tearingDown)")),
    }
}

/// A time as a protobuf timestamp.
pub fn encode_time(time: SystemTime) -> prost_types::Timestamp {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => prost_types::Timestamp {
            seconds: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            nanos: after.subsec_nanos() as i32,
        },
        Err(before) => {
            let before = before.duration();
            let mut seconds = -i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            let mut nanos = before.subsec_nanos() as i32;
            if nanos > 0 {
                seconds -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            prost_types::Timestamp { seconds, nanos }
        }
    }
}

/// A time after the epoch, for an error: RFC 3339 up to year 9999, else seconds.
fn describe_time(time: SystemTime) -> String {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) if after.as_secs() < 253_402_300_800 => {
            humantime::format_rfc3339_nanos(time).to_string()
        }
        Ok(after) => format!("{} seconds after the epoch", after.as_secs()),
        Err(before) => format!("{} seconds before the epoch", before.duration().as_secs()),
    }
}

/// A protobuf timestamp back into a time (absent: the epoch).
pub fn decode_time(
    timestamp: Option<&prost_types::Timestamp>,
) -> std::result::Result<SystemTime, String> {
    let Some(ts) = timestamp else {
        return Ok(SystemTime::UNIX_EPOCH);
    };
    if !(0..1_000_000_000).contains(&ts.nanos) {
        return Err(format!("nanos {} out of range 0..1e9", ts.nanos));
    }
    let time = if ts.seconds >= 0 {
        SystemTime::UNIX_EPOCH
            .checked_add(Duration::new(ts.seconds.unsigned_abs(), ts.nanos as u32))
    } else {
        SystemTime::UNIX_EPOCH
            .checked_sub(Duration::from_secs(ts.seconds.unsigned_abs()))
            .and_then(|t| t.checked_add(Duration::from_nanos(ts.nanos as u64)))
    };
    time.ok_or_else(|| format!("{} seconds is out of range", ts.seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{Resource, ResourceSpec};
    use serde::{Deserialize, Serialize};

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Port {
        port: u16,
    }
    impl ResourceSpec for Port {
        const TYPE: &'static str = "Ports.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }

    fn codec() -> Codec {
        let mut registry = Registry::new();
        registry.register::<Port>().unwrap();
        Codec::new(Arc::new(registry))
    }

    #[test]
    fn a_time_metadata_cannot_keep_is_an_error_naming_its_field() {
        let mut r = Resource::new("http", Port { port: 80 });
        r.metadata.set_version(Version::new(1));
        let mut wire = codec().encode(&r, false).unwrap();
        let metadata = wire.metadata.as_mut().unwrap();
        // 3000-01-01T00:00:00Z, after 2262.
        metadata.updated = Some(prost_types::Timestamp {
            seconds: 32_503_680_000,
            nanos: 0,
        });
        let err = codec().decode(wire, Reader::Server).unwrap_err();
        assert_eq!(
            err.to_string(),
            "test/Ports.test.cosi.dev/http: invalid metadata.updated: \
             3000-01-01T00:00:00.000000000Z is after 2262-04-11T23:47:16.854775807Z, the last \
             time metadata keeps"
        );
    }

    #[test]
    fn go_s_zero_time_reads_as_the_first_time_metadata_keeps() {
        let mut r = Resource::new("http", Port { port: 80 });
        r.metadata.set_version(Version::new(1));
        let mut wire = codec().encode(&r, false).unwrap();
        // 0001-01-01T00:00:00Z, what a Go client sends for a time never set.
        wire.metadata.as_mut().unwrap().created = Some(prost_types::Timestamp {
            seconds: -62_135_596_800,
            nanos: 0,
        });
        let decoded = codec().decode(wire, Reader::Server).unwrap();
        let first = SystemTime::UNIX_EPOCH - Duration::from_nanos(i64::MAX as u64 + 1);
        assert_eq!(decoded.metadata().created(), first);
    }

    #[test]
    fn metadata_round_trips_every_field() {
        let mut r = Resource::new("http", Port { port: 80 });
        r.metadata.set_version(Version::new(7));
        r.metadata.set_owner(Some("PortController".into()));
        r.metadata.set_phase(Phase::TearingDown);
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        r.metadata.set_timestamps(t, t + Duration::from_secs(1));
        r.metadata.finalizers_mut().insert("f".into());
        r.metadata.labels_mut().insert("a".into(), "b".into());
        r.metadata.annotations_mut().insert("c".into(), "d".into());
        let codec = codec();
        let back = codec
            .decode(codec.encode(&r, true).unwrap(), Reader::Server)
            .unwrap();
        assert_eq!(back.metadata(), &r.metadata);
        assert_eq!(back.metadata().created(), t);
        assert_eq!(
            cosi_core::downcast_ref::<Port>(&*back).unwrap().spec,
            r.spec
        );
    }

    #[test]
    fn spec_decodes_from_yaml_when_proto_spec_is_absent_or_foreign() {
        let codec = codec();
        let mut wire = codec
            .encode(&Resource::new("h", Port { port: 1 }), true)
            .unwrap();
        let spec = wire.spec.as_mut().unwrap();
        spec.proto_spec = b"\x08\x01".to_vec();
        spec.yaml_spec = "port: 8080\n".into();
        let back = codec.decode(wire, Reader::Server).unwrap();
        assert_eq!(
            cosi_core::downcast_ref::<Port>(&*back).unwrap().spec.port,
            8080
        );
    }

    #[test]
    fn unregistered_type_is_refused_naming_it_or_kept_dynamic() {
        let codec = codec();
        let r = DynamicResource {
            metadata: Metadata::new(Pointer::new("test", "Nopes.test.cosi.dev", "x")),
            spec: serde_json::json!({"a": 1}),
        };
        let wire = codec.encode(&r, true).unwrap();
        let err = codec.decode(wire.clone(), Reader::Server).unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"Nopes.test.cosi.dev\": invalid type: not a registered resource type (full names \
             only, e.g. Services.runtime.cosi.dev)"
        );
        let kept = codec.decode(wire, Reader::Client).unwrap();
        assert_eq!(kept.spec_value().unwrap(), serde_json::json!({"a": 1}));
    }

    #[test]
    fn an_integer_beyond_64_bits_in_a_json_spec_is_refused_naming_its_path() {
        let codec = codec();
        let r = DynamicResource {
            metadata: Metadata::new(Pointer::new("test", "Nopes.test.cosi.dev", "x")),
            spec: serde_json::json!(null),
        };
        let mut wire = codec.encode(&r, false).unwrap();
        wire.spec = Some(pb::Spec {
            proto_spec: br#"{"n": 18446744073709551616}"#.to_vec(),
            yaml_spec: String::new(),
        });
        let err = codec.decode(wire, Reader::Client).unwrap_err();
        assert_eq!(
            err.to_string(),
            "test/Nopes.test.cosi.dev/x: invalid spec.proto_spec: n: integer \
             18446744073709551616 is outside the 64-bit range a spec's integers are kept in at \
             line 1 column 7"
        );
    }

    #[test]
    fn malformed_metadata_fields_are_named() {
        let codec = codec();
        let mut wire = codec
            .encode(&Resource::new("h", Port { port: 1 }), false)
            .unwrap();
        wire.metadata.as_mut().unwrap().version = "v2".into();
        let err = codec.decode(wire.clone(), Reader::Server).unwrap_err();
        assert_eq!(
            err.to_string(),
            "test/Ports.test.cosi.dev/h: invalid metadata.version: \"v2\" is not a decimal \
             version or \"undefined\""
        );
        wire.metadata.as_mut().unwrap().version = "1".into();
        wire.metadata.as_mut().unwrap().phase = "gone".into();
        let err = codec.decode(wire.clone(), Reader::Server).unwrap_err();
        assert!(
            err.to_string().ends_with(
                "invalid metadata.phase: \"gone\" is not a phase (running, tearingDown)"
            ),
            "{err}"
        );
        wire.metadata.as_mut().unwrap().phase = "running".into();
        wire.spec.as_mut().unwrap().proto_spec = b"{\"port\": 70000}".to_vec();
        let err = codec.decode(wire, Reader::Server).unwrap_err();
        assert_eq!(
            err.to_string(),
            "test/Ports.test.cosi.dev/h: invalid spec.port: invalid value: integer `70000`, expected u16"
        );
    }

    #[test]
    fn version_zero_travels_as_undefined() {
        assert_eq!(encode_version(Version::UNSET), "undefined");
        assert_eq!(decode_version("undefined"), Ok(Version::UNSET));
        assert_eq!(decode_version("12"), Ok(Version::new(12)));
    }

    #[test]
    fn times_before_the_epoch_round_trip() {
        let t = SystemTime::UNIX_EPOCH - Duration::new(5, 250);
        let ts = encode_time(t);
        assert_eq!((ts.seconds, ts.nanos), (-6, 999_999_750));
        assert_eq!(decode_time(Some(&ts)), Ok(t));
        let bad = prost_types::Timestamp {
            seconds: 0,
            nanos: -1,
        };
        assert!(decode_time(Some(&bad)).is_err());
    }
}
