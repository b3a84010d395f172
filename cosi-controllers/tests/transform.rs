//! Conformance tests of the generic transforms, level-triggered and per-item.

mod common;

use std::sync::Arc;

use common::*;
use cosi_controllers::testing::Harness;
use cosi_controllers::{QueueController, Transform};
use cosi_core::{Call, CreateOptions, Phase, Resource, ResourceSpec, State, StateExt};

fn a_to_b() -> Transform<A, B> {
    Transform::same_id("AtoB", |a: &A| Some(B { value: a.value + 1 })).with_finalizers()
}

fn b_to_c() -> Transform<B, C> {
    Transform::same_id("BtoC", |b: &B| Some(C { value: b.value + 1 })).with_finalizers()
}

/// Registers the A → B → C chain, level-triggered or per item.
fn chain(queued: bool) -> Harness {
    let h = Harness::new();
    if queued {
        h.register_queue(a_to_b().into_queue(4)).unwrap();
        h.register_queue(b_to_c().into_queue(4)).unwrap();
    } else {
        h.register(a_to_b()).unwrap();
        h.register(b_to_c()).unwrap();
    }
    h
}

/// Registers an A → B transform, per item with `workers` workers when `queued`.
fn register_a_to_b(h: &Harness, transform: Transform<A, B>, queued: bool, workers: usize) {
    if queued {
        h.register_queue(transform.into_queue(workers)).unwrap();
    } else {
        h.register(transform).unwrap();
    }
}

/// A started [`chain`] that has converged on one input, A/x with value 1.
async fn settled_chain_with_x(queued: bool) -> (Harness, Arc<dyn State>) {
    let h = chain(queued);
    h.start().await;
    let state = h.state();
    create(&state, "x", A { value: 1 }).await;
    h.settle().await;
    (h, state)
}

