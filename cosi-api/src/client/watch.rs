//! Remote watches that survive the network: a task per watch reads the server's stream into a
//! bounded channel and, when the stream breaks (a dropped connection, a server restart),
//! reconnects with backoff and resumes exactly after the last event it delivered.
//!
//! Where it resumes from depends on what was delivered last:
//! - nothing yet: the original request again (nothing can be duplicated);
//! - an exact event, a `Bootstrapped` or a `Noop`: after its bookmark, so the next event
//!   delivered is the next change — no duplicate, no gap;
//! - an event inside a bootstrap, a catch-up or a resync: their events all carry the bookmark
//!   of the batch's end, so a resume from the middle would skip the rest. The watch starts over
//!   with a bootstrap and tells the consumer so with [`Event::Resync`] (drop your view; the full
//!   contents follow, then `Bootstrapped`).
//!
//! A bookmark the server refuses on reconnect (its store was replaced) also leads to a resync.
//! Every reopen waits its backoff, after a failed open and after a broken stream alike (the
//! backoff starts over once a stream has stayed up for [`Backoff::max`]), so a server that
//! establishes watches and ends them at once is not called in a tight loop.
//! An error that retrying cannot fix (permission, invalid request) ends the watch with one
//! `Errored` event; so does a server that stays unreachable for [`Backoff::give_up_after`].
//!
//! Kind watches always ask the server for the bookmark of the starting position
//! (`bootstrap_bookmark`), so even a watch that has received no change can resume; that
//! `Noop` is not passed on. Single-resource watches resume as kind watches filtered to the id.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cosi_core::{Error, Event, EventSource, Kind, Pointer, Result, Watch, WatchKindOptions};
use tokio::sync::mpsc;
use tonic::{Code, Status, Streaming};

use crate::events::{decode_event, API_EXTENDED};
use crate::proto::resource as pb;
use crate::query::{encode_bookmark, encode_ids, encode_labels, exact_id_message};
use crate::status::{from_status, is_transient, Call, CallContext};

use super::answer::{same_kind, same_resource};
use super::deadline::within;
use super::watch_frame::{self, Events, WatchFrame};
use tonic::transport::Channel;

/// What a watch needs of its client: the connection and the codec.
#[derive(Clone)]
pub(super) struct WatchClient {
    pub(super) channel: Channel,
    pub(super) codec: crate::codec::Codec,
    /// How long opening a watch waits for its established message.
    pub(super) call_timeout: Option<Duration>,
}

/// How a broken watch reconnects: exponential backoff with jitter.
#[derive(Clone, Debug)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The longest delay; a watch stream that stayed up this long was healthy, and the delays
    /// after it break start over from `initial`.
    pub max: Duration,
    /// Give up (the watch ends with `Errored`) after failing this long without a success.
    pub give_up_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(5),
            give_up_after: Duration::from_secs(15 * 60),
        }
    }
}

impl Backoff {
    /// The delay before attempt `attempt` (from 0): doubling, capped, ±25 % jitter.
    fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .initial
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max);
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let jitter = 0.75 + (random % 1000) as f64 / 2000.0;
        base.mul_f64(jitter)
    }
}

/// What is watched.
#[derive(Clone, Debug)]
pub(super) enum WatchTarget {
    /// One resource.
    Pointer { pointer: Pointer, strict: bool },
    /// A kind.
    Kind {
        kind: Kind,
        options: Arc<WatchKindOptions>,
    },
}

impl WatchTarget {
    fn kind(&self) -> &Kind {
        match self {
            WatchTarget::Pointer { pointer, .. } => pointer.kind(),
            WatchTarget::Kind { kind, .. } => kind,
        }
    }
}

/// Where a reconnect starts.
#[derive(Clone, Debug)]
enum Position {
    /// Nothing delivered yet.
    Initial,
    /// Right after this bookmark.
    At(Vec<u8>),
    /// Inside a batch that cannot be resumed from its middle.
    InRun,
}

