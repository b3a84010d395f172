//! A stream that has sent a large message and gone idle holds no buffer of that message's size
//! in the server: 64 watches that each carried one update of a 4 MiB resource, read to the end
//! by their client and then idle, leave the server holding the stored resource and a few KiB
//! per stream. tonic's encoder kept the allocation of the largest message each stream had
//! encoded for as long as the stream lived (about +260 MiB here), which bounded what a caller's
//! idle watches pin only by their count times the message limit.
//!
//! Its own test binary with a plain harness (`harness = false`): it measures the resident
//! memory of the server, which runs in a child process (this binary again, with
//! `COSI_IDLE_STREAM_SERVER` set), so that the client's memory is not counted. The child's
//! allocator gives every allocation of 64 KiB or more back to the system when it is freed
//! (`MALLOC_MMAP_THRESHOLD_`), so its resident memory is what the server holds rather than
//! what the allocator keeps for reuse.

mod support;

use std::ffi::OsStr;
use std::io::{BufRead, Write};

use cosi_api::client::{channel, ClientSecurity};
use cosi_api::proto::resource::{self as pb, state_client::StateClient};
use cosi_api::server::OMIT_YAML_HEADER;
use cosi_core::{CreateOptions, Resource, ResourceSpec, State, StateExt, UpdateOptions};
use support::memory::{serve_or_test, settled_rss_kib, ServerChild};
use support::Blob;

/// Watches of the resource, each of which receives its one large update.
const WATCHES: usize = 64;
/// The size of the update each watch sends.
const LARGE: usize = 4 << 20;
/// What a stream may hold once idle: the small buffer the task asks for, at most.
const IDLE_STREAM_BYTES: usize = 64 << 10;
/// Room for what else moves in the server's resident memory between the two measurements
/// (the client's connection, the tasks' stacks and the allocator's small-object pools).
const SLACK_MIB: u64 = 8;

fn blob(data: String) -> Resource<Blob> {
    Resource::new("large", Blob { data })
}

/// The server: a plaintext State server over a memory store holding one small resource.
/// Prints `PORT`; on the line `base` prints `BASE` (its settled memory, every watch open); on
/// `write` makes the resource LARGE bytes and prints `WRITTEN`; on `idle` prints `IDLE` (its
/// settled memory once the client has read every watch's update).
async fn server_process() {
    let store = std::sync::Arc::new(cosi_state::MemoryState::default());
    store
        .create(blob("small".into()).into_shared(), CreateOptions::default())
        .await
        .unwrap();
    let server =
        support::plaintext_server(store.clone(), support::blob_codec(), support::any_port()).await;
    println!("PORT {}", server.local_addr().port());
    let mut lines = std::io::stdin().lock().lines();
    let mut expect = |word: &str| assert_eq!(lines.next().unwrap().unwrap(), word);
    expect("base");
    println!("BASE {}", settled_rss_kib().await);
    expect("write");
    store
        .modify(blob(String::new()), UpdateOptions::default(), |b| {
            b.spec.data = "x".repeat(LARGE);
            Ok(())
        })
        .await
        .unwrap();
    println!("WRITTEN");
    expect("idle");
    println!("IDLE {}", settled_rss_kib().await);
    std::io::stdout().flush().unwrap();
    // Serve until the parent is done.
    let _ = lines.next();
}

fn main() {
    serve_or_test(
        "COSI_IDLE_STREAM_SERVER",
        |_| server_process(),
        "a_stream_that_sent_a_large_message_holds_at_most_a_small_buffer_when_idle",
        a_stream_that_sent_a_large_message_holds_at_most_a_small_buffer_when_idle,
    );
}

async fn a_stream_that_sent_a_large_message_holds_at_most_a_small_buffer_when_idle() {
    let mut server = ServerChild::spawn(&[
        ("COSI_IDLE_STREAM_SERVER", OsStr::new("1")),
        ("MALLOC_MMAP_THRESHOLD_", OsStr::new("65536")),
    ]);
    let port = server.figure("PORT") as u16;

    let channel = channel(
        ([127, 0, 0, 1], port).into(),
        None,
        ClientSecurity::Plaintext,
    )
    .unwrap();
    let mut client = StateClient::new(channel).max_decoding_message_size(64 << 20);
    let mut watches = Vec::new();
    for _ in 0..WATCHES {
        let mut request = tonic::Request::new(pb::WatchRequest {
            namespace: Blob::kind().namespace().to_string(),
            r#type: Blob::TYPE.to_string(),
            ..pb::WatchRequest::default()
        });
        // One copy of the resource per message (no YAML copy of its spec).
        request
            .metadata_mut()
            .insert(OMIT_YAML_HEADER, "1".parse().unwrap());
        let mut watch = client.watch(request).await.unwrap().into_inner();
        let established = watch.message().await.unwrap().unwrap();
        assert!(established.event.is_empty());
        watches.push(watch);
    }
    server.say("base");
    let base = server.figure("BASE");
    server.say("write");
    server.expect("WRITTEN");
    // Every watch's update, read to its last byte (all at once: the watches share one
    // connection's receive window); the streams stay open and idle.
    let sizes = futures::future::join_all(watches.iter_mut().map(|watch| async move {
        let response = watch.message().await.unwrap().unwrap();
        assert_eq!(response.event.len(), 1);
        // The resource, as its encoded message.
        response.event[0].resource.as_ref().unwrap().len()
    }))
    .await;
    for size in sizes {
        assert!(size > LARGE, "{size}");
    }
    server.say("idle");
    let idle = server.figure("IDLE");
    server.finish();
    drop(watches);

    let grown_mib = idle.saturating_sub(base) / 1024;
    // What the server holds anyway: the stored resource, now LARGE bytes.
    let stored_mib = (LARGE >> 20) as u64;
    let streams_mib = ((WATCHES * IDLE_STREAM_BYTES) >> 20) as u64;
    eprintln!(
        "server resident {} MiB -> {} MiB (+{grown_mib} MiB) with {WATCHES} idle watches that \
         each sent {} MiB; the stored resource {stored_mib} MiB, the streams' allowance \
         {streams_mib} MiB",
        base / 1024,
        idle / 1024,
        LARGE >> 20
    );
    assert!(
        grown_mib <= stored_mib + streams_mib + SLACK_MIB,
        "server resident memory grew {grown_mib} MiB with {WATCHES} idle watches that each sent \
         {} MiB",
        LARGE >> 20
    );
}
