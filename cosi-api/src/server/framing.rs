//! The State service's streamed answers (Watch, List), framed into HTTP/2 data by the server
//! itself rather than by tonic's encoder, so that a stream holds no buffer between its
//! messages: an idle watch that once sent a 4 MiB update holds nothing of it.
//!
//! tonic encodes a stream's messages into one buffer per stream and hands HTTP/2 each frame as a
//! split of it (`EncodedBytes` in tonic's `codec/encode.rs`): the part it keeps shares the
//! allocation of the frame it handed out, and takes the whole allocation back for the next
//! message once HTTP/2 has dropped the frame (`BytesMut::reserve`). So a stream held the
//! capacity of the largest message it had ever sent for as long as it lived — 64 idle watches
//! that each sent one 4 MiB update held about 260 MiB — and tonic's `Encoder` API cannot
//! change that (it is handed the buffer only while encoding a message, never after one is sent).
//!
//! [`FramedState`] serves those two methods through tonic for everything but the response
//! body: tonic decodes the request, runs the service and builds the response head (or the
//! error answer) exactly as the generated server does, and [`MessageFrames`] then encodes the
//! service's messages into frames of their own: the gRPC framing tonic writes, byte for byte,
//! gathering the messages that are ready into one frame of up to [`YIELD_BYTES`], as tonic
//! does; each frame is freed once HTTP/2 has written it. Every other method goes to the
//! generated server unchanged.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use http_body::Frame;
use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec};
use tonic::codegen::BoxFuture;
use tonic::server::{Grpc, NamedService, ServerStreamingService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstEncoder;

use crate::bounded_codec::{Bounded, BoundedDecoder};
use crate::proto::resource::{self as pb, state_server};

use super::state::StateService;

/// The Watch method's path.
const WATCH: &str = "/cosi.resource.State/Watch";
/// The List method's path.
const LIST: &str = "/cosi.resource.State/List";

/// The bytes of ready messages gathered into one frame before it is handed to HTTP/2 (tonic's
/// default yield threshold, so the frames are the ones tonic made).
pub(crate) const YIELD_BYTES: usize = 32 * 1024;

/// The gRPC message header: a compression flag and the message's length.
const HEADER: usize = 5;

/// The State service, its Watch and List answers framed by [`MessageFrames`].
#[derive(Clone)]
pub(crate) struct FramedState {
    service: StateService,
    generated: state_server::StateServer<StateService>,
    max_message_size: usize,
}

impl FramedState {
    /// Serves `service`, messages limited to `max_message_size` bytes both ways.
    pub(crate) fn new(service: StateService, max_message_size: usize) -> Self {
        let generated = state_server::StateServer::new(service.clone())
            .max_decoding_message_size(max_message_size)
            .max_encoding_message_size(max_message_size);
        FramedState {
            service,
            generated,
            max_message_size,
        }
    }
}

impl NamedService for FramedState {
    const NAME: &'static str = state_server::SERVICE_NAME;
}

impl tower::Service<http::Request<Body>> for FramedState {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let service = self.service.clone();
        let max = self.max_message_size;
        match request.uri().path() {
            WATCH => Box::pin(async move {
                let call = move |r| watch(service.clone(), r);
                Ok(serve_framed(request, max, call).await)
            }),
            LIST => Box::pin(async move {
                let call = move |r| list(service.clone(), r);
                Ok(serve_framed(request, max, call).await)
            }),
            _ => tower::Service::call(&mut self.generated, request),
        }
    }
}

/// The service's Watch.
async fn watch(
    service: StateService,
    request: Request<pb::WatchRequest>,
) -> Result<Response<<StateService as state_server::State>::WatchStream>, Status> {
    state_server::State::watch(&service, request).await
}

/// The service's List.
async fn list(
    service: StateService,
    request: Request<pb::ListRequest>,
) -> Result<Response<<StateService as state_server::State>::ListStream>, Status> {
    state_server::State::list(&service, request).await
}

/// A service's stream of messages, type-erased.
type Messages<M> = Pin<Box<dyn Stream<Item = Result<M, Status>> + Send>>;

/// Where [`Handover`] leaves the stream of a call the service answered.
type Slot<M> = Arc<Mutex<Option<Messages<M>>>>;

