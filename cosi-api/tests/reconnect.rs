//! Remote watches survive the network: after a server restart (graceful or a cut connection)
//! in the middle of a write stream, a watch resumes after the last event it delivered, and its
//! events are exactly those of an in-process watch of the same store — none duplicated, none
//! skipped. The store stays; only the gRPC server stops and starts again on the same address.
//!
//! The writer is paced by the remote watcher (it stays at most `LEAD` events ahead), so writes
//! happen before, during and after the outage; no test sleeps.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cosi_api::codec::Codec;
use cosi_api::server::ServerHandle;
use cosi_core::{
    Bookmark, CreateOptions, Event, Resource, State, StateExt, UpdateOptions, Watch,
    WatchKindOptions, WatchOptions,
};
use cosi_state::conformance::Widget;
use cosi_state::{MemoryOptions, MemoryState};

const TIMEOUT: Duration = Duration::from_secs(30);
/// Updates in the stream (well inside the store's history window, so resumes are exact).
const WRITES: u64 = 600;
/// How far the writer may run ahead of the remote watcher.
const LEAD: u64 = 40;
/// The restart happens once the remote watcher has this many events.
const RESTART_AT: u64 = 200;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outage {
    /// `ServerHandle::shutdown`: streams end with `Unavailable`.
    Graceful,
    /// `ServerHandle::abort`: sockets cut, streams end mid-flight.
    Severed,
}

fn codec() -> Codec {
    Codec::new(Arc::new(support::conformance_registry()))
}

async fn stop(server: ServerHandle, outage: Outage) -> SocketAddr {
    let address = server.local_addr();
    match outage {
        Outage::Graceful => tokio::time::timeout(TIMEOUT, server.shutdown())
            .await
            .expect("the server stopped in time")
            .expect("a clean shutdown"),
        Outage::Severed => server.abort().await,
    }
    address
}

/// What the comparison looks at: everything an event says.
fn summary(event: &Event) -> (String, String, u64, bool, Option<Bookmark>, Option<u64>) {
    let old = match event {
        Event::Updated { old, .. } => old.as_ref().map(|o| o.metadata().version().get()),
        _ => None,
    };
    match event.resource() {
        Some(r) => (
            event.type_name().to_string(),
            r.metadata().id().to_string(),
            r.metadata().version().get(),
            event.is_compacted(),
            event.bookmark().cloned(),
            old,
        ),
        None => (
            event.type_name().to_string(),
            String::new(),
            0,
            false,
            event.bookmark().cloned(),
            old,
        ),
    }
}

async fn next(watch: &mut Watch, what: &str) -> Event {
    match tokio::time::timeout(TIMEOUT, watch.recv()).await {
        Ok(Some(event)) => event,
        Ok(None) => panic!("{what}: the watch ended"),
        Err(_) => panic!("{what}: no event within {TIMEOUT:?}"),
    }
}

/// Writes `WRITES` updates of widget `w` straight into the store, never more than `LEAD`
/// ahead of `received`.
fn spawn_writer(
    backing: Arc<MemoryState>,
    mut received: tokio::sync::watch::Receiver<u64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pointer = <Widget as cosi_core::ResourceSpec>::kind().pointer("w");
        for i in 1..=WRITES {
            received
                .wait_for(|seen| *seen + LEAD >= i)
                .await
                .expect("the test keeps the counter alive");
            backing
                .update_with_conflicts::<Widget, _>(&pointer, UpdateOptions::default(), |r| {
                    r.spec.value = i;
                    Ok(())
                })
                .await
                .expect("update");
        }
    })
}

