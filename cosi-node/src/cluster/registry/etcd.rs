//! `EtcdRegistry` (feature `etcd`): affiliates in etcd, one key per node under a prefix,
//! each held by the node's lease.
//!
//! A session connects, grants a lease with the TTL, lists the prefix (in pages of a few
//! entries, all at one revision), watches it from the listed revision on, and puts this node's
//! affiliate under the lease; it then keeps the lease alive every third of the TTL. When a node
//! dies its lease expires after the TTL, etcd deletes its key, and every other node's watch
//! reports it gone. A keepalive not answered within a third of the TTL, a failed call or a
//! broken watch ends the session: the view is marked unreachable (kept, so members go stale
//! rather than vanish) and a new session is tried after a growing delay. Nothing here blocks
//! the node: callers only hand over values and read the last view.
//!
//! Anyone who can write the prefix is untrusted. Entries that no lease holds are ignored (every
//! node puts its own under its lease, and a leaseless entry would outlive its writer), entries
//! larger than [`MAX_AFFILIATE_BYTES`] are skipped before they are decoded, and both are logged.
//! List pages and watch messages are decoded up to [`MAX_REPLY_BYTES`], so oversized entries
//! cannot push a reply past the transport's limit: a page holds [`PAGE`] entries, and the
//! watch asks etcd to split a message of many events (`fragment`) into pieces under its
//! request limit. When the watch shows this node's own key deleted,
//! or holding anything but what the node put under its lease, the node puts it again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cosi_state::etcd::range_end;
use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, KeyValue, PutOptions, WatchOptions, WatchStream,
};

use super::{
    insert_bounded, AffiliateRegistry, RegistryHealth, RegistryShared, RegistryView, Shared,
    TaskGuard, ViewChanges,
};
use crate::cluster::{decode_remote, encode_remote, Affiliate, MAX_AFFILIATE_BYTES};

/// Entries per page when listing the prefix.
const PAGE: i64 = 8;

/// The largest reply the registry decodes, a list page or a watch message alike (tonic's
/// default is 4 MiB). etcd refuses requests over 1.5 MiB by default (`--max-request-bytes`),
/// so one entry is at most that: a page of [`PAGE`] of them fits, and so does every piece of
/// a split watch message (etcd splits one over its request limit, as when a watch catches up
/// on many revisions at once).
const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// Settings of an [`EtcdRegistry`].
#[derive(Clone, Debug)]
pub struct EtcdRegistryOptions {
    /// Client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// The key prefix of affiliates (default `/cosi/cluster/affiliates/`).
    pub prefix: String,
    /// The lease's time to live: how long a dead node's affiliate outlives it (etcd rounds
    /// very short TTLs up to its minimum, about two seconds).
    pub ttl: Duration,
    /// How long connecting and each call may take.
    pub timeout: Duration,
    /// The longest delay between reconnection attempts.
    pub max_backoff: Duration,
}

impl EtcdRegistryOptions {
    /// Options for `endpoints` with a 30 s TTL.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        EtcdRegistryOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: "/cosi/cluster/affiliates/".to_string(),
            ttl: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
            max_backoff: Duration::from_secs(5),
        }
    }

    /// With another TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// With another key prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }
}

/// A registry on etcd. See the module docs.
#[derive(Debug, Clone)]
pub struct EtcdRegistry {
    shared: Shared,
    _task: Arc<TaskGuard>,
}

impl EtcdRegistry {
    /// Starts the registry's task (it connects in the background). Must be called inside a
    /// tokio runtime.
    pub fn start(options: EtcdRegistryOptions) -> Self {
        let shared: Shared = Arc::new(RegistryShared::default());
        let task = tokio::spawn(run(shared.clone(), options));
        EtcdRegistry {
            shared,
            _task: Arc::new(TaskGuard(task)),
        }
    }
}

impl AffiliateRegistry for EtcdRegistry {
    fn name(&self) -> &str {
        "etcd"
    }

    fn publish(&self, local: Option<Affiliate>) {
        self.shared.publish(local);
    }

    fn view(&self) -> RegistryView {
        self.shared.view()
    }

    fn subscribe(&self) -> ViewChanges {
        self.shared.subscribe()
    }
}

