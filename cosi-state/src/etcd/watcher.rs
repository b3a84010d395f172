//! One local watch: a task that turns the hub's changes into [`Event`]s for one consumer,
//! through a bounded channel.
//!
//! The task applies the watch's filter (a change into or out of the filter becomes `Created` /
//! `Destroyed`), skips what the consumer's starting point already covers, and repairs gaps:
//! when the consumer is slow the task stops reading, its broadcast receiver lags, and the
//! missed revisions are replayed exactly from etcd's history. Only when etcd compacted those
//! revisions does the consumer get `Resync` and a fresh bootstrap. A strict watch ends with
//! [`Error::WatchOverrun`] instead.
//!
//! A filtered kind watch hands out a `Noop` at its position when the changes it skipped moved
//! it past the last bookmark it sent and no change is waiting: a consumer that keeps up holds a
//! bookmark at the kind's latest change, which stays resumable after etcd compacts the older
//! revisions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cosi_core::{
    AnyResource, Error, Event, EventSource, IdQuery, Kind, LabelQueries, Result, SharedResource,
    Watch,
};
use etcd_client::WatchOptions;
use tokio::sync::{broadcast, mpsc};

use super::connection::{etcd_error, Connection};
use super::hub::{decode_change, Change, HubMessage, KindHub, Subscription};

/// Which resources a watch sees.
#[derive(Clone, Debug, Default)]
pub(super) struct Filter {
    /// Exactly this id (a single-resource watch).
    pub id: Option<Arc<str>>,
    /// Ids matching this regex.
    pub ids: Option<IdQuery>,
    /// Labels matching these queries.
    pub labels: LabelQueries,
}

impl Filter {
    /// Whether it is a kind watch's filter that may skip changes (an id query or labels): the
    /// watches that are handed `Noop`s for what they skip.
    fn skips_changes_of_a_kind(&self) -> bool {
        self.id.is_none() && (self.ids.is_some() || !self.labels.is_empty())
    }

    pub fn matches(&self, resource: &dyn AnyResource) -> bool {
        let md = resource.metadata();
        self.id.as_deref().is_none_or(|id| md.id() == id)
            && self.ids.as_ref().is_none_or(|q| q.matches(md.id()))
            && self.labels.matches(md.labels())
    }

    /// The event a change is for this filter, if any.
    pub fn event(&self, change: &Change) -> Option<Event> {
        let bookmark = super::bookmark(change.revision);
        let before = change.previous.as_ref().filter(|r| self.matches(&***r));
        let after = change.current.as_ref().filter(|r| self.matches(&***r));
        match (before, after) {
            (None, None) => None,
            (None, Some(resource)) => Some(Event::Created {
                resource: resource.clone(),
                bookmark,
                compacted: false,
            }),
            (Some(old), Some(resource)) => Some(Event::Updated {
                old: Some(old.clone()),
                resource: resource.clone(),
                bookmark,
                compacted: false,
            }),
            // Deleted: the last state. Stopped matching: the state that no longer matches.
            (Some(old), None) => Some(Event::Destroyed {
                resource: change.current.clone().unwrap_or_else(|| old.clone()),
                bookmark,
                compacted: false,
            }),
        }
    }
}

/// Where a watch starts.
pub(super) enum Start {
    /// These events first, then every change after `position`.
    Initial { events: Vec<Event>, position: i64 },
    /// Every change after `position`, replayed from etcd's history up to the hub's position.
    Resume { position: i64 },
}

/// The consumer is gone.
struct Gone;

struct Watcher {
    connection: Arc<Connection>,
    hub: Arc<KindHub>,
    filter: Filter,
    strict: bool,
    sender: mpsc::Sender<Event>,
    receiver: broadcast::Receiver<HubMessage>,
    /// Every change up to this revision is reflected in what the consumer received.
    position: i64,
    /// The last bookmark the consumer received (filtered-out changes move `position` only).
    delivered: u64,
    /// The position the last bookmark sent stands for (its start before any): a filtered watch
    /// sends a `Noop` when skipped changes moved `position` past it.
    announced: i64,
}

