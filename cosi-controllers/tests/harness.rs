//! Tests of the test harness itself and of how controllers live with store faults and lagging
//! watches: settle semantics, fault injection, compacted catch-ups and resyncs.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use cosi_controllers::testing::{ControllerFailure, Harness};
use cosi_controllers::{
    Backoff, Controller, ControllerState, EngineOptions, Input, Output, Reconciled, Transform,
};
use cosi_core::{Resource, ResourceSpec, Result, StateExt};
use cosi_state::MemoryOptions;

fn plus_one() -> Transform<A, B> {
    Transform::same_id("PlusOne", |a: &A| Some(B { value: a.value + 1 }))
}

fn fast_backoff() -> EngineOptions {
    EngineOptions {
        restart_backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(10)),
        ..EngineOptions::default()
    }
}

#[tokio::test(start_paused = true)]
async fn settle_returns_only_after_the_whole_chain_converged() {
    let h = Harness::new();
    h.register(plus_one()).unwrap();
    h.register(Transform::<B, C>::same_id("BtoC", |b: &B| {
        Some(C { value: b.value + 1 })
    }))
    .unwrap();
    h.start().await;
    for i in 0..100 {
        create(&h.state(), &format!("x{i:03}"), A { value: i }).await;
    }
    h.settle().await;
    let cs = h.list::<C>().await;
    assert_eq!(cs.len(), 100);
    assert!(cs
        .iter()
        .enumerate()
        .all(|(i, c)| c.spec.value == i as i64 + 2));
    assert!(h.engine().is_idle());
}

#[tokio::test(start_paused = true)]
async fn settle_does_not_move_the_clock() {
    let h = Harness::new();
    h.register(plus_one()).unwrap();
    let before = tokio::time::Instant::now();
    h.start().await;
    h.settle().await;
    assert_eq!(tokio::time::Instant::now(), before);
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_restarts_the_controller_which_then_converges() {
    // Given the second write of B will fail
    let h = Harness::with_options(fast_backoff());
    // The test provokes these failures.
    h.expect_errors("PlusOne");
    h.register(plus_one()).unwrap();
    h.start().await;
    h.faults().fail_nth_write(B::TYPE, 2);

    // When three inputs arrive
    for id in ["x", "y", "z"] {
        create(&h.state(), id, A { value: 1 }).await;
    }
    h.settle().await;

    // Then the reconcile failed part-way and is retried after the backoff
    assert_eq!(h.faults().injected(), 1);
    assert_eq!(h.list::<B>().await.len(), 1);
    let status = h.status("PlusOne").await;
    assert_eq!(
        (status.reconciles, status.errors, status.restarts),
        (2, 1, 1)
    );
    assert!(status
        .last_error
        .unwrap()
        .contains("injected fault: write failed"));
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(h.list::<B>().await.len(), 3);
    assert_eq!(h.status("PlusOne").await.reconciles, 3);
}

#[tokio::test(start_paused = true)]
async fn failing_reads_keep_a_controller_restarting_until_cleared() {
    let h = Harness::with_options(fast_backoff());
    // The test provokes these failures.
    h.expect_errors("PlusOne");
    h.register(plus_one()).unwrap();
    h.start().await;
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    h.faults().fail_reads(A::kind());
    // The user writes past the faults; the controller reads through them.
    set(h.faults().inner(), "x", A { value: 5 }).await;
    h.settle().await;
    h.advance(Duration::from_secs(1)).await;
    h.advance(Duration::from_secs(2)).await;
    let status = h.status("PlusOne").await;
    assert_eq!((status.errors, status.restarts), (3, 3));
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);

    h.faults().clear();
    h.advance(Duration::from_secs(4)).await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 6);
}

#[tokio::test(start_paused = true)]
async fn a_queue_controllers_reads_meet_the_faults_of_the_store_it_runs_on() {
    // A queue transform reads its item through the controller state, whose calls to a store
    // that answers at once are done without a future of their own: a wrapped store that fails
    // reads must still be asked.
    let h = Harness::with_options(fast_backoff());
    // The test provokes these failures.
    h.expect_errors("PlusOne");
    h.register_queue(plus_one().into_queue(1)).unwrap();
    h.start().await;
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    h.faults().fail_reads(A::kind());
    set(h.faults().inner(), "x", A { value: 5 }).await;
    h.settle().await;
    let status = h.status("PlusOne").await;
    assert_eq!(status.errors, 1);
    assert!(status
        .last_error
        .unwrap()
        .contains("injected fault: read failed"));
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);

    h.faults().clear();
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 6);
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "settle: controller \"PlusOne\" failed (backend): \
    test/Bs.test.cosi.dev/x: backend failure: injected fault: write failed\n\
    The test did not expect this failure.")]
async fn a_controller_error_the_test_did_not_expect_fails_settle_with_the_error() {
    let h = Harness::new();
    h.register(plus_one()).unwrap();
    h.start().await;
    h.faults().fail_nth_write(B::TYPE, 1);
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
}

/// Reads a kind it did not declare, and goes on as if nothing happened.
struct Snoop;

#[async_trait]
impl Controller for Snoop {
    fn name(&self) -> &str {
        "Snoop"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        Vec::new()
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let _ = state.get(&b("secret")).await;
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "settle: controller \"Snoop\" failed (accessDenied): \
    test/Bs.test.cosi.dev/secret: access denied: controller \"Snoop\" may not read it")]