async fn kind_watch_survives(outage: Outage) {
    let backing = Arc::new(MemoryState::new(MemoryOptions::default()));
    backing
        .create(
            Resource::new("w", Widget { value: 0 }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let server = support::plaintext_server(backing.clone(), codec(), support::any_port()).await;
    let remote = support::plaintext_client(server.local_addr(), codec());

    let kind = <Widget as cosi_core::ResourceSpec>::kind();
    let mut local = backing
        .watch_kind(&kind, WatchKindOptions::default())
        .await
        .unwrap();
    let mut watch = remote
        .watch_kind(&kind, WatchKindOptions::default())
        .await
        .unwrap();

    let (count, received) = tokio::sync::watch::channel(0u64);
    let writer = spawn_writer(backing.clone(), received);

    let mut remote_events = Vec::new();
    let mut server = Some(server);
    while remote_events.len() < WRITES as usize {
        let event = next(&mut watch, "remote watch").await;
        remote_events.push(summary(&event));
        count.send_replace(remote_events.len() as u64);
        if remote_events.len() as u64 == RESTART_AT {
            let address = stop(server.take().unwrap(), outage).await;
            server = Some(support::plaintext_server(backing.clone(), codec(), address).await);
        }
    }
    writer.await.unwrap();

    let mut local_events = Vec::new();
    while local_events.len() < WRITES as usize {
        local_events.push(summary(&next(&mut local, "local watch").await));
    }
    assert_eq!(remote_events.len(), local_events.len());
    for (i, (remote, local)) in remote_events.iter().zip(&local_events).enumerate() {
        assert_eq!(
            remote, local,
            "event {i} differs ({outage:?} restart at {RESTART_AT})"
        );
    }
    assert_eq!(
        remote_events.last().unwrap().2,
        WRITES + 1,
        "the last event is the last write"
    );
    // And nothing more: the next remote event is the next write.
    backing
        .update_with_conflicts::<Widget, _>(&kind.pointer("w"), UpdateOptions::default(), |r| {
            r.spec.value = 0;
            Ok(())
        })
        .await
        .unwrap();
    let after = summary(&next(&mut watch, "remote watch after the stream").await);
    assert_eq!(
        after,
        summary(&next(&mut local, "local watch after the stream").await)
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_watch_resumes_after_server_restart_without_duplicates_or_gaps() {
    kind_watch_survives(Outage::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_watch_resumes_after_cut_connections_without_duplicates_or_gaps() {
    kind_watch_survives(Outage::Severed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_resource_watch_resumes_after_server_restart() {
    let backing = Arc::new(MemoryState::new(MemoryOptions::default()));
    let kind = <Widget as cosi_core::ResourceSpec>::kind();
    let pointer = kind.pointer("w");
    backing
        .create(
            Resource::new("w", Widget { value: 0 }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let server = support::plaintext_server(backing.clone(), codec(), support::any_port()).await;
    let remote = support::plaintext_client(server.local_addr(), codec());
    let mut watch = remote
        .watch(&pointer, WatchOptions::default())
        .await
        .unwrap();
    let mut local = backing
        .watch(&pointer, WatchOptions::default())
        .await
        .unwrap();
    // The initial states agree.
    assert_eq!(
        summary(&next(&mut watch, "remote").await),
        summary(&next(&mut local, "local").await)
    );

    let (count, received) = tokio::sync::watch::channel(0u64);
    let writer = spawn_writer(backing.clone(), received);
    let mut server = Some(server);
    let mut remote_events = Vec::new();
    while remote_events.len() < WRITES as usize {
        remote_events.push(summary(&next(&mut watch, "remote").await));
        count.send_replace(remote_events.len() as u64);
        if remote_events.len() as u64 == RESTART_AT {
            let address = stop(server.take().unwrap(), Outage::Severed).await;
            server = Some(support::plaintext_server(backing.clone(), codec(), address).await);
        }
    }
    writer.await.unwrap();
    for (i, remote) in remote_events.iter().enumerate() {
        assert_eq!(
            remote,
            &summary(&next(&mut local, "local").await),
            "event {i} differs"
        );
    }
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resyncs_when_the_server_returns_with_another_store() {
    let first = Arc::new(MemoryState::new(MemoryOptions::default()));
    let kind = <Widget as cosi_core::ResourceSpec>::kind();
    for i in 0..5 {
        first
            .create(
                Resource::new(format!("old-{i}"), Widget { value: i }).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    let server = support::plaintext_server(first.clone(), codec(), support::any_port()).await;
    let remote = support::plaintext_client(server.local_addr(), codec());
    let bootstrap = WatchKindOptions {
        bootstrap: true,
        ..Default::default()
    };
    let mut watch = remote.watch_kind(&kind, bootstrap).await.unwrap();
    for _ in 0..6 {
        next(&mut watch, "bootstrap").await;
    }
    // The node comes back with a store that never issued the watch's bookmark.
    let address = stop(server, Outage::Severed).await;
    let second = Arc::new(MemoryState::new(MemoryOptions::default()));
    second
        .create(
            Resource::new("new", Widget { value: 9 }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let _server = support::plaintext_server(second.clone(), codec(), address).await;

    let mut seen = Vec::new();
    loop {
        let event = next(&mut watch, "after the store changed").await;
        let done = matches!(event, Event::Bootstrapped { .. });
        seen.push(summary(&event).0 + " " + &summary(&event).1);
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        ["resync ", "created new", "bootstrapped "],
        "drop the old view, then the new contents"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_resource_watch_resynced_to_a_store_without_its_resource_gets_a_tombstone() {
    // Given a remote watch of widget w, which exists
    let first = Arc::new(MemoryState::new(MemoryOptions::default()));
    let pointer = <Widget as cosi_core::ResourceSpec>::kind().pointer("w");
    first
        .create(
            Resource::new("w", Widget { value: 1 }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let server = support::plaintext_server(first.clone(), codec(), support::any_port()).await;
    let remote = support::plaintext_client(server.local_addr(), codec());
    let mut watch = remote
        .watch(&pointer, WatchOptions::default())
        .await
        .unwrap();
    let initial = next(&mut watch, "initial state").await;
    assert_eq!(summary(&initial).0, "created");
    // When the node comes back with a store that never issued the watch's bookmark and
    // holds no w
    let address = stop(server, Outage::Severed).await;
    let second = Arc::new(MemoryState::new(MemoryOptions::default()));
    second
        .create(
            Resource::new("other", Widget { value: 9 }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let _server = support::plaintext_server(second.clone(), codec(), address).await;

    // Then the watch resyncs, and says w is absent with a tombstone, as its first event would
    // have (before: the resync and its bootstrapped alone)
    let mut seen = Vec::new();
    loop {
        let event = next(&mut watch, "after the store changed").await;
        let done = matches!(event, Event::Bootstrapped { .. });
        let (kind, id, version, compacted, ..) = summary(&event);
        seen.push(format!("{kind} {id} {version} {compacted}"));
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "resync  0 false",
            "destroyed w 0 false",
            "bootstrapped  0 false"
        ],
        "drop the old view, then say w is absent"
    );
}

/// When each kind watch was opened on [`EndingWatches`].
#[derive(Default)]
struct Opens {
    at: std::sync::Mutex<Vec<std::time::Instant>>,
    opened: tokio::sync::Notify,
}

impl Opens {
    /// The open times, once there are `count` of them (a hang guard fails the test after
    /// [`TIMEOUT`]: the wait is on the opens, never on time).
    async fn wait_for(&self, count: usize) -> Vec<std::time::Instant> {
        let wait = async {
            loop {
                let opened = self.opened.notified();
                let at = self.at.lock().unwrap().clone();
                if at.len() >= count {
                    return at;
                }
                opened.await;
            }
        };
        tokio::time::timeout(TIMEOUT, wait)
            .await
            .expect("the watch was opened again")
    }
}

/// A watch that has ended before its first event.
struct Ended;

#[async_trait::async_trait]
impl cosi_core::EventSource for Ended {
    async fn next(&mut self) -> Option<Event> {
        None
    }
}

/// A broken store: kind watches end as soon as they are opened (so the server establishes each
/// watch and then ends it); everything else is a memory store's.
struct EndingWatches {
    inner: MemoryState,
    opens: Arc<Opens>,
}

impl State for EndingWatches {
    fn get<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
    ) -> cosi_core::Call<'a, cosi_core::SharedResource> {
        self.inner.get(pointer)
    }
    fn list<'a>(
        &'a self,
        kind: &'a cosi_core::Kind,
        options: &'a cosi_core::ListOptions,
    ) -> cosi_core::Call<'a, Vec<cosi_core::SharedResource>> {
        self.inner.list(kind, options)
    }
    fn create(
        &self,
        resource: cosi_core::SharedResource,
        options: CreateOptions,
    ) -> cosi_core::Call<'_, cosi_core::SharedResource> {
        self.inner.create(resource, options)
    }
    fn update(
        &self,
        resource: cosi_core::SharedResource,
        options: UpdateOptions,
    ) -> cosi_core::Call<'_, cosi_core::SharedResource> {
        self.inner.update(resource, options)
    }
    fn destroy<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::DestroyOptions,
    ) -> cosi_core::Call<'a, ()> {
        self.inner.destroy(pointer, options)
    }
    fn watch<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: WatchOptions,
    ) -> cosi_core::Call<'a, Watch> {
        self.inner.watch(pointer, options)
    }
    fn watch_kind<'a>(
        &'a self,
        _: &'a cosi_core::Kind,
        _: WatchKindOptions,
    ) -> cosi_core::Call<'a, Watch> {
        self.opens
            .at
            .lock()
            .unwrap()
            .push(std::time::Instant::now());
        self.opens.opened.notify_waiters();
        cosi_core::Call::pending(async { Ok(Watch::new(Ended)) })
    }
}

/// A server that establishes every watch and then ends it (a broken node, a proxy that cuts
/// streams) is not reopened in a tight loop: each reopen after a broken stream waits the
/// backoff, as a failed open does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_the_server_keeps_ending_is_reopened_only_after_the_backoff() {
    let opens = Arc::new(Opens::default());
    let state = Arc::new(EndingWatches {
        inner: MemoryState::default(),
        opens: opens.clone(),
    });
    let server = support::plaintext_server(state, codec(), support::any_port()).await;
    let delay = Duration::from_millis(200);
    let client = cosi_api::client::RemoteState::with_options(
        cosi_api::client::channel(
            server.local_addr(),
            None,
            cosi_api::client::ClientSecurity::Plaintext,
        )
        .unwrap(),
        codec(),
        cosi_api::client::RemoteOptions {
            reconnect: cosi_api::client::Backoff {
                initial: delay,
                max: delay,
                give_up_after: Duration::from_secs(3600),
            },
            ..cosi_api::client::RemoteOptions::default()
        },
    );
    let _watch = client
        .watch_kind(
            &<Widget as cosi_core::ResourceSpec>::kind(),
            WatchKindOptions::default(),
        )
        .await
        .unwrap();
    let at = opens.wait_for(3).await;
    // The jitter takes at most a quarter off the delay.
    let least = delay.mul_f64(0.75);
    assert!(at[1] - at[0] >= least, "{:?}", at[1] - at[0]);
    assert!(at[2] - at[1] >= least, "{:?}", at[2] - at[1]);
}