async fn chained_transforms_propagate_creates_and_updates(queued: bool) {
    let h = chain(queued);
    h.start().await;
    let state = h.state();
    for i in 0..10 {
        create(&state, &format!("x{i}"), A { value: i }).await;
    }
    h.settle().await;
    for i in 0..10 {
        let c = h.expect::<C>(&format!("x{i}")).await;
        assert_eq!(c.spec.value, i + 2);
        assert_eq!(c.metadata.owner(), Some("BtoC"));
    }
    set(&state, "x3", A { value: 100 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x3").await.spec.value, 101);
    assert_eq!(h.expect::<C>("x3").await.spec.value, 102);
}

#[tokio::test(start_paused = true)]
async fn chained_transforms_propagate_creates_and_updates_level() {
    chained_transforms_propagate_creates_and_updates(false).await;
}

#[tokio::test(start_paused = true)]
async fn chained_transforms_propagate_creates_and_updates_queued() {
    chained_transforms_propagate_creates_and_updates(true).await;
}

async fn an_unchanged_output_is_not_written(queued: bool) {
    let (h, state) = settled_chain_with_x(queued).await;
    let b_version = h.expect::<B>("x").await.metadata.version();
    let c_version = h.expect::<C>("x").await.metadata.version();
    // A new version of A with the same spec (a label change).
    state
        .update_with_conflicts::<A, _>(&a("x"), Default::default(), |r| {
            r.metadata
                .labels_mut()
                .insert("touched".into(), "yes".into());
            Ok(())
        })
        .await
        .unwrap();
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.metadata.version(), b_version);
    assert_eq!(h.expect::<C>("x").await.metadata.version(), c_version);
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_output_is_not_written_level() {
    an_unchanged_output_is_not_written(false).await;
}

#[tokio::test(start_paused = true)]
async fn an_unchanged_output_is_not_written_queued() {
    an_unchanged_output_is_not_written(true).await;
}

async fn strong_inputs_are_released_only_after_their_outputs_are_destroyed(queued: bool) {
    // Given a chain holding finalizers: A/x ← AtoB, B/x ← BtoC
    let (h, state) = settled_chain_with_x(queued).await;
    let stored_a = h.expect::<A>("x").await;
    let stored_b = h.expect::<B>("x").await;
    assert_eq!(
        stored_a.metadata.finalizers().iter().collect::<Vec<_>>(),
        vec!["AtoB"]
    );
    assert_eq!(
        stored_b.metadata.finalizers().iter().collect::<Vec<_>>(),
        vec!["BtoC"]
    );

    // The input cannot be destroyed while held
    let err = state
        .destroy(&a("x"), Default::default())
        .await
        .unwrap_err();
    assert!(matches!(err, cosi_core::Error::PendingFinalizers { .. }));

    // When the user tears A down
    assert!(!state.teardown(&a("x"), None).await.unwrap());
    h.settle().await;

    // Then C goes, then B, then A is released
    h.expect_absent::<C>("x").await;
    h.expect_absent::<B>("x").await;
    let released = h.expect::<A>("x").await;
    assert_eq!(released.metadata.phase(), Phase::TearingDown);
    assert!(released.metadata.finalizers().is_empty());
    state.destroy(&a("x"), Default::default()).await.unwrap();
    h.settle().await;
    h.expect_absent::<A>("x").await;
    assert_eq!(h.status("AtoB").await.errors, 0);
    assert_eq!(h.status("BtoC").await.errors, 0);
}

#[tokio::test(start_paused = true)]
async fn strong_inputs_are_released_only_after_their_outputs_are_destroyed_level() {
    strong_inputs_are_released_only_after_their_outputs_are_destroyed(false).await;
}

#[tokio::test(start_paused = true)]
async fn strong_inputs_are_released_only_after_their_outputs_are_destroyed_queued() {
    strong_inputs_are_released_only_after_their_outputs_are_destroyed(true).await;
}

async fn an_output_waits_for_foreign_finalizers_before_it_is_destroyed(queued: bool) {
    let h = Harness::new();
    register_a_to_b(&h, a_to_b(), queued, 2);
    h.start().await;
    let state = h.state();
    create(&state, "x", A { value: 1 }).await;
    h.settle().await;
    // Someone else holds B/x.
    state.add_finalizer(&b("x"), &["consumer"]).await.unwrap();
    state.teardown(&a("x"), None).await.unwrap();
    h.settle().await;
    let held = h.expect::<B>("x").await;
    assert_eq!(held.metadata.phase(), Phase::TearingDown);
    assert_eq!(h.expect::<A>("x").await.metadata.finalizers().len(), 1);

    // When the consumer lets go, the destroy-ready input wakes the transform
    state
        .remove_finalizer(&b("x"), &["consumer"])
        .await
        .unwrap();
    h.settle().await;
    h.expect_absent::<B>("x").await;
    assert!(h.expect::<A>("x").await.metadata.finalizers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_output_waits_for_foreign_finalizers_before_it_is_destroyed_level() {
    an_output_waits_for_foreign_finalizers_before_it_is_destroyed(false).await;
}

#[tokio::test(start_paused = true)]
async fn an_output_waits_for_foreign_finalizers_before_it_is_destroyed_queued() {
    an_output_waits_for_foreign_finalizers_before_it_is_destroyed(true).await;
}

async fn an_output_whose_input_vanished_is_destroyed(queued: bool) {
    let h = Harness::new();
    let t = Transform::<A, B>::same_id("Weak", |a: &A| Some(B { value: a.value }));
    register_a_to_b(&h, t, queued, 1);
    h.start().await;
    let state = h.state();
    create(&state, "x", A { value: 1 }).await;
    create(&state, "y", A { value: 2 }).await;
    h.settle().await;
    state.destroy(&a("x"), Default::default()).await.unwrap();
    h.settle().await;
    h.expect_absent::<B>("x").await;
    assert_eq!(h.expect::<B>("y").await.spec.value, 2);
}

#[tokio::test(start_paused = true)]
async fn an_output_whose_input_vanished_is_destroyed_level() {
    an_output_whose_input_vanished_is_destroyed(false).await;
}

#[tokio::test(start_paused = true)]
async fn an_output_whose_input_vanished_is_destroyed_queued() {
    an_output_whose_input_vanished_is_destroyed(true).await;
}

/// Ten inputs are destroyed while the kind watch lags past the store's window and its 4 destroy
/// markers: the watch resyncs, and no destroyed event tells of them.
async fn outputs_of_inputs_destroyed_inside_a_resync_are_destroyed(queued: bool) {
    let h = resyncing_harness();
    let t = Transform::<A, B>::same_id("Weak", |a: &A| Some(B { value: a.value }));
    register_a_to_b(&h, t, queued, 1);
    h.start().await;
    destroy_ten_inputs_inside_a_resync(&h, async || h.list::<B>().await.len()).await;
    assert!(h.list::<B>().await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn outputs_of_inputs_destroyed_inside_a_resync_are_destroyed_level() {
    outputs_of_inputs_destroyed_inside_a_resync_are_destroyed(false).await;
}

#[tokio::test(start_paused = true)]
async fn outputs_of_inputs_destroyed_inside_a_resync_are_destroyed_queued() {
    outputs_of_inputs_destroyed_inside_a_resync_are_destroyed(true).await;
}

async fn resources_of_the_output_kind_that_others_own_are_left_alone(queued: bool) {
    // Given a user's B/u (no owner) and a controller's B/w, neither with an input.
    let h = Harness::new();
    let t = Transform::<A, B>::same_id("Weak", |a: &A| Some(B { value: a.value }));
    register_a_to_b(&h, t, queued, 1);
    let state = h.state();
    create(&state, "u", B { value: 7 }).await;
    let theirs = Resource::new("w", B { value: 8 }).into_shared();
    state
        .create(
            theirs,
            CreateOptions {
                owner: Some("SomeoneElse".into()),
            },
        )
        .await
        .unwrap();
    // When the transform converges its own inputs (full passes and incremental ones).
    h.start().await;
    create(&state, "x", A { value: 1 }).await;
    h.settle().await;
    set(&state, "x", A { value: 2 }).await;
    h.settle().await;
    state.destroy(&a("x"), Default::default()).await.unwrap();
    h.settle().await;
    // Then only its own output came and went; the others' are as they were.
    h.expect_absent::<B>("x").await;
    let u = h.expect::<B>("u").await;
    assert_eq!((u.spec.value, u.metadata.owner()), (7, None));
    let w = h.expect::<B>("w").await;
    assert_eq!((w.spec.value, w.metadata.owner()), (8, Some("SomeoneElse")));
}

/// A full pass (more inputs changed than the transform converges one by one) finds an output
/// that no longer holds what the transform wrote, although its input did not change, and
/// writes it again.
#[tokio::test(start_paused = true)]
async fn a_full_pass_writes_back_an_output_changed_behind_the_transforms_back() {
    let h = Harness::new();
    let t = Transform::<A, B>::same_id("Weak", |a: &A| Some(B { value: a.value }));
    register_a_to_b(&h, t, false, 1);
    h.start().await;
    let state = h.state();
    for i in 0..6 {
        create(&state, &format!("x{i}"), A { value: i }).await;
    }
    h.settle().await;
    // Someone writes B/x0 as the transform's owner; its input stays as it was.
    state
        .update_with_conflicts::<B, _>(
            &b("x0"),
            cosi_core::UpdateOptions::owned_by(Some("Weak")),
            |r| {
                r.spec.value = 999;
                Ok(())
            },
        )
        .await
        .unwrap();
    for i in 1..6 {
        set(&state, &format!("x{i}"), A { value: 10 + i }).await;
    }
    h.settle().await;
    assert_eq!(h.expect::<B>("x0").await.spec.value, 0);
    for i in 1..6 {
        assert_eq!(h.expect::<B>(&format!("x{i}")).await.spec.value, 10 + i);
    }
}

#[tokio::test(start_paused = true)]
async fn resources_of_the_output_kind_that_others_own_are_left_alone_level() {
    resources_of_the_output_kind_that_others_own_are_left_alone(false).await;
}

#[tokio::test(start_paused = true)]
async fn resources_of_the_output_kind_that_others_own_are_left_alone_queued() {
    resources_of_the_output_kind_that_others_own_are_left_alone(true).await;
}

async fn an_input_the_map_skips_has_no_output(queued: bool) {
    let h = Harness::new();
    let t = Transform::<A, B>::same_id("EvenOnly", |a: &A| {
        (a.value % 2 == 0).then_some(B { value: a.value })
    })
    .with_finalizers();
    register_a_to_b(&h, t, queued, 1);
    h.start().await;
    let state = h.state();
    create(&state, "x", A { value: 2 }).await;
    create(&state, "y", A { value: 3 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
    h.expect_absent::<B>("y").await;
    assert!(h.expect::<A>("y").await.metadata.finalizers().is_empty());
    // x stops mapping: its output goes and the finalizer is released.
    set(&state, "x", A { value: 5 }).await;
    h.settle().await;
    h.expect_absent::<B>("x").await;
    assert!(h.expect::<A>("x").await.metadata.finalizers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_input_the_map_skips_has_no_output_level() {
    an_input_the_map_skips_has_no_output(false).await;
}

#[tokio::test(start_paused = true)]
async fn an_input_the_map_skips_has_no_output_queued() {
    an_input_the_map_skips_has_no_output(true).await;
}

#[tokio::test(start_paused = true)]
async fn a_transform_maps_to_other_ids_and_namespaces() {
    let h = Harness::new();
    h.register(
        Transform::<A, B>::new("ByValue", |a| {
            Some((
                Arc::from(format!("v{}", a.spec.value)),
                B {
                    value: a.spec.value,
                },
            ))
        })
        .output_namespace("other"),
    )
    .unwrap();
    h.start().await;
    let state = h.state();
    create(&state, "x", A { value: 7 }).await;
    h.settle().await;
    let out = h
        .get_at::<B>(&B::kind_in("other").pointer("v7"))
        .await
        .expect("mapped output");
    assert_eq!(out.spec.value, 7);
    set(&state, "x", A { value: 8 }).await;
    h.settle().await;
    assert!(h
        .get_at::<B>(&B::kind_in("other").pointer("v7"))
        .await
        .is_none());
    assert!(h
        .get_at::<B>(&B::kind_in("other").pointer("v8"))
        .await
        .is_some());
}

#[tokio::test(start_paused = true)]
async fn a_queue_transform_rejects_a_mapping_that_changes_the_id() {
    let h = Harness::new();
    // The test provokes these failures.
    h.expect_errors("Renamer");
    let t = Transform::<A, B>::new("Renamer", |a| {
        Some((
            Arc::from(format!("{}-renamed", a.metadata.id())),
            B::default(),
        ))
    })
    .into_queue(1);
    assert_eq!(t.name(), "Renamer");
    h.register_queue(t).unwrap();
    h.start().await;
    create(&h.state(), "x", A::default()).await;
    h.settle().await;
    h.expect_absent::<B>("x-renamed").await;
    let status = h.status("Renamer").await;
    assert_eq!(status.errors, 1);
    assert!(status
        .last_error
        .unwrap()
        .contains("a queue transform must keep the input id"));
    assert_eq!(B::kind().namespace(), "test");
}

/// The chain on a real multi-threaded runtime (no harness, no paused clock): controllers,
/// feeds and the writer run in parallel; completion is awaited through a watch, bounded by a
/// timeout so a lost wake-up fails instead of hanging.
async fn chain_converges_on_a_multi_threaded_runtime(queued: bool) {
    use cosi_controllers::Engine;
    use cosi_core::{Event, WatchKindOptions};
    use cosi_state::{MemoryOptions, MemoryState};
    use std::time::Duration;

    let state: Arc<dyn State> = Arc::new(MemoryState::new(MemoryOptions {
        history: 64,
        ..MemoryOptions::default()
    }));
    let engine = Engine::new(state.clone());
    if queued {
        engine.register_queue(a_to_b().into_queue(3)).unwrap();
        engine.register_queue(b_to_c().into_queue(3)).unwrap();
    } else {
        engine.register(a_to_b()).unwrap();
        engine.register(b_to_c()).unwrap();
    }
    engine.start();
    let mut watch = state
        .watch_kind(&C::kind(), WatchKindOptions::default())
        .await
        .unwrap();
    const N: i64 = 500;
    for i in 0..N {
        create(&state, &format!("x{i:03}"), A { value: i }).await;
    }
    for i in 0..N {
        set(&state, &format!("x{i:03}"), A { value: i + 1000 }).await;
    }
    let converged = async {
        let mut done = std::collections::HashSet::new();
        while done.len() < N as usize {
            let Some(event) = watch.recv().await else {
                panic!("watch ended")
            };
            if let Event::Created { resource, .. } | Event::Updated { resource, .. } = event {
                let c = cosi_controllers::testing::spec_of::<C>(&*resource);
                let i: i64 = resource.metadata().id()[1..].parse().unwrap();
                if c.value == i + 1002 {
                    done.insert(i);
                }
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(20), converged)
        .await
        .is_err()
    {
        let bs = state.list(&B::kind(), &Default::default()).await.unwrap();
        let cs = state.list(&C::kind(), &Default::default()).await.unwrap();
        let as_ = state.list(&A::kind(), &Default::default()).await.unwrap();
        let mut bad = Vec::new();
        for ((a, b), c) in as_.iter().zip(&bs).zip(&cs) {
            let (a, b, c) = (
                cosi_controllers::testing::spec_of::<A>(&**a),
                cosi_controllers::testing::spec_of::<B>(&**b),
                cosi_controllers::testing::spec_of::<C>(&**c),
            );
            if b.value != a.value + 1 || c.value != a.value + 2 {
                bad.push((a.value, b.value, c.value));
            }
        }
        panic!(
            "not converged: {} A, {} B, {} C; wrong (a, b, c): {:?}; statuses {:?} {:?}; idle {}",
            as_.len(),
            bs.len(),
            cs.len(),
            &bad[..bad.len().min(10)],
            engine.status("AtoB"),
            engine.status("BtoC"),
            engine.is_idle()
        );
    }
    let report = engine.shutdown().await;
    assert_eq!(report.aborted, 0);
    for name in ["AtoB", "BtoC"] {
        let status = engine.status(name).unwrap();
        assert_eq!(status.errors, 0, "{name}: {:?}", status.last_error);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_converges_on_a_multi_threaded_runtime_level() {
    chain_converges_on_a_multi_threaded_runtime(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_converges_on_a_multi_threaded_runtime_queued() {
    chain_converges_on_a_multi_threaded_runtime(true).await;
}

async fn an_input_destroyed_and_created_again_unseen_gets_the_output_of_its_new_value(
    queued: bool,
) {
    // Given a transform that has converged on x = 4 (output 5) and y = 4,
    let h = Harness::new();
    register_a_to_b(
        &h,
        Transform::same_id("EvenOnly", |a: &A| {
            (a.value % 2 == 0).then_some(B { value: a.value + 1 })
        }),
        queued,
        1,
    );
    h.start().await;
    let state = h.state();
    for id in ["x", "y"] {
        create(&state, id, A { value: 4 }).await;
    }
    h.settle().await;

    // when both are destroyed and created again (at version 1 again) before it runs, x with a
    // value that has no output and y with a new one,
    for (id, value) in [("x", 3), ("y", 6)] {
        state
            .destroy(&A::kind().pointer(id.to_string()), Default::default())
            .await
            .unwrap();
        create(&state, id, A { value }).await;
    }
    h.settle().await;

    // then x has no output and y's follows its new value.
    h.expect_absent::<B>("x").await;
    assert_eq!(h.expect::<B>("y").await.spec.value, 7);
}

#[tokio::test(start_paused = true)]
async fn an_input_destroyed_and_created_again_unseen_gets_the_output_of_its_new_value_level() {
    an_input_destroyed_and_created_again_unseen_gets_the_output_of_its_new_value(false).await;
}

#[tokio::test(start_paused = true)]
async fn an_input_destroyed_and_created_again_unseen_gets_the_output_of_its_new_value_queued() {
    an_input_destroyed_and_created_again_unseen_gets_the_output_of_its_new_value(true).await;
}

async fn an_input_created_again_while_its_old_output_waits_for_a_finalizer_gets_a_new_one_after(
    queued: bool,
) {
    // Given a transform that has converged on x, and someone else's finalizer on x's output,
    let h = Harness::new();
    register_a_to_b(
        &h,
        Transform::same_id("PlusOne", |a: &A| Some(B { value: a.value + 1 })),
        queued,
        1,
    );
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
    assert_eq!(old.metadata.phase(), Phase::TearingDown);
    assert_eq!(h.status("PlusOne").await.errors, 0);

    // and once the finalizer is gone, the new input has its own output.
    state.remove_finalizer(&b("x"), &["foreign"]).await.unwrap();
    h.settle().await;
    let new = h.expect::<B>("x").await;
    assert_eq!((new.metadata.phase(), new.spec.value), (Phase::Running, 3));
}

#[tokio::test(start_paused = true)]
async fn an_input_created_again_while_its_old_output_waits_gets_a_new_one_after_level() {
    an_input_created_again_while_its_old_output_waits_for_a_finalizer_gets_a_new_one_after(false)
        .await;
}

#[tokio::test(start_paused = true)]
async fn an_input_created_again_while_its_old_output_waits_gets_a_new_one_after_queued() {
    an_input_created_again_while_its_old_output_waits_for_a_finalizer_gets_a_new_one_after(true)
        .await;
}

async fn a_destroyed_inputs_output_goes_while_another_input_changes_in_the_same_burst(
    queued: bool,
) {
    // Given a transform that has converged on x and y,
    let h = Harness::new();
    register_a_to_b(
        &h,
        Transform::same_id("PlusOne", |a: &A| Some(B { value: a.value + 1 })),
        queued,
        1,
    );
    h.start().await;
    let state = h.state();
    for id in ["x", "y"] {
        create(&state, id, A { value: 1 }).await;
    }
    h.settle().await;

    // when x is destroyed and y changes before the transform runs,
    state.destroy(&a("x"), Default::default()).await.unwrap();
    set(&state, "y", A { value: 4 }).await;
    h.settle().await;

    // then x's output is gone and y's is up to date.
    h.expect_absent::<B>("x").await;
    assert_eq!(h.expect::<B>("y").await.spec.value, 5);
}

#[tokio::test(start_paused = true)]
async fn a_destroyed_inputs_output_goes_while_another_input_changes_level() {
    a_destroyed_inputs_output_goes_while_another_input_changes_in_the_same_burst(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_destroyed_inputs_output_goes_while_another_input_changes_queued() {
    a_destroyed_inputs_output_goes_while_another_input_changes_in_the_same_burst(true).await;
}

/// A store that counts the lists of each kind, over the in-memory one.
struct CountingLists {
    inner: cosi_state::MemoryState,
    lists: std::sync::Mutex<std::collections::BTreeMap<String, usize>>,
}

impl CountingLists {
    fn lists(&self) -> std::collections::BTreeMap<String, usize> {
        self.lists.lock().unwrap().clone()
    }
}

impl State for CountingLists {
    fn get<'a>(&'a self, pointer: &'a cosi_core::Pointer) -> Call<'a, cosi_core::SharedResource> {
        self.inner.get(pointer)
    }
    fn list<'a>(
        &'a self,
        kind: &'a cosi_core::Kind,
        options: &'a cosi_core::ListOptions,
    ) -> Call<'a, Vec<cosi_core::SharedResource>> {
        Call::pending(async move {
            *self
                .lists
                .lock()
                .unwrap()
                .entry(kind.resource_type().to_string())
                .or_default() += 1;
            self.inner.list(kind, options).await
        })
    }
    fn create<'a>(
        &'a self,
        resource: cosi_core::SharedResource,
        options: cosi_core::CreateOptions,
    ) -> Call<'a, cosi_core::SharedResource> {
        self.inner.create(resource, options)
    }
    fn update<'a>(
        &'a self,
        resource: cosi_core::SharedResource,
        options: cosi_core::UpdateOptions,
    ) -> Call<'a, cosi_core::SharedResource> {
        self.inner.update(resource, options)
    }
    fn destroy<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::DestroyOptions,
    ) -> Call<'a, ()> {
        self.inner.destroy(pointer, options)
    }
    fn watch<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::WatchOptions,
    ) -> Call<'a, cosi_core::Watch> {
        self.inner.watch(pointer, options)
    }
    fn watch_kind<'a>(
        &'a self,
        kind: &'a cosi_core::Kind,
        options: cosi_core::WatchKindOptions,
    ) -> Call<'a, cosi_core::Watch> {
        self.inner.watch_kind(kind, options)
    }
}

/// Waits until the `B` of `id` has `value`.
async fn until_b(watch: &mut cosi_core::Watch, id: &str, value: i64) {
    while let Some(event) = watch.recv().await {
        if let Some(b) = event.resource() {
            let b = cosi_core::downcast_ref::<B>(&**b).unwrap();
            if b.metadata.id() == id && b.spec.value == value {
                return;
            }
        }
    }
    panic!("the watch of B ended before {id} reached {value}");
}

#[tokio::test]
async fn after_its_first_reconcile_a_transform_converges_a_changed_input_without_listing() {
    const INPUTS: i64 = 32;
    let counting = Arc::new(CountingLists {
        inner: cosi_state::MemoryState::default(),
        lists: Default::default(),
    });
    let state: Arc<dyn State> = counting.clone();
    let id = |n: i64| format!("i{n:02}");
    for n in 0..INPUTS {
        create(&state, &id(n), A { value: n }).await;
    }
    let mut outputs = state
        .watch_kind(&B::kind(), cosi_core::WatchKindOptions::default())
        .await
        .unwrap();
    let engine = cosi_controllers::Engine::new(state.clone());
    engine
        .register(Transform::<A, B>::same_id("Plus", |a: &A| {
            Some(B {
                value: a.value + 1000,
            })
        }))
        .unwrap();
    engine.start();
    until_b(&mut outputs, &id(INPUTS - 1), INPUTS - 1 + 1000).await;
    let after_first = counting.lists();

    // One input of 32 changes: its output follows, and nothing is listed for it.
    set(&state, &id(7), A { value: 100 }).await;
    until_b(&mut outputs, &id(7), 1100).await;
    assert_eq!(counting.lists(), after_first);
    let stored = state.list_typed::<B>(&B::kind(), &Default::default()).await;
    let values: Vec<i64> = stored.unwrap().iter().map(|b| b.spec.value).collect();
    let expected: Vec<i64> = (0..INPUTS)
        .map(|n| if n == 7 { 1100 } else { n + 1000 })
        .collect();
    assert_eq!(values, expected);
    engine.shutdown().await;
}
