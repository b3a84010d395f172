//! Watch events on the wire, both directions, per protocol level (`api_version`):
//!
//! - 0: `CREATED`, `UPDATED`, `DESTROYED`, `NOOP` only;
//! - 1: adds `BOOTSTRAPPED` and `ERRORED` (the original's clients send 1);
//! - 2 (this project's client): adds `RESYNC`, the `compacted` flag and the structured error of
//!   `ERRORED`.
//!
//! A level below 2 cannot express a resync: such a watch ends there (an `ERRORED` event at
//! level 1, an `Aborted` status at level 0), which is what the original's clients do on a
//! buffer overrun. Catch-up events reach them as ordinary events (an `UPDATED` without `old`).

use cosi_core::{Bookmark, Error, Event, Kind, Metadata, Pointer, Result, SharedResource};
use prost::bytes::Bytes;
use prost::Message;
use tonic::Status;

use crate::codec::{encode_metadata, Codec, Reader, Tombstones};
use crate::proto::encoded;
use crate::proto::resource::{self as pb, EventType};
use crate::query::{decode_bookmark, encode_bookmark};
use crate::status::{clipped, clipped_detail, error_detail, from_detail, to_status, Call};

/// The protocol level that adds `RESYNC`, `compacted` and structured errors.
pub const API_EXTENDED: i32 = 2;

/// What the server does with one event.
#[derive(Debug)]
pub enum Outgoing {
    /// Send it.
    Send(encoded::Event),
    /// Send it, then end the stream (an `ERRORED` event).
    Last(encoded::Event),
    /// The client's level has no such event: skip it.
    Skip,
    /// End the stream with this status instead.
    End(Status),
}

/// The resource of an event about the kind rather than a resource (bookmarks, errors).
fn marker(kind: &Kind) -> Bytes {
    let metadata = Metadata::new(Pointer::new(kind.namespace(), kind.resource_type(), ""));
    let message = pb::Resource {
        metadata: Some(encode_metadata(&metadata)),
        spec: Some(pb::Spec::default()),
    };
    Bytes::from(message.encode_to_vec())
}

fn errored(kind: &Kind, error: &Error, api: i32) -> encoded::Event {
    encoded::Event {
        resource: Some(marker(kind)),
        event_type: EventType::Errored as i32,
        old: None,
        // Cut as a status's texts are: the error may quote what a caller sent.
        error: Some(clipped(&format!(
            "namespace {:?} type {:?}: {error}",
            kind.namespace(),
            kind.resource_type()
        ))),
        bookmark: None,
        compacted: false,
        error_detail: (api >= API_EXTENDED).then(|| clipped_detail(&error_detail(error))),
    }
}

/// Encodes `event` of a watch on `kind` for a client at level `api` (`yaml`: with the YAML
/// specs).
///
/// ```
/// use std::sync::Arc;
/// use cosi_api::codec::Codec;
/// use cosi_api::events::{decode_event, encode_event, Outgoing, API_EXTENDED};
/// use cosi_core::{Bookmark, Event, Registry, Resource, ResourceSpec};
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
/// let mut created = Resource::new("h", Hostname { name: "node-1".into() });
/// created.metadata.set_version(cosi_core::Version::new(1));
/// let event = Event::Created {
///     resource: created.into_shared(),
///     bookmark: Bookmark::from_bytes(b"1"),
///     compacted: false,
/// };
/// let Outgoing::Send(wire) = encode_event(&codec, &Hostname::kind(), &event, API_EXTENDED, false)
/// else { unreachable!() };
/// let back = decode_event(&codec, &Hostname::kind(), wire).unwrap();
/// assert_eq!(back.event.resource().unwrap().metadata().id(), "h");
/// assert_eq!(back.bookmark.as_deref(), Some(&b"1"[..]));
/// ```
pub fn encode_event(codec: &Codec, kind: &Kind, event: &Event, api: i32, yaml: bool) -> Outgoing {
    encode_event_with(kind, event, api, &mut |r: &SharedResource| {
        codec.encode_bytes(&**r, yaml)
    })
}

