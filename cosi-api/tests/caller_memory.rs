//! What one remote caller can make the server hold is bounded by bytes, not only by its count
//! of calls: a reader that opens as many watches as it may on a kind of 1 MiB resources and
//! never reads them, while a writer updates the resources, pins at most the caller's byte
//! budget ([`DEFAULT_MAX_BYTES_PER_CALLER`]) of encoded responses in the server, plus what the
//! store keeps anyway (its live resources and its history window). Before the budget, each
//! watch held a few encoded events (one in HTTP/2's send buffer, one in its channel, one being
//! sent): 256 watches × ~3 × 4 MiB.
//!
//! Its own test binary with a plain harness (`harness = false`): it measures the server's peak
//! resident memory, and the server runs in a child process (this binary again, with
//! `COSI_CALLER_MEMORY_SERVER` naming the directory of its certificates), so that the
//! client's memory is not counted.

mod support;

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use cosi_api::auth::{Role, StatePolicy};
use cosi_api::client::{channel_with, ChannelOptions, ClientSecurity};
use cosi_api::pki::{CertificateAuthority, CertifiedKey, CERT_VALIDITY};
use cosi_api::proto::resource::{self as pb, state_client::StateClient};
use cosi_api::server::{
    ApiServer, Security, StateService, DEFAULT_MAX_BYTES_PER_CALLER, DEFAULT_MAX_CALLS_PER_CALLER,
};
use cosi_core::{CreateOptions, Resource, ResourceSpec, State, StateExt, UpdateOptions};
use cosi_state::{MemoryOptions, MemoryState};
use support::memory::{report_peak_then_serve, serve_or_test, status_kib, ServerChild};
use support::Blob;

/// Resources of the kind, each of [`BLOB_BYTES`].
const BLOBS: usize = 8;
const BLOB_BYTES: usize = 1 << 20;
/// Updates of every resource while the watches are open (each watch would send every one).
const ROUNDS: usize = 6;
/// The store's history window: the old versions it keeps for lagging watchers (one per update
/// here, as ROUNDS × BLOBS ≤ HISTORY).
const HISTORY: usize = 64;

fn blob(id: usize, round: usize) -> Resource<Blob> {
    let fill = char::from(b'a' + round as u8);
    Resource::new(
        format!("b{id}"),
        Blob {
            data: fill.to_string().repeat(BLOB_BYTES),
        },
    )
}

/// The server, in a process of its own: serves mutual TLS with the certificates in `dir`,
/// prints `PORT`, then `BASE` (its peak memory with the resources created), and on the line
/// `write` updates every resource ROUNDS times and prints `PEAK` once its memory has settled.
async fn server_process(dir: &Path) {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let identity =
        CertifiedKey::read_pem(&dir.join("server.pem"), &dir.join("server-key.pem")).unwrap();
    let store = Arc::new(MemoryState::new(MemoryOptions {
        history: HISTORY,
        ..MemoryOptions::default()
    }));
    for id in 0..BLOBS {
        store
            .create(blob(id, 0).into_shared(), CreateOptions::default())
            .await
            .unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let _server = ApiServer::new(Security::MutualTls {
        identity,
        client_ca_pem: read("ca.pem"),
    })
    .with_state(StateService::new(
        store.clone(),
        support::blob_codec(),
        StatePolicy::default(),
    ))
    .serve(listener)
    .unwrap();
    println!("PORT {port}");
    println!("BASE {}", status_kib("VmHWM") / 1024);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "write");
    for round in 1..=ROUNDS {
        for id in 0..BLOBS {
            let next = blob(id, round).spec.data;
            store
                .modify(blob(id, 0), UpdateOptions::default(), |b| {
                    b.spec.data = next.clone();
                    Ok(())
                })
                .await
                .unwrap();
        }
    }
    report_peak_then_serve().await;
}

fn main() {
    serve_or_test(
        "COSI_CALLER_MEMORY_SERVER",
        |dir| async move { server_process(Path::new(&dir)).await },
        "one_caller_s_unread_watches_pin_at_most_its_byte_budget",
        one_caller_s_unread_watches_pin_at_most_its_byte_budget,
    );
}

async fn one_caller_s_unread_watches_pin_at_most_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cosi").unwrap();
    let server = ca
        .issue_server(&["127.0.0.1".parse().unwrap()], &[], CERT_VALIDITY)
        .unwrap();
    server.write_pem(dir.path(), "server").unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca.cert_pem()).unwrap();
    let reader = ca
        .issue_client("slow-reader", Role::Reader, CERT_VALIDITY)
        .unwrap();

    let mut server = ServerChild::spawn(&[("COSI_CALLER_MEMORY_SERVER", dir.path().as_os_str())]);
    let port = server.figure("PORT") as u16;
    let base = server.figure("BASE");

    // A slow reader: a small receive window, every watch established and then never read.
    let channel = channel_with(
        ([127, 0, 0, 1], port).into(),
        None,
        ClientSecurity::MutualTls {
            ca_pem: ca.cert_pem().to_string(),
            identity: reader,
        },
        ChannelOptions {
            stream_window: Some(64 * 1024),
            ..ChannelOptions::default()
        },
    )
    .unwrap();
    let mut client = StateClient::new(channel).max_decoding_message_size(64 << 20);
    let mut watches = Vec::new();
    for _ in 0..DEFAULT_MAX_CALLS_PER_CALLER {
        let mut watch = client
            .watch(pb::WatchRequest {
                namespace: Blob::kind().namespace().to_string(),
                r#type: Blob::TYPE.to_string(),
                ..pb::WatchRequest::default()
            })
            .await
            .unwrap()
            .into_inner();
        let established = watch.message().await.unwrap().unwrap();
        assert!(established.event.is_empty());
        watches.push(watch);
    }
    server.say("write");
    let peak = server.figure("PEAK");
    server.finish();
    drop(watches);

    let grown = peak - base;
    let budget = (DEFAULT_MAX_BYTES_PER_CALLER >> 20) as u64;
    // What the store keeps anyway: a new version of each update (the window keeps them for the
    // lagging watchers).
    let store = ((ROUNDS * BLOBS * BLOB_BYTES) >> 20) as u64;
    eprintln!(
        "server peak {base} MiB -> {peak} MiB (+{grown} MiB) for {} unread watches; budget \
         {budget} MiB, store's window {store} MiB",
        DEFAULT_MAX_CALLS_PER_CALLER
    );
    assert!(
        grown < budget + store + 64,
        "server peak {base} MiB -> {peak} MiB for {} unread watches",
        DEFAULT_MAX_CALLS_PER_CALLER
    );
}
