//! The distributed backend: [`EtcdState`] keeps resources in etcd, so several processes (on
//! several machines) share one state.
//!
//! - **Layout**: each resource is one key, `{prefix}{namespace}/{type}/{id}`, holding a versioned
//!   record (a format byte, then JSON `{metadata, spec}`). The prefix isolates users (and tests)
//!   sharing one etcd.
//! - **Versions and conflicts** map onto etcd transactions: `create` writes only if the key has
//!   never been created (`create_revision == 0`); `update` and `destroy` read the stored record,
//!   check version, owner, phase and finalizers, and write only if the key's `mod_revision` is
//!   still the one read. Of two concurrent writers from the same version exactly one wins; the
//!   other re-reads and gets a version conflict. Each resource is written in its own
//!   transaction, so every change has its own revision. Cost: `create` is one round trip,
//!   `update` and `destroy` two (read, then compare-and-swap).
//! - **Typed values**: etcd holds bytes, so a process gives [`EtcdState::connect`] the
//!   [`cosi_core::Registry`] of the types it wants back as Rust values; other types load as
//!   [`cosi_core::DynamicResource`].
//! - **Watches** follow etcd revisions: bookmarks are revisions, valid in every process and after
//!   restarts for as long as etcd keeps the history. One etcd watch per kind feeds all local
//!   watchers of that kind. A bookmark etcd has compacted away gets `Resync` and a full
//!   bootstrap, never a silent gap.
//! - **Failures**: every call is bounded by [`EtcdOptions::request_timeout`]; an unreachable etcd
//!   is an [`Error::Backend`] with `retryable: true`; a write etcd refuses as too large (over
//!   its `--max-request-bytes`, whichever layer of etcd refuses it) is not retryable. Watches
//!   survive etcd restarts and resume from the last delivered revision; if etcd comes back with
//!   its revision gone backwards (its data was replaced), watchers get `Resync` and the new
//!   contents.
//! - **Large kinds**: lists and watch bootstraps read a kind in pages at one revision, watches
//!   ask etcd to split a reply of many events (`fragment`), and replies are decoded up to
//!   64 MiB; a page of large values too big for one reply is read again in fewer keys. So a
//!   kind is not bounded by the reply size, only each value by etcd's request limit.
//! - **Invalid records** (bytes under a resource key that are not a valid record): `get` of that
//!   resource fails with a non-retryable [`Error::Backend`] naming it; `list` and watches skip it
//!   (and log it at error level) so the rest of the kind is still served — a watcher sees a
//!   resource overwritten with garbage as `Destroyed`, as a later list would;
//!   [`EtcdState::list_report`] returns the skipped ones with their errors. Such a key can only be
//!   repaired or removed through etcd itself ([`EtcdState::client`], `etcdctl`).
//! - **Tail**: `WatchKindOptions::tail` is served from the kind's window of changes observed by
//!   this state since it first wrote or watched the kind (etcd has no per-prefix "last N
//!   events"): every write starts the kind's shared watch first, so a state's own writes are
//!   always in its window.
//! - **Slow watchers**: a watcher more than the window (plus its buffer) behind gets a compacted
//!   catch-up (one event per changed resource, computed from etcd's history), as DESIGN §4
//!   prescribes; a watch resumed with `since` gets the exact history instead, from etcd.

mod connection;
mod hub;
mod keys;
mod record;
mod watcher;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cosi_core::{
    make_mut, Bookmark, Call, CreateOptions, DestroyOptions, Error, Event, Kind, ListOptions,
    Pointer, Registry, Result, SharedResource, State, UpdateOptions, Watch, WatchKindOptions,
    WatchOptions,
};
use dashmap::DashMap;
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, Txn, TxnOp};
use tokio::sync::OnceCell;

use crate::memory::write_rules;
pub use connection::range_end;
use connection::Connection;
use hub::KindHub;
pub use record::FORMAT_V1;
use watcher::{Filter, Start};

/// The origin of every etcd bookmark. Revisions count the changes of the whole etcd cluster, so
/// a bookmark means the same to every `EtcdState` on that cluster, whatever its prefix.
const ORIGIN: u64 = u64::from_be_bytes(*b"etcd.rev");

/// The bookmark of an etcd revision.
pub(crate) fn bookmark(revision: i64) -> Bookmark {
    Bookmark::at(ORIGIN, revision.max(0) as u64)
}

/// The revision a bookmark names, if an etcd state issued it.
pub(crate) fn revision_in(bookmark: &Bookmark) -> Option<i64> {
    bookmark
        .position_in(ORIGIN)
        .map(|p| i64::try_from(p).unwrap_or(i64::MAX))
}