/// [`encode_event`] with each resource's bytes from `encode` (a server shares them between
/// the watches that send the same resource).
pub fn encode_event_with(
    kind: &Kind,
    event: &Event,
    api: i32,
    encode: &mut dyn FnMut(&SharedResource) -> Result<Bytes>,
) -> Outgoing {
    let extended = api >= API_EXTENDED;
    let mut resource_event = |event_type: EventType,
                              resource: &SharedResource,
                              old: Option<&SharedResource>,
                              bookmark: &Bookmark,
                              compacted: bool| {
        let resource = encode(resource)?;
        let old = old.map(&mut *encode).transpose()?;
        Ok::<_, Error>(encoded::Event {
            resource: Some(resource),
            event_type: event_type as i32,
            old,
            error: None,
            bookmark: Some(encode_bookmark(bookmark)),
            compacted: extended && compacted,
            error_detail: None,
        })
    };
    let encoded = match event {
        Event::Created {
            resource,
            bookmark,
            compacted,
        } => resource_event(EventType::Created, resource, None, bookmark, *compacted),
        Event::Updated {
            old,
            resource,
            bookmark,
            compacted,
        } => resource_event(
            EventType::Updated,
            resource,
            old.as_ref(),
            bookmark,
            *compacted,
        ),
        Event::Destroyed {
            resource,
            bookmark,
            compacted,
        } => resource_event(EventType::Destroyed, resource, None, bookmark, *compacted),
        Event::Bootstrapped { bookmark }
        | Event::Noop { bookmark }
        | Event::Resync { bookmark } => {
            let event_type = match event {
                Event::Bootstrapped { .. } => EventType::Bootstrapped,
                Event::Noop { .. } => EventType::Noop,
                _ => EventType::Resync,
            };
            if event_type == EventType::Bootstrapped && api < 1 {
                return Outgoing::Skip;
            }
            if event_type == EventType::Resync && !extended {
                let error = Error::Backend {
                    subject: kind.to_string(),
                    message: "the watch fell behind and must be restarted (resync)".into(),
                    retryable: true,
                    source: None,
                };
                return if api < 1 {
                    Outgoing::End(to_status(&error, Call::Watch))
                } else {
                    Outgoing::Last(errored(kind, &error, api))
                };
            }
            Ok(encoded::Event {
                resource: Some(marker(kind)),
                event_type: event_type as i32,
                old: None,
                error: None,
                bookmark: Some(encode_bookmark(bookmark)),
                compacted: false,
                error_detail: None,
            })
        }
        Event::Errored { error } => {
            return if api < 1 {
                Outgoing::End(to_status(error, Call::Watch))
            } else {
                Outgoing::Last(errored(kind, error, api))
            };
        }
        other => Err(Error::Unsupported {
            subject: kind.to_string(),
            message: format!("event {} has no wire form", other.type_name()),
        }),
    };
    match encoded {
        Ok(event) => Outgoing::Send(event),
        // A stored resource that cannot be encoded ends the watch with the reason.
        Err(error) if api >= 1 => Outgoing::Last(errored(kind, &error, api)),
        Err(error) => Outgoing::End(to_status(&error, Call::Watch)),
    }
}

/// A received event: the event, and the raw bookmark it carried (the resume position).
#[derive(Debug)]
pub struct Incoming {
    /// The event.
    pub event: Event,
    /// The bookmark bytes, if the event had any.
    pub bookmark: Option<Vec<u8>>,
}

/// Decodes an event of a watch on `kind` (see [`encode_event`] for an example).
pub fn decode_event(codec: &Codec, kind: &Kind, event: encoded::Event) -> Result<Incoming> {
    // Formatted only for an error: formatting it for every event was 1.6 % of all of w8's
    // instructions.
    let subject = || kind.to_string();
    let raw = event.bookmark;
    let bookmark = match &raw {
        Some(bytes) => decode_bookmark(bytes),
        // A peer's event without a bookmark (the reference's initial single-watch event):
        // an empty one, which no store resumes from.
        None => Bookmark::from_bytes(&[]),
    };
    let event_type = EventType::try_from(event.event_type).map_err(|_| {
        Error::invalid(
            subject(),
            "event.event_type",
            format!("unknown event type {}", event.event_type),
        )
    })?;
    let resource = |r: Option<Bytes>| -> Result<SharedResource> {
        let r = r.ok_or_else(|| Error::invalid(subject(), "event.resource", "missing"))?;
        decode_resource(codec, &r)
    };
    let compacted = event.compacted;
    let event = match event_type {
        EventType::Created => Event::Created {
            resource: resource(event.resource)?,
            bookmark,
            compacted,
        },
        EventType::Updated => Event::Updated {
            old: event
                .old
                .map(|old| decode_resource(codec, &old))
                .transpose()?,
            resource: resource(event.resource)?,
            bookmark,
            compacted,
        },
        EventType::Destroyed => Event::Destroyed {
            resource: resource(event.resource)?,
            bookmark,
            compacted,
        },
        EventType::Bootstrapped => Event::Bootstrapped { bookmark },
        EventType::Noop => Event::Noop { bookmark },
        EventType::Resync => Event::Resync { bookmark },
        EventType::Errored => {
            let error = event
                .error_detail
                .as_ref()
                .and_then(from_detail)
                .unwrap_or_else(|| Error::Backend {
                    subject: subject(),
                    message: event.error.unwrap_or_else(|| "watch failed".into()),
                    retryable: false,
                    source: None,
                });
            Event::Errored { error }
        }
    };
    Ok(Incoming {
        event,
        bookmark: raw,
    })
}