/// Answers the server-streaming call `request` with `call`: tonic decodes the request and
/// builds the response's head (or its error answer, the service's or its own), and the
/// messages are framed by [`MessageFrames`].
async fn serve_framed<Req, M, F, Fut, S>(
    request: http::Request<Body>,
    max_message_size: usize,
    call: F,
) -> http::Response<Body>
where
    Req: prost::Message + Default + Bounded + Send + 'static,
    M: prost::Message + Send + 'static,
    F: Fn(Request<Req>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
    S: Stream<Item = Result<M, Status>> + Send + 'static,
{
    let slot: Slot<M> = Arc::default();
    let mut grpc = Grpc::new(RequestCodec::<M, Req>::default())
        .max_decoding_message_size(max_message_size)
        .max_encoding_message_size(max_message_size);
    let handover = Handover {
        call,
        slot: slot.clone(),
    };
    let response = grpc.server_streaming(handover, request).await;
    let messages = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    match messages {
        // tonic's body streams nothing: the call's messages were handed over.
        Some(messages) => {
            response.map(|_| Body::new(MessageFrames::new(messages, max_message_size)))
        }
        None => response,
    }
}

/// The service as tonic calls it: it runs the call and leaves the answer's stream in its slot,
/// giving tonic the answer's metadata and an empty stream.
struct Handover<F, M> {
    call: F,
    slot: Slot<M>,
}

impl<Req, M, F, Fut, S> ServerStreamingService<Req> for Handover<F, M>
where
    M: Send + 'static,
    F: Fn(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<S>, Status>> + Send + 'static,
    S: Stream<Item = Result<M, Status>> + Send + 'static,
{
    type Response = M;
    type ResponseStream = futures::stream::Empty<Result<M, Status>>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let answer = (self.call)(request);
        let slot = self.slot.clone();
        Box::pin(async move {
            let (metadata, messages, extensions) = answer.await?.into_parts();
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::pin(messages));
            Ok(Response::from_parts(
                metadata,
                futures::stream::empty(),
                extensions,
            ))
        })
    }
}

/// The codec tonic decodes the request with (the generated server's: prost's after the
/// request's repeated entries are counted, [`crate::bounded_codec`]); its encoder is never
/// given a message ([`Handover`]'s stream is empty), so it starts with no buffer.
struct RequestCodec<M, Req>(std::marker::PhantomData<(M, Req)>);

impl<M, Req> Default for RequestCodec<M, Req> {
    fn default() -> Self {
        RequestCodec(std::marker::PhantomData)
    }
}

impl<M, Req> Codec for RequestCodec<M, Req>
where
    M: prost::Message + Send + 'static,
    Req: prost::Message + Default + Bounded + Send + 'static,
{
    type Encode = M;
    type Decode = Req;
    type Encoder = ProstEncoder<M>;
    type Decoder = BoundedDecoder<Req>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::new(0, YIELD_BYTES))
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder::default()
    }
}

/// A stream of messages as an HTTP/2 response body: each message behind its gRPC header (no
/// compression), the messages that are ready gathered into one frame of up to [`YIELD_BYTES`]
/// (one larger message is a frame of its own), then the status as trailers. A frame is a new
/// allocation handed to HTTP/2 whole, so the body holds no buffer between frames. A message
/// larger than the limit ends the stream with `OutOfRange`, as tonic's encoder does, after the
/// messages before it.
pub(crate) struct MessageFrames<M> {
    messages: Messages<M>,
    max_message_size: usize,
    /// The status to end with, once the frame before it has been handed over.
    end: Option<Status>,
    ended: bool,
}

impl<M> MessageFrames<M> {
    /// Frames `messages`, each at most `max_message_size` bytes encoded.
    pub(crate) fn new(messages: Messages<M>, max_message_size: usize) -> Self {
        MessageFrames {
            messages,
            max_message_size,
            end: None,
            ended: false,
        }
    }

    /// The trailers that end the stream with `status`.
    fn trailers(&mut self, status: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.ended = true;
        let mut trailers = http::HeaderMap::new();
        Poll::Ready(Some(
            status
                .add_header(&mut trailers)
                .map(|()| Frame::trailers(trailers)),
        ))
    }
}

impl<M: prost::Message> MessageFrames<M> {
    /// Appends `message`, framed, to `frame`; a message over the limit is refused with the
    /// status tonic's encoder gives it.
    fn append(&self, frame: &mut BytesMut, message: &M) -> Result<(), Status> {
        let len = message.encoded_len();
        if len > self.max_message_size {
            return Err(Status::out_of_range(format!(
                "Error, encoded message length too large: found {len} bytes, the limit is: {} \
                 bytes",
                self.max_message_size
            )));
        }
        // The limit is at most u32::MAX in any server (a message of 4 GiB cannot be framed).
        let Ok(framed_len) = u32::try_from(len) else {
            return Err(Status::resource_exhausted(format!(
                "Cannot return body with more than 4GB of data but got {len} bytes"
            )));
        };
        frame.reserve(HEADER + len);
        frame.put_u8(0);
        frame.put_u32(framed_len);
        message.encode_raw(frame);
        Ok(())
    }
}

