//! A `cosi.resource.Resource` message read in place ([`ResourceView`]) and written straight
//! from borrowed parts ([`ResourceParts`]), without the generated message in between.
//!
//! The generated message owns a heap string per field; a client that turns it into a resource
//! allocated each of them only to copy or drop it (namespace and type are interned, version and
//! phase parsed), and a server built it from a resource only to encode and drop it. Reading in
//! place borrows every field from the received bytes; writing from parts borrows them from the
//! resource. Both follow prost exactly, so [`crate::codec::Codec`] gives the same result either
//! way (checked by this module's tests and the `wire_resource` fuzz target): the last value of a
//! repeated scalar field wins, a repeated message field merges, unknown fields are skipped, a
//! known field with the wrong wire type is an error, and fields are written in tag order with
//! proto3 defaults left out.
//!
//! This module knows the message's layout only; what the fields mean is the codec's.

use std::collections::{BTreeMap, BTreeSet};

use prost::bytes::BufMut;
use prost::encoding::{
    decode_key, decode_varint, encode_key, encode_varint, encoded_len_varint, skip_field,
    DecodeContext, WireType,
};

/// Why a message could not be read: prost's own errors, or the same conditions found here.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Malformed(String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<prost::DecodeError> for Malformed {
    fn from(error: prost::DecodeError) -> Self {
        Malformed(error.to_string())
    }
}

/// A `google.protobuf.Timestamp`, as prost reads it.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct TimestampView {
    pub(crate) seconds: i64,
    pub(crate) nanos: i32,
}

/// A `Metadata` message's fields, borrowed from the bytes it was read from.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub(crate) struct MetadataView<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) resource_type: &'a str,
    pub(crate) id: &'a str,
    pub(crate) version: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) phase: &'a str,
    pub(crate) created: Option<TimestampView>,
    pub(crate) updated: Option<TimestampView>,
    /// Folded as read, each once: a set, as the resource keeps them. (Collected one per entry
    /// on the wire, a message of empty entries, 2 bytes each, cost 16 bytes per entry here.)
    pub(crate) finalizers: BTreeSet<&'a str>,
    /// Folded as read: a later entry for a key replaces an earlier one, as in prost.
    pub(crate) labels: BTreeMap<&'a str, &'a str>,
    /// As `labels`.
    pub(crate) annotations: BTreeMap<&'a str, &'a str>,
}

/// A `Resource` message's fields, borrowed from the bytes it was read from.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub(crate) struct ResourceView<'a> {
    pub(crate) metadata: Option<MetadataView<'a>>,
    pub(crate) spec: Option<SpecView<'a>>,
}

/// A `Spec` message's fields.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct SpecView<'a> {
    pub(crate) proto_spec: &'a [u8],
    pub(crate) yaml_spec: &'a str,
}

impl<'a> ResourceView<'a> {
    /// Reads a whole `Resource` message.
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<Self, Malformed> {
        let mut view = ResourceView::default();
        read_fields(bytes, |tag, wire_type, buf| match tag {
            1 => merge_nested(&mut view.metadata, wire_type, buf, MetadataView::merge),
            2 => merge_nested(&mut view.spec, wire_type, buf, SpecView::merge),
            _ => skip(wire_type, tag, buf),
        })?;
        Ok(view)
    }
}

impl<'a> MetadataView<'a> {
    fn merge(&mut self, bytes: &'a [u8]) -> Result<(), Malformed> {
        read_fields(bytes, |tag, wire_type, buf| {
            match tag {
                1 => self.namespace = string(wire_type, buf)?,
                2 => self.resource_type = string(wire_type, buf)?,
                3 => self.id = string(wire_type, buf)?,
                4 => self.version = string(wire_type, buf)?,
                5 => self.owner = string(wire_type, buf)?,
                6 => self.phase = string(wire_type, buf)?,
                7 => merge_nested(&mut self.created, wire_type, buf, TimestampView::merge)?,
                8 => merge_nested(&mut self.updated, wire_type, buf, TimestampView::merge)?,
                9 => {
                    self.finalizers.insert(string(wire_type, buf)?);
                }
                10 => {
                    let (key, value) = map_entry(delimited(wire_type, buf)?)?;
                    self.labels.insert(key, value);
                }
                11 => {
                    let (key, value) = map_entry(delimited(wire_type, buf)?)?;
                    self.annotations.insert(key, value);
                }
                _ => skip(wire_type, tag, buf)?,
            }
            Ok(())
        })
    }
}

