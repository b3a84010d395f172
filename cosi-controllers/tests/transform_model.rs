//! Property test of the level-triggered transform: whatever a user does to the inputs —
//! create, change, tear down, destroy, in any order, with the controller running in between
//! at arbitrary points or not at all — once it settles, the outputs are exactly what the map
//! gives for the running inputs, and the transform holds its finalizer exactly on the inputs
//! that have an output. It found that an input destroyed and created again before the
//! controller ran (back at version 1) was taken for its old self by the memo.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use cosi_controllers::testing::Harness;
use cosi_controllers::{Backoff, EngineOptions, Transform};
use cosi_core::{DestroyOptions, Phase, StateExt};
use proptest::prelude::*;

const IDS: [&str; 5] = ["p", "q", "r", "s", "t"];
const NAME: &str = "Model";

#[derive(Clone, Debug)]
enum Op {
    Create(usize, i64),
    Set(usize, i64),
    Teardown(usize),
    Destroy(usize),
    /// Let the controller run (until it settles).
    Settle,
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..IDS.len();
    prop_oneof![
        3 => (id.clone(), 0..9i64).prop_map(|(i, v)| Op::Create(i, v)),
        4 => (id.clone(), 0..9i64).prop_map(|(i, v)| Op::Set(i, v)),
        1 => id.clone().prop_map(Op::Teardown),
        2 => id.prop_map(Op::Destroy),
        3 => Just(Op::Settle),
    ]
}

/// Multiples of 3 have no output; every other value maps to value + 1.
fn model_map(a: &A) -> Option<B> {
    (a.value % 3 != 0).then(|| B { value: a.value + 1 })
}

async fn apply(h: &Harness, op: &Op) {
    let state = h.state();
    match *op {
        Op::Create(i, value) => {
            let resource = cosi_core::Resource::new(IDS[i], A { value }).into_shared();
            // Already there: a user's create fails, nothing changes.
            let _ = state.create(resource, Default::default()).await;
        }
        Op::Set(i, value) => {
            // Gone or tearing down: refused, nothing changes.
            let _ = state
                .update_with_conflicts::<A, _>(&a(IDS[i]), Default::default(), |r| {
                    r.spec.value = value;
                    Ok(())
                })
                .await;
        }
        Op::Teardown(i) => {
            let _ = state.teardown(&a(IDS[i]), None).await;
        }
        Op::Destroy(i) => {
            // Refused while finalizers are held: nothing changes.
            let _ = state.destroy(&a(IDS[i]), DestroyOptions::default()).await;
        }
        Op::Settle => h.settle().await,
    }
}

async fn run_model(finalizers: bool, ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
    let h = Harness::with_options(EngineOptions {
        restart_backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(100)),
        ..EngineOptions::default()
    });
    let transform = Transform::<A, B>::same_id(NAME, model_map);
    h.register(if finalizers {
        transform.with_finalizers()
    } else {
        transform
    })
    .unwrap();
    h.start().await;
    for op in &ops {
        apply(&h, op).await;
    }
    // Retries after a conflict wait for their backoff: let the clock run out every one.
    for _ in 0..3 {
        h.settle().await;
        h.advance(Duration::from_secs(1)).await;
    }
    h.settle().await;

    let inputs: BTreeMap<String, _> = h
        .list::<A>()
        .await
        .into_iter()
        .map(|a| (a.metadata.id().to_string(), a))
        .collect();
    let outputs: BTreeMap<String, _> = h
        .list::<B>()
        .await
        .into_iter()
        .map(|b| (b.metadata.id().to_string(), b))
        .collect();
    let expected: BTreeMap<String, i64> = inputs
        .iter()
        .filter(|(_, a)| a.metadata.phase() == Phase::Running)
        .filter_map(|(id, a)| model_map(&a.spec).map(|b| (id.clone(), b.value)))
        .collect();
    let actual: BTreeMap<String, i64> = outputs
        .iter()
        .map(|(id, b)| (id.clone(), b.spec.value))
        .collect();
    prop_assert_eq!(&actual, &expected, "outputs after {:?}", ops);
    for (id, b) in &outputs {
        prop_assert_eq!(b.metadata.owner(), Some(NAME));
        prop_assert_eq!(b.metadata.phase(), Phase::Running, "output {}", id);
    }
    for (id, a) in &inputs {
        let held = a.metadata.finalizers().contains(NAME);
        prop_assert_eq!(
            held,
            finalizers && expected.contains_key(id),
            "finalizer on input {} after {:?}",
            id,
            ops
        );
    }
    h.shutdown().await;
    Ok(())
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn outputs_follow_any_history_of_the_inputs(ops in prop::collection::vec(op(), 1..30)) {
        paused_runtime().block_on(run_model(false, ops))?;
    }

    #[test]
    fn outputs_and_finalizers_follow_any_history_of_strong_inputs(
        ops in prop::collection::vec(op(), 1..30)
    ) {
        paused_runtime().block_on(run_model(true, ops))?;
    }
}
