//! What one caller holds at once: its connections and its open calls, counted per caller so
//! that one client certificate cannot take every place the server has.
//!
//! Callers are told apart by their client certificate's name, maintenance callers (who have
//! none) by the address they connect from; plaintext callers (trusted, loopback) are not
//! counted. So in maintenance one peer cannot take the places the operator's first apply
//! needs. [`PerCaller::claim`] takes a
//! place and returns a [`Claim`] that gives it back when dropped. [`CallLimit`] is the tower
//! layer that claims a place for every call and holds it until the call's response body is
//! dropped — for a unary call when its answer is sent, for a watch, a list or a log follow when
//! the stream ends or the client cancels it — so a caller past its limit is refused with
//! `ResourceExhausted` before its call reaches a service. It also gives each counted call a
//! ledger of the bytes its responses hold ([`super::held_bytes`]), in the request's extensions
//! for the service, counts every frame of the response body against it until HTTP/2 drops
//! the frame, and reads the request body only while the caller has room for its message
//! ([`Reading`]). Uncounted (plaintext) calls pass through as they are.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::Status;

use crate::auth::{Caller, Transport};

use super::held_bytes::{Admission, BytesPerCaller, StreamBytes, FRAME_HEADER, LARGEST_RESPONSE};

/// Places held per counted caller.
#[derive(Debug, Default)]
pub(crate) struct PerCaller {
    held: Mutex<HashMap<String, usize>>,
}

impl PerCaller {
    /// Takes one of `caller`'s places, unless it already holds `limit`; then the error says
    /// how many it holds. Uncounted callers always get a place (an empty claim).
    pub(crate) fn claim(self: &Arc<Self>, caller: &Caller, limit: usize) -> Result<Claim, usize> {
        let Some(key) = counted_key(caller) else {
            return Ok(Claim { place: None });
        };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(key.clone()).or_default();
        if *count >= limit {
            return Err(*count);
        }
        *count += 1;
        Ok(Claim {
            place: Some((self.clone(), key)),
        })
    }

    /// Places `caller` holds now.
    #[cfg(test)]
    pub(crate) fn held(&self, caller: &Caller) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        counted_key(caller)
            .and_then(|key| held.get(&key).copied())
            .unwrap_or(0)
    }
}

/// Whom a place counts for: the client certificate's name, or a maintenance caller's address;
/// plaintext callers (trusted, loopback) are not counted.
fn counted_key(caller: &Caller) -> Option<String> {
    match caller.transport {
        Transport::Plaintext => None,
        Transport::Maintenance => Some(match caller.address {
            Some(address) => format!("maintenance {address}"),
            None => "maintenance".to_string(),
        }),
        Transport::MutualTls => Some(format!("certificate {}", caller.name)),
    }
}

/// One place held; given back on drop.
#[derive(Debug)]
pub(crate) struct Claim {
    place: Option<(Arc<PerCaller>, String)>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let Some((open, key)) = self.place.take() else {
            return;
        };
        let mut held = open.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&key);
            }
        }
    }
}

/// A tower layer holding each caller to `limit` open calls, and their responses to `bytes`
/// held at once (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct CallLimit {
    open: Arc<PerCaller>,
    limit: usize,
    bytes: Arc<BytesPerCaller>,
}

impl CallLimit {
    pub(crate) fn new(limit: usize, bytes: usize) -> Self {
        CallLimit {
            open: Arc::default(),
            limit,
            bytes: Arc::new(BytesPerCaller::new(bytes)),
        }
    }
}

impl<S> tower::Layer<S> for CallLimit {
    type Service = CallLimitService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        CallLimitService {
            inner,
            limit: self.clone(),
        }
    }
}

/// The service [`CallLimit`] wraps around the routes.
#[derive(Clone, Debug)]
pub(crate) struct CallLimitService<S> {
    inner: S,
    limit: CallLimit,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<Body>> for CallLimitService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // A request without an identity never gets here: the method gate refuses it first.
        let claim = match request.extensions().get::<Caller>() {
            Some(caller) => match self.limit.open.claim(caller, self.limit.limit) {
                Ok(claim) => claim,
                Err(held) => {
                    let status = Status::resource_exhausted(format!(
                        "{} has {held} calls open, as many as one caller may; end some of its \
                         watches or log follows, or retry later",
                        caller.describe()
                    ));
                    tracing::info!(
                        method = request.uri().path(),
                        "refused: {}",
                        status.message()
                    );
                    return Box::pin(async move { Ok(status.into_http()) });
                }
            },
            None => Claim { place: None },
        };
        let Some((_, key)) = &claim.place else {
            // Nothing held (a trusted plaintext caller): the answer as it is, unwrapped.
            return Box::pin(self.inner.call(request));
        };
        let bytes = self.limit.bytes.stream(key);
        let mut request = request.map(|body| Body::new(Reading::new(body, bytes.clone())));
        request.extensions_mut().insert(bytes.clone());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                Body::new(Held {
                    body,
                    bytes,
                    _claim: claim,
                })
            }))
        })
    }
}

