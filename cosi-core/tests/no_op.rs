//! `StateExt::modify` and NaN: a spec holding NaN cannot be stored (`cosi_core::spec_encode`),
//! so a writer that keeps computing one gets the same refusal each time and never a write —
//! no version bump and no event, as the no-op rule promises for an unchanged resource.

use cosi_core::{Error, Resource, ResourceSpec, StateExt, UpdateOptions, Version};
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

fn ratio(value: f64) -> Resource<Ratio> {
    Resource::new(
        "r",
        Ratio {
            name: "idle".into(),
            value,
        },
    )
}

#[tokio::test]
async fn modify_to_a_spec_holding_nan_is_refused_every_time_and_writes_nothing() {
    let state = MemoryState::default();
    state
        .modify(ratio(0.5), UpdateOptions::default(), |_| Ok(()))
        .await
        .unwrap();

    for _ in 0..2 {
        let err = state
            .modify(ratio(0.5), UpdateOptions::default(), |r| {
                r.spec.value = f64::NAN;
                Ok(())
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { field, .. } if field == "spec.value"),
            "{err}"
        );
    }

    let stored = state
        .get_typed::<Ratio>(&Ratio::kind().pointer("r"))
        .await
        .unwrap();
    assert_eq!(
        (stored.metadata.version(), stored.spec.value),
        (Version::FIRST, 0.5)
    );
}
