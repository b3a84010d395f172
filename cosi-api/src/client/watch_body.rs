//! The Watch answer's messages, cut out of the HTTP/2 body by the client itself rather than
//! in tonic's decode buffer, so that an idle watch holds no buffer of the largest message it
//! once received.
//!
//! tonic reads a stream's messages into one buffer per stream (`StreamingInner::buf` in
//! tonic 0.14's `codec/decode.rs`): it reserves room for each message there and hands the
//! decoder a view of it, and the buffer keeps its capacity, shared with the split the decoder
//! takes (`BytesMut::reserve` takes the whole allocation back once the split is dropped), for
//! as long as the stream lives. So a watch that once received a 4 MiB event held 4 MiB or more
//! while idle, and 64 such watches 256 MiB; the decoder is handed the buffer only while it
//! decodes a message, so no [`Decoder`] can release it after one.
//!
//! So tonic makes the call and reads the answer's head, trailers and errors as the generated
//! client does, over a channel ([`CuttingChannel`]) whose answer body ([`CutBody`]) reads the
//! gRPC framing itself: each whole uncompressed message goes to a queue the stream's decoder
//! ([`QueueDecoder`]) takes it from, and tonic gets an empty message in its place, so its
//! buffer stays at its first few KiB. Once a message of [`LARGE`] bytes or more is cut out,
//! the body's own buffer starts over at the size of what is left in it, and the message's
//! allocation is freed with the last event decoded from it. A compressed or oversized message
//! (and everything after it) goes to tonic as it came, for tonic to read or refuse as before.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::Frame;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, Streaming};
use tonic::transport::Channel;
use tonic::Status;

use super::raw_answer::{ready, Method, RawCodec};
use crate::server::MAX_MESSAGE_SIZE;

/// The gRPC message header: a compression flag and the message's length.
const HEADER: usize = 5;

/// The header of the empty, uncompressed message tonic gets in place of each cut-out one.
static EMPTY_MESSAGE: [u8; HEADER] = [0; HEADER];

/// A message this long or longer makes the body start its buffer over once it is cut out.
/// Below it the buffer is kept and reused, as tonic's was (the common case: events of a few
/// hundred bytes, whose buffer costs less to keep than to allocate again).
pub(super) const LARGE: usize = 64 * 1024;

/// The messages a [`CutBody`] cut out, in order, until its stream's decoder takes them.
type MessageQueue = Arc<Mutex<VecDeque<Bytes>>>;

/// A fresh queue for one call: its [`CuttingChannel`] fills it, its [`QueueCodec`] empties it.
pub(super) fn queue() -> MessageQueue {
    Arc::default()
}

/// A [`Channel`] whose answer bodies are [`CutBody`]s filling `queue`. One per call.
#[derive(Clone)]
pub(super) struct CuttingChannel {
    channel: Channel,
    queue: MessageQueue,
    max_message_size: usize,
}

impl CuttingChannel {
    /// `channel`, its answers' messages cut into `queue`; a message longer than
    /// `max_message_size` is left to tonic, which refuses it.
    pub(super) fn new(channel: Channel, queue: MessageQueue, max_message_size: usize) -> Self {
        CuttingChannel {
            channel,
            queue,
            max_message_size,
        }
    }
}

impl tower::Service<http::Request<Body>> for CuttingChannel {
    type Response = http::Response<CutBody>;
    type Error = tonic::transport::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.channel, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let answer = tower::Service::call(&mut self.channel, request);
        let queue = self.queue.clone();
        let max_message_size = self.max_message_size;
        Box::pin(async move {
            let answer = answer.await?;
            Ok(answer.map(|body| CutBody::new(body, queue, max_message_size)))
        })
    }
}

/// An answer body whose whole messages are cut out into a queue (see the [module docs](self)).
pub(super) struct CutBody {
    inner: Body,
    /// Bytes received and not yet cut out: the start of a message.
    buf: BytesMut,
    /// Frames for tonic, in order, before anything more is read.
    ready: VecDeque<Frame<Bytes>>,
    queue: MessageQueue,
    max_message_size: usize,
    /// Set at a message left to tonic: everything from there goes to tonic as it came.
    passing_through: bool,
    ended: bool,
}

impl CutBody {
    fn new(inner: Body, queue: MessageQueue, max_message_size: usize) -> Self {
        CutBody {
            inner,
            buf: BytesMut::new(),
            ready: VecDeque::new(),
            queue,
            max_message_size,
            passing_through: false,
            ended: false,
        }
    }

