//! A level-triggered controller that asks for them is told which input resources changed since
//! its previous reconcile ([`ControllerState::input_changes`]) — or that the runtime cannot say,
//! and it must read everything.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use cosi_controllers::testing::Harness;
use cosi_controllers::{
    Backoff, Controller, ControllerState, EngineOptions, Input, Output, Reconciled, Transform,
    Waker,
};
use cosi_core::{Error, ResourceSpec, Result, StateExt};

/// What one reconcile was told: `None` (read everything) or the changed ids with their value
/// and whether they were destroyed, sorted.
type Seen = Option<Vec<(String, i64, bool)>>;

/// Records what each reconcile was told; fails the reconciles the test asks it to.
struct Recorder {
    track: bool,
    seen: Arc<Mutex<Vec<Seen>>>,
    fail_next: Arc<Mutex<bool>>,
    waker: Arc<Mutex<Option<Waker>>>,
}

#[async_trait]
impl Controller for Recorder {
    fn name(&self) -> &str {
        "Recorder"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<B>()]
    }
    fn track_input_changes(&self) -> bool {
        self.track
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        *self.waker.lock().unwrap() = Some(state.waker());
        let seen = state.input_changes().map(|changes| {
            let mut seen: Vec<_> = changes
                .iter()
                .map(|(pointer, change)| {
                    let value = spec_of::<A>(&**change.resource()).value;
                    (pointer.id().to_string(), value, change.is_destroyed())
                })
                .collect();
            seen.sort();
            seen
        });
        self.seen.lock().unwrap().push(seen);
        if std::mem::take(&mut *self.fail_next.lock().unwrap()) {
            return Err(Error::invalid("Recorder", "test", "failing on purpose"));
        }
        Ok(Reconciled::Done)
    }
}

fn spec_of<S: ResourceSpec>(resource: &dyn cosi_core::AnyResource) -> S {
    cosi_controllers::testing::spec_of(resource)
}

struct Setup {
    h: Harness,
    seen: Arc<Mutex<Vec<Seen>>>,
    fail_next: Arc<Mutex<bool>>,
    waker: Arc<Mutex<Option<Waker>>>,
}