/// How to reach etcd and how to behave there.
///
/// ```
/// use std::time::Duration;
/// use cosi_state::etcd::EtcdOptions;
/// let options = EtcdOptions::new(["http://127.0.0.1:2379"])
///     .with_prefix("/node-1/")
///     .with_request_timeout(Duration::from_secs(2));
/// assert_eq!(options.prefix, "/node-1/");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EtcdOptions {
    /// Client URLs of the etcd cluster, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Every key this state reads or writes starts with it. Default `/cosi/`.
    pub prefix: String,
    /// Upper bound of every etcd call (a call that takes longer fails, retryable). Default 5 s.
    pub request_timeout: Duration,
    /// Upper bound of establishing a connection. Default 2 s.
    pub connect_timeout: Duration,
    /// Changes kept per kind for `tail` and broadcast to local watchers before a slow one has
    /// to replay from etcd. Default 4096.
    pub history_window: usize,
    /// Events buffered per watch between its task and the consumer. Default 256.
    pub watch_buffer: usize,
}

impl EtcdOptions {
    /// Defaults for `endpoints`.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: "/cosi/".into(),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            history_window: 4096,
            watch_buffer: 256,
        }
    }

    /// Sets the key prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sets the request timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the per-kind history window.
    pub fn with_history_window(mut self, changes: usize) -> Self {
        self.history_window = changes;
        self
    }

    /// Sets the per-watch event buffer.
    pub fn with_watch_buffer(mut self, events: usize) -> Self {
        self.watch_buffer = events;
        self
    }
}

/// The result of [`EtcdState::list_report`]: what `list` returns, plus the resources it skipped.
#[derive(Debug)]
pub struct ListReport {
    /// The valid, matching resources, sorted by id.
    pub resources: Vec<SharedResource>,
    /// One error per key of the kind whose value is not a valid record (each names the resource).
    pub invalid: Vec<Error>,
}

struct HubEntry {
    hub: Arc<KindHub>,
    task: tokio::task::AbortHandle,
}