    /// Takes in `data`, cutting out every message it completes.
    fn cut(&mut self, data: Bytes) {
        if self.passing_through {
            self.ready.push_back(Frame::data(data));
            return;
        }
        self.buf.extend_from_slice(&data);
        while self.buf.len() >= HEADER {
            let compressed = self.buf[0] != 0;
            let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if compressed || len > self.max_message_size {
                self.passing_through = true;
                self.pass_rest();
                return;
            }
            let Some(missing) = (HEADER + len)
                .checked_sub(self.buf.len())
                .filter(|m| *m > 0)
            else {
                self.buf.advance(HEADER);
                let message = self.buf.split_to(len).freeze();
                if len >= LARGE {
                    // The message shares the allocation with what is left: start over, so
                    // that the allocation goes when the message does.
                    self.buf = BytesMut::from(&self.buf[..]);
                }
                self.queue
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push_back(message);
                self.ready
                    .push_back(Frame::data(Bytes::from_static(&EMPTY_MESSAGE)));
                continue;
            };
            // Room for the rest of the message at once, rather than by doubling.
            self.buf.reserve(missing);
            return;
        }
    }

    /// Hands what is left in the buffer to tonic as it came (a message left to tonic, or the
    /// incomplete end of a stream, which tonic reports).
    fn pass_rest(&mut self) {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf).freeze();
            self.ready.push_back(Frame::data(rest));
        }
    }
}

impl http_body::Body for CutBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        loop {
            if let Some(frame) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => this.cut(data),
                    Err(trailers) => {
                        this.pass_rest();
                        this.ready.push_back(trailers);
                    }
                },
                Some(Err(status)) => return Poll::Ready(Some(Err(status))),
                None => {
                    this.pass_rest();
                    this.ended = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.ready.is_empty()
    }
}

/// The Watch call's codec: requests written as prost writes them, answers taken from the
/// queue a [`CutBody`] fills.
pub(super) struct QueueCodec<Request, Frame> {
    queue: MessageQueue,
    raw: RawCodec<Request, Frame>,
}

impl<Request, Frame> QueueCodec<Request, Frame> {
    /// The codec of the call whose body fills `queue`.
    pub(super) fn new(queue: MessageQueue) -> Self {
        QueueCodec {
            queue,
            raw: RawCodec::default(),
        }
    }
}

impl<Request, Frame> Codec for QueueCodec<Request, Frame>
where
    Request: prost::Message + Send + 'static,
    Frame: From<Bytes> + Send + 'static,
{
    type Encode = Request;
    type Decode = Frame;
    type Encoder = RawCodec<Request, Frame>;
    type Decoder = QueueDecoder<Frame>;

    fn encoder(&mut self) -> Self::Encoder {
        self.raw.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        QueueDecoder {
            queue: self.queue.clone(),
            frame: std::marker::PhantomData,
        }
    }
}

/// Takes each message from the queue: tonic's own message in its place is empty. A message
/// left to tonic (compressed) comes with the queue empty, and is read from tonic's buffer.
pub(super) struct QueueDecoder<Frame> {
    queue: MessageQueue,
    frame: std::marker::PhantomData<fn() -> Frame>,
}

impl<Frame: From<Bytes>> Decoder for QueueDecoder<Frame> {
    type Item = Frame;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Frame>, Status> {
        let cut = self
            .queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop_front();
        Ok(Some(Frame::from(match cut {
            Some(message) => message,
            None => src.copy_to_bytes(src.remaining()),
        })))
    }
}