/// Starts the task of one watch and returns its receiving end.
pub(super) fn spawn(
    connection: Arc<Connection>,
    hub: Arc<KindHub>,
    subscription: Subscription,
    filter: Filter,
    strict: bool,
    start: Start,
    buffer: usize,
) -> Watch {
    let (sender, events) = mpsc::channel(buffer.max(1));
    let last_change = subscription.last_change;
    let watcher = Watcher {
        connection,
        hub,
        filter,
        strict,
        sender,
        receiver: subscription.receiver,
        position: 0,
        delivered: 0,
        announced: 0,
    };
    tokio::spawn(async move {
        let _ = watcher.run(start, last_change).await;
    });
    Watch::new(EtcdEvents { events })
}

impl Watcher {
    async fn send(&mut self, event: Event) -> Result<(), Gone> {
        let bookmark = event.bookmark().cloned();
        self.sender.send(event).await.map_err(|_| Gone)?;
        if let Some(revision) = bookmark.as_ref().and_then(super::revision_in) {
            self.delivered = revision as u64;
            self.announced = revision;
        }
        Ok(())
    }

    /// Sends a `Noop` at the position when skipped changes moved it past the last bookmark
    /// sent and no change is waiting (at most one per run of skipped changes).
    async fn bookmark_skipped(&mut self) -> Result<(), Gone> {
        if self.position > self.announced && self.receiver.is_empty() {
            let bookmark = super::bookmark(self.position);
            self.send(Event::Noop { bookmark }).await?;
        }
        Ok(())
    }

    /// The error that ends a strict watch: it names the last bookmark the consumer received.
    fn overrun(&self) -> Event {
        Event::Errored {
            error: Error::WatchOverrun {
                kind: self.hub.kind().clone(),
                position: super::bookmark(self.delivered as i64),
            },
        }
    }

    async fn run(mut self, start: Start, last_change: i64) -> Result<(), Gone> {
        match start {
            Start::Initial { events, position } => {
                for event in events {
                    self.send(event).await?;
                }
                self.position = position;
                self.announced = position;
            }
            Start::Resume { position } => {
                self.position = position;
                self.announced = position;
                self.catch_up(last_change).await?;
            }
        }
        let noops = self.filter.skips_changes_of_a_kind();
        loop {
            if noops {
                self.bookmark_skipped().await?;
            }
            let message = tokio::select! {
                () = self.sender.closed() => return Err(Gone),
                message = self.receiver.recv() => message,
            };
            match message {
                Ok(HubMessage::Change(change)) => {
                    if change.revision <= self.position {
                        continue;
                    }
                    if let Some(event) = self.filter.event(&change) {
                        self.send(event).await?;
                    }
                    self.position = change.revision;
                }
                Ok(HubMessage::Resync) | Err(broadcast::error::RecvError::Lagged(_))
                    if self.strict =>
                {
                    let overrun = self.overrun();
                    return self.send(overrun).await;
                }
                Ok(HubMessage::Resync) => {
                    self.resubscribe()?;
                    self.resync().await?;
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let last_change = self.resubscribe()?;
                    self.compacted_catch_up(last_change).await?;
                }
                Err(broadcast::error::RecvError::Closed) => return Err(Gone),
            }
        }
    }

    /// Takes a fresh place on the hub; returns the hub's last change at that moment.
    fn resubscribe(&mut self) -> Result<i64, Gone> {
        let subscription = self.hub.subscribe().ok_or(Gone)?;
        self.receiver = subscription.receiver;
        Ok(subscription.last_change)
    }

    /// Delivers the changes in `(position, upto]` from etcd's history, or resyncs if etcd
    /// compacted them. Retries while etcd is unreachable: a watch never fails for that.
    async fn catch_up(&mut self, upto: i64) -> Result<(), Gone> {
        let mut backoff = Duration::from_millis(20);
        while self.position < upto {
            match self.replay(upto).await {
                Ok(()) => return Ok(()),
                Err(Replay::Gone) => return Err(Gone),
                Err(Replay::Compacted) if self.strict => {
                    let overrun = self.overrun();
                    self.send(overrun).await?;
                    return Err(Gone);
                }
                Err(Replay::Compacted) => {
                    self.resubscribe()?;
                    return self.resync().await;
                }
                Err(Replay::Failed(error)) => {
                    tracing::warn!(kind = %self.hub.kind(), %error, "replaying etcd history failed; retrying");
                    self.pause(&mut backoff).await?;
                }
            }
        }
        Ok(())
    }

