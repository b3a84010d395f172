//! Output tracking: a reconcile marks what it produced; untouched outputs are torn down and
//! destroyed once free of finalizers.

mod common;

use async_trait::async_trait;
use common::*;
use cosi_controllers::testing::Harness;
use cosi_controllers::{Cleanup, Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{ListOptions, Phase, Resource, ResourceSpec, Result, StateExt};
use std::sync::{Arc, Mutex};

/// One C per A, through output tracking; wakes when its own outputs become destroyable.
struct Tracked {
    cleanups: Arc<Mutex<Vec<Cleanup>>>,
}

#[async_trait]
impl Controller for Tracked {
    fn name(&self) -> &str {
        "Tracked"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>(), Input::destroy_ready_of::<C>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<C>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        state.start_tracking();
        for input in state
            .list_typed::<A>(&A::kind(), &ListOptions::default())
            .await?
        {
            let value = input.spec.value;
            state
                .modify_output(
                    Resource::new(input.metadata.id().to_string(), C::default()),
                    |r| {
                        r.spec.value = value;
                        Ok(())
                    },
                )
                .await?;
        }
        let cleanup = state.cleanup_outputs(&[C::kind()]).await?;
        self.cleanups.lock().unwrap().push(cleanup);
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn untouched_outputs_are_torn_down_and_destroyed_once_free() {
    // Given three inputs and their outputs, one held by a foreign finalizer
    let h = Harness::new();
    let cleanups = Arc::new(Mutex::new(Vec::new()));
    h.register(Tracked {
        cleanups: cleanups.clone(),
    })
    .unwrap();
    h.start().await;
    let state = h.state();
    for id in ["x", "y", "z"] {
        create(&state, id, A { value: 1 }).await;
    }
    h.settle().await;
    assert_eq!(h.list::<C>().await.len(), 3);
    cleanups.lock().unwrap().clear();
    let c_kind = C::kind();
    state
        .add_finalizer(&c_kind.pointer("y"), &["consumer"])
        .await
        .unwrap();

    // When two inputs go away
    state.destroy(&a("x"), Default::default()).await.unwrap();
    state.destroy(&a("y"), Default::default()).await.unwrap();
    h.settle().await;

    // Then the free output is destroyed and the held one waits, torn down
    h.expect_absent::<C>("x").await;
    let held = h.expect::<C>("y").await;
    assert_eq!(held.metadata.phase(), Phase::TearingDown);
    // (x is destroyed in the same reconcile; its destroyed event wakes one more, idle run.)
    assert_eq!(
        std::mem::take(&mut *cleanups.lock().unwrap()),
        vec![
            Cleanup {
                destroyed: 1,
                waiting: 1
            },
            Cleanup {
                destroyed: 0,
                waiting: 1
            }
        ]
    );
    assert_eq!(h.expect::<C>("z").await.metadata.phase(), Phase::Running);

    // And once the finalizer goes, the destroy-ready input wakes it to finish the job
    state
        .remove_finalizer(&c_kind.pointer("y"), &["consumer"])
        .await
        .unwrap();
    h.settle().await;
    h.expect_absent::<C>("y").await;
    assert_eq!(
        *cleanups.lock().unwrap(),
        vec![
            Cleanup {
                destroyed: 1,
                waiting: 0
            },
            Cleanup {
                destroyed: 0,
                waiting: 0
            }
        ]
    );
    assert_eq!(h.list::<C>().await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cleanup_without_tracking_is_an_error() {
    struct Careless;
    #[async_trait]
    impl Controller for Careless {
        fn name(&self) -> &str {
            "Careless"
        }
        fn inputs(&self) -> Vec<Input> {
            vec![]
        }
        fn outputs(&self) -> Vec<Output> {
            vec![Output::exclusive_of::<C>()]
        }
        async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
            state.cleanup_outputs(&[C::kind()]).await?;
            Ok(Reconciled::Done)
        }
    }
    let h = Harness::new();
    // The test provokes these failures.
    h.expect_errors("Careless");
    h.register(Careless).unwrap();
    h.start().await;
    let status = h.status("Careless").await;
    assert_eq!(status.errors, 1);
    assert_eq!(
        status.last_error.as_deref(),
        Some(
            "Careless: invalid cleanup_outputs: output tracking was not started in this reconcile"
        )
    );
}

/// Starts tracking in its first reconcile only, and cleans up in every later one.
struct ForgetsToStart {
    reconciles: usize,
}

#[async_trait]
impl Controller for ForgetsToStart {
    fn name(&self) -> &str {
        "ForgetsToStart"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<C>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        self.reconciles += 1;
        if self.reconciles == 1 {
            state.start_tracking();
        } else {
            state.cleanup_outputs(&[C::kind()]).await?;
        }
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn tracking_started_in_one_reconcile_is_not_active_in_the_next() {
    let h = Harness::new();
    h.expect_errors("ForgetsToStart");
    h.register(ForgetsToStart { reconciles: 0 }).unwrap();
    h.start().await;
    h.settle().await;
    create(&h.state(), "a", A { value: 1 }).await;
    h.settle().await;
    let status = h.status("ForgetsToStart").await;
    assert_eq!((status.reconciles, status.errors), (2, 1), "{status:?}");
    assert_eq!(
        status.last_error.as_deref(),
        Some(
            "ForgetsToStart: invalid cleanup_outputs: output tracking was not started in this \
             reconcile"
        )
    );
}

/// A queue controller whose two items reconcile at the same time: each tracks the one output it
/// writes, waits until the other has written too, then cleans up.
struct ConcurrentItems {
    both_written: Arc<tokio::sync::Barrier>,
}

impl cosi_controllers::QueueController for ConcurrentItems {
    fn name(&self) -> &str {
        "ConcurrentItems"
    }
    fn primary(&self) -> Input {
        Input::weak_of::<A>()
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<C>()]
    }
    fn concurrency(&self) -> usize {
        2
    }
    async fn reconcile(
        &self,
        state: &ControllerState,
        item: &cosi_core::Pointer,
    ) -> Result<Reconciled> {
        state.start_tracking();
        let value = state.get_typed::<A>(item).await?.spec.value;
        state
            .modify_output(Resource::new(item.id().to_string(), C::default()), |r| {
                r.spec.value = value;
                Ok(())
            })
            .await?;
        self.both_written.wait().await;
        // Outputs of this item only: the other item's output is not this reconcile's to clean.
        let theirs: Vec<_> = state
            .list(&C::kind(), &ListOptions::default())
            .await?
            .iter()
            .filter(|c| c.metadata().id() != item.id())
            .map(|c| c.metadata().pointer().clone())
            .collect();
        for pointer in &theirs {
            state.touch(pointer);
        }
        state.cleanup_outputs(&[C::kind()]).await?;
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn concurrent_items_track_their_outputs_separately() {
    // Given two inputs whose items reconcile at the same time
    let h = Harness::new();
    h.register_queue(ConcurrentItems {
        both_written: Arc::new(tokio::sync::Barrier::new(2)),
    })
    .unwrap();
    create(&h.state(), "a", A { value: 1 }).await;
    create(&h.state(), "b", A { value: 2 }).await;

    // When both reconcile, each tracking and cleaning up in the middle of the other
    h.start().await;
    h.settle().await;

    // Then both outputs stand and neither reconcile failed
    assert_eq!(h.expect::<C>("a").await.spec.value, 1);
    assert_eq!(h.expect::<C>("b").await.spec.value, 2);
    let status = h.status("ConcurrentItems").await;
    assert_eq!((status.reconciles, status.errors), (2, 0), "{status:?}");
}
