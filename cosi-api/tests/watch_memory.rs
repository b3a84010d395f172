//! One watch message costs the client about its size, however many events it packs: the
//! client reads a response's events one at a time. (Decoding the whole generated message first
//! cost some 400 bytes per 2-byte empty event: 210 MiB for a 1 MiB message, gigabytes at the
//! 32 MiB limit.) Its own test binary, as it measures this process's peak resident memory; the
//! server runs in a child process (this binary again, with `COSI_HOSTILE_SERVER` set), so its
//! memory is not counted. A plain harness (`harness = false`), so that the server is not a
//! test that passes by doing nothing.

mod support;

use std::io::BufRead;
use std::sync::Arc;

use cosi_api::client::{channel, ClientSecurity, RemoteState};
use cosi_api::codec::Codec;
use cosi_api::proto::encoded;
use cosi_api::proto::resource::state_server;
use cosi_core::{Event, Kind, State, WatchKindOptions};
use support::hostile::{Answers, Hostile};
use support::memory::{serve_or_test, status_kib};

/// The hostile server, in a process of its own (so its memory is not the client's).
async fn hostile_server_process() {
    // 1 MiB on the wire: 524,288 empty events of 2 bytes each (`0a 00`).
    let big = encoded::WatchResponse {
        event: vec![encoded::Event::default(); 1 << 19],
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("PORT {}", listener.local_addr().unwrap().port());
    tonic::transport::Server::builder()
        .add_service(state_server::StateServer::new(Hostile(Arc::new(Answers {
            // The established message, then the big one.
            watch: vec![encoded::WatchResponse { event: vec![] }, big],
            ..Answers::default()
        }))))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await
        .unwrap();
}

fn main() {
    serve_or_test(
        "COSI_HOSTILE_SERVER",
        |_| hostile_server_process(),
        "a_watch_message_of_many_events_costs_the_client_about_its_size",
        a_watch_message_of_many_events_costs_the_client_about_its_size,
    );
}

async fn a_watch_message_of_many_events_costs_the_client_about_its_size() {
    let mut server = std::process::Command::new(std::env::current_exe().unwrap())
        .env("COSI_HOSTILE_SERVER", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
    let port: u16 = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(port) = line.strip_prefix("PORT ") {
            break port.parse().unwrap();
        }
    };
    let client = RemoteState::new(
        channel(
            ([127, 0, 0, 1], port).into(),
            None,
            ClientSecurity::Plaintext,
        )
        .unwrap(),
        Codec::new(Arc::new(cosi_core::Registry::new())),
    );
    let before = status_kib("VmHWM") / 1024;
    let mut watch = client
        .watch_kind(
            &Kind::new("test", "Blobs.test.cosi.dev"),
            WatchKindOptions::default(),
        )
        .await
        .unwrap();
    let first = watch.recv().await.unwrap();
    let after = status_kib("VmHWM") / 1024;
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(matches!(first, Event::Errored { .. }), "{first:?}");
    eprintln!("peak resident memory {before} MiB -> {after} MiB for one 1 MiB message");
    assert!(
        after - before < 16,
        "peak {before} MiB -> {after} MiB for one 1 MiB message"
    );
}