/// How the next request asks to start.
enum Start {
    Original,
    After(Vec<u8>),
    Resync,
}

fn request(target: &WatchTarget, start: &Start) -> pb::WatchRequest {
    let kind = target.kind();
    let mut request = pb::WatchRequest {
        namespace: kind.namespace().to_string(),
        r#type: kind.resource_type().to_string(),
        id: None,
        options: None,
        api_version: API_EXTENDED,
    };
    let mut options = pb::WatchOptions::default();
    match target {
        WatchTarget::Pointer { pointer, strict } => {
            options.strict = *strict;
            match start {
                Start::Original => request.id = Some(pointer.id().to_string()),
                Start::After(bookmark) => {
                    options.id_query = Some(exact_id_message(pointer.id()));
                    options.start_from_bookmark = Some(bookmark.clone());
                    options.aggregated = true;
                }
                Start::Resync => {
                    options.id_query = Some(exact_id_message(pointer.id()));
                    options.bootstrap_contents = true;
                    options.aggregated = true;
                }
            }
        }
        WatchTarget::Kind { options: o, .. } => {
            options.label_query = encode_labels(&o.labels);
            options.id_query = encode_ids(o.ids.as_ref());
            options.strict = o.strict;
            options.aggregated = true;
            match start {
                Start::Original => {
                    options.bootstrap_contents = o.bootstrap;
                    options.tail_events = o.tail.map_or(0, |t| t.min(i32::MAX as usize) as i32);
                    options.start_from_bookmark = o.since.as_ref().map(encode_bookmark);
                    options.bootstrap_bookmark =
                        !o.bootstrap && o.tail.is_none() && o.since.is_none();
                }
                Start::After(bookmark) => options.start_from_bookmark = Some(bookmark.clone()),
                Start::Resync => options.bootstrap_contents = true,
            }
        }
    }
    request.options = Some(options);
    request
}

/// Opens the stream and waits for the server's "established" message; events that came with
/// it (a server that sends no empty first message) are returned to be handled first.
async fn open(
    state: &WatchClient,
    message: pb::WatchRequest,
) -> std::result::Result<(Streaming<WatchFrame>, WatchFrame), Status> {
    within(
        state.call_timeout,
        "RemoteOptions::call_timeout",
        async move {
            let mut stream = watch_frame::call(&state.channel, request_for_watch(message)).await?;
            match stream.message().await? {
                Some(first) => Ok((stream, first)),
                None => Err(Status::unavailable(
                    "the server closed the watch before it was established",
                )),
            }
        },
    )
    .await
}

fn request_for_watch(message: pb::WatchRequest) -> tonic::Request<pb::WatchRequest> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        crate::server::OMIT_YAML_HEADER,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    request
}

/// Starts a watch: the first connection is made here, so setup errors are returned.
pub(super) async fn start_watch(
    state: &WatchClient,
    target: WatchTarget,
    backoff: Backoff,
    buffer: usize,
) -> Result<Watch> {
    let kind = target.kind().clone();
    let ctx = CallContext::new(
        Call::Watch,
        match &target {
            WatchTarget::Pointer { pointer, .. } => pointer.clone(),
            WatchTarget::Kind { kind, .. } => kind.pointer(""),
        },
    );
    let (stream, early) = open(state, request(&target, &Start::Original))
        .await
        .map_err(|s| from_status(&s, &ctx))?;
    let (tx, rx) = mpsc::channel(buffer.max(1));
    let swallow_noop = matches!(&target, WatchTarget::Kind { options, .. }
        if !options.bootstrap && options.tail.is_none() && options.since.is_none());
    let bootstrapping = matches!(&target, WatchTarget::Kind { options, .. } if options.bootstrap);
    let pump = Pump {
        state: state.clone(),
        target,
        kind,
        ctx,
        backoff,
        tx,
        position: Position::Initial,
        bootstrapping,
        swallow_noop,
        announce_resync: false,
        resync_delivered: None,
    };
    let task = tokio::spawn(pump.run(stream, early));
    Ok(Watch::new(RemoteWatch { rx, task }))
}

