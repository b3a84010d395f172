//! The `cosi.resource.State` service over any [`State`]: each call decodes and checks its
//! input completely (type registered, fields well-formed, the caller allowed) before it touches
//! the store, so a refused or malformed call changes nothing.
//!
//! Watches: the first response is empty (the "established" signal the original's clients wait
//! for); events follow one per response, or one response per backend batch when `aggregated`.
//! A single-resource watch that resumes from a bookmark or replays history is served as a kind
//! watch filtered to that id, which every backend supports. `bootstrap_bookmark` is served by
//! reading the kind's head position first (the initial event of a watch on an id that is never
//! stored) and resuming after it. A server shutting down ends every watch with `Unavailable`,
//! which clients treat as "reconnect and resume", and so every list and unary answer waiting
//! for room in its caller's byte budget ([`super::held_bytes`]). An event larger than one
//! message (an update of a resource over half the limit carries two copies) goes without its
//! YAML copies, then without its old resource; a resource too large alone ends the watch with
//! an error naming it.
//!
//! Lists and watches send each resource as its encoded bytes (the `cosi_rs.encoded` twins of
//! the responses, the same on the wire), and the watches of one service share those bytes
//! ([`super::encodings`]): ten watchers of a kind encode each event once, not ten times.

use std::sync::Arc;

use cosi_core::{
    AnyResource, CreateOptions, DestroyOptions, Error, Event, Kind, ListOptions, Pointer,
    Sensitivity, State, StateExt, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::auth::{caller_of, Caller, StatePolicy};
use crate::codec::{decode_phase, Codec, Reader};
use crate::events::{encode_event_with, Outgoing};
use crate::proto::encoded;
use crate::proto::resource::{self as pb, state_server};

use super::encodings::{SharedEncodings, DEFAULT_BUDGET};
use super::held_bytes::{counted, framed_len, Admission, StreamBytes};
use crate::query::{decode_bookmark, decode_ids, decode_labels, exact_id};
use crate::status::{to_status, Call};

/// The request header with which a client says it needs no YAML specs (this crate's client
/// decodes `proto_spec`; writing YAML is the most expensive part of encoding a resource).
pub const OMIT_YAML_HEADER: &str = "cosi-omit-yaml";

/// Events read from the backend per batch (and per response of an aggregated watch), by
/// default.
pub const WATCH_BATCH: usize = 256;

/// The most encoded bytes of events an aggregated watch response gathers before it is sent: a
/// batch of large resources goes out in several responses, each well under the 32 MiB message
/// limit (a single event larger than a message is first made to fit, see `WatchFeed::fit`).
pub const AGGREGATE_BYTES: usize = 4 * 1024 * 1024;
/// Responses buffered per watch before the server waits for the client (HTTP/2 flow control
/// does the rest), so a slow client cannot grow the server's memory.
const WATCH_BUFFER: usize = 1;

/// The State service.
#[derive(Clone)]
pub struct StateService {
    shared: Arc<Shared>,
    shutdown: crate::server::StopSignal,
    batch: usize,
}

struct Shared {
    state: Arc<dyn State>,
    codec: Codec,
    policy: StatePolicy,
    encodings: SharedEncodings,
}

impl std::fmt::Debug for StateService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateService")
            .field("codec", &self.shared.codec)
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}

impl StateService {
    /// Serves `state`, with the types and spec encodings of `codec`, under `policy`.
    pub fn new(state: Arc<dyn State>, codec: Codec, policy: StatePolicy) -> Self {
        StateService {
            shared: Arc::new(Shared {
                state,
                codec,
                policy,
                encodings: SharedEncodings::new(DEFAULT_BUDGET),
            }),
            // Never shut down until a server sets its own signal.
            shutdown: crate::server::never(),
            batch: WATCH_BATCH,
        }
    }

