//! The client against a server whose answers are wrong: a [`RemoteState`] never hands its caller
//! a resource it did not ask for. An answer about another resource, or of another kind, is an
//! error naming what was asked and what came back, never a silently wrong view.
//!
//! The server here implements the generated State service by hand and answers with crafted
//! messages, whatever it was asked.

mod support;

use std::sync::Arc;

use bytes::Bytes;
use cosi_api::client::{channel, ClientSecurity, RemoteOptions, RemoteState};
use cosi_api::proto::encoded;
use cosi_api::proto::resource::{self as pb, state_server};
use cosi_api::status::{to_status, Call};
use cosi_core::{
    Error, Event, ListOptions, Resource, ResourceSpec, SharedResource, State, Version,
    WatchKindOptions, WatchOptions,
};

use support::blob_codec as codec;
use support::hostile::{Answers, Hostile};
use support::{Blob, Stranger};

fn blob(id: &str) -> SharedResource {
    let mut resource = Resource::new(id, Blob { data: id.into() });
    resource.metadata.set_version(Version::new(1));
    resource.into_shared()
}

fn stranger(id: &str) -> SharedResource {
    let mut resource = Resource::new(id, Stranger { data: id.into() });
    resource.metadata.set_version(Version::new(1));
    resource.into_shared()
}

fn bytes(resource: &SharedResource) -> Bytes {
    codec().encode_bytes(&**resource, false).unwrap()
}

/// A client of a server that gives `answers`; the server runs until the test's runtime ends.
async fn client_of(answers: Answers) -> RemoteState {
    client_with(answers, RemoteOptions::default()).await
}

async fn client_with(answers: Answers, options: RemoteOptions) -> RemoteState {
    serve(Arc::new(answers), options).await
}

async fn serve(answers: Arc<Answers>, options: RemoteOptions) -> RemoteState {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let service = state_server::StateServer::new(Hostile(answers));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    RemoteState::with_options(
        channel(address, None, ClientSecurity::Plaintext).unwrap(),
        codec(),
        options,
    )
}

fn event(kind: pb::EventType, resource: &SharedResource, bookmark: &[u8]) -> encoded::Event {
    encoded::Event {
        resource: Some(bytes(resource)),
        event_type: kind as i32,
        bookmark: Some(bookmark.to_vec()),
        ..Default::default()
    }
}

fn marker(kind: pb::EventType, bookmark: &[u8]) -> encoded::Event {
    encoded::Event {
        event_type: kind as i32,
        bookmark: Some(bookmark.to_vec()),
        ..Default::default()
    }
}

/// The error of a wrong answer: not retryable, about what was asked, naming what came back.
fn assert_wrong_answer(error: &Error, asked: &str, answered: &str) {
    match error {
        Error::Backend {
            subject,
            message,
            retryable: false,
            ..
        } => {
            assert_eq!(subject, asked, "{error}");
            assert!(
                message.contains(answered),
                "the error names what came back: {error}"
            );
        }
        other => panic!("expected a backend error about {asked}, got {other:?}"),
    }
}

#[tokio::test]
async fn get_refuses_an_answer_about_another_resource() {
    let client = client_of(Answers {
        get: Some(blob("b")),
        ..Default::default()
    })
    .await;

    let error = client
        .get(&Blob::kind().pointer("a"))
        .await
        .expect_err("an answer about test/Blobs.test.cosi.dev/b is not test/…/a");

    assert_wrong_answer(
        &error,
        "test/Blobs.test.cosi.dev/a",
        "test/Blobs.test.cosi.dev/b",
    );
}

#[tokio::test]
async fn list_refuses_resources_of_another_kind() {
    let client = client_of(Answers {
        list: vec![blob("a"), stranger("b")],
        ..Default::default()
    })
    .await;

    let error = client
        .list(&Blob::kind(), &ListOptions::default())
        .await
        .expect_err("a Stranger in a list of Blobs");

    assert_wrong_answer(
        &error,
        "test/Blobs.test.cosi.dev",
        "test/Strangers.test.cosi.dev/b",
    );
}