/// The consumer's end.
struct RemoteWatch {
    rx: mpsc::Receiver<Event>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RemoteWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[async_trait]
impl EventSource for RemoteWatch {
    async fn next(&mut self) -> Option<Event> {
        self.rx.recv().await
    }

    async fn next_batch(&mut self, max: usize) -> Option<Vec<Event>> {
        let first = self.rx.recv().await?;
        let mut batch = vec![first];
        while batch.len() < max {
            match self.rx.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        Some(batch)
    }
}

struct Pump {
    state: WatchClient,
    target: WatchTarget,
    kind: Kind,
    ctx: CallContext,
    backoff: Backoff,
    tx: mpsc::Sender<Event>,
    position: Position,
    /// Events until `Bootstrapped` belong to a bootstrap (or resync).
    bootstrapping: bool,
    /// The next `Noop` was asked for by this client, not by the consumer.
    swallow_noop: bool,
    /// A resync was started: tell the consumer before the first event of the new stream.
    announce_resync: bool,
    /// Within a resync of a single-resource watch: whether the resource was delivered. One
    /// that ends without it gets a tombstone before its `Bootstrapped`: the resync replaced
    /// the consumer's view, and absent must be said, as the watch's first event says it.
    resync_delivered: Option<bool>,
}

/// Why a stream stopped.
enum Broken {
    /// The consumer went away, or the watch ended for good: stop.
    Done,
    /// Reconnect.
    Retry(Status),
}

impl Pump {
    async fn run(mut self, stream: Streaming<WatchFrame>, early: WatchFrame) {
        let mut stream = Some((stream, early));
        let mut attempt: u32 = 0;
        let mut failing_since: Option<Instant> = None;
        loop {
            let (current, early) = match stream.take() {
                Some(open) => open,
                None => {
                    let start = match self.position.clone() {
                        Position::Initial => Start::Original,
                        Position::At(bookmark) => Start::After(bookmark),
                        Position::InRun => Start::Resync,
                    };
                    match open(&self.state, request(&self.target, &start)).await {
                        Ok(opened) => opened,
                        Err(status) => {
                            if self.position_refused(&status) {
                                // The store no longer knows the bookmark: start over.
                                self.position = Position::InRun;
                                continue;
                            }
                            if !retryable(&status) {
                                self.fail(from_status(&status, &self.ctx)).await;
                                return;
                            }
                            let since = *failing_since.get_or_insert_with(Instant::now);
                            if since.elapsed() >= self.backoff.give_up_after {
                                let error = from_status(&status, &self.ctx);
                                self.fail(Error::Backend {
                                    subject: self.kind.to_string(),
                                    message: format!(
                                        "gave up reconnecting the watch after {:?}: {error}",
                                        self.backoff.give_up_after
                                    ),
                                    retryable: true,
                                    source: None,
                                })
                                .await;
                                return;
                            }
                            let delay = self.backoff.delay(attempt);
                            attempt = attempt.saturating_add(1);
                            tracing::debug!(kind = %self.kind, "watch retrying in {delay:?}: {}", status.message());
                            tokio::select! {
                                _ = tokio::time::sleep(delay) => {}
                                _ = self.tx.closed() => return,
                            }
                            continue;
                        }
                    }
                }
            };
            let opened_at = Instant::now();
            if matches!(self.position, Position::InRun) {
                self.announce_resync = true;
                self.bootstrapping = true;
            }
            match self.drain(current, early, &mut failing_since).await {
                Broken::Done => return,
                Broken::Retry(status) => {
                    // A stream that stayed up a while was healthy: the backoff starts over. One
                    // that broke at once (a server that establishes watches and ends them) backs
                    // off like a failed open, instead of being reopened in a tight loop.
                    if opened_at.elapsed() >= self.backoff.max {
                        attempt = 0;
                    }
                    let delay = self.backoff.delay(attempt);
                    attempt = attempt.saturating_add(1);
                    tracing::debug!(kind = %self.kind, "watch stream broke, reopening in {delay:?}: {status}");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.tx.closed() => return,
                    }
                }
            }
        }
    }