/// A response body that holds its call's place until it is dropped, and hands on each frame
/// as bytes counted against the call's ledger until HTTP/2 drops them.
struct Held {
    body: Body,
    bytes: Arc<StreamBytes>,
    _claim: Claim,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                let bytes = &self.bytes;
                Poll::Ready(Some(Ok(frame.map_data(|data| bytes.frame(data)))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A counted call's request body: read from HTTP/2 only while the caller has room for the
/// message it carries, whose bytes count against the caller's budget from when its header is
/// read until the body is dropped (see [`super::held_bytes`]).
/// While it waits for room nothing more of the body is read, so HTTP/2 flow control holds the
/// client back.
struct Reading {
    body: Body,
    bytes: Arc<StreamBytes>,
    /// Body bytes read so far.
    read: usize,
    /// Body bytes counted so far: through the end of the request's message once its header
    /// has been read.
    counted: usize,
    /// Bytes charged to the caller's budget, given back when the body is dropped.
    charged: usize,
    /// The message's gRPC frame header, as much of it as has been read.
    header: [u8; FRAME_HEADER],
    header_read: usize,
    /// Bytes came after the message (a unary call's request has one message; tonic reads and
    /// drops what follows): each further frame waits for room of its own.
    past_message: bool,
    /// Room reserved for what the next frame brings, before it is read.
    room: Option<Admission>,
    /// The wait for that room, while the caller has none.
    waiting: Option<BoxFuture<Admission>>,
}

impl Reading {
    fn new(body: Body, bytes: Arc<StreamBytes>) -> Self {
        Reading {
            body,
            bytes,
            read: 0,
            counted: 0,
            charged: 0,
            header: [0; FRAME_HEADER],
            header_read: 0,
            past_message: false,
            room: None,
            waiting: None,
        }
    }

    /// Whether the next frame may bring bytes nothing counts yet: the message's, before its
    /// header has told its size, or bytes past it. Right after the message it may not (that
    /// poll sees the body's end, which must not wait: the message's own bytes may fill the
    /// budget until tonic drops the body); if it brings bytes after all, they are counted as
    /// read, a frame's worth, and every frame after them waits for room.
    fn needs_room(&self) -> bool {
        self.read >= self.counted && (self.header_read < FRAME_HEADER || self.past_message)
    }

    /// Counts the frame's `data`, just read.
    fn count(&mut self, data: &Bytes) {
        let start = self.read;
        self.read += data.len();
        if self.header_read < FRAME_HEADER {
            let take = (FRAME_HEADER - self.header_read).min(data.len());
            self.header[self.header_read..self.header_read + take].copy_from_slice(&data[..take]);
            self.header_read += take;
            if self.header_read < FRAME_HEADER {
                // The header's first bytes: the reservation still stands for the message.
                return;
            }
            let announced = u32::from_be_bytes([
                self.header[1],
                self.header[2],
                self.header[3],
                self.header[4],
            ]) as usize;
            // Past the message limit tonic refuses the call once it has the header.
            let message = FRAME_HEADER.saturating_add(announced).min(LARGEST_RESPONSE);
            self.counted = message;
            self.charged += message;
            match self.room.take() {
                Some(room) => room.charge_request(message),
                None => self.bytes.charge_request(message),
            }
        }
        if self.read > self.counted {
            let beyond = self.read - self.counted.max(start);
            self.counted = self.read;
            self.past_message = true;
            self.charged += beyond;
            match self.room.take() {
                Some(room) => room.charge_request(beyond),
                None => self.bytes.charge_request(beyond),
            }
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.bytes.give_back_request(self.charged);
    }
}

impl http_body::Body for Reading {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if this.room.is_none() && this.needs_room() {
            if this.waiting.is_none() {
                match this.bytes.try_admit_request() {
                    Some(room) => this.room = Some(room),
                    None => this.waiting = Some(Box::pin(this.bytes.clone().admit_request())),
                }
            }
            if let Some(waiting) = &mut this.waiting {
                let Poll::Ready(room) = waiting.as_mut().poll(cx) else {
                    return Poll::Pending;
                };
                this.waiting = None;
                this.room = Some(room);
            }
        }
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.count(data);
                }
            }
            // Ended: no more to reserve room for.
            Poll::Ready(_) => this.room = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::{Layer, Service, ServiceExt};

    fn reader(name: &str) -> Caller {
        Caller::from_certificate(name, ["os:reader"])
    }

    fn request(caller: Caller) -> http::Request<Body> {
        let mut request = http::Request::new(Body::empty());
        request.extensions_mut().insert(caller);
        request
    }

    fn answering() -> impl Service<
        http::Request<Body>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future = impl Send + 'static,
    > + Clone {
        // A body with a frame still to send, as a stream's is (an empty one ends at once).
        tower::service_fn(|_: http::Request<Body>| async {
            let body = http_body_util::Full::new(Bytes::from_static(b"frame"));
            Ok::<_, Infallible>(http::Response::new(Body::new(body)))
        })
    }

    #[test]
    fn a_place_is_given_back_when_its_claim_drops() {
        let open = Arc::new(PerCaller::default());
        let caller = reader("a");
        let first = open.claim(&caller, 1).unwrap();
        assert_eq!(open.claim(&caller, 1).unwrap_err(), 1);
        // Another certificate has places of its own; plaintext callers are not counted.
        let _other = open.claim(&reader("b"), 1).unwrap();
        for _ in 0..3 {
            std::mem::forget(open.claim(&Caller::trusted(), 1).unwrap());
        }
        drop(first);
        assert_eq!(open.held(&caller), 0);
        let _again = open.claim(&caller, 1).unwrap();
    }

    #[tokio::test]
    async fn a_call_holds_its_place_until_its_response_body_is_dropped() {
        let limit = CallLimit::new(1, 0);
        let mut service = limit.layer(answering());
        let caller = reader("a");
        let open = service.ready().await.unwrap().call(request(caller.clone()));
        let response = open.await.unwrap();
        assert_eq!(limit.open.held(&caller), 1);

        // Past the limit: refused before the service, as ResourceExhausted naming the bound.
        let refused = service
            .ready()
            .await
            .unwrap()
            .call(request(caller.clone()))
            .await
            .unwrap();
        let status = Status::from_header_map(refused.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status.message(),
            "a (os:reader) has 1 calls open, as many as one caller may; end some of its watches \
             or log follows, or retry later"
        );
        assert_eq!(limit.open.held(&caller), 1);

        drop(response);
        assert_eq!(limit.open.held(&caller), 0);
        let served = service.ready().await.unwrap().call(request(caller.clone()));
        assert_eq!(served.await.unwrap().headers().get("grpc-status"), None);
    }

    /// A request body of `frames`, counting how often it is polled.
    struct Frames {
        frames: std::collections::VecDeque<Bytes>,
        polls: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl http_body::Body for Frames {
        type Data = Bytes;
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            self.polls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Poll::Ready(self.frames.pop_front().map(|data| Ok(Frame::data(data))))
        }
    }

    /// A gRPC frame header announcing a message of `len` bytes.
    fn header(len: usize) -> Bytes {
        let mut header = vec![0];
        header.extend_from_slice(&(len as u32).to_be_bytes());
        Bytes::from(header)
    }

    /// `call`'s request body of `frames`, and how often the body under it has been polled.
    fn reading(
        call: &Arc<StreamBytes>,
        frames: Vec<Bytes>,
    ) -> (Reading, Arc<std::sync::atomic::AtomicUsize>) {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let body = Frames {
            frames: frames.into(),
            polls: polls.clone(),
        };
        (Reading::new(Body::new(body), call.clone()), polls)
    }

    fn polls(polls: &std::sync::atomic::AtomicUsize) -> usize {
        polls.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The body's next frame's data, if it has one ready.
    fn next(body: &mut Reading) -> Option<Option<Bytes>> {
        use http_body_util::BodyExt;
        body.frame()
            .now_or_never()
            .map(|frame| frame.map(|frame| frame.unwrap().into_data().unwrap()))
    }

    use futures::FutureExt;

    #[tokio::test]
    async fn a_request_body_is_not_read_while_its_caller_has_no_room() {
        // The smallest budget: one largest message, of which another call holds a byte.
        let budgets = BytesPerCaller::new(0);
        let other = budgets.stream("a");
        other.admit().now_or_never().unwrap().charge(1);
        let call = budgets.stream("a");
        let (mut body, polled) = reading(&call, vec![header(3), Bytes::from_static(b"abc")]);

        // No room: the body under it is not polled at all, however often it is asked.
        assert_eq!(next(&mut body), None);
        assert_eq!(next(&mut body), None);
        assert_eq!(polls(&polled), 0);
        assert_eq!(call.caller_holds(), 1);

        // The other call ends: the message is read and counted, header and all.
        let reader = tokio::spawn(async move {
            use http_body_util::BodyExt;
            let data = body.frame().await.unwrap().unwrap().into_data().unwrap();
            (data, body)
        });
        tokio::task::yield_now().await;
        assert!(!reader.is_finished());
        drop(other);
        let (data, body) = reader.await.unwrap();
        assert_eq!(data, header(3));
        assert_eq!(polls(&polled), 1);
        assert_eq!(call.caller_holds(), FRAME_HEADER + 3);
        drop(body);
    }

    #[tokio::test]
    async fn a_request_s_bytes_are_given_back_when_its_body_is_dropped() {
        let budgets = BytesPerCaller::new(0);
        let call = budgets.stream("a");
        let (mut body, _) = reading(&call, vec![header(1000), Bytes::from(vec![0; 1000])]);
        assert_eq!(next(&mut body), Some(Some(header(1000))));
        assert_eq!(next(&mut body), Some(Some(Bytes::from(vec![0; 1000]))));
        assert_eq!(next(&mut body), Some(None));
        // Read: counted until tonic, having decoded the message, drops the body.
        assert_eq!(call.caller_holds(), 1005);
        drop(body);
        assert_eq!(call.caller_holds(), 0);
    }

    #[tokio::test]
    async fn a_request_cancelled_while_it_arrives_gives_its_room_back() {
        let budgets = BytesPerCaller::new(0);
        let other = budgets.stream("a");
        // Cancelled with half a header read: the room reserved for its message is given back.
        let call = budgets.stream("a");
        let (mut body, _) = reading(&call, vec![Bytes::from_static(&[0, 0]), header(9)]);
        assert_eq!(next(&mut body), Some(Some(Bytes::from_static(&[0, 0]))));
        assert_eq!(other.caller_holds(), LARGEST_RESPONSE);
        drop(body);
        drop(call);
        assert_eq!(other.caller_holds(), 0);

        // Cancelled while it waits for room: it had reserved nothing.
        other.admit().now_or_never().unwrap().charge(1);
        let call = budgets.stream("a");
        let (mut body, _) = reading(&call, vec![header(9)]);
        assert_eq!(next(&mut body), None);
        drop(body);
        drop(call);
        assert_eq!(other.caller_holds(), 1);
    }

    #[tokio::test]
    async fn a_request_larger_than_what_is_left_waits_for_the_caller_s_other_calls_then_completes()
    {
        // The smallest budget, of which another call's unwritten answer holds 1,000 bytes.
        let budgets = BytesPerCaller::new(0);
        let other = budgets.stream("a");
        other.admit().now_or_never().unwrap().charge(1000);
        let call = budgets.stream("a");
        let largest = LARGEST_RESPONSE - FRAME_HEADER;
        let (mut body, polled) = reading(&call, vec![header(largest), Bytes::from(vec![0; 16])]);
        assert_eq!(next(&mut body), None);
        assert_eq!(polls(&polled), 0);

        // The other call ends: the message is read, the whole budget counted for it.
        drop(other);
        assert_eq!(next(&mut body), Some(Some(header(largest))));
        assert_eq!(next(&mut body), Some(Some(Bytes::from(vec![0; 16]))));
        assert_eq!(call.caller_holds(), LARGEST_RESPONSE);
        assert_eq!(next(&mut body), Some(None));

        // Its own answer does not wait on its request's bytes: they are given back when the
        // body is dropped, before the service runs.
        drop(body);
        let admission = call.try_admit().expect("the answer has the request's room");
        admission.charge(40);
        assert_eq!(call.caller_holds(), 40);
    }

    #[tokio::test]
    async fn a_call_dropped_before_its_answer_gives_its_place_back() {
        let limit = CallLimit::new(1, 0);
        let mut service = limit.layer(answering());
        let caller = reader("a");
        let pending = service.ready().await.unwrap().call(request(caller.clone()));
        assert_eq!(limit.open.held(&caller), 1);
        drop(pending);
        assert_eq!(limit.open.held(&caller), 0);
    }
}
