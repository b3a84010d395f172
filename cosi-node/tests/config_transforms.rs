//! The fan-out: typed resources follow the active config, nothing else.

mod config_support;

use std::sync::Arc;

use config_support::{Restarts, BASE};
use cosi_controllers::testing::Harness;
use cosi_core::{table, ResourceSpec, StateExt};
use cosi_node::config::{
    transforms, ApplyMode, ApplyRequest, ConfigApplier, Hostname, KubeletSpec, MachineRole,
    MachineType, NodeLabels,
};

async fn running() -> (Harness, ConfigApplier) {
    let harness = Harness::new();
    transforms::register(harness.engine()).unwrap();
    harness.start().await;
    let applier = ConfigApplier::new(harness.state(), Arc::new(Restarts::default()));
    applier
        .apply(ApplyRequest::config(BASE, ApplyMode::NoReboot, "admin"))
        .await
        .unwrap();
    harness.settle().await;
    (harness, applier)
}

#[tokio::test(start_paused = true)]
async fn the_active_config_fans_out_into_typed_resources() {
    let (harness, _applier) = running().await;
    assert_eq!(
        harness
            .expect::<MachineType>(MachineType::ID)
            .await
            .spec
            .machine_type,
        MachineRole::Worker
    );
    assert_eq!(
        harness.expect::<Hostname>(Hostname::ID).await.spec.hostname,
        "node-1"
    );
    assert_eq!(
        harness
            .expect::<NodeLabels>(NodeLabels::ID)
            .await
            .spec
            .labels["zone"],
        "eu-1a"
    );
    let kubelet = harness.expect::<KubeletSpec>(KubeletSpec::ID).await;
    assert_eq!(kubelet.spec.args(), ["--max-pods=110"]);
    assert_eq!(kubelet.metadata.owner(), Some("KubeletSpecController"));
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn fan_out_resources_follow_a_live_change_and_only_the_changed_one_is_written() {
    let (harness, applier) = running().await;
    applier
        .apply(ApplyRequest::patches(
            ["machine:\n  nodeLabels:\n    tier: gold\n"],
            ApplyMode::NoReboot,
            "admin",
        ))
        .await
        .unwrap();
    harness.settle().await;
    let labels = harness.expect::<NodeLabels>(NodeLabels::ID).await;
    assert_eq!(labels.spec.labels.len(), 2);
    assert_eq!(labels.metadata.version().get(), 2);
    assert_eq!(
        harness
            .expect::<Hostname>(Hostname::ID)
            .await
            .metadata
            .version()
            .get(),
        1
    );
    assert_eq!(
        harness
            .expect::<KubeletSpec>(KubeletSpec::ID)
            .await
            .metadata
            .version()
            .get(),
        1
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_staged_config_does_not_reach_the_fan_out() {
    let (harness, applier) = running().await;
    applier
        .apply(ApplyRequest::patches(
            ["machine:\n  network:\n    hostname: staged\n"],
            ApplyMode::Staged,
            "admin",
        ))
        .await
        .unwrap();
    harness.settle().await;
    assert_eq!(
        harness.expect::<Hostname>(Hostname::ID).await.spec.hostname,
        "node-1"
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn removing_a_field_removes_its_resource() {
    let (harness, applier) = running().await;
    applier
        .apply(ApplyRequest::patches(
            ["machine:\n  network:\n    hostname:\n      $patch: delete\n"],
            ApplyMode::NoReboot,
            "admin",
        ))
        .await
        .unwrap();
    harness.settle().await;
    harness.expect_absent::<Hostname>(Hostname::ID).await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn fan_out_resources_print_their_columns() {
    let (harness, _applier) = running().await;
    let state = harness.state();
    let list = |kind| {
        let state = state.clone();
        async move { state.list(&kind, &Default::default()).await.unwrap() }
    };
    assert_eq!(
        table::render(&MachineType::definition(), list(MachineType::kind()).await).unwrap(),
        "NAMESPACE   TYPE          ID             VERSION   Type\nconfig      MachineType   machine-type   1         worker\n"
    );
    assert_eq!(
        table::render(&KubeletSpec::definition(), list(KubeletSpec::kind()).await).unwrap(),
        "NAMESPACE   TYPE          ID        VERSION   Image           Args\nconfig      KubeletSpec   kubelet   1         kubelet:v1.31   {\"max-pods\":\"110\"}\n"
    );
    let _ = state
        .get_typed::<Hostname>(&Hostname::kind().pointer(Hostname::ID))
        .await
        .unwrap();
    harness.shutdown().await;
}