/// A [`State`] stored in etcd. See the [module docs](self) for the mapping.
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> cosi_core::Result<()> {
/// use cosi_core::{Resource, ResourceSpec, StateExt, UpdateOptions};
/// use cosi_state::etcd::{EtcdOptions, EtcdState};
/// use cosi_test_support::etcd::EtcdServer;
/// # #[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
/// # struct Hostname { name: String }
/// # impl ResourceSpec for Hostname {
/// #     const TYPE: &'static str = "Hostnames.net.cosi.dev";
/// #     const DEFAULT_NAMESPACE: &'static str = "network";
/// # }
/// // A private etcd for this example; a node would name its cluster's endpoints instead.
/// let server = EtcdServer::start()?;
/// let registry = std::sync::Arc::new(cosi_core::Registry::new().with::<Hostname>()?);
/// let state = EtcdState::connect(EtcdOptions::new([server.endpoint()]), registry).await?;
/// let name = Hostname { name: "node-1".into() };
/// let stored = state
///     .modify(Resource::new("hostname", name), UpdateOptions::default(), |_| Ok(()))
///     .await?;
/// assert_eq!(stored.spec.name, "node-1");
/// assert_eq!(stored.metadata.version().get(), 1);
/// # Ok(()) }
/// ```
pub struct EtcdState {
    connection: Arc<Connection>,
    options: EtcdOptions,
    hubs: DashMap<Kind, Arc<OnceCell<HubEntry>>>,
}

impl EtcdState {
    /// Connects to etcd. Resources of the types in `registry` load typed, others as
    /// [`cosi_core::DynamicResource`]. The connection is made lazily: this fails only on bad
    /// options; an unreachable etcd shows up as retryable errors of the calls.
    pub async fn connect(options: EtcdOptions, registry: Arc<Registry>) -> Result<Self> {
        let connect = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_keep_alive(Duration::from_secs(10), options.request_timeout);
        let client = Client::connect(&options.endpoints, Some(connect))
            .await
            .map_err(|e| {
                Error::invalid(
                    "etcd options",
                    "endpoints",
                    format!("{:?}: {e}", options.endpoints),
                )
            })?;
        let connection = Connection::new(
            client,
            options.prefix.as_bytes().to_vec(),
            options.request_timeout,
            registry,
        );
        Ok(EtcdState {
            connection: Arc::new(connection),
            options,
            hubs: DashMap::new(),
        })
    }

    /// The options this state was connected with.
    pub fn options(&self) -> &EtcdOptions {
        &self.options
    }

    /// The etcd key a resource is stored under.
    pub fn key(&self, pointer: &Pointer) -> Vec<u8> {
        self.connection.key(pointer)
    }

    /// The etcd client this state uses (for tools that need raw access to the same cluster).
    pub fn client(&self) -> &Client {
        self.connection.client()
    }

    /// Lists like [`State::list`] and also reports the keys whose values are not valid records.
    pub async fn list_report(&self, kind: &Kind, options: &ListOptions) -> Result<ListReport> {
        let prefix = self.connection.kind_prefix(kind);
        let (_, kvs) = self.connection.range(kind).await?;
        let filter = filter_of(options.ids.clone(), options.labels.clone());
        let mut report = ListReport {
            resources: Vec::with_capacity(kvs.len()),
            invalid: Vec::new(),
        };
        for kv in &kvs {
            match self.connection.decode(kind, &prefix, kv) {
                Some(Ok(resource)) if filter.matches(&*resource) => report.resources.push(resource),
                Some(Err(error)) => report.invalid.push(error),
                _ => {}
            }
        }
        // etcd returns keys in byte order, which is id order; sorting keeps that a checked fact.
        report
            .resources
            .sort_by(|a, b| a.metadata().id().cmp(b.metadata().id()));
        Ok(report)
    }

    async fn hub(&self, kind: &Kind) -> Result<Arc<KindHub>> {
        let cell = match self.hubs.get(kind) {
            Some(cell) => cell.clone(),
            None => self.hubs.entry(kind.clone()).or_default().clone(),
        };
        let entry = cell
            .get_or_try_init(|| async {
                let (hub, task) = KindHub::start(
                    self.connection.clone(),
                    kind.clone(),
                    self.options.history_window,
                )
                .await?;
                Ok::<_, Error>(HubEntry { hub, task })
            })
            .await?;
        Ok(entry.hub.clone())
    }

    async fn read(&self, pointer: &Pointer) -> Result<(SharedResource, i64)> {
        match self.connection.get(pointer).await?.0 {
            Some(kv) => Ok((
                self.connection.decode_value(pointer, kv.value())?,
                kv.mod_revision(),
            )),
            None => Err(Error::NotFound {
                pointer: pointer.clone(),
            }),
        }
    }

    fn closed(&self, kind: &Kind) -> Error {
        Error::Backend {
            subject: kind.to_string(),
            message: "the state is shutting down".into(),
            retryable: false,
            source: None,
        }
    }
}

impl Drop for EtcdState {
    fn drop(&mut self) {
        for entry in self.hubs.iter() {
            if let Some(entry) = entry.value().get() {
                entry.task.abort();
                entry.hub.close();
            }
        }
    }
}

fn filter_of(ids: Option<cosi_core::IdQuery>, labels: cosi_core::LabelQueries) -> Filter {
    Filter {
        id: None,
        ids,
        labels,
    }
}

/// The revision a successful transaction wrote at.
fn revision_of(response: &etcd_client::TxnResponse) -> i64 {
    response.header().map_or(0, |h| h.revision())
}

impl State for EtcdState {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        Call::pending(async move { Ok(self.read(pointer).await?.0) })
    }

    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        Call::pending(async move {
            let report = self.list_report(kind, options).await?;
            for error in &report.invalid {
                tracing::error!(%error, "list skipped a value that is not a valid record");
            }
            Ok(report.resources)
        })
    }

    fn create<'a>(
        &'a self,
        mut resource: SharedResource,
        options: CreateOptions,
    ) -> Call<'a, SharedResource> {
        Call::pending(async move {
            let pointer = resource.metadata().pointer().clone();
            // Checked before the hub starts: an empty namespace or type must not open an etcd watch.
            write_rules::prepare_create(&mut resource, options.owner, SystemTime::now())?;
            let hub = self.hub(pointer.kind()).await?;
            let key = self.connection.key(&pointer);
            let value = record::encode(&*resource)?;
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, value, None)]);
            let response = self.connection.txn(&pointer, txn).await?;
            if response.succeeded() {
                hub.wrote(revision_of(&response));
                Ok(resource)
            } else {
                Err(Error::AlreadyExists { pointer })
            }
        })
    }

    fn update<'a>(
        &'a self,
        mut resource: SharedResource,
        options: UpdateOptions,
    ) -> Call<'a, SharedResource> {
        Call::pending(async move {
            let pointer = resource.metadata().pointer().clone();
            let carried = resource.metadata().version();
            let key = self.connection.key(&pointer);
            let hub = self.hub(pointer.kind()).await?;
            loop {
                // Checked against the value read, and written only if etcd still holds that value
                // (the compare-and-swap below): the rules apply to the state the write replaces.
                let (stored, revision) = self.read(&pointer).await?;
                write_rules::check_update(&*stored, &*resource, &options)?;
                write_rules::stamp_update(&*stored, &mut resource, SystemTime::now());
                let value = record::encode(&*resource)?;
                let txn = Txn::new()
                    .when([Compare::mod_revision(
                        key.clone(),
                        CompareOp::Equal,
                        revision,
                    )])
                    .and_then([TxnOp::put(key.clone(), value, None)]);
                let response = self.connection.txn(&pointer, txn).await?;
                if response.succeeded() {
                    hub.wrote(revision_of(&response));
                    return Ok(resource);
                }
                // Someone wrote in between: carry the caller's version again (the stamp replaced
                // it), so that the re-read reports their version as the conflict.
                make_mut(&mut resource).metadata_mut().set_version(carried);
            }
        })
    }

    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
        Call::pending(async move {
            let key = self.connection.key(pointer);
            let hub = self.hub(pointer.kind()).await?;
            loop {
                let (stored, revision) = self.read(pointer).await?;
                write_rules::check_destroy(&*stored, &options)?;
                let txn = Txn::new()
                    .when([Compare::mod_revision(
                        key.clone(),
                        CompareOp::Equal,
                        revision,
                    )])
                    .and_then([TxnOp::delete(key.clone(), None)]);
                let response = self.connection.txn(pointer, txn).await?;
                if response.succeeded() {
                    hub.wrote(revision_of(&response));
                    return Ok(());
                }
            }
        })
    }

    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
        Call::pending(async move {
            let kind = pointer.kind();
            let hub = self.hub(kind).await?;
            let subscription = hub.subscribe().ok_or_else(|| self.closed(kind))?;
            // Subscribed before the read: every change after the read's revision comes from the hub.
            let (stored, position) = self.connection.get(pointer).await?;
            let first = match stored {
                Some(kv) => Some(self.connection.decode_value(pointer, kv.value())?),
                None => None,
            };
            let bookmark = bookmark(position);
            let event = match first {
                Some(resource) => Event::Created {
                    resource,
                    bookmark,
                    compacted: false,
                },
                None => Event::Destroyed {
                    resource: crate::memory::tombstone(pointer),
                    bookmark,
                    compacted: false,
                },
            };
            let filter = Filter {
                id: Some(pointer.shared_id().clone()),
                ..Filter::default()
            };
            let start = Start::Initial {
                events: vec![event],
                position,
            };
            Ok(watcher::spawn(
                self.connection.clone(),
                hub,
                subscription,
                filter,
                options.strict,
                start,
                self.options.watch_buffer,
            ))
        })
    }

    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch> {
        Call::pending(async move {
            crate::memory::check_watch_options(kind, &options)?;
            let hub = self.hub(kind).await?;
            let filter = filter_of(options.ids.clone(), options.labels.clone());
            let (subscription, start) = if let Some(since) = &options.since {
                let subscription = hub.subscribe().ok_or_else(|| self.closed(kind))?;
                let head = self.connection.revision(kind).await?;
                let position = revision_in(since)
                    .ok_or_else(|| Error::bookmark_not_issued_here(kind.to_string(), since))?;
                if position > head {
                    return Err(Error::invalid(
                        kind.to_string(),
                        "since",
                        format!("bookmark {since} is in the future (the latest is {head})"),
                    ));
                }
                (subscription, Start::Resume { position })
            } else if options.bootstrap {
                let subscription = hub.subscribe().ok_or_else(|| self.closed(kind))?;
                let (revision, resources) =
                    watcher::read_matching(&self.connection, kind, &filter).await?;
                let bookmark = bookmark(revision);
                let mut events: Vec<Event> = resources
                    .into_iter()
                    .map(|resource| Event::Created {
                        resource,
                        bookmark: bookmark.clone(),
                        compacted: false,
                    })
                    .collect();
                events.push(Event::Bootstrapped { bookmark });
                let start = Start::Initial {
                    events,
                    position: revision,
                };
                (subscription, start)
            } else if let Some(tail) = options.tail {
                // The tail ends at the latest change this state made: wait until the hub has it.
                hub.wait_own_writes(self.options.request_timeout).await?;
                let subscription = hub
                    .subscribe_with_window(tail)
                    .ok_or_else(|| self.closed(kind))?;
                // The last `tail` changes, seen through the filter (as the in-memory backend does);
                // every later change comes from the subscription.
                let events: Vec<Event> = subscription
                    .window
                    .iter()
                    .filter_map(|c| filter.event(c))
                    .collect();
                let start = Start::Initial {
                    events,
                    position: subscription.last_change,
                };
                (subscription, start)
            } else {
                // Subscribed before the read: every change after its revision comes from the hub.
                let subscription = hub.subscribe().ok_or_else(|| self.closed(kind))?;
                let revision = self.connection.revision(kind).await?;
                let start = Start::Initial {
                    events: Vec::new(),
                    position: revision,
                };
                (subscription, start)
            };
            Ok(watcher::spawn(
                self.connection.clone(),
                hub,
                subscription,
                filter,
                options.strict,
                start,
                self.options.watch_buffer,
            ))
        })
    }
}