    /// Brings a consumer that fell behind the window to `upto` with one event per resource that
    /// changed, carrying its latest state relative to what the consumer last saw (marked
    /// compacted), computed from etcd's history; resyncs if etcd compacted that history.
    async fn compacted_catch_up(&mut self, upto: i64) -> Result<(), Gone> {
        let mut backoff = Duration::from_millis(20);
        let folded = loop {
            if self.position >= upto {
                return Ok(());
            }
            match self.fold_history(upto).await {
                Ok(folded) => break folded,
                Err(Replay::Gone) => return Err(Gone),
                Err(Replay::Compacted) => {
                    self.resubscribe()?;
                    return self.resync().await;
                }
                Err(Replay::Failed(error)) => {
                    tracing::warn!(kind = %self.hub.kind(), %error, "reading etcd history failed; retrying");
                    self.pause(&mut backoff).await?;
                }
            }
        };
        let bookmark = super::bookmark(upto);
        for (_, fold) in folded {
            let before = fold.first_previous.filter(|r| self.filter.matches(&**r));
            let after = fold
                .last_current
                .clone()
                .filter(|r| self.filter.matches(&**r));
            let event = match (before, after) {
                (None, None) => continue,
                (None, Some(resource)) => Event::Created {
                    resource,
                    bookmark: bookmark.clone(),
                    compacted: true,
                },
                (Some(_), Some(resource)) => Event::Updated {
                    old: None,
                    resource,
                    bookmark: bookmark.clone(),
                    compacted: true,
                },
                (Some(before), None) => Event::Destroyed {
                    resource: fold.last_current.or(fold.last_previous).unwrap_or(before),
                    bookmark: bookmark.clone(),
                    compacted: true,
                },
            };
            self.send(event).await?;
        }
        self.position = upto;
        Ok(())
    }

    /// Per id changed in `(position, upto]`: its state at `position` and its latest states.
    async fn fold_history(&mut self, upto: i64) -> Result<BTreeMap<Arc<str>, Fold>, Replay> {
        let kind = self.hub.kind().clone();
        let mut stream = self.open_history().await?;
        let mut folded: BTreeMap<Arc<str>, Fold> = BTreeMap::new();
        loop {
            let response = next_response(&kind, &mut stream).await?;
            for event in response.events() {
                let Some(change) = decode_change(&self.connection, &kind, self.hub.prefix(), event)
                else {
                    continue;
                };
                if change.revision > upto {
                    return Ok(folded);
                }
                let fold = folded.entry(change.id.clone()).or_insert_with(|| Fold {
                    first_previous: change.previous.clone(),
                    last_previous: None,
                    last_current: None,
                });
                fold.last_previous = change.previous.clone();
                fold.last_current = change.current.clone();
                if change.revision == upto {
                    return Ok(folded);
                }
            }
        }
    }

