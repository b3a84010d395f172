//! How a server's stop reaches its calls: the [`Stop`] signal, which carries the reason every
//! call it ends is given (an `Unavailable` status with that message), and [`EndArriving`], the
//! tower layer that ends at once the calls whose request is still arriving when it fires.
//!
//! A graceful stop lets the calls in flight finish, but a call whose request has not fully
//! arrived is the client's to finish: a caller that opens a call and never sends its request
//! would hold the stop for as long as it likes. So those calls end when the stop fires, and
//! only calls the server is already answering are waited for. Open watches and streams end
//! with the same reason where they are fed (`state.rs`, `machine.rs`).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::sync::watch;
use tonic::body::Body;
use tonic::Status;

/// The reason a stop gives when its caller names none.
pub const DEFAULT_STOP_REASON: &str = "server shutting down";

/// The sending side: fired once, with the first reason given.
#[derive(Debug)]
pub(crate) struct Stop {
    sender: watch::Sender<Option<Arc<str>>>,
}

/// The receiving side, one per task that must end when the server stops.
pub(crate) type StopSignal = watch::Receiver<Option<Arc<str>>>;

impl Stop {
    pub(crate) fn new() -> (Stop, StopSignal) {
        let (sender, signal) = watch::channel(None);
        (Stop { sender }, signal)
    }

    /// Fires the stop with `reason`, unless it fired already (the first reason stays).
    pub(crate) fn fire(&self, reason: &str) {
        self.sender.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(Arc::from(reason));
            true
        });
    }
}

/// A signal that never fires, for a service not (yet) part of a server. Its sender lives for
/// the whole process: a signal whose sender is gone reads as fired ([`stopped`]).
pub(crate) fn never() -> StopSignal {
    static NEVER: std::sync::OnceLock<watch::Sender<Option<Arc<str>>>> = std::sync::OnceLock::new();
    NEVER.get_or_init(|| watch::channel(None).0).subscribe()
}

/// Resolves once the stop fires (or its sender is gone), with its reason.
pub(crate) async fn stopped(signal: &mut StopSignal) -> Arc<str> {
    // The guard `wait_for` returns is dropped here, never held across an await.
    match signal.wait_for(Option::is_some).await {
        Ok(reason) => reason
            .clone()
            .unwrap_or_else(|| Arc::from(DEFAULT_STOP_REASON)),
        Err(_) => Arc::from(DEFAULT_STOP_REASON),
    }
}

/// A tower layer ending, when the server stops, every call whose request is still arriving
/// (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct EndArriving {
    signal: StopSignal,
}

impl EndArriving {
    pub(crate) fn new(signal: StopSignal) -> Self {
        EndArriving { signal }
    }
}

impl<S> tower::Layer<S> for EndArriving {
    type Service = EndArrivingService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        EndArrivingService {
            inner,
            signal: self.signal.clone(),
        }
    }
}

/// The service [`EndArriving`] wraps around the routes.
#[derive(Clone, Debug)]
pub(crate) struct EndArrivingService<S> {
    inner: S,
    signal: StopSignal,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S> tower::Service<http::Request<Body>> for EndArrivingService<S>
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
        let arrived = Arc::new(AtomicBool::new(false));
        let request = request.map(|body| {
            Body::new(Arriving {
                body,
                arrived: arrived.clone(),
            })
        });
        let answer = self.inner.call(request);
        let mut signal = self.signal.clone();
        Box::pin(async move {
            tokio::select! {
                biased;
                answered = answer => answered,
                reason = stopped_while_arriving(&mut signal, &arrived) => {
                    tracing::debug!("a call whose request was still arriving ended: {reason}");
                    Ok(Status::unavailable(reason.to_string()).into_http())
                }
            }
        })
    }
}

/// Resolves with the stop's reason if the stop fires before the request has arrived; never
/// once it has (the call is then answered, and a graceful stop waits for it).
async fn stopped_while_arriving(signal: &mut StopSignal, arrived: &AtomicBool) -> Arc<str> {
    let reason = stopped(signal).await;
    if arrived.load(Ordering::Acquire) {
        std::future::pending::<()>().await;
    }
    reason
}

/// A request body that says when it has been read to its end.
struct Arriving {
    body: Body,
    arrived: Arc<AtomicBool>,
}

impl http_body::Body for Arriving {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        let ended = match &frame {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => self.body.is_end_stream(),
            Poll::Pending => false,
        };
        if ended {
            self.arrived.store(true, Ordering::Release);
        }
        frame
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

    #[tokio::test]
    async fn a_stop_keeps_its_first_reason() {
        let (stop, mut signal) = Stop::new();
        stop.fire("the node left maintenance mode");
        stop.fire(DEFAULT_STOP_REASON);
        assert_eq!(
            &*stopped(&mut signal).await,
            "the node left maintenance mode"
        );
    }

    #[tokio::test]
    async fn a_dropped_stop_gives_the_default_reason() {
        let (stop, mut signal) = Stop::new();
        drop(stop);
        assert_eq!(&*stopped(&mut signal).await, DEFAULT_STOP_REASON);
    }
}
