//! A [`MachineClient`] bounds every call by its deadline: a node that accepts a call and never
//! answers costs the caller the deadline (default 30 s), then a retryable error naming the
//! setting; a stream is bounded while it opens, and followed for as long as it goes on once
//! open. The node is a hand-written machine server, late or silent on every call, reached over
//! in-memory pipes so that the tests run on tokio's paused clock and measure time exactly.

mod support;

use std::future::Future;
use std::time::Duration;

use cosi_api::client::{MachineClient, DEFAULT_CALL_TIMEOUT};
use cosi_api::machine::{ApplyRequest, EventTail, LogRequest, ServiceAction};
use cosi_core::Error;
use futures::StreamExt;
use tokio::time::Instant;

use support::hostile_machine::{in_memory, HostileMachine, FIRST_LINE, VERSION_TAG};

/// A client of a node that never answers a call, nor opens a stream.
fn silent_node() -> MachineClient {
    MachineClient::new(in_memory(HostileMachine {
        delay: None,
        streams_open_at_once: false,
    }))
}

/// How long `call` took, and its outcome; on the paused clock a guard of a day costs nothing,
/// and fails a call that would wait for good instead of hanging the test.
async fn timed<T>(call: impl Future<Output = T>) -> (Duration, T) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(86_400), call)
        .await
        .expect("the call ended within a day");
    (started.elapsed(), outcome)
}

/// The error of a call the node did not answer within `limit`: retryable, about the call,
/// naming the limit and where it is set.
fn assert_timed_out<T>(outcome: cosi_core::Result<T>, call: &str, limit: &str) {
    let Err(error) = outcome else {
        panic!("{call}: expected the deadline's error, got an answer");
    };
    match &error {
        Error::Backend {
            subject,
            message,
            retryable: true,
            ..
        } => {
            assert_eq!(subject, &format!("machine/{call}/"), "{error}");
            assert_eq!(
                message,
                &format!(
                    "DeadlineExceeded: the server did not answer within {limit} \
                     (MachineClient::with_call_timeout)"
                ),
                "{call}"
            );
        }
        other => panic!("{call}: expected a retryable backend error, got {other:?}"),
    }
}

fn follow() -> LogRequest {
    LogRequest {
        service: "kubelet".into(),
        tail: None,
        follow: true,
    }
}

#[tokio::test(start_paused = true)]
async fn every_machine_call_the_node_never_answers_fails_at_the_default_deadline_of_30_s() {
    let machine = silent_node();
    assert_eq!(DEFAULT_CALL_TIMEOUT, Duration::from_secs(30));
    let thirty = Duration::from_secs(30);

    let (took, outcome) = timed(machine.version()).await;
    assert_eq!(took, thirty);
    assert_timed_out(outcome, "Version", "30s");

    let (took, outcome) = timed(machine.services()).await;
    assert_eq!(took, thirty);
    assert_timed_out(outcome, "ServiceList", "30s");

    for (action, call) in [
        (ServiceAction::Start, "ServiceStart"),
        (ServiceAction::Stop, "ServiceStop"),
        (ServiceAction::Restart, "ServiceRestart"),
    ] {
        let (took, outcome) = timed(machine.service_action("kubelet", action)).await;
        assert_eq!(took, thirty, "{call}");
        assert_timed_out(outcome, call, "30s");
    }

    let apply = ApplyRequest {
        data: b"version: v1alpha1\n".to_vec(),
        ..ApplyRequest::default()
    };
    let (took, outcome) = timed(machine.apply_configuration(apply)).await;
    assert_eq!(took, thirty);
    assert_timed_out(outcome, "ApplyConfiguration", "30s");

    let (took, outcome) = timed(machine.logs(follow())).await;
    assert_eq!(took, thirty);
    assert_timed_out(outcome, "Logs", "30s");

    let (took, outcome) = timed(machine.events(EventTail::All)).await;
    assert_eq!(took, thirty);
    assert_timed_out(outcome, "Events", "30s");
}

#[tokio::test(start_paused = true)]
async fn a_configured_machine_deadline_replaces_the_default() {
    let machine = silent_node().with_call_timeout(Some(Duration::from_millis(200)));

    let (took, outcome) = timed(machine.version()).await;

    assert_eq!(took, Duration::from_millis(200));
    assert_timed_out(outcome, "Version", "200ms");
}

#[tokio::test(start_paused = true)]
async fn a_machine_client_without_a_deadline_waits_for_a_late_answer() {
    let machine = MachineClient::new(in_memory(HostileMachine {
        delay: Some(Duration::from_secs(3600)),
        streams_open_at_once: false,
    }))
    .with_call_timeout(None);

    let (took, outcome) = timed(machine.version()).await;

    assert_eq!(took, Duration::from_secs(3600));
    assert_eq!(outcome.unwrap().tag, VERSION_TAG);
}

#[tokio::test(start_paused = true)]
async fn a_machine_stream_that_opened_in_time_is_followed_past_the_deadline() {
    // Streams open at once; their first message comes a minute later, twice the deadline.
    let machine = MachineClient::new(in_memory(HostileMachine {
        delay: Some(Duration::from_secs(60)),
        streams_open_at_once: true,
    }));

    let (opened_in, logs) = timed(machine.logs(follow())).await;
    let (first_in, first) = timed(logs.unwrap().boxed().next()).await;
    assert_eq!(opened_in, Duration::ZERO);
    assert_eq!(first_in, Duration::from_secs(60));
    assert_eq!(first.unwrap().unwrap(), FIRST_LINE);

    let (opened_in, events) = timed(machine.events(EventTail::None)).await;
    let (first_in, first) = timed(events.unwrap().boxed().next()).await;
    assert_eq!(opened_in, Duration::ZERO);
    assert_eq!(first_in, Duration::from_secs(60));
    assert_eq!(first.unwrap().unwrap().id, "1");
}