impl<'a> SpecView<'a> {
    fn merge(&mut self, bytes: &'a [u8]) -> Result<(), Malformed> {
        read_fields(bytes, |tag, wire_type, buf| {
            match tag {
                1 => self.proto_spec = delimited(wire_type, buf)?,
                2 => self.yaml_spec = string(wire_type, buf)?,
                _ => skip(wire_type, tag, buf)?,
            }
            Ok(())
        })
    }
}

impl TimestampView {
    fn merge(&mut self, bytes: &[u8]) -> Result<(), Malformed> {
        read_fields(bytes, |tag, wire_type, buf| {
            match tag {
                // As prost: int64 and int32 are varints, the int32 truncated.
                1 => self.seconds = varint(wire_type, buf)? as i64,
                2 => self.nanos = varint(wire_type, buf)? as i32,
                _ => skip(wire_type, tag, buf)?,
            }
            Ok(())
        })
    }
}

/// Calls `read` for each field of a message (`read` consumes the field's value from `buf`).
fn read_fields<'a>(
    mut buf: &'a [u8],
    mut read: impl FnMut(u32, WireType, &mut &'a [u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        read(tag, wire_type, &mut buf)?;
    }
    Ok(())
}

/// A message field: present from its first occurrence on, and merged with each further one.
fn merge_nested<'a, T: Default>(
    slot: &mut Option<T>,
    wire_type: WireType,
    buf: &mut &'a [u8],
    merge: impl FnOnce(&mut T, &'a [u8]) -> Result<(), Malformed>,
) -> Result<(), Malformed> {
    let inner = delimited(wire_type, buf)?;
    merge(slot.get_or_insert_with(T::default), inner)
}

fn wrong_wire_type(expected: WireType, actual: WireType) -> Malformed {
    Malformed(format!(
        "invalid wire type: {actual:?} (expected {expected:?})"
    ))
}

fn varint(wire_type: WireType, buf: &mut &[u8]) -> Result<u64, Malformed> {
    if wire_type != WireType::Varint {
        return Err(wrong_wire_type(WireType::Varint, wire_type));
    }
    Ok(decode_varint(buf)?)
}

/// The content of a length-delimited field.
fn delimited<'a>(wire_type: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], Malformed> {
    if wire_type != WireType::LengthDelimited {
        return Err(wrong_wire_type(WireType::LengthDelimited, wire_type));
    }
    let len = decode_varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|len| *len <= buf.len())
        .ok_or_else(|| Malformed("buffer underflow".into()))?;
    let (content, rest) = buf.split_at(len);
    *buf = rest;
    Ok(content)
}

fn string<'a>(wire_type: WireType, buf: &mut &'a [u8]) -> Result<&'a str, Malformed> {
    let bytes = delimited(wire_type, buf)?;
    std::str::from_utf8(bytes)
        .map_err(|_| Malformed("invalid string value: data is not UTF-8 encoded".into()))
}

/// A `map<string, string>` entry: absent key or value read as empty, as in prost.
fn map_entry(entry: &[u8]) -> Result<(&str, &str), Malformed> {
    let (mut key, mut value) = ("", "");
    read_fields(entry, |tag, wire_type, buf| {
        match tag {
            1 => key = string(wire_type, buf)?,
            2 => value = string(wire_type, buf)?,
            _ => skip(wire_type, tag, buf)?,
        }
        Ok(())
    })?;
    Ok((key, value))
}

fn skip(wire_type: WireType, tag: u32, buf: &mut &[u8]) -> Result<(), Malformed> {
    Ok(skip_field(wire_type, tag, buf, DecodeContext::default())?)
}