async fn run(shared: Shared, options: EtcdRegistryOptions) {
    let mut delay = Duration::from_millis(100);
    loop {
        let started = tokio::time::Instant::now();
        let error = match session(&shared, &options).await {
            Ok(()) => return,
            Err(error) => error,
        };
        tracing::warn!(%error, "the etcd registry is unreachable; reconnecting");
        shared.unreachable(error);
        // A session that lasted a while was healthy: start the backoff over.
        if started.elapsed() > options.ttl {
            delay = Duration::from_millis(100);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(options.max_backoff);
    }
}

fn call_error(what: &str, error: impl std::fmt::Display) -> String {
    format!("{what}: {error}")
}

/// One connected session; returns `Err` when the registry is lost, `Ok` when the node is
/// gone (its affiliate channel closed).
async fn session(shared: &Shared, options: &EtcdRegistryOptions) -> Result<(), String> {
    let timeout = options.timeout;
    let within = |what: &'static str| move |_| format!("{what}: no answer within {timeout:?}");
    let connect = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    let mut client =
        tokio::time::timeout(timeout, Client::connect(&options.endpoints, Some(connect)))
            .await
            .map_err(within("connect"))?
            .map_err(|e| call_error("connect", e))?;
    let ttl_secs = options.ttl.as_secs().max(1) as i64;
    let lease = client
        .lease_grant(ttl_secs, None)
        .await
        .map_err(|e| call_error("grant a lease", e))?
        .id();
    let (mut keeper, mut keepalives) = client
        .lease_keep_alive(lease)
        .await
        .map_err(|e| call_error("keep the lease alive", e))?;

    let (revision, affiliates) = list(&client, &options.prefix).await?;
    // The stream's first message confirms the watch (no events).
    let mut events = watch_from(&client, &options.prefix, revision + 1).await?;
    shared.update(|view| {
        view.affiliates = affiliates;
        view.health = RegistryHealth::Healthy;
    });

    let mut local = shared.local();
    let mut published: Option<Published> = None;
    // Publish what is there now, then whatever changes.
    local.mark_changed();
    let period = (options.ttl / 3).max(Duration::from_millis(100));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut awaiting_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            changed = local.changed() => {
                if changed.is_err() {
                    let _ = client.lease_revoke(lease).await;
                    return Ok(());
                }
                let affiliate = local.borrow_and_update().clone();
                let key = affiliate.as_ref().map(|a| format!("{}{}", options.prefix, a.node_id));
                if let Some(old) = published.take().filter(|old| Some(&old.key) != key.as_ref()) {
                    client.delete(old.key, None).await.map_err(|e| call_error("withdraw the affiliate", e))?;
                }
                if let (Some(key), Some(affiliate)) = (key, affiliate) {
                    let value = encode_remote(&affiliate);
                    let revision = put_own(&mut client, lease, &key, &value).await?;
                    published = Some(Published { key, value, revision });
                }
            }
            _ = ticks.tick() => {
                if let Some(since) = awaiting_since {
                    if since.elapsed() >= period {
                        return Err(format!("keepalive: no answer within {period:?}"));
                    }
                } else {
                    keeper.keep_alive().await.map_err(|e| call_error("keep the lease alive", e))?;
                    awaiting_since = Some(tokio::time::Instant::now());
                }
            }
            answer = keepalives.message() => {
                match answer {
                    Ok(Some(answer)) if answer.ttl() > 0 => awaiting_since = None,
                    Ok(Some(_)) => return Err("the lease expired".to_string()),
                    Ok(None) => return Err("the keepalive stream ended".to_string()),
                    Err(e) => return Err(call_error("keep the lease alive", e)),
                }
            }
            batch = events.message() => {
                let batch = match batch {
                    Ok(Some(batch)) => batch,
                    Ok(None) => return Err("the watch ended".to_string()),
                    Err(e) => return Err(call_error("watch affiliates", e)),
                };
                if batch.canceled() {
                    return Err(format!("the watch was cancelled: {}", batch.cancel_reason()));
                }
                let mut tampered = false;
                shared.update(|view| {
                    for event in batch.events() {
                        let Some(kv) = event.kv() else { continue };
                        let Some(node_id) = key_node_id(&options.prefix, kv.key()) else { continue };
                        let deleted = event.event_type() == EventType::Delete;
                        if let Some(own) = published.as_ref().filter(|own| own.key.as_bytes() == kv.key()) {
                            // Changes older than this node's last put are its own history.
                            tampered |= kv.mod_revision() > own.revision
                                && (deleted || kv.lease() != lease || kv.value() != own.value);
                        }
                        match (deleted, accept_kv(&options.prefix, kv)) {
                            (false, Some(affiliate)) => insert_bounded("etcd", &mut view.affiliates, affiliate),
                            _ => {
                                view.affiliates.remove(node_id);
                            }
                        }
                    }
                });
                if let Some(own) = published.as_mut().filter(|_| tampered) {
                    tracing::warn!(key = %own.key, "another client changed or deleted this node's affiliate in etcd; publishing it again");
                    own.revision = put_own(&mut client, lease, &own.key, &own.value).await?;
                }
            }
        }
    }
}

