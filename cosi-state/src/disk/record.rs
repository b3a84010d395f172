//! The record format: how one resource, and one entry of the change log, is laid out as bytes.
//!
//! A record is a one-byte encoding tag followed by a JSON object holding the metadata the store
//! owns (version, owner, phase, finalizers, labels, annotations, timestamps) and the spec in its
//! dynamic (JSON) form. Identity (namespace, type, id) lives in the table key, not in the value.
//! JSON keeps every record readable without the Rust type, which is what lets a store keep
//! resources of types it does not know, and lets a newer spec decode an older record through
//! serde defaults. This module owns the bytes only: it knows nothing of tables or transactions.

use std::collections::BTreeMap;

use cosi_core::{
    Annotations, AnyResource, Error, Finalizers, Labels, Phase, Pointer, Result, SharedResource,
};
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
    /// The body of a stored resource (as [`encode_resource`] writes it, but owned).
    #[cfg(test)]
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

/// The body of a record as it is written: the fields of [`RecordBody`] (with its
/// [`StoredMetadata`] inline), in the same order and with the same omissions, borrowed from the
/// resource instead of copied out of it (owner, finalizers, labels and annotations are not
/// cloned for every write). `a_borrowed_body_encodes_as_the_record_body` checks the two agree.
#[derive(Serialize)]
struct BorrowedBody<'a> {
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a str>,
    phase: Phase,
    #[serde(skip_serializing_if = "is_empty_set")]
    finalizers: &'a Finalizers,
    #[serde(skip_serializing_if = "is_empty_map")]
    labels: &'a Labels,
    #[serde(skip_serializing_if = "is_empty_map")]
    annotations: &'a Annotations,
    created: u64,
    updated: u64,
    spec: serde_json::Value,
}

fn is_empty_set(set: &&Finalizers) -> bool {
    set.is_empty()
}

fn is_empty_map(map: &&BTreeMap<String, String>) -> bool {
    map.is_empty()
}

/// Encodes a resource as record bytes.
pub(crate) fn encode_resource(resource: &dyn AnyResource) -> Result<Vec<u8>> {
    let md = resource.metadata();
    let body = BorrowedBody {
        version: md.version().get(),
        owner: md.owner(),
        phase: md.phase(),
        finalizers: md.finalizers(),
        labels: md.labels(),
        annotations: md.annotations(),
        created: record::to_nanos(md.created()),
        updated: record::to_nanos(md.updated()),
        spec: resource.spec_value()?,
    };
    record::encode(&body, md.pointer())
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

impl ChangeOp {
    /// The name serde gives the operation in a change-log entry.
    fn name(self) -> &'static str {
        match self {
            ChangeOp::Created => "created",
            ChangeOp::Updated => "updated",
            ChangeOp::Destroyed => "destroyed",
        }
    }
}

