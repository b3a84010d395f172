//! The checks behind the `wire_resource` and `wire_watch` fuzz targets: the remote API's
//! decoding of what arrives from the network (a `Resource` message, a `WatchRequest`'s label
//! and id queries and bookmark). Shared with `cosi-api/tests/fuzz_corpus.rs`, which includes
//! this file and replays the corpora on a normal `cargo test`. Kept out of `lib.rs` so that
//! cosi-core's corpus test, which includes `lib.rs`, does not need cosi-api.

use std::sync::Arc;

use cosi_api::codec::{Codec, Reader, Tombstones};
use cosi_api::proto::resource as pb;
use cosi_api::query::{decode_bookmark, decode_ids, decode_labels, encode_labels};
use cosi_core::{same_content, Registry, ResourceSpec};
use prost::Message;
use serde::{Deserialize, Serialize};

/// What a check made of its input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WireOutcome {
    /// Decoded, and every round trip held.
    Accepted,
    /// Refused with an error (not a panic).
    Rejected,
}

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Note {
    text: String,
}

impl ResourceSpec for Note {
    const TYPE: &'static str = "Notes.fuzz.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "fuzz";
}

fn codec() -> Codec {
    let mut registry = Registry::new();
    registry
        .register::<Note>()
        .expect("the fuzz type registers");
    Codec::new(Arc::new(registry))
}

/// Decodes `data` as a `Resource` message and then as a resource of the registry; a decoded
/// resource must encode and decode back to the same resource (metadata with timestamps, spec).
/// Reading the message in place (`Codec::decode_bytes`) must agree with decoding the generated
/// message: both refuse, or both make the same resource.
pub fn wire_resource(data: &[u8]) -> WireOutcome {
    let codec = codec();
    let in_place = codec.decode_bytes(data, Reader::Server, Tombstones::Typed);
    let decoded = pb::Resource::decode(data)
        .ok()
        .and_then(|message| codec.decode(message, Reader::Server).ok());
    let resource = match (decoded, in_place) {
        (Some(resource), Ok(same)) => {
            assert!(
                same_content(&*resource, &*same),
                "{resource:?} read in place as {same:?}"
            );
            assert_eq!(resource.metadata().created(), same.metadata().created());
            assert_eq!(resource.metadata().updated(), same.metadata().updated());
            resource
        }
        (None, Err(_)) => return WireOutcome::Rejected,
        (decoded, in_place) => {
            panic!("decoded as {decoded:?} but read in place as {in_place:?}")
        }
    };
    let bytes = codec
        .encode_bytes(&*resource, true)
        .unwrap_or_else(|e| panic!("a decoded resource does not encode: {e}"));
    let encoded = codec
        .encode(&*resource, true)
        .unwrap_or_else(|e| panic!("a decoded resource does not encode: {e}"));
    assert_eq!(
        bytes,
        encoded.encode_to_vec(),
        "written straight and through the message differ"
    );
    let back = codec
        .decode(encoded, Reader::Server)
        .unwrap_or_else(|e| panic!("an encoded resource does not decode: {e}"));
    assert!(
        same_content(&*resource, &*back),
        "{resource:?} came back as {back:?}"
    );
    assert_eq!(resource.metadata().created(), back.metadata().created());
    assert_eq!(resource.metadata().updated(), back.metadata().updated());
    WireOutcome::Accepted
}

/// Decodes `data` as a `WatchRequest` and its queries and bookmark as the server does; decoded
/// label queries must encode and decode back equal.
pub fn wire_watch(data: &[u8]) -> WireOutcome {
    let Ok(request) = pb::WatchRequest::decode(data) else {
        return WireOutcome::Rejected;
    };
    let options = request.options.unwrap_or_default();
    let Ok(labels) = decode_labels("fuzz", options.label_query) else {
        return WireOutcome::Rejected;
    };
    let back = decode_labels("fuzz", encode_labels(&labels))
        .unwrap_or_else(|e| panic!("encoded label queries do not decode: {e}"));
    assert_eq!(back, labels);
    if decode_ids("fuzz", options.id_query).is_err() {
        return WireOutcome::Rejected;
    }
    if let Some(bytes) = options.start_from_bookmark {
        // Opaque: any bytes are carried as they are, and come back the same.
        assert_eq!(decode_bookmark(&bytes).to_bytes(), bytes);
    }
    WireOutcome::Accepted
}