    /// An etcd watch of the kind's history after the consumer's position.
    async fn open_history(&self) -> Result<etcd_client::WatchStream, Replay> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_fragment()
            .with_start_revision(self.position + 1);
        let mut client = self.connection.watch_client();
        let kind = self.hub.kind();
        // The stream's first message confirms the watch (no events); `next_response` passes it
        // through as an empty response.
        self.connection
            .call(
                kind,
                "watch",
                client.watch(self.hub.prefix().to_vec(), Some(options)),
            )
            .await
            .map_err(Replay::Failed)
    }

    async fn replay(&mut self, upto: i64) -> Result<(), Replay> {
        let kind = self.hub.kind().clone();
        let mut stream = self.open_history().await?;
        while self.position < upto {
            let response = next_response(&kind, &mut stream).await?;
            for event in response.events() {
                let Some(change) = decode_change(&self.connection, &kind, self.hub.prefix(), event)
                else {
                    continue;
                };
                if change.revision > upto {
                    // From here on the hub's receiver delivers.
                    return Ok(());
                }
                if let Some(event) = self.filter.event(&change) {
                    self.send(event).await.map_err(|_| Replay::Gone)?;
                }
                self.position = change.revision;
            }
        }
        Ok(())
    }

    /// Replaces the consumer's view: `Resync`, a `Created` per matching resource, then
    /// `Bootstrapped`. The caller has resubscribed first, so no change after the read is missed.
    async fn resync(&mut self) -> Result<(), Gone> {
        let mut backoff = Duration::from_millis(20);
        let (revision, resources) = loop {
            match read_matching(&self.connection, self.hub.kind(), &self.filter).await {
                Ok(read) => break read,
                Err(error) => {
                    tracing::warn!(kind = %self.hub.kind(), %error, "resync read failed; retrying");
                    self.pause(&mut backoff).await?;
                }
            }
        };
        let bookmark = super::bookmark(revision);
        self.send(Event::Resync {
            bookmark: bookmark.clone(),
        })
        .await?;
        let absent = match &self.filter.id {
            // A single-resource watch says the resource is absent the way its first event did:
            // the resync replaces the consumer's view.
            Some(id) if resources.is_empty() => Some(Event::Destroyed {
                resource: crate::memory::tombstone(&self.hub.kind().pointer(&**id)),
                bookmark: bookmark.clone(),
                compacted: false,
            }),
            _ => None,
        };
        for resource in resources {
            self.send(Event::Created {
                resource,
                bookmark: bookmark.clone(),
                compacted: false,
            })
            .await?;
        }
        if let Some(absent) = absent {
            self.send(absent).await?;
        }
        self.send(Event::Bootstrapped { bookmark }).await?;
        self.position = revision;
        Ok(())
    }

    async fn pause(&self, backoff: &mut Duration) -> Result<(), Gone> {
        tokio::select! {
            () = self.sender.closed() => return Err(Gone),
            () = tokio::time::sleep(*backoff) => {}
        }
        *backoff = (*backoff * 2).min(Duration::from_secs(1));
        Ok(())
    }
}

enum Replay {
    Gone,
    Compacted,
    Failed(Error),
}

impl From<Gone> for Replay {
    fn from(_: Gone) -> Self {
        Replay::Gone
    }
}

/// What a compacted catch-up keeps per changed id.
struct Fold {
    first_previous: Option<SharedResource>,
    last_previous: Option<SharedResource>,
    last_current: Option<SharedResource>,
}

/// The next response of a history watch; compaction and a broken stream are errors.
async fn next_response(
    kind: &Kind,
    stream: &mut etcd_client::WatchStream,
) -> Result<etcd_client::WatchResponse, Replay> {
    let response = match stream.message().await {
        Ok(Some(response)) => response,
        Ok(None) => {
            return Err(Replay::Failed(Error::Backend {
                subject: kind.to_string(),
                message: "etcd ended the watch".into(),
                retryable: true,
                source: None,
            }))
        }
        Err(e) => return Err(Replay::Failed(etcd_error(kind, "watch", e))),
    };
    if response.compact_revision() > 0 {
        return Err(Replay::Compacted);
    }
    if response.canceled() {
        return Err(Replay::Failed(Error::Backend {
            subject: kind.to_string(),
            message: format!("etcd canceled the watch: {}", response.cancel_reason()),
            retryable: true,
            source: None,
        }));
    }
    Ok(response)
}

/// Reads the resources of `kind` matching `filter` (id order) and the revision of the read.
/// Values that are not valid records are skipped (and logged), as `list` does.
pub(super) async fn read_matching(
    connection: &Connection,
    kind: &Kind,
    filter: &Filter,
) -> Result<(i64, Vec<SharedResource>)> {
    let prefix = connection.kind_prefix(kind);
    let (revision, kvs) = connection.range(kind).await?;
    let mut resources = Vec::with_capacity(kvs.len());
    for kv in &kvs {
        match connection.decode(kind, &prefix, kv) {
            Some(Ok(resource)) if filter.matches(&*resource) => resources.push(resource),
            Some(Err(error)) => {
                tracing::error!(%error, "skipping a value that is not a valid record")
            }
            _ => {}
        }
    }
    Ok((revision, resources))
}

/// The consumer's end: a bounded channel fed by the watch task.
struct EtcdEvents {
    events: mpsc::Receiver<Event>,
}

#[async_trait]
impl EventSource for EtcdEvents {
    async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    async fn next_batch(&mut self, max: usize) -> Option<Vec<Event>> {
        let mut batch = Vec::new();
        if self.events.recv_many(&mut batch, max).await == 0 {
            return None;
        }
        Some(batch)
    }
}
