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

use std::sync::Arc;

use cosi_core::{
    Bookmark, DynamicResource, Error, Event, Kind, Metadata, Pointer, Result, Version,
};
use tonic::Status;

use crate::codec::{encode_metadata, Codec, Reader};
use crate::proto::resource::{self as pb, EventType};
use crate::query::{decode_bookmark, encode_bookmark};
use crate::status::{error_detail, from_detail, to_status, Call};

/// The protocol level that adds `RESYNC`, `compacted` and structured errors.
pub const API_EXTENDED: i32 = 2;

/// What the server does with one event.
#[derive(Debug)]
pub enum Outgoing {
    /// Send it.
    Send(pb::Event),
    /// Send it, then end the stream (an `ERRORED` event).
    Last(pb::Event),
    /// The client's level has no such event: skip it.
    Skip,
    /// End the stream with this status instead.
    End(Status),
}

fn marker(kind: &Kind) -> pb::Resource {
    let metadata = Metadata::new(Pointer::new(kind.namespace(), kind.resource_type(), ""));
    pb::Resource {
        metadata: Some(encode_metadata(&metadata)),
        spec: Some(pb::Spec::default()),
    }
}

fn errored(kind: &Kind, error: &Error, api: i32) -> pb::Event {
    pb::Event {
        resource: Some(marker(kind)),
        event_type: EventType::Errored as i32,
        old: None,
        error: Some(format!(
            "namespace {:?} type {:?}: {error}",
            kind.namespace(),
            kind.resource_type()
        )),
        bookmark: None,
        compacted: false,
        error_detail: (api >= API_EXTENDED).then(|| error_detail(error)),
    }
}

/// Encodes `event` of a watch on `kind` for a client at level `api`.
pub fn encode_event(codec: &Codec, kind: &Kind, event: &Event, api: i32, yaml: bool) -> Outgoing {
    let extended = api >= API_EXTENDED;
    let resource_event = |event_type: EventType,
                          resource: &cosi_core::SharedResource,
                          old: Option<&cosi_core::SharedResource>,
                          bookmark: &Bookmark,
                          compacted: bool| {
        let encode = |r: &cosi_core::SharedResource| codec.encode(&**r, yaml);
        let resource = encode(resource)?;
        let old = old.map(encode).transpose()?;
        Ok::<_, Error>(pb::Event {
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
            Ok(pb::Event {
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

/// Decodes an event of a watch on `kind`.
pub fn decode_event(codec: &Codec, kind: &Kind, event: pb::Event) -> Result<Incoming> {
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
    let resource = |r: Option<pb::Resource>| -> Result<cosi_core::SharedResource> {
        let r = r.ok_or_else(|| Error::invalid(subject(), "event.resource", "missing"))?;
        decode_resource(codec, r)
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
                .map(|old| decode_resource(codec, old))
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
fn decode_resource(codec: &Codec, resource: pb::Resource) -> Result<cosi_core::SharedResource> {
    let tombstone = resource
        .metadata
        .as_ref()
        .is_some_and(|md| crate::codec::decode_version(&md.version) == Ok(Version::UNSET))
        && resource
            .spec
            .as_ref()
            .is_none_or(|s| s.proto_spec.is_empty() && s.yaml_spec.is_empty());
    if tombstone {
        let md = crate::codec::decode_metadata(resource.metadata.unwrap_or_default())?;
        return Ok(Arc::new(DynamicResource {
            metadata: md,
            spec: serde_json::Value::Null,
        }));
    }
    codec.decode(resource, Reader::Client)
}