/// What a `Resource` message is written from, borrowed from a resource.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResourceParts<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) resource_type: &'a str,
    pub(crate) id: &'a str,
    pub(crate) version: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) phase: &'a str,
    pub(crate) created: TimestampView,
    pub(crate) updated: TimestampView,
    pub(crate) finalizers: &'a BTreeSet<String>,
    pub(crate) labels: &'a BTreeMap<String, String>,
    pub(crate) annotations: &'a BTreeMap<String, String>,
    pub(crate) proto_spec: &'a [u8],
    pub(crate) yaml_spec: &'a str,
}

impl ResourceParts<'_> {
    /// The message's bytes, as prost writes the generated message with these field values
    /// (metadata and spec always present, timestamps always present).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let metadata_len = self.metadata_len();
        let spec_len = bytes_field_len(1, self.proto_spec) + string_field_len(2, self.yaml_spec);
        let total = nested_len(1, metadata_len) + nested_len(2, spec_len);
        let mut buf = Vec::with_capacity(total);
        encode_key(1, WireType::LengthDelimited, &mut buf);
        encode_varint(metadata_len as u64, &mut buf);
        self.write_metadata(&mut buf);
        encode_key(2, WireType::LengthDelimited, &mut buf);
        encode_varint(spec_len as u64, &mut buf);
        if !self.proto_spec.is_empty() {
            encode_key(1, WireType::LengthDelimited, &mut buf);
            encode_varint(self.proto_spec.len() as u64, &mut buf);
            buf.put_slice(self.proto_spec);
        }
        put_string(2, self.yaml_spec, &mut buf);
        debug_assert_eq!(buf.len(), total);
        buf
    }

    fn metadata_len(&self) -> usize {
        let strings = [
            self.namespace,
            self.resource_type,
            self.id,
            self.version,
            self.owner,
            self.phase,
        ];
        let mut len: usize = strings
            .iter()
            .zip(1..)
            .map(|(s, tag)| string_field_len(tag, s))
            .sum();
        len += nested_len(7, timestamp_len(self.created));
        len += nested_len(8, timestamp_len(self.updated));
        len += self
            .finalizers
            .iter()
            .map(|f| key_len(9) + encoded_len_varint(f.len() as u64) + f.len())
            .sum::<usize>();
        len += map_len(10, self.labels);
        len += map_len(11, self.annotations);
        len
    }

    fn write_metadata(&self, buf: &mut Vec<u8>) {
        put_string(1, self.namespace, buf);
        put_string(2, self.resource_type, buf);
        put_string(3, self.id, buf);
        put_string(4, self.version, buf);
        put_string(5, self.owner, buf);
        put_string(6, self.phase, buf);
        put_timestamp(7, self.created, buf);
        put_timestamp(8, self.updated, buf);
        for finalizer in self.finalizers {
            // A repeated string writes every element, empty ones too.
            encode_key(9, WireType::LengthDelimited, buf);
            encode_varint(finalizer.len() as u64, buf);
            buf.put_slice(finalizer.as_bytes());
        }
        put_map(10, self.labels, buf);
        put_map(11, self.annotations, buf);
    }
}

fn string_field_len(tag: u32, value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(value.len() as u64) + value.len()
    }
}

fn bytes_field_len(tag: u32, value: &[u8]) -> usize {
    if value.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(value.len() as u64) + value.len()
    }
}

fn key_len(tag: u32) -> usize {
    prost::encoding::key_len(tag)
}

fn nested_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn timestamp_len(t: TimestampView) -> usize {
    let mut len = 0;
    if t.seconds != 0 {
        len += key_len(1) + encoded_len_varint(t.seconds as u64);
    }
    if t.nanos != 0 {
        len += key_len(2) + encoded_len_varint(i64::from(t.nanos) as u64);
    }
    len
}

/// An entry's length: key and value each left out when empty, as prost writes maps.
fn entry_len(key: &str, value: &str) -> usize {
    string_field_len(1, key) + string_field_len(2, value)
}

fn map_len(tag: u32, map: &BTreeMap<String, String>) -> usize {
    map.iter()
        .map(|(k, v)| nested_len(tag, entry_len(k, v)))
        .sum()
}

fn put_string(tag: u32, value: &str, buf: &mut Vec<u8>) {
    if !value.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(value.len() as u64, buf);
        buf.put_slice(value.as_bytes());
    }
}

