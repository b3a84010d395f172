//! Calls whose answers are kept as the bytes received ([`RawCodec`]), for the client to read in
//! place: a watch response's events one at a time ([`super::watch_frame`], its messages cut
//! out by [`super::watch_body`]), the resource of a
//! Get, Create or Update answer straight from its bytes ([`resource_of`]). The generated
//! message would be built first, a heap value for each repeated entry on the wire: a message of
//! 2-byte empty entries cost the client some 20 times its size before it could look at it.

use std::borrow::Cow;
use std::marker::PhantomData;

use bytes::{Buf, Bytes};
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::Status;

use crate::server::MAX_MESSAGE_SIZE;

/// A method of the State service.
#[derive(Clone, Copy, Debug)]
pub(super) struct Method {
    name: &'static str,
    path: &'static str,
}

impl Method {
    pub(super) const GET: Method = Method::new("Get", "/cosi.resource.State/Get");
    pub(super) const CREATE: Method = Method::new("Create", "/cosi.resource.State/Create");
    pub(super) const UPDATE: Method = Method::new("Update", "/cosi.resource.State/Update");
    pub(super) const WATCH: Method = Method::new("Watch", "/cosi.resource.State/Watch");

    const fn new(name: &'static str, path: &'static str) -> Method {
        Method { name, path }
    }

    pub(super) fn path(self) -> http::uri::PathAndQuery {
        http::uri::PathAndQuery::from_static(self.path)
    }

    /// `request`, named as the generated client names it.
    pub(super) fn named<T>(self, mut request: tonic::Request<T>) -> tonic::Request<T> {
        request
            .extensions_mut()
            .insert(tonic::GrpcMethod::new("cosi.resource.State", self.name));
        request
    }
}

/// Writes the request as prost does; reads each response as its bytes, made a `Frame`.
pub(super) struct RawCodec<Request, Frame>(PhantomData<fn(Request) -> Frame>);

impl<Request, Frame> Default for RawCodec<Request, Frame> {
    fn default() -> Self {
        RawCodec(PhantomData)
    }
}

impl<Request, Frame> Codec for RawCodec<Request, Frame>
where
    Request: Message + Send + 'static,
    Frame: From<Bytes> + Send + 'static,
{
    type Encode = Request;
    type Decode = Frame;
    type Encoder = Self;
    type Decoder = Self;

    fn encoder(&mut self) -> Self {
        Self::default()
    }

    fn decoder(&mut self) -> Self {
        Self::default()
    }
}

impl<Request: Message, Frame> Encoder for RawCodec<Request, Frame> {
    type Item = Request;
    type Error = Status;

    fn encode(&mut self, item: Request, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the request: {e}")))
    }
}

impl<Request, Frame: From<Bytes>> Decoder for RawCodec<Request, Frame> {
    type Item = Frame;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Frame>, Status> {
        Ok(Some(Frame::from(src.copy_to_bytes(src.remaining()))))
    }
}

/// A client of the State service on `channel`, as the generated one is set up.
pub(super) async fn ready<T>(channel: T) -> Result<tonic::client::Grpc<T>, Status>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError> + std::fmt::Display,
{
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_SIZE)
        .max_encoding_message_size(MAX_MESSAGE_SIZE);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
    Ok(grpc)
}

/// Calls the State service's unary `method`, as the generated client does; the answer as its
/// bytes.
pub(super) async fn unary<Request: Message + Send + 'static>(
    channel: &Channel,
    method: Method,
    request: tonic::Request<Request>,
) -> Result<Bytes, Status> {
    let mut grpc = ready(channel.clone()).await?;
    let codec = RawCodec::<Request, Bytes>::default();
    Ok(grpc
        .unary(method.named(request), method.path(), codec)
        .await?
        .into_inner())
}