    /// Reads at most `batch` events from the store per step of a watch (at least 1). With the
    /// client's receive window, it bounds how far a watch runs ahead of a consumer that is not
    /// reading before the store's own catch-up takes over.
    pub fn with_watch_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Lets the watches share at most `budget` bytes of encoded resources (default
    /// [`DEFAULT_SHARED_ENCODINGS`](super::DEFAULT_SHARED_ENCODINGS); 0: each watch encodes
    /// every resource it sends). Call it before the service is cloned or served.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cosi_api::auth::StatePolicy;
    /// use cosi_api::codec::Codec;
    /// use cosi_api::server::StateService;
    /// let store = Arc::new(cosi_state::MemoryState::default());
    /// let codec = Codec::new(Arc::new(cosi_core::Registry::new()));
    /// let service = StateService::new(store, codec, StatePolicy::default())
    ///     .with_shared_encodings(16 * 1024 * 1024);
    /// # let _ = service;
    /// ```
    pub fn with_shared_encodings(mut self, budget: usize) -> Self {
        let shared = Shared {
            state: self.shared.state.clone(),
            codec: self.shared.codec.clone(),
            policy: self.shared.policy.clone(),
            encodings: SharedEncodings::new(budget),
        };
        self.shared = Arc::new(shared);
        self
    }

    /// The same service, ending its watches when `shutdown` fires, with its reason.
    pub(crate) fn with_shutdown(mut self, shutdown: crate::server::StopSignal) -> Self {
        self.shutdown = shutdown;
        self
    }

    fn codec(&self) -> &Codec {
        &self.shared.codec
    }

    fn sensitivity(&self, resource_type: &str) -> Sensitivity {
        self.codec()
            .registry()
            .get(resource_type)
            .map(|d| d.sensitivity)
            .unwrap_or_default()
    }

    fn check_read(&self, caller: &Caller, kind: &Kind) -> Result<(), Status> {
        self.shared.policy.check_read(
            caller,
            &kind.to_string(),
            self.sensitivity(kind.resource_type()),
        )
    }

    /// The stored owner, read only when the caller is subject to the write rules.
    async fn stored_owner(
        &self,
        caller: &Caller,
        pointer: &Pointer,
        call: Call,
    ) -> Result<Option<String>, Status> {
        if caller.is_trusted() {
            return Ok(None);
        }
        match self.shared.state.get(pointer).await {
            Ok(stored) => Ok(stored.metadata().owner().map(str::to_string)),
            // Absent: the write itself reports not found.
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(to_status(&e, call)),
        }
    }

    fn check_write(
        &self,
        caller: &Caller,
        pointer: &Pointer,
        owner: Option<&str>,
        stored_owner: Option<&str>,
    ) -> Result<(), Status> {
        self.shared.policy.check_write(
            caller,
            &pointer.to_string(),
            pointer.resource_type(),
            owner,
            stored_owner,
        )
    }

    fn encode(
        &self,
        resource: &dyn AnyResource,
        yaml: bool,
        call: Call,
    ) -> Result<pb::Resource, Status> {
        self.codec()
            .encode(resource, yaml)
            .map_err(|e| to_status(&e, call))
    }

    /// Room in the caller's byte budget for a unary answer, taken now if the caller has it,
    /// else once it has ([`StreamBytes::admit_or_stop`]); a server that stops first ends the
    /// call with `Unavailable` and the stop's reason, saying what the call had `applied` (a
    /// write and its resource) so that the caller does not take it for undone.
    async fn room(
        &self,
        bytes: &Arc<StreamBytes>,
        applied: Option<(&str, &Pointer)>,
    ) -> Result<Admission, Status> {
        bytes
            .admit_or_stop(&self.shutdown)
            .await
            .map_err(|reason| match applied {
                None => Status::unavailable(reason.to_string()),
                Some((write, pointer)) => Status::unavailable(format!(
                    "{reason}: the {write} of {pointer} was applied; its answer was not sent"
                )),
            })
    }
}

fn wants_yaml<T>(request: &Request<T>) -> bool {
    request.metadata().get(OMIT_YAML_HEADER).is_none()
}

fn owner(text: String) -> Option<Arc<str>> {
    Some(text).filter(|o| !o.is_empty()).map(Arc::from)
}

fn err(call: Call) -> impl Fn(Error) -> Status {
    move |e| to_status(&e, call)
}

#[tonic::async_trait]
impl state_server::State for StateService {
    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let caller = caller_of(&request)?.clone();
        let yaml = wants_yaml(&request);
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let r = request.into_inner();
        let pointer = self
            .codec()
            .pointer(&r.namespace, &r.r#type, &r.id)
            .map_err(err(Call::Get))?;
        self.check_read(&caller, pointer.kind())?;
        let stored = self
            .shared
            .state
            .get(&pointer)
            .await
            .map_err(err(Call::Get))?;
        let (stored, admission) = match bytes.as_ref().map(|bytes| (bytes, bytes.try_admit())) {
            None => (stored, None),
            Some((_, Some(admission))) => (stored, Some(admission)),
            Some((bytes, None)) => {
                // No room: wait holding nothing of the resource, and read it again once there
                // is (see `held_bytes`).
                drop(stored);
                let admission = self.room(bytes, None).await?;
                let stored = self
                    .shared
                    .state
                    .get(&pointer)
                    .await
                    .map_err(err(Call::Get))?;
                (stored, Some(admission))
            }
        };
        let answer = pb::GetResponse {
            resource: Some(self.encode(&*stored, yaml, Call::Get)?),
        };
        Ok(counted(admission, answer))
    }

