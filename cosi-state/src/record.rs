//! The record codec shared by the backends that store resources as bytes (disk, etcd): the
//! format byte in front of every record, the metadata fields the store owns, and the errors for
//! bytes that are not a record this build reads.
//!
//! Each backend lays its JSON object out around [`StoredMetadata`] (the disk keeps identity in
//! the table key, etcd repeats it in the value); the layouts are written down in
//! `docs/disk-format.md` and in the etcd module docs. This module knows nothing of keys, tables
//! or transactions.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cosi_core::{Annotations, Error, Finalizers, Labels, Metadata, Phase, Pointer, Result};
use serde::{Deserialize, Serialize};

/// The first byte of every record written by this version: a JSON object follows. A reader
/// that finds another byte refuses the record instead of guessing.
pub const FORMAT_V1: u8 = 1;

/// The metadata a store owns, as it is written in a record: everything but the identity.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct StoredMetadata {
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
}

impl StoredMetadata {
    /// The stored fields of `md`.
    pub(crate) fn of(md: &Metadata) -> Self {
        StoredMetadata {
            version: md.version().get(),
            owner: md.owner().map(str::to_string),
            phase: md.phase(),
            finalizers: md.finalizers().clone(),
            labels: md.labels().clone(),
            annotations: md.annotations().clone(),
            created: to_nanos(md.created()),
            updated: to_nanos(md.updated()),
        }
    }

    /// The metadata of the resource at `pointer` with these fields.
    pub(crate) fn into_metadata(self, pointer: Pointer) -> Metadata {
        let mut md = Metadata::new(pointer);
        md.set_version(cosi_core::Version::new(self.version));
        md.set_owner(self.owner.map(Arc::from));
        md.set_phase(self.phase);
        *md.finalizers_mut() = self.finalizers;
        *md.labels_mut() = self.labels;
        *md.annotations_mut() = self.annotations;
        md.set_timestamps(from_nanos(self.created), from_nanos(self.updated));
        md
    }
}

/// Nanoseconds since the Unix epoch, as a record stores a timestamp.
pub(crate) fn to_nanos(time: SystemTime) -> u64 {
    // Times before the epoch cannot be set by the store; clamp rather than fail.
    let nanos = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

pub(crate) fn from_nanos(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

/// Encodes `value` as a record: the format byte, then its JSON. `subject` names it in errors.
pub(crate) fn encode<T: Serialize>(value: &T, subject: &Pointer) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(256);
    bytes.push(FORMAT_V1);
    serde_json::to_writer(&mut bytes, value)
        .map_err(|e| Error::invalid(subject.to_string(), "spec", e.to_string()))?;
    Ok(bytes)
}

/// Decodes a record. Bytes that are not one (empty, another format byte, bad JSON) are a
/// non-retryable [`Error::Backend`] naming `subject`.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], subject: &str) -> Result<T> {
    match bytes.split_first() {
        Some((&FORMAT_V1, json)) => serde_json::from_slice(json).map_err(|e| {
            let message = format!("it is corrupt: {e}");
            invalid_record(subject, message, Some(std::sync::Arc::new(e)))
        }),
        Some((tag, _)) => Err(invalid_record(
            subject,
            format!(
                "it has encoding tag {tag}, this build reads only tag {FORMAT_V1}; \
                 it was written by a newer version"
            ),
            None,
        )),
        None => Err(invalid_record(subject, "it is empty".into(), None)),
    }
}

/// The error for stored bytes that are not a valid record of `subject`.
pub(crate) fn invalid_record(
    subject: &str,
    message: String,
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
) -> Error {
    Error::Backend {
        subject: subject.to_string(),
        message: format!("stored record is not valid: {message}"),
        retryable: false,
        source,
    }
}

/// A typed spec and a fully stamped resource of it, for the record tests of every backend.
#[cfg(test)]
pub(crate) mod fixture {
    use cosi_core::{Phase, Resource, ResourceSpec, Version};
    use serde::{Deserialize, Serialize};

    use super::from_nanos;

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    pub(crate) struct Widget {
        pub(crate) size: u32,
    }

    impl ResourceSpec for Widget {
        const TYPE: &'static str = "Widgets.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }

    /// A widget with every metadata field set away from its default.
    pub(crate) fn stored_widget() -> Resource<Widget> {
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
}

#[cfg(test)]
mod tests {
    use super::fixture::stored_widget;
    use super::*;

    fn subject() -> Pointer {
        stored_widget().metadata.pointer().clone()
    }

    #[test]
    fn a_record_starts_with_the_format_byte() {
        let stored = StoredMetadata::of(&stored_widget().metadata);
        assert_eq!(encode(&stored, &subject()).unwrap()[0], FORMAT_V1);
    }

    #[test]
    fn a_record_with_an_unknown_encoding_tag_is_refused() {
        let err = decode::<StoredMetadata>(&[9, b'{', b'}'], "w").unwrap_err();
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("encoding tag 9"), "{err}");
    }

    #[test]
    fn an_empty_record_is_refused() {
        let err = decode::<StoredMetadata>(&[], "w").unwrap_err();
        assert_eq!(
            err.to_string(),
            "w: backend failure: stored record is not valid: it is empty"
        );
    }

    #[test]
    fn a_truncated_record_is_refused() {
        let stored = StoredMetadata::of(&stored_widget().metadata);
        let bytes = encode(&stored, &subject()).unwrap();
        let err = decode::<StoredMetadata>(&bytes[..bytes.len() / 2], "w").unwrap_err();
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("corrupt"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_decode_to_a_record_or_an_error_never_a_panic(
            tagged in proptest::bool::ANY,
            mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
        ) {
            if tagged {
                // Reach the JSON decoder, not only the tag check.
                bytes.insert(0, FORMAT_V1);
            }
            let _ = decode::<StoredMetadata>(&bytes, "w");
        }

        #[test]
        fn any_stored_metadata_round_trips(
            version in 1u64..u64::MAX,
            owner in proptest::option::of("[a-z.]{1,12}"),
            tearing_down in proptest::bool::ANY,
            finalizers in proptest::collection::btree_set("\\PC{0,8}", 0..4),
            labels in proptest::collection::btree_map("\\PC{0,8}", "\\PC{0,8}", 0..4),
            annotations in proptest::collection::btree_map("\\PC{0,8}", "\\PC{0,8}", 0..4),
            // Up to 2262-04-11: the nanoseconds metadata keeps.
            created in 0u64..i64::MAX as u64,
        ) {
            let mut md = Metadata::new(subject());
            md.set_version(cosi_core::Version::new(version));
            md.set_owner(owner.map(Arc::from));
            md.set_phase(if tearing_down { Phase::TearingDown } else { Phase::Running });
            *md.finalizers_mut() = finalizers;
            *md.labels_mut() = labels;
            *md.annotations_mut() = annotations;
            md.set_timestamps(from_nanos(created), from_nanos(created / 2));
            let bytes = encode(&StoredMetadata::of(&md), &subject()).unwrap();
            let back: StoredMetadata = decode(&bytes, "w").unwrap();
            proptest::prop_assert_eq!(back.into_metadata(subject()), md);
        }
    }
}