/// Encodes the change-log entry of `op` on the resource at `subject` from the record bytes of
/// the resource (`record`, from [`encode_resource`]) and of its previous state (`old`, an update
/// only), without encoding either resource again.
///
/// The bytes are exactly what serde_json writes for the [`ChangeEntry`] of the same change (the
/// tag byte, then `{"op":…,"id":…,"resource":<body>,"old":<body>}`, `old` left out when absent):
/// a record's payload is the JSON of its [`RecordBody`], which is what the entry nests, so the
/// entry is that JSON spliced between the entry's own keys. `entry_bytes_are_what_serde_writes_for_the_entry`
/// checks the two agree.
pub(crate) fn encode_change(
    op: ChangeOp,
    subject: &Pointer,
    record: &[u8],
    old: Option<&[u8]>,
) -> Result<Vec<u8>> {
    fn body<'a>(record: &'a [u8], subject: &Pointer) -> Result<&'a [u8]> {
        match record.split_first() {
            Some((&record::FORMAT_V1, json)) => Ok(json),
            _ => Err(Error::Backend {
                subject: subject.to_string(),
                message: "encoding the change: the given bytes are not a record".into(),
                retryable: false,
                source: None,
            }),
        }
    }
    let resource = body(record, subject)?;
    let old = old.map(|old| body(old, subject)).transpose()?;
    let id = subject.id();
    // Keys, punctuation and the op name are 40 bytes at most; the id may grow by its escapes.
    let capacity = 48 + id.len() + resource.len() + old.map_or(0, |old| old.len() + 7);
    let mut bytes = Vec::with_capacity(capacity);
    bytes.push(record::FORMAT_V1);
    bytes.extend_from_slice(b"{\"op\":\"");
    bytes.extend_from_slice(op.name().as_bytes());
    bytes.extend_from_slice(b"\",\"id\":");
    serde_json::to_writer(&mut bytes, id)
        .map_err(|e| Error::invalid(subject.to_string(), "id", e.to_string()))?;
    bytes.extend_from_slice(b",\"resource\":");
    bytes.extend_from_slice(resource);
    if let Some(old) = old {
        bytes.extend_from_slice(b",\"old\":");
        bytes.extend_from_slice(old);
    }
    bytes.push(b'}');
    Ok(bytes)
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
    fn a_borrowed_body_encodes_as_the_record_body() {
        let full = stored_widget();
        let bare = cosi_core::Resource::new("w", Widget { size: 1 });
        for resource in [&full, &bare] {
            let pointer = resource.metadata.pointer();
            let owned = encode_body(&RecordBody::of(resource).unwrap(), pointer).unwrap();

            let borrowed = encode_resource(resource).unwrap();

            assert_eq!(
                String::from_utf8(borrowed).unwrap(),
                String::from_utf8(owned).unwrap()
            );
        }
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

    /// The entry of `op` on `resource` (and `old`) as serde_json writes the [`ChangeEntry`]:
    /// how entries were encoded before they reused the record bytes.
    fn entry_through_serde(
        op: ChangeOp,
        resource: &dyn AnyResource,
        old: Option<&dyn AnyResource>,
    ) -> Vec<u8> {
        let entry = ChangeEntry {
            op,
            id: resource.metadata().id().to_string(),
            resource: RecordBody::of(resource).unwrap(),
            old: old.map(|old| RecordBody::of(old).unwrap()),
        };
        record::encode(&entry, resource.metadata().pointer()).unwrap()
    }

    #[test]
    fn entry_bytes_are_what_serde_writes_for_the_entry() {
        let old = stored_widget();
        let mut new = stored_widget();
        new.spec.size = 4;
        let mut escaped = cosi_core::Resource::new("quote \" back \\ tab \t é", Widget { size: 1 });
        escaped
            .metadata
            .labels_mut()
            .insert("k\"".into(), "v\n".into());
        let cases: [(ChangeOp, &dyn AnyResource, Option<&dyn AnyResource>); 4] = [
            (ChangeOp::Created, &old, None),
            (ChangeOp::Updated, &new, Some(&old)),
            (ChangeOp::Destroyed, &new, None),
            (ChangeOp::Created, &escaped, None),
        ];
        for (op, resource, previous) in cases {
            let record = encode_resource(resource).unwrap();
            let old_record = previous.map(|p| encode_resource(p).unwrap());
            let pointer = resource.metadata().pointer();

            let entry = encode_change(op, pointer, &record, old_record.as_deref()).unwrap();

            let expected = entry_through_serde(op, resource, previous);
            assert_eq!(
                String::from_utf8(entry).unwrap(),
                String::from_utf8(expected).unwrap(),
                "{op:?} of {pointer}"
            );
        }
    }

    #[test]
    fn an_update_entry_has_the_documented_bytes() {
        // docs/disk-format.md, "Records": the change record nests the resource bodies.
        let old = stored_widget();
        let mut new = stored_widget();
        new.spec.size = 4;
        let (record, old_record) = (
            encode_resource(&new).unwrap(),
            encode_resource(&old).unwrap(),
        );
        let entry = encode_change(
            ChangeOp::Updated,
            new.metadata.pointer(),
            &record,
            Some(&old_record),
        )
        .unwrap();
        let body = |size: u32| {
            format!(
                concat!(
                    r#"{{"version":4,"owner":"ctrl","phase":"tearingDown","finalizers":["f"],"#,
                    r#""labels":{{"app":"web"}},"annotations":{{"note":"x"}},"#,
                    r#""created":1000000007,"updated":2000000009,"spec":{{"size":{}}}}}"#
                ),
                size
            )
        };
        let expected = format!(
            "\u{1}{{\"op\":\"updated\",\"id\":\"w\",\"resource\":{},\"old\":{}}}",
            body(4),
            body(3)
        );
        assert_eq!(String::from_utf8(entry).unwrap(), expected);
    }

    #[test]
    fn an_entry_is_refused_for_bytes_that_are_not_a_record() {
        let pointer = stored_widget().metadata.pointer().clone();
        for bytes in [&b""[..], &b"\x02{}"[..]] {
            let error = encode_change(ChangeOp::Created, &pointer, bytes, None).unwrap_err();
            let Error::Backend {
                subject, message, ..
            } = &error
            else {
                panic!("a backend error, got {error:?}");
            };
            assert_eq!(subject, &pointer.to_string());
            assert_eq!(
                message,
                "encoding the change: the given bytes are not a record"
            );
        }
    }

    #[test]
    fn a_record_without_a_phase_decodes_as_running() {
        let bytes = b"\x01{\"version\":1,\"created\":0,\"updated\":0,\"spec\":{\"size\":1}}";
        let pointer = stored_widget().metadata.pointer().clone();
        let decoded = decode_resource(bytes, pointer, &Registry::new()).unwrap();
        assert_eq!(decoded.metadata().phase(), cosi_core::Phase::Running);
    }
}
