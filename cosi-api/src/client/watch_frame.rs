//! A watch response read one event at a time: the client keeps the received message as its
//! bytes ([`WatchFrame`]) and decodes each event when it delivers it. Decoding the generated
//! `WatchResponse` first built every event of the message at once, some 400 bytes for each
//! 2 bytes of an empty event on the wire: a 32 MiB message from a wrong or hostile server cost
//! gigabytes before the client could refuse it.
//!
//! The events are read as prost reads `repeated Event event = 1`: each occurrence of field 1 is
//! one event, other fields are skipped, field 1 with another wire type is an error.

use bytes::{Buf, Bytes};
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::Message;
use tonic::codec::Streaming;
use tonic::transport::Channel;
use tonic::Status;

use crate::proto::encoded;
use crate::proto::resource as pb;

use super::raw_answer::Method;
use super::watch_body;

/// One received `WatchResponse`, undecoded.
#[derive(Clone, Debug, Default)]
pub(super) struct WatchFrame(Bytes);

impl WatchFrame {
    /// The events, decoded as they are taken; after an error, none.
    pub(super) fn events(&self) -> Events {
        Events(self.0.clone())
    }
}

/// The events of a [`WatchFrame`].
pub(super) struct Events(Bytes);

impl Events {
    fn read(&mut self) -> Result<Option<encoded::Event>, String> {
        let buf = &mut self.0;
        while buf.has_remaining() {
            let (tag, wire_type) = decode_key(buf).map_err(|e| e.to_string())?;
            if tag != 1 {
                skip_field(wire_type, tag, buf, DecodeContext::default())
                    .map_err(|e| e.to_string())?;
                continue;
            }
            if wire_type != WireType::LengthDelimited {
                return Err(format!(
                    "invalid wire type: {wire_type:?} (expected {:?})",
                    WireType::LengthDelimited
                ));
            }
            let len = decode_varint(buf).map_err(|e| e.to_string())?;
            let len = usize::try_from(len)
                .ok()
                .filter(|len| *len <= buf.remaining())
                .ok_or_else(|| "buffer underflow".to_string())?;
            let event = buf.split_to(len);
            return encoded::Event::decode(event)
                .map(Some)
                .map_err(|e| e.to_string());
        }
        Ok(None)
    }
}

impl Iterator for Events {
    type Item = Result<encoded::Event, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let read = self.read().transpose();
        if matches!(read, Some(Err(_))) {
            self.0 = Bytes::new();
        }
        read
    }
}

impl From<Bytes> for WatchFrame {
    fn from(bytes: Bytes) -> Self {
        WatchFrame(bytes)
    }
}

/// Calls `Watch` on `channel`, as the generated client does, with responses as frames.
pub(super) async fn call(
    channel: &Channel,
    request: tonic::Request<pb::WatchRequest>,
) -> Result<Streaming<WatchFrame>, Status> {
    watch_body::server_streaming(channel, Method::WATCH, request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_yields_the_events_prost_would_decode() {
        let event = |id: u8| encoded::Event {
            bookmark: Some(vec![id]),
            event_type: 5,
            ..Default::default()
        };
        let response = encoded::WatchResponse {
            event: vec![event(1), encoded::Event::default(), event(2)],
        };
        let frame = WatchFrame(Bytes::from(response.encode_to_vec()));
        let events: Result<Vec<_>, _> = frame.events().collect();
        assert_eq!(events.unwrap(), response.event);
    }

    #[test]
    fn a_malformed_frame_yields_its_events_up_to_an_error_then_none() {
        let mut bytes = encoded::WatchResponse {
            event: vec![encoded::Event::default()],
        }
        .encode_to_vec();
        bytes.extend([0x0a, 0x05, 0x01]); // field 1, 5 bytes announced, 1 there
        let mut events = WatchFrame(Bytes::from(bytes)).events();
        assert_eq!(events.next(), Some(Ok(encoded::Event::default())));
        assert_eq!(events.next(), Some(Err("buffer underflow".to_string())));
        assert_eq!(events.next(), None);
    }
}
