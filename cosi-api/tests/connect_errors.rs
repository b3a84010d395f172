//! A client that cannot connect says which address it dialled: a caller of several nodes can
//! tell which one is down from the error alone. The clients name the resource or call; the
//! channel's connection failure (refused, or no answer within its connect timeout, 5 s) names
//! the address.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use cosi_api::client::{channel, ClientSecurity, MachineClient, RemoteOptions, RemoteState};
use cosi_core::{Error, ResourceSpec, State};
use support::{blob_codec, Blob};

/// A loopback address nothing listens on.
async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// The error of a failed connection: retryable, about `subject`, its message starting with
/// `prefix`.
fn assert_unreachable(error: &Error, subject: &str, prefix: &str) {
    match error {
        Error::Backend {
            subject: about,
            message,
            retryable: true,
            ..
        } => {
            assert_eq!(about, subject, "{error}");
            assert!(
                message.starts_with(prefix),
                "{message:?} starts with {prefix:?}"
            );
        }
        other => panic!("expected a retryable backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_refused_connection_names_the_address_dialled() {
    let address = closed_port().await;
    let channel = channel(address, None, ClientSecurity::Plaintext).unwrap();
    let state = RemoteState::new(channel.clone(), blob_codec());
    let machine = MachineClient::new(channel);

    let got = state.get(&Blob::kind().pointer("a")).await.unwrap_err();
    let version = machine.version().await.unwrap_err();

    let refused = format!("Unavailable: connecting to {address}: Connection refused");
    assert_unreachable(&got, "test/Blobs.test.cosi.dev/a", &refused);
    assert_unreachable(&version, "machine/Version/", &refused);
}

#[tokio::test]
async fn a_connection_never_accepted_fails_at_the_connect_timeout_naming_the_address() {
    // A listener with no room in its accept queue (one connection fills a backlog of 0): the
    // kernel drops the client's handshake, and its connect waits for good.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let address = listener.local_addr().unwrap();
    let _filler = tokio::net::TcpStream::connect(address).await.unwrap();
    let state = RemoteState::with_options(
        channel(address, None, ClientSecurity::Plaintext).unwrap(),
        blob_codec(),
        RemoteOptions {
            call_timeout: None,
            ..RemoteOptions::default()
        },
    );

    // On the paused clock the 5 s pass at once, once every task waits.
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(3600),
        state.get(&Blob::kind().pointer("a")),
    )
    .await
    .expect("the connection attempt ends")
    .unwrap_err();

    // Tokio's timer rounds a deadline up to its next 1 ms tick.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(5) && took <= Duration::from_millis(5001),
        "{took:?}"
    );
    assert_unreachable(
        &got,
        "test/Blobs.test.cosi.dev/a",
        &format!("Unavailable: connecting to {address}: no answer within 5s"),
    );
}
