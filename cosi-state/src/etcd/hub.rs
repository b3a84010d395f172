//! [`KindHub`]: the one etcd watch of a kind, shared by every local watcher of that kind.
//!
//! The hub decodes each etcd event once and fans it out through a bounded broadcast channel
//! (capacity = the history window), keeping the last window of changes for `tail`. A watcher
//! that falls behind the channel is not fed from an unbounded queue: it replays the missed
//! revisions from etcd's own history (see `watcher`). When the hub's etcd stream breaks (etcd
//! restarted, connection lost) it reopens it from the revision after the last one it delivered,
//! so nothing is lost or repeated; if etcd compacted those revisions meanwhile it tells every
//! watcher to resync.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cosi_core::{Error, Kind, Result, SharedResource};
use etcd_client::{EventType, WatchOptions};
use tokio::sync::{broadcast, watch};

use super::connection::{etcd_error, Connection};

/// One change of one key, decoded. A value that is not a valid record decodes to `None`, the
/// same as an absent one: lists skip such records, and watches agree with lists.
#[derive(Debug)]
pub(super) struct Change {
    /// The id of the changed resource.
    pub id: Arc<str>,
    /// The etcd revision of the change: the bookmark of its events.
    pub revision: i64,
    /// The state before (from etcd's `prev_kv`).
    pub previous: Option<SharedResource>,
    /// The state after; `None` for a deletion.
    pub current: Option<SharedResource>,
}

/// What the hub broadcasts.
#[derive(Clone, Debug)]
pub(super) enum HubMessage {
    Change(Arc<Change>),
    /// History was lost (compacted while the hub was disconnected): every watcher resyncs.
    Resync,
}

/// A watcher's starting point on the hub, taken atomically with its subscription.
pub(super) struct Subscription {
    pub receiver: broadcast::Receiver<HubMessage>,
    /// The revision of the last change it delivered.
    pub last_change: i64,
    /// The requested end of the history window at subscription time (oldest first).
    pub window: Vec<Arc<Change>>,
}

struct Fanout {
    window: VecDeque<Arc<Change>>,
    sender: Option<broadcast::Sender<HubMessage>>,
    last_change: i64,
}

/// The shared watch of one kind.
pub(super) struct KindHub {
    kind: Kind,
    prefix: Vec<u8>,
    window_size: usize,
    fanout: Mutex<Fanout>,
    /// The revision of the last change delivered.
    delivered: watch::Sender<i64>,
    /// The latest revision at which this state wrote the kind.
    own_writes: AtomicI64,
}

impl KindHub {
    /// Starts the hub of `kind`: every change after the current revision is delivered.
    pub async fn start(
        connection: Arc<Connection>,
        kind: Kind,
        window_size: usize,
    ) -> Result<(Arc<KindHub>, tokio::task::AbortHandle)> {
        let start = connection.revision(&kind).await?;
        let (sender, _) = broadcast::channel(window_size.max(1));
        let hub = Arc::new(KindHub {
            prefix: connection.kind_prefix(&kind),
            kind,
            window_size: window_size.max(1),
            fanout: Mutex::new(Fanout {
                window: VecDeque::new(),
                sender: Some(sender),
                last_change: start,
            }),
            delivered: watch::channel(start).0,
            own_writes: AtomicI64::new(0),
        });
        let task = tokio::spawn(run(hub.clone(), connection, start));
        Ok((hub, task.abort_handle()))
    }

    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    fn fanout(&self) -> std::sync::MutexGuard<'_, Fanout> {
        // A poisoned lock means a panic while publishing; the window is still consistent.
        self.fanout.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes; `None` once the state was dropped.
    pub fn subscribe(&self) -> Option<Subscription> {
        self.subscribe_with_window(0)
    }

    /// Subscribes, also taking (at most) the last `changes` of the window.
    pub fn subscribe_with_window(&self, changes: usize) -> Option<Subscription> {
        let fanout = self.fanout();
        let skip = fanout.window.len().saturating_sub(changes);
        Some(Subscription {
            receiver: fanout.sender.as_ref()?.subscribe(),
            last_change: fanout.last_change,
            window: fanout.window.iter().skip(skip).cloned().collect(),
        })
    }

    /// Records that this state wrote the kind at `revision`.
    pub fn wrote(&self, revision: i64) {
        self.own_writes.fetch_max(revision, Ordering::Relaxed);
    }

