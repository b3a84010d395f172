//! A remote watch that has received a large message and gone idle holds no buffer of that
//! message's size in the client: 64 watches that each received one update of a 4 MiB
//! resource, delivered and dropped by their consumer, then idle, leave the client holding a
//! few KiB per watch. tonic's decoder kept a buffer of the largest message each stream had
//! received for as long as the stream lived (about +260 MiB here), which bounded what a
//! client's idle watches pin only by their count times the message limit.
//!
//! Its own test binary with a plain harness (`harness = false`): it measures the resident
//! memory of the client. The server runs in a child process (this binary again, with
//! `COSI_IDLE_WATCH_SERVER` set), so that its memory is not counted; the client runs in
//! another (with `COSI_IDLE_WATCH_CLIENT` set), whose allocator gives every allocation of
//! 64 KiB or more back to the system when it is freed (`MALLOC_MMAP_THRESHOLD_`), so that its
//! resident memory is what the client holds rather than what the allocator keeps for reuse.

mod support;

use std::ffi::OsStr;
use std::io::{BufRead, Write};
use std::sync::Arc;

use cosi_api::client::{channel, ClientSecurity, RemoteState};
use cosi_core::{
    CreateOptions, Event, Resource, ResourceSpec, State, StateExt, UpdateOptions, WatchKindOptions,
};
use support::memory::{passed, runtime, settled_rss_kib, ServerChild};
use support::Blob;

/// Watches of the resource, each of which receives its one large update.
const WATCHES: usize = 64;
/// The size of the update each watch receives.
const LARGE: usize = 4 << 20;
/// What a watch may hold once idle: a small buffer, at most.
const IDLE_WATCH_BYTES: usize = 64 << 10;
/// Room for what else moves in the client's resident memory between the two measurements
/// (the tasks' stacks, the allocator's small-object pools).
const SLACK_MIB: u64 = 8;

const NAME: &str = "a_watch_that_received_a_large_message_holds_at_most_a_small_buffer_when_idle";

fn blob(data: String) -> Resource<Blob> {
    Resource::new("large", Blob { data })
}

/// The server: a plaintext State server over a memory store holding one small resource.
/// Prints `PORT`; on the line `write` makes the resource LARGE bytes and prints `WRITTEN`.
async fn server_process() {
    let store = Arc::new(cosi_state::MemoryState::default());
    store
        .create(blob("small".into()).into_shared(), CreateOptions::default())
        .await
        .unwrap();
    let server =
        support::plaintext_server(store.clone(), support::blob_codec(), support::any_port()).await;
    println!("PORT {}", server.local_addr().port());
    let mut lines = std::io::stdin().lock().lines();
    assert_eq!(lines.next().unwrap().unwrap(), "write");
    store
        .modify(blob(String::new()), UpdateOptions::default(), |b| {
            b.spec.data = "x".repeat(LARGE);
            Ok(())
        })
        .await
        .unwrap();
    println!("WRITTEN");
    std::io::stdout().flush().unwrap();
    // Serve until the client is done.
    let _ = lines.next();
}

fn main() {
    if std::env::var_os("COSI_IDLE_WATCH_SERVER").is_some() {
        runtime().block_on(server_process());
        return;
    }
    if std::env::var_os("COSI_IDLE_WATCH_CLIENT").is_some() {
        runtime().block_on(
            a_watch_that_received_a_large_message_holds_at_most_a_small_buffer_when_idle(),
        );
        return;
    }
    // The client, measured, in a process of its own with its allocator set as it needs.
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .env("COSI_IDLE_WATCH_CLIENT", "1")
        .env("MALLOC_MMAP_THRESHOLD_", "65536")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "{NAME} failed: the client process ended with {status}"
    );
    passed(NAME);
}

async fn a_watch_that_received_a_large_message_holds_at_most_a_small_buffer_when_idle() {
    let mut server = ServerChild::spawn(&[("COSI_IDLE_WATCH_SERVER", OsStr::new("1"))]);
    let port = server.figure("PORT") as u16;
    let client = RemoteState::new(
        channel(
            ([127, 0, 0, 1], port).into(),
            None,
            ClientSecurity::Plaintext,
        )
        .unwrap(),
        support::blob_codec(),
    );
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        let watch = client
            .watch_kind(&Blob::kind(), WatchKindOptions::default())
            .await
            .unwrap();
        watches.push(watch);
    }
    let base = settled_rss_kib().await;
    server.say("write");
    server.expect("WRITTEN");
    // Every watch's update, delivered and dropped; the watches stay open and idle.
    let sizes = futures::future::join_all(watches.iter_mut().map(|watch| async move {
        match watch.recv().await {
            Some(Event::Updated { resource, .. }) => cosi_core::downcast_ref::<Blob>(&*resource)
                .unwrap()
                .spec
                .data
                .len(),
            other => panic!("expected the update, got {other:?}"),
        }
    }))
    .await;
    assert_eq!(sizes, vec![LARGE; WATCHES]);
    let idle = settled_rss_kib().await;
    server.finish();
    drop(watches);

    let grown_mib = idle.saturating_sub(base) / 1024;
    let watches_mib = ((WATCHES * IDLE_WATCH_BYTES) >> 20) as u64;
    eprintln!(
        "client resident {} MiB -> {} MiB (+{grown_mib} MiB) with {WATCHES} idle watches that \
         each received {} MiB; the watches' allowance {watches_mib} MiB",
        base / 1024,
        idle / 1024,
        LARGE >> 20
    );
    assert!(
        grown_mib <= watches_mib + SLACK_MIB,
        "client resident memory grew {grown_mib} MiB with {WATCHES} idle watches that each \
         received {} MiB",
        LARGE >> 20
    );
}