impl<M: prost::Message> http_body::Body for MessageFrames<M> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Some(status) = self.end.take() {
            return self.trailers(status);
        }
        let mut frame = BytesMut::new();
        loop {
            let status = match self.messages.as_mut().poll_next(cx) {
                Poll::Pending if frame.is_empty() => return Poll::Pending,
                Poll::Pending => break,
                Poll::Ready(Some(Ok(message))) => match self.append(&mut frame, &message) {
                    Ok(()) if frame.len() >= YIELD_BYTES => break,
                    Ok(()) => continue,
                    Err(status) => status,
                },
                Poll::Ready(Some(Err(status))) => status,
                Poll::Ready(None) => Status::ok(""),
            };
            if frame.is_empty() {
                return self.trailers(status);
            }
            self.end = Some(status);
            break;
        }
        Poll::Ready(Some(Ok(Frame::data(frame.freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::encoded;
    use http_body_util::BodyExt;
    use tonic::codec::{EncodeBody, SingleMessageCompressionOverride};

    /// Everything a body sends, as HTTP/2 takes it: its data, concatenated, up to and with its
    /// trailers (which end the stream: HTTP/2 polls no further).
    async fn sent(body: impl http_body::Body<Data = Bytes, Error = Status>) -> (Vec<u8>, String) {
        let mut body = std::pin::pin!(body);
        let mut data = Vec::new();
        while let Some(frame) = body.frame().await {
            match frame.unwrap().into_data() {
                Ok(bytes) => data.extend_from_slice(&bytes),
                Err(trailers) => return (data, format!("{:?}", trailers.into_trailers().ok())),
            }
        }
        (data, "no trailers".into())
    }

    fn responses(sizes: &[usize]) -> Vec<Result<encoded::ListResponse, Status>> {
        sizes
            .iter()
            .map(|&size| {
                Ok(encoded::ListResponse {
                    resource: (size > 0).then(|| Bytes::from(vec![b'r'; size])),
                })
            })
            .collect()
    }

    /// What tonic's encoder sends for `items` and what [`MessageFrames`] sends.
    async fn both(
        items: Vec<Result<encoded::ListResponse, Status>>,
        max: usize,
    ) -> ((Vec<u8>, String), (Vec<u8>, String)) {
        let tonic = EncodeBody::new_server(
            ProstEncoder::<encoded::ListResponse>::new(BufferSettings::default()),
            futures::stream::iter(items.clone()),
            None,
            SingleMessageCompressionOverride::default(),
            Some(max),
        );
        let ours = MessageFrames::new(Box::pin(futures::stream::iter(items)), max);
        (sent(tonic).await, sent(ours).await)
    }

    #[tokio::test]
    async fn messages_are_framed_as_tonic_frames_them() {
        // An empty message (a watch's "established"), small ones, one past the frame size,
        // and one large.
        let items = responses(&[0, 10, 300, 40_000, 0, 5 << 20, 7]);
        let (tonic, ours) = both(items, 32 << 20).await;
        assert_eq!(ours.0.len(), tonic.0.len());
        assert!(ours.0 == tonic.0, "the framed bytes differ");
        assert_eq!(ours.1, tonic.1);
        assert!(ours.1.contains("\"grpc-status\": \"0\""), "{}", ours.1);
    }

    #[tokio::test]
    async fn an_error_in_the_stream_ends_it_as_tonic_ends_it() {
        let mut items = responses(&[10, 20]);
        items.push(Err(Status::unavailable("the store ended the watch")));
        items.extend(responses(&[30]));
        let (tonic, ours) = both(items, 32 << 20).await;
        assert!(ours.0 == tonic.0, "the framed bytes differ");
        assert_eq!(ours.1, tonic.1);
        assert!(ours.1.contains("\"grpc-status\": \"14\""), "{}", ours.1);
    }

    #[tokio::test]
    async fn a_message_over_the_limit_ends_the_stream_with_tonic_s_status() {
        let (tonic, ours) = both(responses(&[2000]), 1000).await;
        assert!(ours.0.is_empty() && tonic.0.is_empty());
        assert_eq!(ours.1, tonic.1);
        assert!(ours.1.contains("\"grpc-status\": \"11\""), "{}", ours.1);
    }

    #[tokio::test]
    async fn a_frame_gathers_the_ready_messages_up_to_the_yield_size() {
        let mut body = MessageFrames::new(
            Box::pin(futures::stream::iter(responses(&[1000; 40]))),
            32 << 20,
        );
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.unwrap().into_data() {
                frames.push(data.len());
            }
        }
        // Each message is 1,003 bytes encoded, 1,008 framed: 33 make a frame of 32 KiB.
        assert_eq!(frames, vec![33 * 1008, 7 * 1008]);
    }
}