    fn position_refused(&self, status: &Status) -> bool {
        !matches!(self.position, Position::Initial) && status.code() == Code::FailedPrecondition
    }

    async fn drain(
        &mut self,
        mut stream: Streaming<WatchFrame>,
        early: WatchFrame,
        failing_since: &mut Option<Instant>,
    ) -> Broken {
        if let Err(done) = self.deliver(early.events()).await {
            return done;
        }
        loop {
            let message = tokio::select! {
                message = stream.message() => message,
                _ = self.tx.closed() => return Broken::Done,
            };
            match message {
                Ok(Some(response)) => {
                    *failing_since = None;
                    if let Err(done) = self.deliver(response.events()).await {
                        return done;
                    }
                }
                Ok(None) => {
                    return Broken::Retry(Status::unavailable("the server ended the watch"))
                }
                Err(status) if retryable(&status) => return Broken::Retry(status),
                Err(status) => {
                    self.fail(from_status(&status, &self.ctx)).await;
                    return Broken::Done;
                }
            }
        }
    }

    async fn deliver(&mut self, events: Events) -> std::result::Result<(), Broken> {
        for event in events {
            let event = match event {
                Ok(event) => event,
                Err(message) => {
                    let subject = self.kind.to_string();
                    self.fail(Error::invalid(subject, "watch response", message))
                        .await;
                    return Err(Broken::Done);
                }
            };
            let incoming = match decode_event(&self.state.codec, &self.kind, event)
                .and_then(|incoming| self.asked_for(&incoming.event).map(|()| incoming))
            {
                Ok(incoming) => incoming,
                Err(error) => {
                    self.fail(error).await;
                    return Err(Broken::Done);
                }
            };
            let event = incoming.event;
            let ends = matches!(event, Event::Errored { .. });
            let next = match (&event, incoming.bookmark) {
                (Event::Errored { .. }, _) => self.position.clone(),
                (Event::Resync { .. }, _) => {
                    self.bootstrapping = true;
                    Position::InRun
                }
                (Event::Bootstrapped { .. }, Some(b)) | (Event::Noop { .. }, Some(b)) => {
                    self.bootstrapping = false;
                    Position::At(b)
                }
                (e, Some(b)) if !e.is_compacted() && !self.bootstrapping => Position::At(b),
                (_, _) if self.bootstrapping || event.is_compacted() => Position::InRun,
                // An exact event without a bookmark: a peer's initial single-watch event (its
                // state, sent again by a reopen from the same position). On a kind watch every
                // event has one (a server's bug): resuming from the last would repeat this
                // event, or skip what came before it, so the next reopen resyncs.
                _ => match self.target {
                    WatchTarget::Pointer { .. } => self.position.clone(),
                    WatchTarget::Kind { .. } => Position::InRun,
                },
            };
            if self.announce_resync
                && !matches!(event, Event::Errored { .. } | Event::Resync { .. })
            {
                self.announce_resync = false;
                let bookmark = event
                    .bookmark()
                    .cloned()
                    .unwrap_or_else(|| cosi_core::Bookmark::from_bytes(&[]));
                if self.tx.send(Event::Resync { bookmark }).await.is_err() {
                    return Err(Broken::Done);
                }
                self.resync_started();
            }
            self.say_absent_in_resync(&event).await?;
            self.position = next;
            if matches!(event, Event::Noop { .. }) && self.swallow_noop {
                self.swallow_noop = false;
                continue;
            }
            self.swallow_noop = false;
            if self.tx.send(event).await.is_err() || ends {
                return Err(Broken::Done);
            }
        }
        Ok(())
    }