    /// Waits until the hub has delivered every change this state wrote to the kind.
    ///
    /// Only the hub's own events count: etcd 3.4's progress reports can run ahead of events
    /// still in flight to a catching-up watch, so they are not used to decide what was seen.
    pub async fn wait_own_writes(&self, timeout: Duration) -> Result<()> {
        let revision = self.own_writes.load(Ordering::Relaxed);
        let mut delivered = self.delivered.subscribe();
        tokio::time::timeout(timeout, delivered.wait_for(|&r| r >= revision))
            .await
            .map(|_| ())
            .map_err(|_| Error::Backend {
                subject: self.kind.to_string(),
                message: format!(
                    "etcd watch did not deliver revision {revision} within {timeout:?}"
                ),
                retryable: true,
                source: None,
            })
    }

    fn publish(&self, change: Change) {
        let revision = change.revision;
        let change = Arc::new(change);
        let mut fanout = self.fanout();
        if fanout.window.len() == self.window_size {
            fanout.window.pop_front();
        }
        fanout.window.push_back(change.clone());
        fanout.last_change = revision;
        if let Some(sender) = &fanout.sender {
            // No receivers is fine: the change is kept in the window.
            let _ = sender.send(HubMessage::Change(change));
        }
        drop(fanout);
        self.delivered.send_replace(revision);
    }

    fn resync(&self, revision: i64) {
        // Writes recorded before a reset name revisions of the old history.
        self.own_writes.fetch_min(revision, Ordering::Relaxed);
        let mut fanout = self.fanout();
        fanout.window.clear();
        fanout.last_change = revision;
        if let Some(sender) = &fanout.sender {
            let _ = sender.send(HubMessage::Resync);
        }
        drop(fanout);
        self.delivered.send_replace(revision);
    }

    /// Ends every watcher's subscription (the state is being dropped).
    pub fn close(&self) {
        self.fanout().sender = None;
    }
}

/// Decodes one etcd event of the kind with prefix `prefix`.
pub(super) fn decode_change(
    connection: &Connection,
    kind: &Kind,
    prefix: &[u8],
    event: &etcd_client::Event,
) -> Option<Change> {
    let kv = event.kv()?;
    let id: Arc<str> = Arc::from(super::keys::id_of(prefix, kv.key())?);
    let decode = |kv: &etcd_client::KeyValue| match connection.decode(kind, prefix, kv)? {
        Ok(resource) => Some(resource),
        Err(error) => {
            tracing::error!(%error, "skipping a value that is not a valid record");
            None
        }
    };
    let current = match event.event_type() {
        EventType::Put => decode(kv),
        EventType::Delete => None,
    };
    Some(Change {
        id,
        revision: kv.mod_revision(),
        previous: event.prev_kv().and_then(decode),
        current,
    })
}

async fn run(hub: Arc<KindHub>, connection: Arc<Connection>, start: i64) {
    let mut next = start + 1;
    let mut backoff = Duration::from_millis(20);
    let mut reconnecting = false;
    loop {
        if reconnecting {
            // An etcd whose revision went back lost its data (restored from an older backup or
            // from nothing): a watch from `next` would wait silently for revisions that mean
            // something else now. Everyone rebuilds their view instead.
            match connection.revision(&hub.kind).await {
                Ok(now) if now < next - 1 => {
                    tracing::warn!(kind = %hub.kind, was = next - 1, now, "etcd's revision went back; watchers resync");
                    hub.resync(now);
                    next = now + 1;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(kind = %hub.kind, %error, "etcd unreachable; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            }
        }
        reconnecting = true;
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_fragment()
            .with_start_revision(next);
        let mut client = connection.watch_client();
        let opened = connection
            .call(
                &hub.kind,
                "watch",
                client.watch(hub.prefix.clone(), Some(options)),
            )
            .await;
        // The first message confirms the watch; it carries no events.
        let mut stream = match opened {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(kind = %hub.kind, %error, "etcd watch failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        loop {
            let response = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => break,
                Err(e) => {
                    let error = etcd_error(&hub.kind, "watch", e);
                    tracing::warn!(kind = %hub.kind, %error, "etcd watch broke; reopening");
                    break;
                }
            };
            backoff = Duration::from_millis(20);
            if response.compact_revision() > 0 {
                // etcd no longer has the revisions after our position: start again from now
                // and have every watcher rebuild its view.
                match connection.revision(&hub.kind).await {
                    Ok(now) => {
                        tracing::warn!(kind = %hub.kind, from = next, "etcd compacted the watched history; watchers resync");
                        hub.resync(now);
                        next = now + 1;
                    }
                    Err(error) => tracing::warn!(kind = %hub.kind, %error, "cannot resync yet"),
                }
                break;
            }
            if response.canceled() {
                break;
            }
            for event in response.events() {
                if let Some(change) = decode_change(&connection, &hub.kind, &hub.prefix, event) {
                    next = change.revision + 1;
                    hub.publish(change);
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
