//! The stored form of one resource in etcd, and the decoders that turn it back into typed values.
//!
//! A record is one format byte ([`FORMAT_V1`]) followed by the JSON document
//! `{"metadata": {...}, "spec": ...}`. The format byte lets a later version change the encoding
//! while still reading old records. Timestamps are nanoseconds since the Unix epoch.
//!
//! This module knows nothing of etcd keys or transactions: it only converts bytes and resources.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cosi_core::{
    Annotations, AnyResource, DynamicResource, Error, Finalizers, Labels, Metadata, Phase, Pointer,
    Resource, ResourceSpec, Result, SharedResource, Version,
};
use serde::{Deserialize, Serialize};

/// The first byte of every record written by this version.
pub const FORMAT_V1: u8 = 1;

#[derive(Serialize, Deserialize)]
struct RecordV1 {
    metadata: MetadataV1,
    spec: serde_json::Value,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataV1 {
    namespace: String,
    #[serde(rename = "type")]
    resource_type: String,
    id: String,
    version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    phase: Phase,
    #[serde(default, skip_serializing_if = "Finalizers::is_empty")]
    finalizers: Finalizers,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    labels: Labels,
    #[serde(default, skip_serializing_if = "Annotations::is_empty")]
    annotations: Annotations,
    created: u64,
    updated: u64,
}

fn nanos(t: SystemTime) -> u64 {
    // Times before the epoch cannot come from the store's own clock; clamp rather than fail.
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// Encodes a resource as a record.
pub fn encode(resource: &dyn AnyResource) -> Result<Vec<u8>> {
    let md = resource.metadata();
    let record = RecordV1 {
        metadata: MetadataV1 {
            namespace: md.namespace().to_string(),
            resource_type: md.resource_type().to_string(),
            id: md.id().to_string(),
            version: md.version().get(),
            owner: md.owner().map(str::to_string),
            phase: md.phase(),
            finalizers: md.finalizers().clone(),
            labels: md.labels().clone(),
            annotations: md.annotations().clone(),
            created: nanos(md.created()),
            updated: nanos(md.updated()),
        },
        spec: resource.spec_value()?,
    };
    let mut bytes = vec![FORMAT_V1];
    serde_json::to_writer(&mut bytes, &record)
        .map_err(|e| Error::invalid(md.pointer().to_string(), "spec", e.to_string()))?;
    Ok(bytes)
}

type DecodeFn = fn(Metadata, serde_json::Value) -> Result<SharedResource>;

fn decode_typed<S: ResourceSpec>(
    metadata: Metadata,
    spec: serde_json::Value,
) -> Result<SharedResource> {
    match serde_json::from_value::<S>(spec) {
        Ok(spec) => Ok(Resource::with_metadata(metadata, spec).into_shared()),
        Err(e) => Err(Error::invalid(
            metadata.pointer().to_string(),
            "spec",
            format!("stored spec does not decode as {}: {e}", S::TYPE),
        )),
    }
}

/// The types this process can decode into Rust values; every other type loads as a
/// [`DynamicResource`].
#[derive(Default)]
pub struct Decoders {
    by_type: RwLock<HashMap<String, DecodeFn>>,
}

impl Decoders {
    /// Registers `S` (idempotent).
    pub fn register<S: ResourceSpec>(&self) {
        // A poisoned lock only means a panic elsewhere while inserting; the map is still valid.
        self.by_type
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(S::TYPE.to_string(), decode_typed::<S>);
    }

    fn find(&self, resource_type: &str) -> Option<DecodeFn> {
        self.by_type
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(resource_type)
            .copied()
    }

    /// Decodes the record stored for `pointer`. A record that is not valid, or that names
    /// another resource than its key, is an error naming `pointer`; nothing is guessed.
    pub fn decode(&self, pointer: &Pointer, bytes: &[u8]) -> Result<SharedResource> {
        let corrupt = |message: String| Error::Backend {
            subject: pointer.to_string(),
            message: format!("stored record is not valid: {message}"),
            retryable: false,
            source: None,
        };
        let (format, body) = bytes
            .split_first()
            .ok_or_else(|| corrupt("empty value".into()))?;
        if *format != FORMAT_V1 {
            return Err(corrupt(format!(
                "unknown record format {format} (this version reads format {FORMAT_V1})"
            )));
        }
        let record: RecordV1 =
            serde_json::from_slice(body).map_err(|e| corrupt(format!("bad JSON: {e}")))?;
        let md = record.metadata;
        if md.namespace != pointer.namespace()
            || md.resource_type != pointer.resource_type()
            || md.id != pointer.id()
        {
            return Err(corrupt(format!(
                "record names {}/{}/{}",
                md.namespace, md.resource_type, md.id
            )));
        }
        let mut metadata = Metadata::new(pointer.clone());
        metadata.set_version(Version::new(md.version));
        metadata.set_owner(md.owner);
        metadata.set_phase(md.phase);
        *metadata.finalizers_mut() = md.finalizers;
        *metadata.labels_mut() = md.labels;
        *metadata.annotations_mut() = md.annotations;
        metadata.set_timestamps(time(md.created), time(md.updated));
        match self.find(pointer.resource_type()) {
            Some(decode) => decode(metadata, record.spec).map_err(|e| corrupt(e.to_string())),
            None => Ok(Arc::new(DynamicResource {
                metadata,
                spec: record.spec,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Spec {
        value: i64,
    }

    impl ResourceSpec for Spec {
        const TYPE: &'static str = "Specs.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "ns";
    }

    fn stored() -> Resource<Spec> {
        let mut r = Resource::new("a", Spec { value: 7 });
        r.metadata.set_version(Version::new(3));
        r.metadata.set_owner(Some("ctrl".into()));
        r.metadata.set_phase(Phase::TearingDown);
        r.metadata.labels_mut().insert("app".into(), "web".into());
        r.metadata.finalizers_mut().insert("f".into());
        r.metadata
            .annotations_mut()
            .insert("note".into(), "x".into());
        r.metadata
            .set_timestamps(time(1_000_000_123), time(2_000_000_456));
        r
    }

    #[test]
    fn registered_type_round_trips_to_an_equal_typed_resource() {
        let decoders = Decoders::default();
        decoders.register::<Spec>();
        let r = stored();
        let bytes = encode(&r).unwrap();
        assert_eq!(bytes[0], FORMAT_V1);
        let back = decoders.decode(r.metadata.pointer(), &bytes).unwrap();
        assert_eq!(cosi_core::downcast_ref::<Spec>(&*back).unwrap(), &r);
    }

    #[test]
    fn unregistered_type_loads_as_dynamic_resource() {
        let r = stored();
        let back = Decoders::default()
            .decode(r.metadata.pointer(), &encode(&r).unwrap())
            .unwrap();
        let dynamic = back.as_any().downcast_ref::<DynamicResource>().unwrap();
        assert_eq!(dynamic.metadata, r.metadata);
        assert_eq!(dynamic.spec, serde_json::json!({"value": 7}));
    }

    #[test]
    fn garbage_bytes_are_a_non_retryable_error_naming_the_resource() {
        let pointer = Pointer::new("ns", "Specs.test.cosi.dev", "a");
        for bytes in [&b""[..], b"\x01not json", b"\x09{}"] {
            let err = Decoders::default().decode(&pointer, bytes).unwrap_err();
            assert!(!err.is_retryable());
            assert!(
                err.to_string().starts_with(
                    "ns/Specs.test.cosi.dev/a: backend failure: stored record is not valid"
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn record_under_another_key_is_rejected() {
        let r = stored();
        let other = Pointer::new("ns", "Specs.test.cosi.dev", "b");
        let err = Decoders::default()
            .decode(&other, &encode(&r).unwrap())
            .unwrap_err();
        assert!(err
            .to_string()
            .contains("record names ns/Specs.test.cosi.dev/a"));
    }

    #[test]
    fn spec_that_does_not_fit_the_registered_type_is_an_error() {
        let decoders = Decoders::default();
        decoders.register::<Spec>();
        let r = DynamicResource {
            metadata: stored().metadata,
            spec: serde_json::json!({"value": "seven"}),
        };
        let err = decoders
            .decode(r.metadata.pointer(), &encode(&r).unwrap())
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("does not decode as Specs.test.cosi.dev"),
            "{err}"
        );
    }
}