    /// A resync reaches the consumer: for a single-resource watch, whether it delivers the
    /// resource is watched from here.
    fn resync_started(&mut self) {
        if matches!(self.target, WatchTarget::Pointer { .. }) {
            self.resync_delivered = Some(false);
        }
    }

    /// Follows a single-resource watch's resync through `event` (about to be delivered), and
    /// delivers a tombstone before the `Bootstrapped` of one that did not deliver the resource.
    async fn say_absent_in_resync(&mut self, event: &Event) -> std::result::Result<(), Broken> {
        let WatchTarget::Pointer { pointer, .. } = &self.target else {
            return Ok(());
        };
        match event {
            Event::Resync { .. } => self.resync_delivered = Some(false),
            Event::Created { .. } | Event::Updated { .. } | Event::Destroyed { .. } => {
                if let Some(delivered) = &mut self.resync_delivered {
                    *delivered = true;
                }
            }
            Event::Bootstrapped { bookmark } => {
                // The end of a resync, if one was being followed.
                let delivered = self.resync_delivered.take();
                if delivered == Some(false) {
                    let absent = Event::Destroyed {
                        resource: Arc::new(cosi_core::DynamicResource {
                            metadata: cosi_core::Metadata::new(pointer.clone()),
                            spec: serde_json::Value::Null,
                        }),
                        bookmark: bookmark.clone(),
                        compacted: false,
                    };
                    if self.tx.send(absent).await.is_err() {
                        return Err(Broken::Done);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether the resources of `event` are what this watch asked for: of its kind, and for a
    /// single-resource watch that resource.
    fn asked_for(&self, event: &Event) -> Result<()> {
        let (resource, old) = match event {
            Event::Created { resource, .. } | Event::Destroyed { resource, .. } => (resource, None),
            Event::Updated { resource, old, .. } => (resource, old.as_ref()),
            _ => return Ok(()),
        };
        for answered in std::iter::once(resource).chain(old) {
            let answered = answered.metadata().pointer();
            match &self.target {
                WatchTarget::Pointer { pointer, .. } => same_resource(pointer, answered)?,
                WatchTarget::Kind { kind, .. } => same_kind(kind, answered)?,
            }
        }
        Ok(())
    }

    async fn fail(&self, error: Error) {
        let _ = self.tx.send(Event::Errored { error }).await;
    }
}

/// Whether a broken stream is worth reconnecting: the transient codes, and any status the
/// client's own transport made (an HTTP/2 stream reset or a connection that died mid-stream,
/// which tonic may report as `Internal`): the network failing, not the server refusing. A
/// status the server sent arrives in trailers and carries no source, whatever its text says.
fn retryable(status: &Status) -> bool {
    is_transient(status.code()) || made_by_transport(status)
}

/// Whether `status` wraps an error of the connection (hyper's, h2's or an I/O error) rather than
/// one the server sent.
fn made_by_transport(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<hyper::Error>() || error.is::<h2::Error>() || error.is::<std::io::Error>() {
            return true;
        }
        source = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_the_server_sent_is_retried_by_its_code_not_its_text() {
        // An error about a resource whose name says "h2" is the server's answer, not a
        // broken connection.
        assert!(!retryable(&Status::internal(
            "backend failure reading config/Files.cosi.dev/h2-settings"
        )));
        assert!(!retryable(&Status::permission_denied("h2")));
        assert!(retryable(&Status::unavailable("shutting down")));
        assert!(retryable(&Status::unknown("anything")));
    }

    #[test]
    fn a_status_the_transport_made_is_retried_whatever_its_code() {
        let mut reset = Status::internal("h2 protocol error: stream no longer needed");
        reset.set_source(Arc::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(retryable(&reset));
    }
}
