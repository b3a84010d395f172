//! The record format: how one resource, and one entry of the change log, is laid out as bytes.
//!
//! A record is a one-byte encoding tag followed by a JSON object holding the metadata the store
//! owns (version, owner, phase, finalizers, labels, annotations, timestamps) and the spec in its
//! dynamic (JSON) form. Identity (namespace, type, id) lives in the table key, not in the value.
//! JSON keeps every record readable without the Rust type, which is what lets a store keep
//! resources of types it does not know, and lets a newer spec decode an older record through
//! serde defaults. This module owns the bytes only: it knows nothing of tables or transactions.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cosi_core::{
    Annotations, AnyResource, Error, Finalizers, Labels, Metadata, Phase, Pointer, Result,
    SharedResource, Version,
};
use serde::{Deserialize, Serialize};

use super::types::KnownTypes;

/// Tag of the JSON record encoding, the first byte of every value. A reader that finds another
/// tag refuses the record instead of guessing.
pub(crate) const RECORD_JSON_V1: u8 = 1;

/// The body of a record: everything but the identity.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct RecordBody {
    version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    #[serde(default)]
    phase: Phase,
    #[serde(default, skip_serializing_if = "Finalizers::is_empty")]
    finalizers: Finalizers,
    #[serde(default, skip_serializing_if = "Labels::is_empty")]
    labels: Labels,
    #[serde(default, skip_serializing_if = "Annotations::is_empty")]
    annotations: Annotations,
    /// Nanoseconds since the Unix epoch.
    created: u64,
    /// Nanoseconds since the Unix epoch.
    updated: u64,
    spec: serde_json::Value,
}

fn to_nanos(time: SystemTime) -> u64 {
    // Times before the epoch cannot be set by the store; clamp rather than fail.
    let nanos = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

fn from_nanos(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

impl RecordBody {
    /// The body of a stored resource.
    pub(crate) fn of(resource: &dyn AnyResource) -> Result<Self> {
        let md = resource.metadata();
        Ok(RecordBody {
            version: md.version().get(),
            owner: md.owner().map(str::to_string),
            phase: md.phase(),
            finalizers: md.finalizers().clone(),
            labels: md.labels().clone(),
            annotations: md.annotations().clone(),
            created: to_nanos(md.created()),
            updated: to_nanos(md.updated()),
            spec: resource.spec_value()?,
        })
    }

    /// Rebuilds the resource at `pointer`, typed when its type is known.
    pub(crate) fn into_resource(self, pointer: Pointer, types: &KnownTypes) -> SharedResource {
        let mut md = Metadata::new(pointer);
        md.set_version(Version::new(self.version));
        md.set_owner(self.owner);
        md.set_phase(self.phase);
        *md.finalizers_mut() = self.finalizers;
        *md.labels_mut() = self.labels;
        *md.annotations_mut() = self.annotations;
        md.set_timestamps(from_nanos(self.created), from_nanos(self.updated));
        types.decode(md, self.spec)
    }
}

/// Encodes a resource as record bytes.
pub(crate) fn encode_resource(resource: &dyn AnyResource) -> Result<Vec<u8>> {
    encode(&RecordBody::of(resource)?, resource.metadata().pointer())
}

/// Decodes record bytes into the resource at `pointer`.
pub(crate) fn decode_resource(
    bytes: &[u8],
    pointer: Pointer,
    types: &KnownTypes,
) -> Result<SharedResource> {
    let body: RecordBody = decode(bytes, &pointer.to_string())?;
    Ok(body.into_resource(pointer, types))
}

/// What a change-log entry records.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ChangeOp {
    /// The resource appeared.
    Created,
    /// The resource changed; `old` holds the previous state.
    Updated,
    /// The resource went away; `resource` holds its last state.
    Destroyed,
}

/// One entry of the durable change log: enough to replay the event a watcher would have seen.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct ChangeEntry {
    pub(crate) op: ChangeOp,
    pub(crate) id: String,
    pub(crate) resource: RecordBody,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) old: Option<RecordBody>,
}

/// Encodes a change-log entry.
pub(crate) fn encode_change(entry: &ChangeEntry, subject: &Pointer) -> Result<Vec<u8>> {
    encode(entry, subject)
}

/// Decodes a change-log entry; `subject` names it in errors.
pub(crate) fn decode_change(bytes: &[u8], subject: &str) -> Result<ChangeEntry> {
    decode(bytes, subject)
}