async fn next(watch: &mut cosi_core::Watch) -> Event {
    tokio::time::timeout(std::time::Duration::from_secs(10), watch.recv())
        .await
        .expect("an event within 10 s")
        .expect("the watch is open")
}

#[tokio::test]
async fn a_kind_watch_refuses_events_of_another_kind() {
    let client = client_of(Answers {
        watch: vec![
            encoded::WatchResponse { event: vec![] },
            encoded::WatchResponse {
                event: vec![
                    marker(pb::EventType::Noop, b"0"),
                    event(pb::EventType::Created, &blob("a"), b"1"),
                    event(pb::EventType::Created, &stranger("b"), b"2"),
                ],
            },
        ],
        ..Default::default()
    })
    .await;

    let mut watch = client
        .watch_kind(&Blob::kind(), WatchKindOptions::default())
        .await
        .unwrap();

    a_then_the_wrong_answer(
        &mut watch,
        "test/Blobs.test.cosi.dev",
        "test/Strangers.test.cosi.dev/b",
    )
    .await;
}

#[tokio::test]
async fn a_resource_watch_refuses_events_about_another_id() {
    let client = client_of(Answers {
        watch: vec![
            encoded::WatchResponse { event: vec![] },
            encoded::WatchResponse {
                event: vec![
                    event(pb::EventType::Created, &blob("a"), b"1"),
                    event(pb::EventType::Created, &blob("b"), b"2"),
                ],
            },
        ],
        ..Default::default()
    })
    .await;

    let mut watch = client
        .watch(&Blob::kind().pointer("a"), WatchOptions::default())
        .await
        .unwrap();

    a_then_the_wrong_answer(
        &mut watch,
        "test/Blobs.test.cosi.dev/a",
        "test/Blobs.test.cosi.dev/b",
    )
    .await;
}

/// The watch delivers a's creation, then ends with the error of a wrong answer: `answered`
/// where `asked` was asked for.
async fn a_then_the_wrong_answer(watch: &mut cosi_core::Watch, asked: &str, answered: &str) {
    match next(watch).await {
        Event::Created { resource, .. } => assert_eq!(resource.metadata().id(), "a"),
        other => panic!("expected a's creation, got {other:?}"),
    }
    match next(watch).await {
        Event::Errored { error } => assert_wrong_answer(&error, asked, answered),
        other => panic!("expected the watch to end with an error, got {other:?}"),
    }
    assert!(watch.recv().await.is_none(), "the watch has ended");
}

/// A client whose calls wait at most 200 ms for the server.
fn impatient() -> RemoteOptions {
    RemoteOptions {
        call_timeout: Some(std::time::Duration::from_millis(200)),
        ..RemoteOptions::default()
    }
}

/// The error of a call the server did not answer in time: retryable, naming the option.
fn assert_timed_out(error: &Error, asked: &str) {
    match error {
        Error::Backend {
            subject,
            message,
            retryable: true,
            ..
        } => {
            assert_eq!(subject, asked, "{error}");
            assert!(
                message.contains("did not answer within 200ms (RemoteOptions::call_timeout)"),
                "{error}"
            );
        }
        other => panic!("expected a retryable backend error about {asked}, got {other:?}"),
    }
}

/// Fails the test instead of hanging it when the client waits for good.
async fn within_10s<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), call)
        .await
        .expect("the call ended within 10 s")
}

#[tokio::test]
async fn a_get_the_server_never_answers_fails_at_the_call_deadline() {
    let client = client_with(
        Answers {
            silent: true,
            ..Default::default()
        },
        impatient(),
    )
    .await;

    let error = within_10s(client.get(&Blob::kind().pointer("a")))
        .await
        .expect_err("no answer");

    assert_timed_out(&error, "test/Blobs.test.cosi.dev/a");
}

#[tokio::test]
async fn a_list_the_server_stops_sending_fails_at_the_call_deadline() {
    let client = client_with(
        Answers {
            list: vec![blob("a")],
            silent: true,
            ..Default::default()
        },
        impatient(),
    )
    .await;

    let error = within_10s(client.list(&Blob::kind(), &ListOptions::default()))
        .await
        .expect_err("the list never ends");

    assert_timed_out(&error, "test/Blobs.test.cosi.dev/");
}