/// Calls the State service's server-streaming `method`, as the generated client does; each
/// response as its bytes, made a `Frame`, cut out of the answer by the client
/// (see the [module docs](self)) so that the stream keeps no buffer of its largest message.
pub(super) async fn server_streaming<Request, Frame>(
    channel: &Channel,
    method: Method,
    request: tonic::Request<Request>,
) -> Result<Streaming<Frame>, Status>
where
    Request: prost::Message + Send + 'static,
    Frame: From<Bytes> + Send + Sync + 'static,
{
    let queue = queue();
    let cutting = CuttingChannel::new(channel.clone(), queue.clone(), MAX_MESSAGE_SIZE);
    let mut grpc = ready(cutting).await?;
    let codec = QueueCodec::<Request, Frame>::new(queue);
    Ok(grpc
        .server_streaming(method.named(request), method.path(), codec)
        .await?
        .into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use proptest::prelude::*;

    /// A gRPC message: its header and `payload`, `compressed` or not.
    fn framed(payload: &[u8], compressed: bool) -> Vec<u8> {
        let mut bytes = vec![u8::from(compressed)];
        bytes.extend((payload.len() as u32).to_be_bytes());
        bytes.extend(payload);
        bytes
    }

    /// What tonic reads from a [`CutBody`] over `chunks` (its data, concatenated, and whether
    /// trailers came last), and the messages cut into the queue.
    fn cut(chunks: Vec<Vec<u8>>, max_message_size: usize) -> (Vec<u8>, bool, Vec<Bytes>) {
        let mut frames: Vec<Result<Frame<Bytes>, Status>> = chunks
            .into_iter()
            .map(|chunk| Ok(Frame::data(Bytes::from(chunk))))
            .collect();
        frames.push(Ok(Frame::trailers(http::HeaderMap::new())));
        let inner = Body::new(http_body_util::StreamBody::new(futures::stream::iter(
            frames,
        )));
        let queue = queue();
        let mut body = CutBody::new(inner, queue.clone(), max_message_size);
        let (mut data, mut trailers_last) = (Vec::new(), false);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // The chunks are all there: every poll is ready.
        while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
            match frame.unwrap().into_data() {
                Ok(chunk) => {
                    assert!(!trailers_last, "data after the trailers");
                    data.extend_from_slice(&chunk);
                }
                Err(_) => trailers_last = true,
            }
        }
        let messages = queue.lock().unwrap().drain(..).collect();
        (data, trailers_last, messages)
    }

    /// `bytes` in chunks ending at `cuts` (positions, any order, any value).
    fn chunked(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut ends: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        ends.push(bytes.len());
        ends.sort_unstable();
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let chunk = bytes[start..end].to_vec();
                start = end;
                chunk
            })
            .collect()
    }

    proptest! {
        /// However the body is chunked, each message is cut out whole and in order, tonic
        /// reads an empty message in its place, and the trailers come last.
        #[test]
        fn messages_are_cut_out_whole_and_in_order_however_they_are_chunked(
            payloads in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 0..(LARGE + 100)),
                0..4,
            ),
            cuts in proptest::collection::vec(any::<usize>(), 0..6),
        ) {
            let wire: Vec<u8> = payloads.iter().flat_map(|p| framed(p, false)).collect();
            let (data, trailers_last, messages) = cut(chunked(&wire, &cuts), usize::MAX);
            prop_assert_eq!(data, [0u8; HEADER].repeat(payloads.len()));
            prop_assert!(trailers_last);
            let messages: Vec<Vec<u8>> = messages.iter().map(|m| m.to_vec()).collect();
            prop_assert_eq!(messages, payloads);
        }

        /// Whatever a server sends (any bytes, any chunks, any limit), nothing is lost, added
        /// or reordered: tonic reads an empty message for each message cut out, then the rest
        /// as it came, and those messages framed again followed by that rest are the bytes
        /// received.
        #[test]
        fn any_body_is_handed_on_byte_for_byte(
            wire in proptest::collection::vec(any::<u8>(), 0..300),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
            max_message_size in 0usize..80,
        ) {
            let (data, trailers_last, messages) = cut(chunked(&wire, &cuts), max_message_size);
            prop_assert!(trailers_last);
            let markers = HEADER * messages.len();
            prop_assert!(data.len() >= markers);
            prop_assert!(data[..markers].iter().all(|&b| b == 0));
            let mut received: Vec<u8> = messages.iter().flat_map(|m| framed(m, false)).collect();
            received.extend_from_slice(&data[markers..]);
            prop_assert_eq!(received, wire);
        }
    }

    #[test]
    fn from_a_compressed_message_on_everything_goes_to_tonic_as_it_came() {
        let wire = [
            framed(b"first", false),
            framed(b"zipped", true),
            framed(b"after", false),
        ]
        .concat();
        let (data, trailers_last, messages) = cut(chunked(&wire, &[3, 14]), usize::MAX);
        assert_eq!(messages, [Bytes::from_static(b"first")]);
        assert_eq!(
            data,
            [
                &[0u8; HEADER][..],
                &framed(b"zipped", true),
                &framed(b"after", false)
            ]
            .concat()
        );
        assert!(trailers_last);
    }

    #[test]
    fn a_message_over_the_limit_goes_to_tonic_which_refuses_it() {
        let wire = framed(&[7; 100], false);
        let (data, _, messages) = cut(vec![wire.clone()], 99);
        assert!(messages.is_empty());
        assert_eq!(data, wire);
    }

    #[test]
    fn an_incomplete_last_message_goes_to_tonic_which_reports_it() {
        let wire = [framed(b"whole", false), framed(b"cut short", false)].concat();
        let (data, trailers_last, messages) = cut(vec![wire[..wire.len() - 3].to_vec()], 1024);
        assert_eq!(messages, [Bytes::from_static(b"whole")]);
        assert_eq!(
            data,
            [&[0u8; HEADER][..], &framed(b"cut short", false)[..14 - 3]].concat()
        );
        assert!(trailers_last);
    }

    #[test]
    fn after_a_large_message_the_buffer_starts_over_small() {
        let wire = [framed(&vec![1; LARGE], false), framed(b"next", false)].concat();
        let inner = Body::new(http_body_util::StreamBody::new(futures::stream::iter([
            Ok::<_, Status>(Frame::data(Bytes::from(wire[..wire.len() - 2].to_vec()))),
        ])));
        let mut body = CutBody::new(inner, queue(), usize::MAX);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut body).poll_frame(&mut cx).is_ready());
        // What is left is the start of the next message, in a buffer of its own size.
        assert_eq!(&body.buf[..], &framed(b"next", false)[..7]);
        assert!(body.buf.capacity() < 1024, "{}", body.buf.capacity());
    }
}