async fn an_access_violation_the_controller_goes_on_from_fails_settle() {
    let h = Harness::new();
    h.register(Snoop).unwrap();
    h.start().await;
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "controller \"PlusOne\" failed (backend)")]
async fn expected_errors_of_one_controller_do_not_excuse_another() {
    let h = Harness::new();
    h.expect_errors("Snoop");
    h.register(plus_one()).unwrap();
    h.start().await;
    h.faults().fail_nth_write(B::TYPE, 1);
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
}

#[tokio::test(start_paused = true)]
async fn with_errors_allowed_any_controller_may_fail_and_each_failure_is_listed() {
    let h = Harness::with_options(fast_backoff());
    h.allow_errors();
    h.register(plus_one()).unwrap();
    h.register(Snoop).unwrap();
    h.start().await;
    h.faults().fail_nth_write(B::TYPE, 1);
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(
        h.failures(),
        [
            ControllerFailure {
                controller: "Snoop".into(),
                kind: "accessDenied".into(),
                message: "test/Bs.test.cosi.dev/secret: access denied: controller \"Snoop\" \
                          may not read it: not a declared input or output"
                    .into(),
            },
            ControllerFailure {
                controller: "PlusOne".into(),
                kind: "backend".into(),
                message: "test/Bs.test.cosi.dev/x: backend failure: injected fault: write failed"
                    .into(),
            },
            ControllerFailure {
                controller: "Snoop".into(),
                kind: "accessDenied".into(),
                message: "test/Bs.test.cosi.dev/secret: access denied: controller \"Snoop\" \
                          may not read it: not a declared input or output"
                    .into(),
            },
        ]
    );
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
}

#[tokio::test]
#[should_panic(
    expected = "advance: the tokio clock is not paused (time is not frozen). Run the \
    test on a paused clock: `#[tokio::test(start_paused = true)]`"
)]
async fn advance_on_a_clock_that_is_not_paused_says_to_run_on_a_paused_one() {
    let h = Harness::new();
    h.advance(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_lagging_watch_catches_up_and_controllers_converge() {
    // Given a history window of 2 events: the shared watch will fall far behind
    let h = Harness::with_memory(
        EngineOptions::default(),
        MemoryOptions {
            history: 2,
            max_destroy_markers: 4,
            ..MemoryOptions::default()
        },
    );
    h.register(plus_one()).unwrap();
    h.start().await;

    // When many changes land without the engine running in between
    let state = h.state();
    for i in 0..50 {
        create(&state, &format!("x{i:02}"), A { value: i }).await;
    }
    for i in 0..50 {
        set(&state, &format!("x{i:02}"), A { value: i * 10 }).await;
    }
    for i in 0..10 {
        state
            .destroy(&a(&format!("x{i:02}")), Default::default())
            .await
            .unwrap();
    }
    h.settle().await;

    // Then the controller converged all the same
    let bs = h.list::<B>().await;
    assert_eq!(bs.len(), 40);
    assert!(bs
        .iter()
        .all(|b| b.spec.value == b.metadata.id()[1..].parse::<i64>().unwrap() * 10 + 1));
    assert_eq!(h.status("PlusOne").await.errors, 0);
}

/// Counts reconciles; reads nothing.
struct Counter {
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Counter {
    fn name(&self) -> &str {
        "Counter"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::destroy_ready_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<Sum>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) as i64 + 1;
        state
            .modify_output(Resource::new("runs", Sum::default()), |r| {
                r.spec.value = n;
                Ok(())
            })
            .await?;
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_destroy_ready_input_wakes_only_when_ready_to_destroy() {
    let h = Harness::new();
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Counter { runs: runs.clone() }).unwrap();
    h.start().await;
    let state = h.state();
    create(&state, "x", A::default()).await;
    state.add_finalizer(&a("x"), &["hold"]).await.unwrap();
    set(&state, "x", A { value: 3 }).await;
    state.teardown(&a("x"), None).await.unwrap();
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    state.remove_finalizer(&a("x"), &["hold"]).await.unwrap();
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    state.destroy(&a("x"), Default::default()).await.unwrap();
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(h.expect::<Sum>("runs").await.spec.value, 3);
}

#[tokio::test(start_paused = true)]
async fn a_controller_whose_inputs_cannot_be_watched_retries_until_they_can() {
    // Given the input kind cannot be read (so not watched either)
    let h = Harness::with_options(fast_backoff());
    // The test provokes these failures.
    h.expect_errors("PlusOne");
    h.register(plus_one()).unwrap();
    create(h.faults().inner(), "x", A { value: 1 }).await;
    h.faults().fail_reads(A::kind());
    h.start().await;
    h.advance(Duration::from_secs(1)).await;
    let status = h.status("PlusOne").await;
    assert_eq!(
        (status.reconciles, status.errors, status.restarts),
        (0, 2, 2)
    );
    assert!(status
        .last_error
        .unwrap()
        .contains("injected fault: read failed"));
    h.expect_absent::<B>("x").await;

    // When the fault clears, the next retry subscribes and reconciles
    h.faults().clear();
    h.advance(Duration::from_secs(2)).await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
    set(&h.state(), "x", A { value: 7 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 8);
}

#[tokio::test(start_paused = true)]
async fn settle_before_start_and_after_shutdown_returns_at_once() {
    let h = Harness::new();
    h.register(plus_one()).unwrap();
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    h.expect_absent::<B>("x").await;
    h.start().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
    h.shutdown().await;
    set(&h.state(), "x", A { value: 5 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
}
