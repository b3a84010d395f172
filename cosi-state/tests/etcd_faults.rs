//! Faults: etcd restarted under a watch, etcd unreachable, and keys holding bytes that are not
//! valid records.
#![cfg(feature = "etcd")]

mod etcd_common;

use std::time::Duration;

use cosi_core::{
    CreateOptions, DynamicResource, Error, Event, ListOptions, Metadata, Pointer, ResourceSpec,
    SharedResource, State, WatchKindOptions,
};
use cosi_state::etcd::{EtcdOptions, EtcdState};
use etcd_common::{
    connect, counter, create_counter, ev, next_event, next_summary, start_server, state, summary,
    watch_every, Counter,
};

/// A guard far above the request timeout: a call that outlives it hangs.
const HANG_GUARD: Duration = Duration::from_secs(20);

/// Creates, retrying retryable failures (the client reconnects on its first calls after an
/// etcd restart); any other failure or a hang fails the test.
async fn create_retrying(state: &EtcdState, resource: SharedResource) {
    let attempt = async {
        loop {
            match state
                .create(resource.clone(), CreateOptions::default())
                .await
            {
                Ok(_) => return,
                Err(e) if e.is_retryable() => tokio::task::yield_now().await,
                Err(e) => panic!("create failed: {e}"),
            }
        }
    };
    tokio::time::timeout(HANG_GUARD, attempt)
        .await
        .expect("etcd is back");
}

#[tokio::test]
async fn watch_survives_an_etcd_restart_without_losing_or_repeating_changes() {
    let mut server = start_server();
    let options = EtcdOptions::new([server.endpoint()]).with_prefix("/restart/");
    let state = connect(options.clone()).await;
    let mut watch = watch_every(&state).await;
    create_counter(&state, "a", 1).await;
    assert_eq!(next_summary(&mut watch).await, ev("created", "a", 1));

    server.stop();
    server.restart().unwrap();
    // Another client writes first, while this state's watch may still be reconnecting.
    let other = connect(options).await;
    create_retrying(&other, counter("b", 2)).await;
    create_retrying(&state, counter("c", 3)).await;

    assert_eq!(next_summary(&mut watch).await, ev("created", "b", 2));
    assert_eq!(next_summary(&mut watch).await, ev("created", "c", 3));
    // Nothing repeated: the next event is the next change.
    create_retrying(&state, counter("d", 4)).await;
    assert_eq!(next_summary(&mut watch).await, ev("created", "d", 4));
}

