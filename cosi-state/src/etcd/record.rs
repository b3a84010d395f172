//! The stored form of one resource in etcd.
//!
//! A record is the format byte ([`FORMAT_V1`]) followed by the JSON document
//! `{"metadata": {"namespace", "type", "id", ...}, "spec": ...}`: the record codec of this crate
//! (`crate::record`, which the disk backend uses too), with the identity repeated in the value
//! so that a record found under another key is refused rather than served as the wrong resource.
//! Timestamps are nanoseconds since the Unix epoch. A spec JSON cannot hold exactly (a NaN or
//! infinite float) is refused by the encoder, naming its field (`cosi_core::spec_encode`),
//! before anything is sent to etcd.
//!
//! This module knows nothing of etcd keys or transactions: it only converts bytes and resources.

use cosi_core::{AnyResource, Pointer, Result, SharedResource};
use serde::{Deserialize, Serialize};

use crate::record::{self, StoredMetadata};
use cosi_core::Registry;

pub use crate::record::FORMAT_V1;

#[derive(Serialize, Deserialize)]
struct RecordV1 {
    metadata: MetadataV1,
    spec: serde_json::Value,
}

#[derive(Serialize, Deserialize)]
struct MetadataV1 {
    namespace: String,
    #[serde(rename = "type")]
    resource_type: String,
    id: String,
    #[serde(flatten)]
    stored: StoredMetadata,
}

/// Encodes a resource as a record.
pub fn encode(resource: &dyn AnyResource) -> Result<Vec<u8>> {
    let md = resource.metadata();
    let record = RecordV1 {
        metadata: MetadataV1 {
            namespace: md.namespace().to_string(),
            resource_type: md.resource_type().to_string(),
            id: md.id().to_string(),
            stored: StoredMetadata::of(md),
        },
        spec: resource.spec_value()?,
    };
    record::encode(&record, md.pointer())
}

/// Decodes the record stored for `pointer`, typed when `registry` has its type. A record that is
/// not valid, that names another resource than its key, or whose spec does not decode as its
/// registered type is a non-retryable error naming `pointer`; nothing is guessed.
pub fn decode(registry: &Registry, pointer: &Pointer, bytes: &[u8]) -> Result<SharedResource> {
    let subject = pointer.to_string();
    let record: RecordV1 = record::decode(bytes, &subject)?;
    let md = record.metadata;
    if md.namespace != pointer.namespace()
        || md.resource_type != pointer.resource_type()
        || md.id != pointer.id()
    {
        let message = format!(
            "record names {}/{}/{}",
            md.namespace, md.resource_type, md.id
        );
        return Err(record::invalid_record(&subject, message, None));
    }
    crate::decode::exact(
        registry,
        md.stored.into_metadata(pointer.clone()),
        record.spec,
    )
    .map_err(|e| record::invalid_record(&subject, e.to_string(), None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::fixture::{stored_widget, Widget};
    use cosi_core::DynamicResource;

    #[test]
    fn a_record_has_the_documented_bytes() {
        let bytes = encode(&stored_widget()).unwrap();
        let expected = concat!(
            "\u{1}",
            r#"{"metadata":{"namespace":"test","type":"Widgets.test.cosi.dev","id":"w","#,
            r#""version":4,"owner":"ctrl","phase":"tearingDown","finalizers":["f"],"#,
            r#""labels":{"app":"web"},"annotations":{"note":"x"},"#,
            r#""created":1000000007,"updated":2000000009},"spec":{"size":3}}"#
        );
        assert_eq!(String::from_utf8(bytes).unwrap(), expected);
    }

    #[test]
    fn registered_type_round_trips_to_an_equal_typed_resource() {
        let types = Registry::new().with::<Widget>().unwrap();
        let r = stored_widget();
        let bytes = encode(&r).unwrap();
        let back = decode(&types, r.metadata.pointer(), &bytes).unwrap();
        assert_eq!(cosi_core::downcast_ref::<Widget>(&*back).unwrap(), &r);
    }

    #[test]
    fn unregistered_type_loads_as_dynamic_resource() {
        let r = stored_widget();
        let back = decode(&Registry::new(), r.metadata.pointer(), &encode(&r).unwrap()).unwrap();
        let dynamic = back.as_any().downcast_ref::<DynamicResource>().unwrap();
        assert_eq!(dynamic.metadata, r.metadata);
        assert_eq!(dynamic.spec, serde_json::json!({"size": 3}));
    }

    #[test]
    fn garbage_bytes_are_a_non_retryable_error_naming_the_resource() {
        let pointer = stored_widget().metadata.pointer().clone();
        for bytes in [&b""[..], b"\x01not json", b"\x09{}"] {
            let err = decode(&Registry::new(), &pointer, bytes).unwrap_err();
            assert!(!err.is_retryable());
            assert!(
                err.to_string().starts_with(
                    "test/Widgets.test.cosi.dev/w: backend failure: stored record is not valid"
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn record_under_another_key_is_rejected() {
        let r = stored_widget();
        let other = Pointer::new("test", "Widgets.test.cosi.dev", "b");
        let err = decode(&Registry::new(), &other, &encode(&r).unwrap()).unwrap_err();
        assert!(err
            .to_string()
            .contains("record names test/Widgets.test.cosi.dev/w"));
    }

    #[test]
    fn spec_that_does_not_fit_the_registered_type_is_an_error() {
        let types = Registry::new().with::<Widget>().unwrap();
        let r = DynamicResource {
            metadata: stored_widget().metadata,
            spec: serde_json::json!({"size": "three"}),
        };
        let err = decode(&types, r.metadata.pointer(), &encode(&r).unwrap()).unwrap_err();
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("invalid spec.size"), "{err}");
    }
}
