//! Resource types and small helpers shared by the conformance tests.
#![allow(dead_code)]

use std::sync::Arc;

use cosi_core::{
    CreateOptions, Pointer, Resource, ResourceSpec, SharedResource, State, StateExt, UpdateOptions,
};
use serde::{Deserialize, Serialize};

macro_rules! value_type {
    ($name:ident, $ty:literal) => {
        #[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
        pub struct $name {
            pub value: i64,
        }
        impl ResourceSpec for $name {
            const TYPE: &'static str = $ty;
            const DEFAULT_NAMESPACE: &'static str = "test";
        }
    };
}

value_type!(A, "As.test.cosi.dev");
value_type!(B, "Bs.test.cosi.dev");
value_type!(C, "Cs.test.cosi.dev");
value_type!(Sum, "Sums.test.cosi.dev");
value_type!(Config, "Configs.test.cosi.dev");

pub fn a(id: &str) -> Pointer {
    A::kind().pointer(id.to_string())
}

pub fn b(id: &str) -> Pointer {
    B::kind().pointer(id.to_string())
}

/// Creates a user-owned resource.
pub async fn create<S: ResourceSpec>(state: &Arc<dyn State>, id: &str, spec: S) -> SharedResource {
    state
        .create(
            Resource::new(id.to_string(), spec).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap()
}

/// Creates a user-owned resource with labels.
pub async fn create_labelled<S: ResourceSpec>(
    state: &Arc<dyn State>,
    id: &str,
    spec: S,
    labels: &[(&str, &str)],
) {
    let mut r = Resource::new(id.to_string(), spec);
    for (k, v) in labels {
        r.metadata.labels_mut().insert(k.to_string(), v.to_string());
    }
    state
        .create(r.into_shared(), CreateOptions::default())
        .await
        .unwrap();
}

/// Sets the spec of a user-owned resource.
pub async fn set<S: ResourceSpec>(state: &Arc<dyn State>, id: &str, spec: S) {
    state
        .update_with_conflicts::<S, _>(
            &S::kind().pointer(id.to_string()),
            UpdateOptions::default(),
            |r| {
                r.spec = spec.clone();
                Ok(())
            },
        )
        .await
        .unwrap();
}

/// A harness whose store keeps a window of 2 changes and 4 destroy markers, so that a kind
/// watch lagging past a few destroys resyncs instead of hearing them.
pub fn resyncing_harness() -> cosi_controllers::testing::Harness {
    cosi_controllers::testing::Harness::with_memory(
        cosi_controllers::EngineOptions::default(),
        cosi_state::MemoryOptions {
            history: 2,
            max_destroy_markers: 4,
            ..cosi_state::MemoryOptions::default()
        },
    )
}

/// Creates A/x0..x9 and lets the engine settle; then destroys them back to back (the engine
/// does not run in between) and lets it settle again: the watch of A resyncs past the destroys
/// on a [`resyncing_harness`]. `outputs` is how many outputs the first settle must leave.
pub async fn destroy_ten_inputs_inside_a_resync(
    h: &cosi_controllers::testing::Harness,
    outputs: impl AsyncFn() -> usize,
) {
    let state = h.state();
    for i in 0..10 {
        create(&state, &format!("x{i}"), A { value: i }).await;
    }
    h.settle().await;
    assert_eq!(outputs().await, 10);
    for i in 0..10 {
        state
            .destroy(&a(&format!("x{i}")), Default::default())
            .await
            .unwrap();
    }
    h.settle().await;
}