fn assert_retryable_backend_error(result: Result<impl std::fmt::Debug, Error>) {
    match result {
        Err(Error::Backend {
            retryable: true, ..
        }) => {}
        other => panic!("expected a retryable backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_etcd_fails_every_call_with_a_retryable_error_in_bounded_time() {
    let mut server = start_server();
    let endpoint = server.endpoint();
    server.stop();
    let options = EtcdOptions::new([endpoint])
        .with_request_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(500));
    let state = connect(options).await;
    let kind = Counter::kind();
    let pointer = kind.pointer("a");
    let calls = async {
        assert_retryable_backend_error(state.get(&pointer).await);
        assert_retryable_backend_error(state.list(&kind, &ListOptions::default()).await);
        assert_retryable_backend_error(
            state
                .create(counter("a", 1), CreateOptions::default())
                .await,
        );
        assert_retryable_backend_error(state.watch_kind(&kind, WatchKindOptions::default()).await);
    };
    tokio::time::timeout(HANG_GUARD, calls)
        .await
        .expect("no call hangs");
}

async fn put_raw(state: &EtcdState, id: &str, bytes: &[u8]) {
    let key = state.key(&Counter::kind().pointer(id));
    state
        .client()
        .kv_client()
        .put(key, bytes, None)
        .await
        .unwrap();
}

#[tokio::test]
async fn invalid_record_fails_its_get_and_list_serves_the_rest() {
    let state = state("invalid").await;
    create_counter(&state, "a", 1).await;
    put_raw(&state, "b", b"\x01{not json").await;
    create_counter(&state, "c", 3).await;

    let err = state.get(&Counter::kind().pointer("b")).await.unwrap_err();
    assert!(!err.is_retryable());
    assert!(
        err.to_string().starts_with(
            "test/Counters.test.cosi.dev/b: backend failure: stored record is not valid"
        ),
        "{err}"
    );
    let listed = state
        .list(&Counter::kind(), &ListOptions::default())
        .await
        .unwrap();
    let ids: Vec<_> = listed
        .iter()
        .map(|r| r.metadata().id().to_string())
        .collect();
    assert_eq!(ids, ["a", "c"]);
    let report = state
        .list_report(&Counter::kind(), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(report.resources.len(), 2);
    assert_eq!(report.invalid.len(), 1);
    assert!(report.invalid[0]
        .to_string()
        .contains("/b: backend failure"));
}

#[tokio::test]
async fn record_of_an_unknown_format_is_reported_not_guessed() {
    let state = state("format").await;
    put_raw(&state, "x", b"\x07{}").await;
    let err = state.get(&Counter::kind().pointer("x")).await.unwrap_err();
    assert!(err.to_string().contains("encoding tag 7"), "{err}");
}

#[tokio::test]
async fn watch_sees_a_resource_overwritten_with_garbage_as_destroyed() {
    let state = state("garbage-watch").await;
    let mut watch = watch_every(&state).await;
    create_counter(&state, "a", 1).await;
    put_raw(&state, "a", b"garbage").await;
    create_counter(&state, "b", 2).await;
    assert_eq!(next_summary(&mut watch).await, ev("created", "a", 1));
    let gone = next_event(&mut watch).await;
    assert!(matches!(gone, Event::Destroyed { .. }), "{gone:?}");
    assert_eq!(summary(&gone), ev("destroyed", "a", 1));
    assert_eq!(next_summary(&mut watch).await, ev("created", "b", 2));
}

#[tokio::test]
async fn a_write_too_large_for_etcd_fails_without_a_retry() {
    // etcd refuses a request over --max-request-bytes (1.5 MiB by default) itself, and one over
    // that plus gRPC's allowance (2 MiB) already in its gRPC server; neither size ever fits.
    let state = state("too-large").await;
    for (size, refusal) in [
        (1_600_000, "etcdserver: request is too large"),
        (2_200_000, "grpc: received message larger than max"),
    ] {
        let note = DynamicResource {
            metadata: Metadata::new(Pointer::new(
                "test",
                "Notes.test.cosi.dev",
                format!("note-{size}"),
            )),
            spec: serde_json::json!("x".repeat(size)),
        };
        let err = state
            .create(std::sync::Arc::new(note), CreateOptions::default())
            .await
            .unwrap_err();
        let Error::Backend {
            subject,
            message,
            retryable,
            ..
        } = &err
        else {
            panic!("expected a backend error, got {err:?}");
        };
        assert_eq!(subject, &format!("test/Notes.test.cosi.dev/note-{size}"));
        assert!(message.contains(refusal), "{size} bytes: {message}");
        assert!(!retryable, "{size} bytes can never be written: {err}");
    }
}

#[tokio::test]
async fn malformed_endpoint_is_an_invalid_argument() {
    let result = EtcdState::connect(EtcdOptions::new(["not a url"]), Default::default()).await;
    match result {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "endpoints"),
        Err(other) => panic!("expected an invalid argument, got {other}"),
        Ok(_) => panic!("a malformed endpoint was accepted"),
    }
}

#[tokio::test]
async fn watchers_resync_when_etcd_comes_back_with_its_data_gone() {
    let mut server = start_server();
    let state = connect(EtcdOptions::new([server.endpoint()]).with_prefix("/reset/")).await;
    let options = WatchKindOptions {
        bootstrap: true,
        ..Default::default()
    };
    let mut watch = state.watch_kind(&Counter::kind(), options).await.unwrap();
    assert!(matches!(
        next_event(&mut watch).await,
        Event::Bootstrapped { .. }
    ));
    for id in ["a", "b"] {
        create_counter(&state, id, 1).await;
        assert_eq!(next_summary(&mut watch).await, ev("created", id, 1));
    }

    server.restart_empty().unwrap();
    create_retrying(&state, counter("c", 2)).await;

    // The watcher is told to drop its view, and rebuilds it from the new contents.
    let mut view = std::collections::BTreeSet::new();
    assert!(matches!(next_event(&mut watch).await, Event::Resync { .. }));
    loop {
        match next_event(&mut watch).await {
            Event::Created { resource, .. } => {
                view.insert(resource.metadata().id().to_string());
            }
            Event::Bootstrapped { .. } => break,
            other => panic!("unexpected {other:?} during the resync"),
        }
    }
    if view.is_empty() {
        // The resync read ran before "c" was written: it arrives live.
        assert_eq!(next_summary(&mut watch).await, ev("created", "c", 2));
        view.insert("c".to_string());
    }
    assert_eq!(view, ["c".to_string()].into());
}