fn encode<T: Serialize>(value: &T, subject: &Pointer) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(256);
    bytes.push(RECORD_JSON_V1);
    serde_json::to_writer(&mut bytes, value)
        .map_err(|e| Error::invalid(subject.to_string(), "spec", e.to_string()))?;
    Ok(bytes)
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], subject: &str) -> Result<T> {
    match bytes.split_first() {
        Some((&RECORD_JSON_V1, json)) => serde_json::from_slice(json).map_err(|e| Error::Backend {
            subject: subject.to_string(),
            message: format!("stored record is corrupt: {e}"),
            retryable: false,
            source: Some(std::sync::Arc::new(e)),
        }),
        Some((tag, _)) => Err(Error::Backend {
            subject: subject.to_string(),
            message: format!(
                "stored record has encoding tag {tag}, this build reads only tag {RECORD_JSON_V1}; \
                 it was written by a newer version"
            ),
            retryable: false,
            source: None,
        }),
        None => Err(Error::Backend {
            subject: subject.to_string(),
            message: "stored record is empty".into(),
            retryable: false,
            source: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{DynamicResource, Resource, ResourceSpec};

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Widget {
        size: u32,
    }
    impl ResourceSpec for Widget {
        const TYPE: &'static str = "Widgets.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }

    fn stored_widget() -> Resource<Widget> {
        let mut r = Resource::new("w", Widget { size: 3 });
        r.metadata.set_version(Version::new(4));
        r.metadata.set_owner(Some("ctrl".into()));
        r.metadata.set_phase(Phase::TearingDown);
        r.metadata.finalizers_mut().insert("f".into());
        r.metadata.labels_mut().insert("app".into(), "web".into());
        r.metadata
            .annotations_mut()
            .insert("note".into(), "x".into());
        r.metadata
            .set_timestamps(from_nanos(1_000_000_007), from_nanos(2_000_000_009));
        r
    }

    #[test]
    fn a_record_round_trips_every_metadata_field_and_the_spec() {
        let original = stored_widget();
        let bytes = encode_resource(&original).unwrap();
        let types = KnownTypes::new().with::<Widget>();
        let decoded = decode_resource(&bytes, original.metadata.pointer().clone(), &types).unwrap();
        let typed = cosi_core::downcast_ref::<Widget>(&*decoded).unwrap();
        assert_eq!(*typed, original);
    }

    #[test]
    fn a_record_of_an_unknown_type_decodes_as_a_dynamic_resource() {
        let original = stored_widget();
        let bytes = encode_resource(&original).unwrap();
        let decoded = decode_resource(
            &bytes,
            original.metadata.pointer().clone(),
            &KnownTypes::new(),
        )
        .unwrap();
        let dynamic = decoded.as_any().downcast_ref::<DynamicResource>().unwrap();
        assert_eq!(dynamic.metadata, original.metadata);
        assert_eq!(dynamic.spec, serde_json::json!({"size": 3}));
    }

    #[test]
    fn a_record_with_an_unknown_encoding_tag_is_refused() {
        let err = decode_resource(
            &[9, b'{', b'}'],
            stored_widget().metadata.pointer().clone(),
            &KnownTypes::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("encoding tag 9"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_decode_to_a_resource_or_an_error_never_a_panic(
            tagged in proptest::bool::ANY,
            mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
        ) {
            if tagged {
                // Reach the JSON decoder, not only the tag check.
                bytes.insert(0, RECORD_JSON_V1);
            }
            let pointer = stored_widget().metadata.pointer().clone();
            let _ = decode_resource(&bytes, pointer, &KnownTypes::new().with::<Widget>());
        }

        #[test]
        fn any_metadata_and_spec_round_trip(
            version in 1u64..u64::MAX,
            owner in proptest::option::of("[a-z.]{1,12}"),
            finalizers in proptest::collection::btree_set("\\PC{0,8}", 0..4),
            labels in proptest::collection::btree_map("\\PC{0,8}", "\\PC{0,8}", 0..4),
            created in 0u64..u64::MAX,
            size in proptest::num::u32::ANY,
        ) {
            let mut original = Resource::new("w", Widget { size });
            original.metadata.set_version(Version::new(version));
            original.metadata.set_owner(owner);
            *original.metadata.finalizers_mut() = finalizers;
            *original.metadata.labels_mut() = labels;
            original.metadata.set_timestamps(from_nanos(created), from_nanos(created / 2));
            let bytes = encode_resource(&original).unwrap();
            let types = KnownTypes::new().with::<Widget>();
            let decoded = decode_resource(&bytes, original.metadata.pointer().clone(), &types).unwrap();
            proptest::prop_assert_eq!(cosi_core::downcast_ref::<Widget>(&*decoded).unwrap(), &original);
        }
    }

    #[test]
    fn a_truncated_record_is_refused() {
        let bytes = encode_resource(&stored_widget()).unwrap();
        let err = decode_resource(
            &bytes[..bytes.len() / 2],
            stored_widget().metadata.pointer().clone(),
            &KnownTypes::new(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
    }
}