fn put_timestamp(tag: u32, t: TimestampView, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(timestamp_len(t) as u64, buf);
    if t.seconds != 0 {
        encode_key(1, WireType::Varint, buf);
        encode_varint(t.seconds as u64, buf);
    }
    if t.nanos != 0 {
        encode_key(2, WireType::Varint, buf);
        // As prost: an int32 is sign-extended to 64 bits.
        encode_varint(i64::from(t.nanos) as u64, buf);
    }
}

fn put_map(tag: u32, map: &BTreeMap<String, String>, buf: &mut Vec<u8>) {
    for (key, value) in map {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(entry_len(key, value) as u64, buf);
        put_string(1, key, buf);
        put_string(2, value, buf);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::proto::resource as pb;
    use proptest::prelude::*;
    use prost::Message;

    /// Short strings, some empty, some beyond ASCII.
    pub(crate) fn text() -> impl Strategy<Value = String> {
        "[a-zé0-9]{0,5}"
    }

    fn timestamp() -> impl Strategy<Value = prost_types::Timestamp> {
        (any::<i64>(), any::<i32>())
            .prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos })
    }

    fn metadata() -> impl Strategy<Value = pb::Metadata> {
        (
            (text(), text(), text(), text(), text(), text()),
            (
                proptest::option::of(timestamp()),
                proptest::option::of(timestamp()),
            ),
            proptest::collection::vec(text(), 0..3),
            proptest::collection::btree_map(text(), text(), 0..3),
            proptest::collection::btree_map(text(), text(), 0..3),
        )
            .prop_map(
                |(
                    (namespace, r#type, id, version, owner, phase),
                    (created, updated),
                    finalizers,
                    labels,
                    annotations,
                )| pb::Metadata {
                    namespace,
                    r#type,
                    id,
                    version,
                    owner,
                    phase,
                    created,
                    updated,
                    finalizers,
                    labels,
                    annotations,
                },
            )
    }

    /// Any `Resource` message (the fields this project knows).
    pub(crate) fn resource() -> impl Strategy<Value = pb::Resource> {
        let spec = (proptest::collection::vec(any::<u8>(), 0..6), text()).prop_map(
            |(proto_spec, yaml_spec)| pb::Spec {
                proto_spec,
                yaml_spec,
            },
        );
        (proptest::option::of(metadata()), proptest::option::of(spec))
            .prop_map(|(metadata, spec)| pb::Resource { metadata, spec })
    }

    fn ts(t: &Option<prost_types::Timestamp>) -> Option<TimestampView> {
        t.map(|t| TimestampView {
            seconds: t.seconds,
            nanos: t.nanos,
        })
    }

    /// The view of a decoded message, maps folded as the codec folds them (a later entry for
    /// a key wins).
    fn folded(view: &ResourceView<'_>) -> (Option<FoldedMetadata>, Option<(Vec<u8>, String)>) {
        let metadata = view.metadata.as_ref().map(|md| FoldedMetadata {
            strings: [
                md.namespace,
                md.resource_type,
                md.id,
                md.version,
                md.owner,
                md.phase,
            ]
            .map(str::to_string),
            created: md.created,
            updated: md.updated,
            finalizers: md.finalizers.iter().map(|f| f.to_string()).collect(),
            labels: md
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: md
                .annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        let spec = view
            .spec
            .map(|s| (s.proto_spec.to_vec(), s.yaml_spec.to_string()));
        (metadata, spec)
    }

    #[derive(PartialEq, Debug)]
    struct FoldedMetadata {
        strings: [String; 6],
        created: Option<TimestampView>,
        updated: Option<TimestampView>,
        /// As a set, as the codec folds them.
        finalizers: BTreeSet<String>,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
    }

    /// What prost decoded, in the same form.
    fn expected(message: &pb::Resource) -> (Option<FoldedMetadata>, Option<(Vec<u8>, String)>) {
        let metadata = message.metadata.as_ref().map(|md| FoldedMetadata {
            strings: [
                md.namespace.clone(),
                md.r#type.clone(),
                md.id.clone(),
                md.version.clone(),
                md.owner.clone(),
                md.phase.clone(),
            ],
            created: ts(&md.created),
            updated: ts(&md.updated),
            finalizers: md.finalizers.iter().cloned().collect(),
            labels: md.labels.clone(),
            annotations: md.annotations.clone(),
        });
        let spec = message
            .spec
            .as_ref()
            .map(|s| (s.proto_spec.clone(), s.yaml_spec.clone()));
        (metadata, spec)
    }

    /// Reads `bytes` both ways: both fail, or both read the same fields.
    fn same_as_prost(bytes: &[u8]) -> Result<(), TestCaseError> {
        match (pb::Resource::decode(bytes), ResourceView::parse(bytes)) {
            (Ok(message), Ok(view)) => prop_assert_eq!(folded(&view), expected(&message)),
            (Err(_), Err(_)) => {}
            (prost, view) => prop_assert!(false, "prost: {prost:?}, in place: {view:?}"),
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn a_message_reads_in_place_as_prost_decodes_it(message in resource()) {
            same_as_prost(&message.encode_to_vec())?;
        }

        #[test]
        fn concatenated_messages_merge_as_in_prost(a in resource(), b in resource()) {
            let mut bytes = a.encode_to_vec();
            bytes.extend(b.encode_to_vec());
            same_as_prost(&bytes)?;
        }

        #[test]
        fn damaged_messages_fail_or_read_as_in_prost(
            message in resource(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = message.encode_to_vec();
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = byte;
                bytes.truncate(cut.index(bytes.len()) + 1);
            }
            same_as_prost(&bytes)?;
        }

        #[test]
        fn arbitrary_bytes_fail_or_read_as_in_prost(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            same_as_prost(&bytes)?;
        }

        #[test]
        fn parts_write_the_bytes_prost_writes(
            md in metadata(),
            created in timestamp(),
            updated in timestamp(),
            finalizers in proptest::collection::btree_set(text(), 0..3),
            proto_spec in proptest::collection::vec(any::<u8>(), 0..6),
            yaml_spec in text(),
        ) {
            let parts = ResourceParts {
                namespace: &md.namespace,
                resource_type: &md.r#type,
                id: &md.id,
                version: &md.version,
                owner: &md.owner,
                phase: &md.phase,
                created: TimestampView { seconds: created.seconds, nanos: created.nanos },
                updated: TimestampView { seconds: updated.seconds, nanos: updated.nanos },
                finalizers: &finalizers,
                labels: &md.labels,
                annotations: &md.annotations,
                proto_spec: &proto_spec,
                yaml_spec: &yaml_spec,
            };
            let message = pb::Resource {
                metadata: Some(pb::Metadata {
                    created: Some(created),
                    updated: Some(updated),
                    finalizers: finalizers.iter().cloned().collect(),
                    ..md.clone()
                }),
                spec: Some(pb::Spec { proto_spec: proto_spec.clone(), yaml_spec: yaml_spec.clone() }),
            };
            prop_assert_eq!(parts.encode(), message.encode_to_vec());
        }
    }

    #[test]
    fn a_map_entry_under_another_wire_type_is_refused_as_in_prost() {
        // Metadata whose field 10 (labels) has wire type varint, followed by what would be a
        // two-byte entry if the varint were read as its length.
        let metadata = [0x50, 0x02, 0x0a, 0x00];
        let mut bytes = vec![0x0a, metadata.len() as u8];
        bytes.extend(metadata);
        same_as_prost(&bytes).unwrap();
        assert_eq!(
            ResourceView::parse(&bytes).unwrap_err().to_string(),
            "invalid wire type: Varint (expected LengthDelimited)"
        );
    }

    #[test]
    fn an_empty_finalizer_is_written_like_any_other() {
        let finalizers = BTreeSet::from([String::new()]);
        let empty = BTreeMap::new();
        let parts = ResourceParts {
            namespace: "n",
            resource_type: "t",
            id: "i",
            version: "1",
            owner: "",
            phase: "running",
            created: TimestampView::default(),
            updated: TimestampView::default(),
            finalizers: &finalizers,
            labels: &empty,
            annotations: &empty,
            proto_spec: b"",
            yaml_spec: "",
        };
        let decoded = pb::Resource::decode(&parts.encode()[..]).unwrap();
        assert_eq!(decoded.metadata.unwrap().finalizers, vec![String::new()]);
    }
}