/// What this node last put: its key, the encoded affiliate, and the revision of the put.
struct Published {
    key: String,
    value: Vec<u8>,
    revision: i64,
}

/// Puts this node's affiliate under its lease; returns the revision of the put.
async fn put_own(client: &mut Client, lease: i64, key: &str, value: &[u8]) -> Result<i64, String> {
    let put = client
        .put(key, value, Some(PutOptions::new().with_lease(lease)))
        .await
        .map_err(|e| call_error("publish the affiliate", e))?;
    Ok(put.header().map_or(0, |h| h.revision()))
}

/// Lists the affiliates under `prefix` in pages of [`PAGE`] entries, every page at the first
/// page's revision; returns that revision and the accepted affiliates.
async fn list(client: &Client, prefix: &str) -> Result<(i64, BTreeMap<String, Affiliate>), String> {
    let mut kv = client
        .kv_client()
        .max_decoding_message_size(MAX_REPLY_BYTES);
    let end = range_end(prefix.as_bytes());
    let mut from = prefix.as_bytes().to_vec();
    let mut revision = 0;
    let mut affiliates = BTreeMap::new();
    loop {
        let mut page_options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if revision != 0 {
            page_options = page_options.with_revision(revision);
        }
        let page = kv
            .get(from.clone(), Some(page_options))
            .await
            .map_err(|e| call_error("list affiliates", e))?;
        if revision == 0 {
            revision = page.header().map_or(0, |h| h.revision());
        }
        for kv in page.kvs() {
            if let Some(affiliate) = accept_kv(prefix, kv) {
                insert_bounded("etcd", &mut affiliates, affiliate);
            }
        }
        match page.kvs().last() {
            Some(last) if page.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok((revision, affiliates)),
        }
    }
}

/// Watches `prefix` from `revision` on, decoding messages up to [`MAX_REPLY_BYTES`].
async fn watch_from(client: &Client, prefix: &str, revision: i64) -> Result<WatchStream, String> {
    client
        .watch_client()
        .max_decoding_message_size(MAX_REPLY_BYTES)
        .watch(
            prefix,
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_fragment()
                    .with_start_revision(revision),
            ),
        )
        .await
        .map_err(|e| call_error("watch affiliates", e))
}

fn key_node_id<'k>(prefix: &str, key: &'k [u8]) -> Option<&'k str> {
    std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()
}

/// The affiliate an entry holds, if it is one to believe: under the prefix, held by a lease
/// (every node puts its own under one; a leaseless entry would outlive whoever wrote it), no
/// larger than [`MAX_AFFILIATE_BYTES`] (checked before decoding) and valid.
fn accept_kv(prefix: &str, kv: &KeyValue) -> Option<Affiliate> {
    let node_id = key_node_id(prefix, kv.key())?;
    // Quoted by its start only: a peer chooses the key.
    let key = cosi_core::text::prefix_within(node_id, 64);
    if kv.lease() == 0 {
        tracing::warn!(%key, "skipping an affiliate in etcd that no lease holds");
        return None;
    }
    if kv.value().len() > MAX_AFFILIATE_BYTES {
        tracing::warn!(%key, bytes = kv.value().len(), "skipping an affiliate in etcd larger than {MAX_AFFILIATE_BYTES} bytes");
        return None;
    }
    match decode_remote(node_id, kv.value()) {
        Ok(affiliate) => Some(affiliate),
        Err(error) => {
            tracing::warn!(%error, "skipping an affiliate published in etcd");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::encode_node_id;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_watch_decodes_a_catch_up_message_larger_than_four_mib() {
        let server = cosi_test_support::etcd::start_server();
        let prefix = "/cosi-registry-watch/";
        let mut client = Client::connect([server.endpoint()], None).await.unwrap();
        // Four 1.2 MB values at four revisions, before the watch starts
        let mut first = 0;
        for n in 0..4u8 {
            let put = client
                .put(
                    format!("{prefix}{}", encode_node_id(&[n; 32])),
                    vec![b' '; 1_200_000],
                    None,
                )
                .await
                .unwrap();
            if n == 0 {
                first = put.header().unwrap().revision();
            }
        }

        // When the registry's watch starts at the first of them, etcd sends them together
        let mut events = watch_from(&client, prefix, first).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 4 {
            let batch = events.message().await.unwrap().expect("the watch runs");
            seen.extend(
                batch
                    .events()
                    .iter()
                    .map(|e| e.kv().unwrap().mod_revision()),
            );
        }

        // Then it reads all four
        assert_eq!(seen, (first..first + 4).collect::<Vec<_>>());
    }
}
