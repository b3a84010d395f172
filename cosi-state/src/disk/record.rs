//! The record format: how one resource, and one entry of the change log, is laid out as bytes.
//!
//! A record is a one-byte encoding tag followed by a JSON object holding the metadata the store
//! owns (version, owner, phase, finalizers, labels, annotations, timestamps) and the spec in its
//! dynamic (JSON) form. Identity (namespace, type, id) lives in the table key, not in the value.
//! JSON keeps every record readable without the Rust type, which is what lets a store keep
//! resources of types it does not know, and lets a newer spec decode an older record through
//! serde defaults. This module owns the bytes only: it knows nothing of tables or transactions.

use cosi_core::{AnyResource, Pointer, Result, SharedResource};
use serde::{Deserialize, Serialize};

use crate::record::{self, StoredMetadata};
use cosi_core::Registry;

/// The body of a record: everything but the identity.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct RecordBody {
    #[serde(flatten)]
    metadata: StoredMetadata,
    spec: serde_json::Value,
}

impl RecordBody {
    /// The body of a stored resource.
    pub(crate) fn of(resource: &dyn AnyResource) -> Result<Self> {
        Ok(RecordBody {
            metadata: StoredMetadata::of(resource.metadata()),
            spec: resource.spec_value()?,
        })
    }

    /// Rebuilds the resource at `pointer`, typed when its type is registered.
    pub(crate) fn into_resource(self, pointer: Pointer, registry: &Registry) -> SharedResource {
        crate::decode::lenient(registry, self.metadata.into_metadata(pointer), self.spec)
    }
}

/// Encodes a resource as record bytes.
pub(crate) fn encode_resource(resource: &dyn AnyResource) -> Result<Vec<u8>> {
    encode_body(&RecordBody::of(resource)?, resource.metadata().pointer())
}

/// Encodes the body of the resource at `subject` as record bytes.
pub(crate) fn encode_body(body: &RecordBody, subject: &Pointer) -> Result<Vec<u8>> {
    record::encode(body, subject)
}

/// Decodes record bytes into the resource at `pointer`.
pub(crate) fn decode_resource(
    bytes: &[u8],
    pointer: Pointer,
    registry: &Registry,
) -> Result<SharedResource> {
    let body: RecordBody = record::decode(bytes, &pointer.to_string())?;
    Ok(body.into_resource(pointer, registry))
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
    record::encode(entry, subject)
}

/// Decodes a change-log entry; `subject` names it in errors.
pub(crate) fn decode_change(bytes: &[u8], subject: &str) -> Result<ChangeEntry> {
    record::decode(bytes, subject)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fixture::{stored_widget, Widget};
    use cosi_core::DynamicResource;

    #[test]
    fn a_resource_record_has_the_documented_bytes() {
        // docs/disk-format.md, "Records": files written before must keep opening.
        let bytes = encode_resource(&stored_widget()).unwrap();
        let expected = concat!(
            "\u{1}",
            r#"{"version":4,"owner":"ctrl","phase":"tearingDown","finalizers":["f"],"#,
            r#""labels":{"app":"web"},"annotations":{"note":"x"},"#,
            r#""created":1000000007,"updated":2000000009,"spec":{"size":3}}"#
        );
        assert_eq!(String::from_utf8(bytes).unwrap(), expected);
    }

    #[test]
    fn a_record_round_trips_every_metadata_field_and_the_spec() {
        let original = stored_widget();
        let bytes = encode_resource(&original).unwrap();
        let mut types = Registry::new();
        types.register::<Widget>().unwrap();
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
            &Registry::new(),
        )
        .unwrap();
        let dynamic = decoded.as_any().downcast_ref::<DynamicResource>().unwrap();
        assert_eq!(dynamic.metadata, original.metadata);
        assert_eq!(dynamic.spec, serde_json::json!({"size": 3}));
    }

    #[test]
    fn a_record_without_a_phase_decodes_as_running() {
        let bytes = b"\x01{\"version\":1,\"created\":0,\"updated\":0,\"spec\":{\"size\":1}}";
        let pointer = stored_widget().metadata.pointer().clone();
        let decoded = decode_resource(bytes, pointer, &Registry::new()).unwrap();
        assert_eq!(decoded.metadata().phase(), cosi_core::Phase::Running);
    }
}