async fn started(track: bool) -> Setup {
    let h = Harness::with_options(EngineOptions {
        restart_backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(10)),
        ..EngineOptions::default()
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fail_next = Arc::new(Mutex::new(false));
    let waker = Arc::new(Mutex::new(None));
    h.register(Recorder {
        track,
        seen: seen.clone(),
        fail_next: fail_next.clone(),
        waker: waker.clone(),
    })
    .unwrap();
    h.start().await;
    Setup {
        h,
        seen,
        fail_next,
        waker,
    }
}

fn taken(seen: &Mutex<Vec<Seen>>) -> Vec<Seen> {
    std::mem::take(&mut *seen.lock().unwrap())
}

fn changes(list: &[(&str, i64, bool)]) -> Seen {
    Some(
        list.iter()
            .map(|&(id, v, d)| (id.to_string(), v, d))
            .collect(),
    )
}

#[tokio::test(start_paused = true)]
async fn the_first_reconcile_is_told_to_read_everything() {
    let s = started(true).await;
    assert_eq!(taken(&s.seen), [None]);
}

#[tokio::test(start_paused = true)]
async fn later_reconciles_are_told_the_latest_state_of_each_changed_input() {
    // Given a started controller that asks for its changes,
    let s = started(true).await;
    taken(&s.seen);
    let state = s.h.state();

    // when x is created and changed twice, y created, before it runs,
    create(&state, "x", A { value: 1 }).await;
    set(&state, "x", A { value: 2 }).await;
    create(&state, "y", A { value: 7 }).await;
    set(&state, "x", A { value: 3 }).await;
    s.h.settle().await;
    // and then y destroyed,
    state.teardown_and_destroy(&a("y"), None).await.unwrap();
    s.h.settle().await;

    // then one reconcile sees x at its last value and y, the next sees y's destruction.
    assert_eq!(
        taken(&s.seen),
        [
            changes(&[("x", 3, false), ("y", 7, false)]),
            changes(&[("y", 7, true)])
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn after_a_failed_reconcile_the_next_is_told_to_read_everything() {
    let s = started(true).await;
    taken(&s.seen);
    *s.fail_next.lock().unwrap() = true;
    create(&s.h.state(), "x", A { value: 1 }).await;
    s.h.settle().await;
    s.h.advance(Duration::from_secs(1)).await;
    assert_eq!(taken(&s.seen), [changes(&[("x", 1, false)]), None]);
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_from_outside_says_nothing_about_what_changed() {
    let s = started(true).await;
    taken(&s.seen);
    create(&s.h.state(), "x", A { value: 1 }).await;
    let waker = s.waker.lock().unwrap().clone().unwrap();
    waker.wake();
    s.h.settle().await;
    assert_eq!(taken(&s.seen), [None]);
}

#[tokio::test(start_paused = true)]
async fn more_changed_inputs_than_the_log_keeps_make_the_next_reconcile_read_everything() {
    let s = started(true).await;
    taken(&s.seen);
    let state = s.h.state();
    // The log keeps 4,096 changed resources; one more and it cannot say what changed. The
    // controller cannot run in between: nothing here yields to the scheduler.
    for i in 0..=4096 {
        create(&state, &format!("x{i:05}"), A { value: 1 }).await;
    }
    s.h.settle().await;
    assert_eq!(taken(&s.seen), [None]);
}

#[tokio::test(start_paused = true)]
async fn a_controller_that_does_not_ask_is_never_told() {
    let s = started(false).await;
    create(&s.h.state(), "x", A { value: 1 }).await;
    s.h.settle().await;
    assert_eq!(taken(&s.seen), [None, None]);
}

#[tokio::test(start_paused = true)]
async fn a_transform_converges_a_change_from_the_log_without_reading_every_input() {
    // Given a transform that has converged on x,
    let h = Harness::new();
    h.register(Transform::<A, B>::same_id("PlusOne", |a: &A| {
        Some(B { value: a.value + 1 })
    }))
    .unwrap();
    h.start().await;
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;

    // when reading A fails from now on and x changes (written past the faults),
    h.faults().fail_reads(A::kind());
    set(h.faults().inner(), "x", A { value: 5 }).await;
    h.settle().await;

    // then the transform converges from the changed input alone, without an error.
    assert_eq!(h.expect::<B>("x").await.spec.value, 6);
    assert_eq!(h.status("PlusOne").await.errors, 0);
}

#[tokio::test(start_paused = true)]
async fn a_transform_tears_down_the_output_of_a_destroyed_input_through_a_full_pass() {
    // Given a transform that has converged on x and y,
    let h = Harness::new();
    h.register(Transform::<A, B>::same_id("PlusOne", |a: &A| {
        Some(B { value: a.value + 1 })
    }))
    .unwrap();
    h.start().await;
    for id in ["x", "y"] {
        create(&h.state(), id, A { value: 1 }).await;
    }
    h.settle().await;

    // when x is destroyed and y changes in the same burst,
    h.state()
        .destroy(&a("x"), Default::default())
        .await
        .unwrap();
    set(&h.state(), "y", A { value: 4 }).await;
    h.settle().await;

    // then x's output is gone and y's is up to date.
    h.expect_absent::<B>("x").await;
    assert_eq!(h.expect::<B>("y").await.spec.value, 5);
}

#[tokio::test(start_paused = true)]
async fn an_input_created_again_while_its_old_output_waits_for_a_finalizer_gets_a_new_one_after() {
    // Given a transform that has converged on x, and someone else's finalizer on x's output,
    let h = Harness::new();
    h.register(Transform::<A, B>::same_id("PlusOne", |a: &A| {
        Some(B { value: a.value + 1 })
    }))
    .unwrap();
    h.start().await;
    let state = h.state();
    create(&state, "x", A { value: 1 }).await;
    h.settle().await;
    state.add_finalizer(&b("x"), &["foreign"]).await.unwrap();

    // when x is destroyed (its output tears down, held by the finalizer) and created again,
    state.destroy(&a("x"), Default::default()).await.unwrap();
    h.settle().await;
    create(&state, "x", A { value: 2 }).await;
    h.settle().await;

    // then the old output waits, without an error,
    let old = h.expect::<B>("x").await;
    assert_eq!(old.metadata.phase(), cosi_core::Phase::TearingDown);
    assert_eq!(h.status("PlusOne").await.errors, 0);

    // and once the finalizer is gone, the new input has its own output.
    state.remove_finalizer(&b("x"), &["foreign"]).await.unwrap();
    h.settle().await;
    let new = h.expect::<B>("x").await;
    assert_eq!(
        (new.metadata.phase(), new.spec.value),
        (cosi_core::Phase::Running, 3)
    );
}
