//! `StateExt::modify`'s no-op rule: a change that leaves a resource as stored writes nothing.

use cosi_core::{Resource, ResourceSpec, StateExt, UpdateOptions, Version};
use cosi_state::MemoryState;
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Ratio {
    name: String,
    value: f64,
}

impl ResourceSpec for Ratio {
    const TYPE: &'static str = "Ratios.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

fn nan_ratio() -> Resource<Ratio> {
    Resource::new(
        "r",
        Ratio {
            name: "idle".into(),
            value: f64::NAN,
        },
    )
}

#[tokio::test]
async fn modify_leaving_a_spec_that_holds_nan_unchanged_writes_nothing() {
    let state = MemoryState::default();
    let created = state
        .modify(nan_ratio(), UpdateOptions::default(), |_| Ok(()))
        .await
        .unwrap();
    assert_eq!(created.metadata.version(), Version::new(1));

    let again = state
        .modify(nan_ratio(), UpdateOptions::default(), |_| Ok(()))
        .await
        .unwrap();

    assert_eq!(again.metadata.version(), Version::new(1));
}

#[tokio::test]
async fn modify_changing_another_field_of_a_spec_that_holds_nan_writes() {
    let state = MemoryState::default();
    state
        .modify(nan_ratio(), UpdateOptions::default(), |_| Ok(()))
        .await
        .unwrap();

    let changed = state
        .modify(nan_ratio(), UpdateOptions::default(), |r| {
            r.spec.name = "busy".into();
            Ok(())
        })
        .await
        .unwrap();

    assert_eq!(changed.metadata.version(), Version::new(2));
    assert_eq!(changed.spec.name, "busy");
}

#[tokio::test]
async fn modify_turning_nan_into_a_number_writes() {
    let state = MemoryState::default();
    state
        .modify(nan_ratio(), UpdateOptions::default(), |_| Ok(()))
        .await
        .unwrap();

    let changed = state
        .modify(nan_ratio(), UpdateOptions::default(), |r| {
            r.spec.value = 0.5;
            Ok(())
        })
        .await
        .unwrap();

    assert_eq!(changed.metadata.version(), Version::new(2));
    assert_eq!(changed.spec.value, 0.5);
}
