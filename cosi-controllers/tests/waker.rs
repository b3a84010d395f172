//! A controller that mirrors an outside source is woken through its [`Waker`]: every burst of
//! outside wake-ups before it runs costs one reconcile, and a harness settles only after it ran.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cosi_controllers::testing::Harness;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled, Waker};
use cosi_core::{Resource, ResourceSpec, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Mirror {
    value: u32,
}

impl ResourceSpec for Mirror {
    const TYPE: &'static str = "Mirrors.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// Copies an outside value into a resource whenever it is woken.
struct MirrorController {
    source: Arc<Mutex<u32>>,
    waker: Arc<Mutex<Option<Waker>>>,
}

#[async_trait]
impl Controller for MirrorController {
    fn name(&self) -> &str {
        "MirrorController"
    }
    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<Mirror>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        *self.waker.lock().unwrap() = Some(state.waker());
        let value = *self.source.lock().unwrap();
        state
            .modify_output(Resource::new("mirror", Mirror::default()), |m| {
                m.spec.value = value;
                Ok(())
            })
            .await?;
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn outside_wakes_coalesce_into_one_reconcile() {
    // Given a controller with no inputs that has run once
    let source = Arc::new(Mutex::new(1));
    let waker = Arc::new(Mutex::new(None));
    let harness = Harness::new();
    harness
        .register(MirrorController {
            source: source.clone(),
            waker: waker.clone(),
        })
        .unwrap();
    harness.start().await;
    assert_eq!(harness.expect::<Mirror>("mirror").await.spec.value, 1);

    // When the outside source changes and wakes it three times before it runs
    *source.lock().unwrap() = 7;
    let handle = waker
        .lock()
        .unwrap()
        .clone()
        .expect("the first reconcile kept a waker");
    for _ in 0..3 {
        handle.wake();
    }
    harness.settle().await;

    // Then it reconciled once more and mirrors the new value
    assert_eq!(harness.expect::<Mirror>("mirror").await.spec.value, 7);
    assert_eq!(harness.status("MirrorController").await.reconciles, 2);
    harness.shutdown().await;
}