/// A resource of an event; a tombstone (never stored, no spec) stays dynamic, whatever its type.
fn decode_resource(codec: &Codec, bytes: &[u8]) -> Result<SharedResource> {
    codec.decode_bytes(bytes, Reader::Client, Tombstones::Dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::cosi_rs::ErrorDetail;
    use crate::resource_wire::tests::{resource, text};
    use proptest::prelude::*;

    fn event() -> impl Strategy<Value = pb::Event> {
        (
            proptest::option::of(resource()),
            prop_oneof![Just(0), Just(1), Just(2), Just(5), Just(1000), any::<i32>()],
            proptest::option::of(resource()),
            proptest::option::of(text()),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            any::<bool>(),
            proptest::option::of(
                (0..13i32, text()).prop_map(|(kind, namespace)| ErrorDetail {
                    kind,
                    namespace,
                    ..Default::default()
                }),
            ),
        )
            .prop_map(
                |(resource, event_type, old, error, bookmark, compacted, error_detail)| pb::Event {
                    resource,
                    event_type,
                    old,
                    error,
                    bookmark,
                    compacted,
                    error_detail,
                },
            )
    }

    /// The twin of `event`, each resource as its encoded bytes.
    fn twin(event: &pb::Event) -> encoded::Event {
        let bytes = |r: &pb::Resource| Bytes::from(r.encode_to_vec());
        encoded::Event {
            resource: event.resource.as_ref().map(bytes),
            event_type: event.event_type,
            old: event.old.as_ref().map(bytes),
            error: event.error.clone(),
            bookmark: event.bookmark.clone(),
            compacted: event.compacted,
            error_detail: event.error_detail.clone(),
        }
    }

    #[test]
    fn an_error_event_carries_its_texts_cut_as_a_status_does() {
        let kind = Kind::new("ns", "Things.test.dev");
        let error = Error::invalid(
            "ns/Things.test.dev/x",
            "metadata.labels",
            "é".repeat(1 << 19),
        );
        let Outgoing::Last(event) =
            encode_event_with(&kind, &Event::Errored { error }, API_EXTENDED, &mut |_| {
                unreachable!("an error event encodes no resource")
            })
        else {
            panic!("an error event is the watch's last");
        };
        let text = event.error.unwrap();
        assert_eq!(text.len(), crate::status::MAX_STATUS_TEXT + "…".len());
        assert!(
            text.starts_with(
                "namespace \"ns\" type \"Things.test.dev\": ns/Things.test.dev/x: invalid \
                 metadata.labels: éé"
            ),
            "{text}"
        );
        assert!(text.ends_with('…'), "{text}");
        let detail = event.error_detail.unwrap();
        assert!(detail.message.len() <= crate::status::MAX_STATUS_TEXT + "…".len());
        assert_eq!(detail.field, "metadata.labels");
    }

    proptest! {
        #[test]
        fn an_encoded_watch_response_is_the_same_bytes_as_the_protocols(
            events in proptest::collection::vec(event(), 0..4),
        ) {
            let protocol = pb::WatchResponse { event: events.clone() };
            let wire = encoded::WatchResponse { event: events.iter().map(twin).collect() };
            prop_assert_eq!(wire.encode_to_vec(), protocol.encode_to_vec());
            // And the protocol's bytes read back as the twin.
            let back = encoded::WatchResponse::decode(&protocol.encode_to_vec()[..]).unwrap();
            prop_assert_eq!(back, wire);
        }

        #[test]
        fn an_encoded_list_response_is_the_same_bytes_as_the_protocols(
            resource in proptest::option::of(resource()),
        ) {
            let protocol = pb::ListResponse { resource: resource.clone() };
            let wire = encoded::ListResponse {
                resource: resource.map(|r| Bytes::from(r.encode_to_vec())),
            };
            prop_assert_eq!(wire.encode_to_vec(), protocol.encode_to_vec());
            let back = encoded::ListResponse::decode(&protocol.encode_to_vec()[..]).unwrap();
            prop_assert_eq!(back, wire);
        }
    }
}
