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
//! for the service, and counts every frame of the response body against it until HTTP/2 drops
//! the frame.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::Status;

use crate::auth::{Caller, Transport};

use super::held_bytes::{BytesPerCaller, StreamBytes};

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

impl<S, B> tower::Service<http::Request<B>> for CallLimitService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::{Layer, Service, ServiceExt};

    fn reader(name: &str) -> Caller {
        Caller::from_certificate(name, ["os:reader"])
    }

    fn request(caller: Caller) -> http::Request<()> {
        let mut request = http::Request::new(());
        request.extensions_mut().insert(caller);
        request
    }

    fn answering() -> impl Service<
        http::Request<()>,
        Response = http::Response<Body>,
        Error = Infallible,
        Future = impl Send + 'static,
    > + Clone {
        // A body with a frame still to send, as a stream's is (an empty one ends at once).
        tower::service_fn(|_: http::Request<()>| async {
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