#[tokio::test]
async fn a_watch_the_server_never_establishes_fails_at_the_call_deadline() {
    // No first message at all: the stream stays open and silent.
    let client = client_with(Answers::default(), impatient()).await;

    let error = within_10s(client.watch_kind(&Blob::kind(), WatchKindOptions::default()))
        .await
        .expect_err("never established");

    assert_timed_out(&error, "test/Blobs.test.cosi.dev/");
}

#[tokio::test]
async fn list_refuses_resources_out_of_id_order() {
    // A list is sorted by id, each id once: b after b (or a after b) is not a list.
    let client = client_of(Answers {
        list: vec![blob("a"), blob("b"), blob("b")],
        ..Default::default()
    })
    .await;

    let error = client
        .list(&Blob::kind(), &ListOptions::default())
        .await
        .expect_err("b twice");

    assert_wrong_answer(
        &error,
        "test/Blobs.test.cosi.dev",
        "test/Blobs.test.cosi.dev/b after test/Blobs.test.cosi.dev/b",
    );
}

#[tokio::test]
async fn an_error_about_another_resource_is_not_taken_for_one_about_the_asked() {
    // The server's "not found" names b, for a Get of a: not a's absence.
    let client = client_of(Answers {
        get_error: Some(to_status(
            &Error::NotFound {
                pointer: Blob::kind().pointer("b"),
            },
            Call::Get,
        )),
        ..Default::default()
    })
    .await;

    let error = client
        .get(&Blob::kind().pointer("a"))
        .await
        .expect_err("an error");

    assert!(!error.is_not_found(), "{error:?}");
    assert_wrong_answer(
        &error,
        "test/Blobs.test.cosi.dev/a",
        "test/Blobs.test.cosi.dev/b: not found",
    );
}

#[test]
fn a_list_is_bounded_by_default() {
    // A list that never ends (each message in time) would otherwise grow memory without limit;
    // `limits.rs` shows the bound cutting a list.
    assert_eq!(RemoteOptions::default().max_list_bytes, Some(256 << 20));
}

#[tokio::test]
async fn a_kind_watch_does_not_resume_after_an_event_without_a_bookmark() {
    // Every event of a kind watch carries a bookmark (DESIGN 4). One without cannot be resumed
    // after: resuming after the bookmark before it would deliver it twice, and one whose watch
    // had none before would start at the head and skip what came between. The watch resyncs.
    let answers = Arc::new(Answers {
        watch: vec![
            encoded::WatchResponse { event: vec![] },
            encoded::WatchResponse {
                event: vec![
                    marker(pb::EventType::Noop, b"0"),
                    event(pb::EventType::Created, &blob("a"), b"1"),
                    encoded::Event {
                        bookmark: None,
                        ..event(pb::EventType::Created, &blob("b"), b"")
                    },
                ],
            },
        ],
        watch_ends: true,
        ..Default::default()
    });
    let client = serve(answers.clone(), RemoteOptions::default()).await;

    let mut watch = client
        .watch_kind(&Blob::kind(), WatchKindOptions::default())
        .await
        .unwrap();

    let ids: Vec<_> = [next(&mut watch).await, next(&mut watch).await]
        .iter()
        .map(|e| match e {
            Event::Created { resource, .. } => resource.metadata().id().to_string(),
            other => panic!("expected a creation, got {other:?}"),
        })
        .collect();
    assert_eq!(ids, ["a", "b"]);
    // The stream ended: the watch reopens with a resync, not after a's bookmark.
    match next(&mut watch).await {
        Event::Resync { .. } => {}
        other => panic!("expected a resync, got {other:?}"),
    }
    let requests = answers.watch_requests.lock().unwrap().clone();
    let reopened = requests[1].options.clone().unwrap();
    assert_eq!(
        (reopened.bootstrap_contents, reopened.start_from_bookmark),
        (true, None)
    );
}