    /// Encodes each listed resource as the stream is read: a caller that does not read holds
    /// the listed values (shared with the store) and what HTTP/2 buffers, not the whole kind
    /// encoded.
    type ListStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<encoded::ListResponse, Status>> + Send>,
    >;

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<Self::ListStream>, Status> {
        let caller = caller_of(&request)?.clone();
        let yaml = wants_yaml(&request);
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let r = request.into_inner();
        let kind = self
            .codec()
            .kind(&r.namespace, &r.r#type)
            .map_err(err(Call::List))?;
        self.check_read(&caller, &kind)?;
        let subject = format!("list {kind}");
        let options = r.options.unwrap_or_default();
        let options = ListOptions {
            labels: decode_labels(&subject, options.label_query).map_err(err(Call::List))?,
            ids: decode_ids(&subject, options.id_query).map_err(err(Call::List))?,
        };
        let listed = self
            .shared
            .state
            .list(&kind, &options)
            .await
            .map_err(err(Call::List))?;
        let shared = Arc::clone(&self.shared);
        let encode = move |r: &cosi_core::SharedResource| {
            let bytes = shared
                .codec
                .encode_bytes(&**r, yaml)
                .map_err(err(Call::List))?;
            Ok(encoded::ListResponse {
                resource: Some(bytes),
            })
        };
        let Some(bytes) = bytes else {
            let responses =
                tokio_stream::StreamExt::map(tokio_stream::iter(listed), move |r| encode(&r));
            return Ok(Response::new(Box::pin(responses)));
        };
        // A counted caller's resource is encoded once its byte budget has room for it; a
        // server that stops first ends the list.
        let encode = Arc::new(encode);
        let shutdown = self.shutdown.clone();
        let responses = futures::StreamExt::then(futures::stream::iter(listed), move |r| {
            let (bytes, encode, shutdown) = (bytes.clone(), encode.clone(), shutdown.clone());
            async move {
                let admission = bytes
                    .admit_or_stop(&shutdown)
                    .await
                    .map_err(|reason| Status::unavailable(reason.to_string()))?;
                let response = encode(&r)?;
                admission.charge(framed_len(&response));
                Ok(response)
            }
        });
        Ok(Response::new(Box::pin(responses)))
    }

    async fn create(
        &self,
        request: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        let caller = caller_of(&request)?.clone();
        let yaml = wants_yaml(&request);
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let r = request.into_inner();
        let resource = self
            .codec()
            .decode(
                r.resource
                    .ok_or_else(|| Status::invalid_argument("create: resource: missing"))?,
                Reader::Server,
            )
            .map_err(err(Call::Create))?;
        let owner = owner(r.options.unwrap_or_default().owner);
        let pointer = resource.metadata().pointer().clone();
        self.check_write(&caller, &pointer, owner.as_deref(), None)?;
        let stored = self
            .shared
            .state
            .create(resource, CreateOptions { owner })
            .await
            .map_err(err(Call::Create))?;
        let admission = match &bytes {
            Some(bytes) => Some(self.room(bytes, Some(("create", &pointer))).await?),
            None => None,
        };
        let answer = pb::CreateResponse {
            resource: Some(self.encode(&*stored, yaml, Call::Create)?),
        };
        Ok(counted(admission, answer))
    }

    async fn update(
        &self,
        request: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateResponse>, Status> {
        let caller = caller_of(&request)?.clone();
        let yaml = wants_yaml(&request);
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let r = request.into_inner();
        let resource = self
            .codec()
            .decode(
                r.new_resource
                    .ok_or_else(|| Status::invalid_argument("update: new_resource: missing"))?,
                Reader::Server,
            )
            .map_err(err(Call::Update))?;
        let pointer = resource.metadata().pointer().clone();
        let options = r.options.unwrap_or_default();
        let expected_phase = match options.expected_phase {
            None => None,
            Some(text) => Some(decode_phase(&text).map_err(|m| {
                to_status(
                    &Error::invalid(pointer.to_string(), "options.expected_phase", m),
                    Call::Update,
                )
            })?),
        };
        let owner = owner(options.owner);
        let stored_owner = self.stored_owner(&caller, &pointer, Call::Update).await?;
        self.check_write(&caller, &pointer, owner.as_deref(), stored_owner.as_deref())?;
        let stored = self
            .shared
            .state
            .update(
                resource,
                UpdateOptions {
                    owner,
                    expected_phase,
                },
            )
            .await
            .map_err(err(Call::Update))?;
        let admission = match &bytes {
            Some(bytes) => Some(self.room(bytes, Some(("update", &pointer))).await?),
            None => None,
        };
        let answer = pb::UpdateResponse {
            resource: Some(self.encode(&*stored, yaml, Call::Update)?),
        };
        Ok(counted(admission, answer))
    }

    async fn destroy(
        &self,
        request: Request<pb::DestroyRequest>,
    ) -> Result<Response<pb::DestroyResponse>, Status> {
        let caller = caller_of(&request)?.clone();
        let r = request.into_inner();
        let pointer = self
            .codec()
            .pointer(&r.namespace, &r.r#type, &r.id)
            .map_err(err(Call::Destroy))?;
        let owner = owner(r.options.unwrap_or_default().owner);
        let stored_owner = self.stored_owner(&caller, &pointer, Call::Destroy).await?;
        self.check_write(&caller, &pointer, owner.as_deref(), stored_owner.as_deref())?;
        self.shared
            .state
            .destroy(&pointer, DestroyOptions { owner })
            .await
            .map_err(err(Call::Destroy))?;
        Ok(Response::new(pb::DestroyResponse {}))
    }

    type WatchStream = ReceiverStream<Result<encoded::WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let caller = caller_of(&request)?.clone();
        let yaml = wants_yaml(&request);
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let r = request.into_inner();
        let kind = self
            .codec()
            .kind(&r.namespace, &r.r#type)
            .map_err(err(Call::Watch))?;
        self.check_read(&caller, &kind)?;
        let api = r.api_version;
        let options = r.options.unwrap_or_default();
        let aggregated = options.aggregated && r.id.is_none();
        let (watch, first) = self.open_watch(&kind, r.id, options).await?;
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let feed = WatchFeed {
            shared: self.shared.clone(),
            kind,
            api,
            yaml,
            aggregated,
            tx,
            shutdown: self.shutdown.clone(),
            batch: self.batch,
            bytes,
        };
        tokio::spawn(feed.run(watch, first));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn teardown(
        &self,
        request: Request<pb::TeardownRequest>,
    ) -> Result<Response<pb::TeardownResponse>, Status> {
        let caller = caller_of(&request)?.clone();
        let r = request.into_inner();
        let pointer = self
            .codec()
            .pointer(&r.namespace, &r.r#type, &r.id)
            .map_err(err(Call::Teardown))?;
        let owner = owner(r.options.unwrap_or_default().owner);
        let stored_owner = self.stored_owner(&caller, &pointer, Call::Teardown).await?;
        self.check_write(&caller, &pointer, owner.as_deref(), stored_owner.as_deref())?;
        let ready = self
            .shared
            .state
            .teardown(&pointer, owner.as_deref())
            .await
            .map_err(err(Call::Teardown))?;
        Ok(Response::new(pb::TeardownResponse {
            destroy_ready: ready,
        }))
    }

    async fn teardown_and_destroy(
        &self,
        request: Request<pb::TeardownAndDestroyRequest>,
    ) -> Result<Response<pb::TeardownAndDestroyResponse>, Status> {
        let caller = caller_of(&request)?.clone();
        let r = request.into_inner();
        let call = Call::TeardownAndDestroy;
        let pointer = self
            .codec()
            .pointer(&r.namespace, &r.r#type, &r.id)
            .map_err(err(call))?;
        let owner = owner(r.options.unwrap_or_default().owner);
        let stored_owner = self.stored_owner(&caller, &pointer, call).await?;
        self.check_write(&caller, &pointer, owner.as_deref(), stored_owner.as_deref())?;
        self.shared
            .state
            .teardown_and_destroy(&pointer, owner.as_deref())
            .await
            .map_err(err(call))?;
        Ok(Response::new(pb::TeardownAndDestroyResponse {}))
    }
}

impl StateService {
    /// Opens the backend watch a request asks for; returns it with an event to send first
    /// (the `NOOP` of `bootstrap_bookmark`).
    async fn open_watch(
        &self,
        kind: &Kind,
        id: Option<String>,
        options: pb::WatchOptions,
    ) -> Result<(Watch, Option<Event>), Status> {
        let state = &self.shared.state;
        let subject = format!("watch {kind}");
        let call = Call::Watch;
        let unimplemented = |m: &str| {
            to_status(
                &Error::Unsupported {
                    subject: subject.clone(),
                    message: m.to_string(),
                },
                call,
            )
        };
        let tail = match options.tail_events {
            0 => None,
            n if n > 0 => Some(n as usize),
            n => {
                return Err(to_status(
                    &Error::invalid(
                        subject.as_str(),
                        "options.tail_events",
                        format!("{n} is negative"),
                    ),
                    call,
                ))
            }
        };
        let since = options.start_from_bookmark.as_deref().map(decode_bookmark);
        let strict = options.strict;
        if let Some(id) = id {
            if options.bootstrap_contents {
                return Err(unimplemented(
                    "bootstrap contents is not implemented for resource watch",
                ));
            }
            if !options.label_query.is_empty() {
                return Err(unimplemented(
                    "label query is not implemented for resource watch",
                ));
            }
            if id.is_empty() {
                return Err(to_status(
                    &Error::invalid(subject.as_str(), "id", "must not be empty"),
                    call,
                ));
            }
            let pointer = kind.pointer(id.as_str());
            let watch = if since.is_some() || tail.is_some() {
                let options = WatchKindOptions {
                    since,
                    tail,
                    ids: Some(exact_id(subject.as_str(), &id).map_err(|e| to_status(&e, call))?),
                    strict,
                    ..Default::default()
                };
                state.watch_kind(kind, options).await
            } else {
                state.watch(&pointer, WatchOptions { strict }).await
            };
            return Ok((watch.map_err(err(call))?, None));
        }
        let mut first = None;
        let mut since = since;
        if options.bootstrap_bookmark
            && !options.bootstrap_contents
            && since.is_none()
            && tail.is_none()
        {
            let head = self.head(kind).await.map_err(err(call))?;
            first = Some(Event::Noop {
                bookmark: head.clone(),
            });
            since = Some(head);
        }
        let watch_options = WatchKindOptions {
            bootstrap: options.bootstrap_contents,
            tail,
            since,
            labels: decode_labels(&subject, options.label_query).map_err(err(call))?,
            ids: decode_ids(&subject, options.id_query).map_err(err(call))?,
            strict,
        };
        let watch = state
            .watch_kind(kind, watch_options)
            .await
            .map_err(err(call))?;
        Ok((watch, first))
    }

    /// The kind's current position: the bookmark of the initial event of a watch on an id
    /// that is never stored (ids are never empty).
    async fn head(&self, kind: &Kind) -> cosi_core::Result<cosi_core::Bookmark> {
        let mut probe = self
            .shared
            .state
            .watch(&kind.pointer(""), WatchOptions::default())
            .await?;
        match probe.recv().await {
            Some(event) => event.bookmark().cloned().ok_or_else(|| Error::Backend {
                subject: kind.to_string(),
                message: "the backend's initial watch event has no bookmark".into(),
                retryable: false,
                source: None,
            }),
            None => Err(Error::Backend {
                subject: kind.to_string(),
                message: "the backend ended a watch before its initial event".into(),
                retryable: true,
                source: None,
            }),
        }
    }
}

/// Moves one backend watch onto its response stream.
struct WatchFeed {
    shared: Arc<Shared>,
    kind: Kind,
    api: i32,
    yaml: bool,
    aggregated: bool,
    tx: mpsc::Sender<Result<encoded::WatchResponse, Status>>,
    shutdown: crate::server::StopSignal,
    batch: usize,
    /// The call's ledger in its caller's byte budget (None: a caller that is not counted).
    bytes: Option<Arc<StreamBytes>>,
}

enum Step {
    Continue,
    Stop,
}

impl WatchFeed {
    async fn run(mut self, mut watch: Watch, first: Option<Event>) {
        // The "watch established" signal (a few bytes, sent without waiting for room).
        let established = encoded::WatchResponse::default();
        if let Some(bytes) = &self.bytes {
            bytes.charge_small(framed_len(&established));
        }
        if self.tx.send(Ok(established)).await.is_err() {
            return;
        }
        if let Some(event) = first {
            if let Step::Stop = self.send(std::slice::from_ref(&event)).await {
                return;
            }
        }
        loop {
            let batch = tokio::select! {
                // Unfiltered watchers of a kind share one buffer of events in the store.
                batch = watch.recv_shared(self.batch) => batch,
                reason = crate::server::stopped(&mut self.shutdown) => {
                    let _ = self.tx.send(Err(Status::unavailable(reason.to_string()))).await;
                    return;
                }
                _ = self.tx.closed() => return,
            };
            let Some(batch) = batch else {
                let _ = self
                    .tx
                    .send(Err(Status::unavailable("the store ended the watch")))
                    .await;
                return;
            };
            if let Step::Stop = self.send(&batch).await {
                return;
            }
        }
    }

    async fn send(&mut self, batch: &[Event]) -> Step {
        let mut events = Vec::with_capacity(if self.aggregated { batch.len() } else { 1 });
        // Encoded bytes of `events`: an aggregated response is sent before it would pass
        // AGGREGATE_BYTES, so that large resources never make it exceed the message limit.
        let mut pending_bytes = 0;
        let mut step = Step::Continue;
        let mut end = None;
        // Room in the caller's byte budget for the response being built, taken before its
        // first event is encoded (None: not yet taken, or a caller that is not counted).
        let mut admission = None;
        let shared = self.shared.clone();
        let Shared {
            codec, encodings, ..
        } = &*shared;
        let yaml = self.yaml;
        let mut encode = |r: &cosi_core::SharedResource| {
            encodings.get_or_encode(r, yaml, || codec.encode_bytes(&**r, yaml))
        };
        let mut next = 0;
        while let Some(event) = batch.get(next) {
            if admission.is_none() && self.bytes.is_some() {
                match self.admit().await {
                    Ok(room) => admission = room,
                    Err(stop) => return stop,
                }
            }
            let (outgoing, size) = self.sized(
                event,
                encode_event_with(&self.kind, event, self.api, &mut encode),
            );
            let outgoing = match outgoing {
                Outgoing::Send(e) => Some(e),
                Outgoing::Last(e) => {
                    step = Step::Stop;
                    Some(e)
                }
                Outgoing::Skip => None,
                Outgoing::End(status) => {
                    end = Some(status);
                    step = Step::Stop;
                    None
                }
            };
            if let Some(event) = outgoing {
                if !self.aggregated {
                    let response = encoded::WatchResponse { event: vec![event] };
                    if self.deliver(response, admission.take()).await.is_err() {
                        return Step::Stop;
                    }
                } else {
                    if !events.is_empty() && pending_bytes + size > AGGREGATE_BYTES {
                        let response = encoded::WatchResponse {
                            event: std::mem::take(&mut events),
                        };
                        if self.deliver(response, admission.take()).await.is_err() {
                            return Step::Stop;
                        }
                        pending_bytes = 0;
                        if self.bytes.is_some() {
                            // A counted caller's event is encoded again once the next response
                            // has room: held while waiting for it, it would not be counted.
                            continue;
                        }
                    }
                    pending_bytes += size;
                    events.push(event);
                }
            }
            next += 1;
            if matches!(step, Step::Stop) {
                break;
            }
        }
        if !events.is_empty()
            && self
                .deliver(encoded::WatchResponse { event: events }, admission.take())
                .await
                .is_err()
        {
            return Step::Stop;
        }
        if let Some(status) = end {
            let _ = self.tx.send(Err(status)).await;
        }
        step
    }

    /// Waits until the caller's byte budget has room for a response ([`StreamBytes::admit`]);
    /// `Ok(None)` for a caller that is not counted. A stop or the client going away ends the
    /// wait (and the watch).
    async fn admit(&mut self) -> Result<Option<Admission>, Step> {
        let Some(bytes) = self.bytes.clone() else {
            return Ok(None);
        };
        tokio::select! {
            admission = bytes.admit() => Ok(Some(admission)),
            reason = crate::server::stopped(&mut self.shutdown) => {
                let _ = self.tx.send(Err(Status::unavailable(reason.to_string()))).await;
                Err(Step::Stop)
            }
            _ = self.tx.closed() => Err(Step::Stop),
        }
    }

    /// Sends `response`, counted against the caller's budget in place of `admission`.
    async fn deliver(
        &self,
        response: encoded::WatchResponse,
        admission: Option<Admission>,
    ) -> Result<(), ()> {
        if let Some(admission) = admission {
            admission.charge(framed_len(&response));
        }
        self.tx.send(Ok(response)).await.map_err(|_| ())
    }

    /// `outgoing` made to fit one message ([`WatchFeed::fit`]), with its encoded size (0 for
    /// what sends no event), measured once.
    fn sized(&self, event: &Event, outgoing: Outgoing) -> (Outgoing, usize) {
        let size_of = |outgoing: &Outgoing| match outgoing {
            Outgoing::Send(e) | Outgoing::Last(e) => prost::Message::encoded_len(e),
            Outgoing::Skip | Outgoing::End(_) => 0,
        };
        let size = size_of(&outgoing);
        if size <= MAX_EVENT_BYTES {
            return (outgoing, size);
        }
        let outgoing = match outgoing {
            Outgoing::Send(e) => self.fit(event, e, false),
            Outgoing::Last(e) => self.fit(event, e, true),
            other => other,
        };
        let size = size_of(&outgoing);
        (outgoing, size)
    }

    /// `encoded`, larger than [`MAX_EVENT_BYTES`], made to fit one message: an update of a
    /// resource of more than half the limit carries two copies, so it goes without the YAML
    /// copies of its specs, then without its old resource (as a catch-up's update does); if
    /// its resource alone is too large, the watch ends with an error naming it, rather than a
    /// transport error every watcher of the kind would meet again on resuming.
    fn fit(&self, event: &Event, mut encoded: encoded::Event, last: bool) -> Outgoing {
        let too_large = |e: &encoded::Event| prost::Message::encoded_len(e) > MAX_EVENT_BYTES;
        if self.yaml {
            let codec = &self.shared.codec;
            let mut without_yaml = |r: &cosi_core::SharedResource| codec.encode_bytes(&**r, false);
            if let Outgoing::Send(e) | Outgoing::Last(e) =
                encode_event_with(&self.kind, event, self.api, &mut without_yaml)
            {
                encoded = e;
            }
        }
        if too_large(&encoded) {
            encoded.old = None;
        }
        if !too_large(&encoded) {
            return if last {
                Outgoing::Last(encoded)
            } else {
                Outgoing::Send(encoded)
            };
        }
        let subject = event.resource().map_or_else(
            || self.kind.to_string(),
            |r| r.metadata().pointer().to_string(),
        );
        let error = Error::Backend {
            subject,
            message: format!(
                "the resource encodes to {} bytes, more than a watch event can carry ({} \
                 bytes): read it in process or make it smaller",
                prost::Message::encoded_len(&encoded),
                MAX_EVENT_BYTES
            ),
            retryable: false,
            source: None,
        };
        encode_event_with(
            &self.kind,
            &Event::Errored { error },
            self.api,
            &mut encode_nothing,
        )
    }
}

/// The largest event a watch response carries: the message limit, less room for the
/// response's own framing.
pub const MAX_EVENT_BYTES: usize = crate::server::MAX_MESSAGE_SIZE - 1024;

/// The encoder for events that carry no resource.
fn encode_nothing(r: &cosi_core::SharedResource) -> cosi_core::Result<prost::bytes::Bytes> {
    Err(Error::Unsupported {
        subject: r.metadata().pointer().to_string(),
        message: "an error event carries no resource".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{decode_event, API_EXTENDED};
    use crate::server::held_bytes::{BytesPerCaller, LARGEST_RESPONSE};
    use crate::server::stop::Stop;
    use cosi_core::{Resource, ResourceSpec, Version};
    use cosi_state::{MemoryOptions, MemoryState};
    use serde::{Deserialize, Serialize};
    use std::time::Duration;
    use tokio_stream::StreamExt;

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Note {
        text: String,
    }
    impl ResourceSpec for Note {
        const TYPE: &'static str = "Notes.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }

    fn codec() -> Codec {
        let mut registry = cosi_core::Registry::new();
        registry.register::<Note>().unwrap();
        Codec::new(Arc::new(registry))
    }

    async fn write(store: &MemoryState, text: &str) -> Version {
        let note = Resource::new("n", Note { text: text.into() });
        let stored = store
            .modify(note, UpdateOptions::default(), |n| {
                n.spec.text = text.into();
                Ok(())
            })
            .await
            .unwrap();
        stored.metadata().version()
    }

    /// The next event's version and whether it is part of a catch-up.
    async fn next(
        events: &mut ReceiverStream<Result<encoded::WatchResponse, Status>>,
    ) -> (Version, bool) {
        let mut response = events.next().await.unwrap().unwrap();
        assert_eq!(response.event.len(), 1);
        let event = decode_event(&codec(), &Note::kind(), response.event.remove(0)).unwrap();
        match event.event {
            Event::Updated {
                resource,
                compacted,
                ..
            } => (resource.metadata().version(), compacted),
            other => panic!("expected an update, got {other:?}"),
        }
    }

    fn watch_request() -> Request<pb::WatchRequest> {
        let mut request = Request::new(pb::WatchRequest {
            namespace: "test".into(),
            r#type: Note::TYPE.into(),
            api_version: API_EXTENDED,
            ..pb::WatchRequest::default()
        });
        request.extensions_mut().insert(Caller::trusted());
        request
    }

    #[tokio::test]
    async fn a_service_outside_a_server_does_not_end_its_watches() {
        let store = Arc::new(MemoryState::default());
        let first = write(&store, "0").await;
        let service = StateService::new(store.clone(), codec(), StatePolicy::default());
        let mut events = state_server::State::watch(&service, watch_request())
            .await
            .unwrap()
            .into_inner();
        let established = events.next().await.unwrap().unwrap();
        assert_eq!(established, encoded::WatchResponse::default());
        let second = write(&store, "1").await;
        assert_ne!(first, second);
        assert_eq!(next(&mut events).await, (second, false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_whose_caller_has_no_room_waits_and_then_catches_up_from_the_store() {
        let store = Arc::new(MemoryState::new(MemoryOptions {
            history: 4,
            history_min: 1,
            ..MemoryOptions::default()
        }));
        write(&store, "0").await;
        let service = StateService::new(store.clone(), codec(), StatePolicy::default());
        // Room for two of the largest responses: a response starts while the caller holds at
        // most one.
        let budgets = BytesPerCaller::new(2 * LARGEST_RESPONSE);
        let mut request = watch_request();
        request.extensions_mut().insert(budgets.stream("reader"));
        let mut events = state_server::State::watch(&service, request)
            .await
            .unwrap()
            .into_inner();
        let established = events.next().await.unwrap().unwrap();
        assert_eq!(established, encoded::WatchResponse::default());

        // The caller's other stream holds a response its client has not read: no room.
        let other = budgets.stream("reader");
        other.admit().await.charge(LARGEST_RESPONSE);
        let first = write(&store, "1").await;
        // The paused clock advances only once every task waits: the watch sends nothing.
        let waited = tokio::time::timeout(Duration::from_secs(60), events.next()).await;
        assert!(
            waited.is_err(),
            "sent while its caller had no room: {waited:?}"
        );
        let mut last = first;
        for i in 2..=10 {
            last = write(&store, &i.to_string()).await;
        }

        // Room again: the event it held, exactly, then the store's catch-up (the latest state,
        // marked), and live events after it; the watch is not ended.
        drop(other);
        assert_eq!(next(&mut events).await, (first, false));
        assert_eq!(next(&mut events).await, (last, true));
        let live = write(&store, "11").await;
        assert_eq!(next(&mut events).await, (live, false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_cancelled_while_its_store_is_quiet_gives_back_what_it_had_queued() {
        let store = Arc::new(MemoryState::default());
        write(&store, "0").await;
        let service = StateService::new(store.clone(), codec(), StatePolicy::default());
        let budgets = BytesPerCaller::new(2 * LARGEST_RESPONSE);
        let observer = budgets.stream("reader");
        let mut request = watch_request();
        request.extensions_mut().insert(budgets.stream("reader"));
        let mut events = state_server::State::watch(&service, request)
            .await
            .unwrap()
            .into_inner();
        let established = events.next().await.unwrap().unwrap();
        assert_eq!(established, encoded::WatchResponse::default());
        write(&store, "1").await;
        tokio::time::timeout(Duration::from_secs(60), async {
            while events.as_ref().is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
        .await
        .expect("the update was sent");
        // An update queued, not yet taken by HTTP/2: counted (the established message, which
        // was taken but not written here, too).
        assert!(observer.caller_holds() > framed_len(&established));

        // The client cancels while the store has nothing new: the watch ends and gives back
        // all it had counted.
        drop(events);
        tokio::time::timeout(Duration::from_secs(3600), async {
            while observer.caller_holds() != 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
        .await
        .expect("the watch gave its queued update back when its client cancelled");
    }

    /// A read by the trusted caller, counted as a caller's call whose ledger is `call`.
    fn read_request<T>(message: T, call: &Arc<StreamBytes>) -> Request<T> {
        let mut request = Request::new(message);
        request.extensions_mut().insert(Caller::trusted());
        request.extensions_mut().insert(call.clone());
        request
    }

    fn get_request(call: &Arc<StreamBytes>) -> Request<pb::GetRequest> {
        let message = pb::GetRequest {
            namespace: "test".into(),
            r#type: Note::TYPE.into(),
            id: "n".into(),
            ..pb::GetRequest::default()
        };
        read_request(message, call)
    }

    /// A service over `store` that ends its calls when `stop` fires, a budget of one largest
    /// response, and the caller's other stream, which holds a byte of it until it is dropped:
    /// no room.
    async fn no_room(
        store: Arc<MemoryState>,
    ) -> (StateService, Stop, BytesPerCaller, Arc<StreamBytes>) {
        let (stop, signal) = Stop::new();
        let service =
            StateService::new(store, codec(), StatePolicy::default()).with_shutdown(signal);
        let budgets = BytesPerCaller::new(LARGEST_RESPONSE);
        let other = budgets.stream("reader");
        other.admit().await.charge(1);
        (service, stop, budgets, other)
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_waiting_for_room_ends_with_unavailable_when_the_server_stops() {
        let store = Arc::new(MemoryState::default());
        write(&store, "0").await;
        let (service, stop, budgets, _other) = no_room(store).await;
        let request = read_request(
            pb::ListRequest {
                namespace: "test".into(),
                r#type: Note::TYPE.into(),
                ..pb::ListRequest::default()
            },
            &budgets.stream("reader"),
        );
        let mut listed = state_server::State::list(&service, request)
            .await
            .unwrap()
            .into_inner();
        // The paused clock advances only once every task waits: the list sends nothing.
        let waited = tokio::time::timeout(Duration::from_secs(60), listed.next()).await;
        assert!(waited.is_err(), "listed with no room: {waited:?}");

        stop.fire("moving to 192.0.2.7");
        let ended = tokio::time::timeout(Duration::from_secs(60), listed.next())
            .await
            .expect("the list ended when the server stopped")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (ended.code(), ended.message()),
            (tonic::Code::Unavailable, "moving to 192.0.2.7")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_get_waiting_for_room_ends_with_unavailable_when_the_server_stops() {
        let store = Arc::new(MemoryState::default());
        write(&store, "0").await;
        let (service, stop, budgets, _other) = no_room(store).await;
        let request = get_request(&budgets.stream("reader"));
        let get = tokio::spawn(async move { state_server::State::get(&service, request).await });
        // The paused clock advances only once every task waits.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!get.is_finished(), "answered with no room");

        stop.fire("moving to 192.0.2.7");
        let ended = tokio::time::timeout(Duration::from_secs(60), get)
            .await
            .expect("the Get ended when the server stopped")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (ended.code(), ended.message()),
            (tonic::Code::Unavailable, "moving to 192.0.2.7")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_get_waits_for_room_then_answers_the_resource_as_it_is_and_counts_it() {
        let store = Arc::new(MemoryState::default());
        write(&store, "0").await;
        let (service, _stop, budgets, other) = no_room(store.clone()).await;
        let call = budgets.stream("reader");
        let request = get_request(&call);
        let get = tokio::spawn(async move { state_server::State::get(&service, request).await });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!get.is_finished(), "answered with no room");
        // Changed while the Get waits: it answers what the store holds once it has room.
        let current = write(&store, "1").await;

        drop(other);
        let answer = tokio::time::timeout(Duration::from_secs(60), get)
            .await
            .expect("the Get was answered once its caller had room")
            .unwrap()
            .unwrap()
            .into_inner();
        let resource = codec()
            .decode(answer.resource.clone().unwrap(), Reader::Client)
            .unwrap();
        assert_eq!(resource.metadata().version(), current);
        // Counted until HTTP/2 writes it (here: never), at its framed size exactly.
        assert_eq!(call.caller_holds(), framed_len(&answer));
    }
}