/// The `Resource` message of an answer whose field 1 is the resource (`GetResponse`,
/// `CreateResponse`, `UpdateResponse`), as prost reads it: absent, or each occurrence merged
/// into the last (the concatenation of their bytes, which protobuf reads as that merge); other
/// fields skipped; field 1 of another wire type an error.
pub(super) fn resource_of(answer: &[u8]) -> Result<Option<Cow<'_, [u8]>>, String> {
    let mut buf = answer;
    let mut resource: Option<Cow<'_, [u8]>> = None;
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf).map_err(|e| e.to_string())?;
        if tag != 1 {
            skip_field(wire_type, tag, &mut buf, DecodeContext::default())
                .map_err(|e| e.to_string())?;
            continue;
        }
        if wire_type != WireType::LengthDelimited {
            return Err(format!(
                "invalid wire type: {wire_type:?} (expected {:?})",
                WireType::LengthDelimited
            ));
        }
        let len = decode_varint(&mut buf).map_err(|e| e.to_string())?;
        let len = usize::try_from(len)
            .ok()
            .filter(|len| *len <= buf.len())
            .ok_or_else(|| "buffer underflow".to_string())?;
        let (occurrence, rest) = buf.split_at(len);
        buf = rest;
        resource = Some(match resource {
            None => Cow::Borrowed(occurrence),
            Some(earlier) => {
                let mut merged = earlier.into_owned();
                merged.extend_from_slice(occurrence);
                Cow::Owned(merged)
            }
        });
    }
    Ok(resource)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::resource as pb;
    use proptest::prelude::*;

    fn resource(id: &str, labels: &[(&str, &str)]) -> pb::Resource {
        pb::Resource {
            metadata: Some(pb::Metadata {
                id: id.into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            spec: None,
        }
    }

    /// What prost reads as the answer's resource, and what `resource_of` finds, decoded.
    fn both(bytes: &[u8]) -> (Option<pb::Resource>, Option<pb::Resource>) {
        let prost = pb::GetResponse::decode(bytes).unwrap().resource;
        let found = resource_of(bytes)
            .unwrap()
            .map(|r| pb::Resource::decode(&r[..]).unwrap());
        (prost, found)
    }

    #[test]
    fn an_answer_s_resource_is_its_field_1_as_prost_reads_it() {
        let answer = pb::GetResponse {
            resource: Some(resource("a", &[("k", "v")])),
        };
        let (prost, found) = both(&answer.encode_to_vec());
        assert_eq!(found, prost);
        assert_eq!(found, Some(resource("a", &[("k", "v")])));
        assert_eq!(both(&[]), (None, None));
    }

    #[test]
    fn a_resource_sent_twice_merges_as_in_prost() {
        let mut bytes = pb::GetResponse {
            resource: Some(resource("a", &[("k", "v")])),
        }
        .encode_to_vec();
        bytes.extend([0x10, 0x07]); // field 2, a varint: unknown, skipped
        bytes.extend(
            pb::GetResponse {
                resource: Some(resource("", &[("j", "w")])),
            }
            .encode_to_vec(),
        );
        let (prost, found) = both(&bytes);
        assert_eq!(found, prost);
        assert_eq!(found, Some(resource("a", &[("j", "w"), ("k", "v")])));
    }

    #[test]
    fn a_resource_field_of_another_wire_type_is_refused_as_in_prost() {
        let bytes = [0x08, 0x01]; // field 1, a varint
        assert!(pb::GetResponse::decode(&bytes[..]).is_err());
        assert_eq!(
            resource_of(&bytes).unwrap_err(),
            "invalid wire type: Varint (expected LengthDelimited)"
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_fail_or_give_the_resource_prost_reads(
            bytes in proptest::collection::vec(any::<u8>(), 0..48),
        ) {
            let prost = pb::GetResponse::decode(&bytes[..]);
            let found = resource_of(&bytes);
            match (prost, found) {
                (Ok(answer), Ok(found)) => {
                    let found = match found {
                        None => None,
                        Some(r) => match pb::Resource::decode(&r[..]) {
                            Ok(r) => Some(r),
                            Err(_) => return Err(TestCaseError::fail("prost read it, merged not")),
                        },
                    };
                    prop_assert_eq!(found, answer.resource);
                }
                // The resource's own bytes are read later: prost may refuse them where
                // `resource_of` does not look inside.
                (Err(_), Ok(Some(r))) => prop_assert!(pb::Resource::decode(&r[..]).is_err()),
                (Err(_), Err(_)) => {}
                (prost, found) => prop_assert!(false, "prost: {prost:?}, found: {found:?}"),
            }
        }
    }
}
