//! The configuration layer: addresses of `machine.network.interfaces` in the active machine
//! config become `configuration/<link>/<prefix>` specs, beat every other layer, and leave the
//! link when the config drops them; the `no-k8s` filter follows the config's pod and service
//! subnets. In-memory backend, controller harness, paused clock.

use std::sync::Arc;

use cosi_controllers::testing::Harness;
use cosi_core::{Resource, ResourceSpec, StateExt, UpdateOptions};
use cosi_node::config::{MachineConfig, ACTIVE};
use cosi_node::namespaces;
use cosi_node::network::{
    self, operator, AddressScope, AddressSpec, Cmdline, ConfigLayer, MemoryBackend, NodeAddress,
    NodeAddressFilter,
};
use ipnet::IpNet;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn config(addresses: &[&str], pods: &str) -> MachineConfig {
    let list = addresses
        .iter()
        .map(|a| format!("      - {a}\n"))
        .collect::<String>();
    let text = format!(
        "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: node-1\n    interfaces:\n    - interface: eth0\n      addresses:\n{list}cluster:\n  name: demo\n  network:\n    podSubnets: [{pods}]\n    serviceSubnets: [10.96.0.0/12]\n"
    );
    MachineConfig::from_text(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

async fn apply(harness: &Harness, mc: MachineConfig) {
    harness
        .state()
        .modify(
            Resource::new(ACTIVE, mc.clone()),
            UpdateOptions::default(),
            |r| {
                r.spec = mc.clone();
                Ok(())
            },
        )
        .await
        .unwrap();
    harness.settle().await;
}

async fn start() -> (Harness, MemoryBackend) {
    let backend = MemoryBackend::with_links(["lo", "eth0"]);
    let harness = Harness::new();
    network::register(
        harness.engine(),
        Arc::new(backend.clone()),
        Cmdline::default(),
    )
    .unwrap();
    harness.start().await;
    (harness, backend)
}

async fn merged(harness: &Harness, id: &str) -> Option<Arc<Resource<AddressSpec>>> {
    harness
        .get_at::<AddressSpec>(&AddressSpec::kind_in(namespaces::NETWORK).pointer(id.to_string()))
        .await
}

#[tokio::test(start_paused = true)]
async fn config_interfaces_become_configuration_layer_specs_on_the_link() {
    let (harness, backend) = start().await;
    apply(
        &harness,
        config(&["192.0.2.10/24", "2001:db8::10/64"], "10.244.0.0/16"),
    )
    .await;

    let raw = harness
        .get_at::<AddressSpec>(
            &AddressSpec::kind_in(namespaces::NETWORK_CONFIG)
                .pointer("configuration/eth0/192.0.2.10/24"),
        )
        .await
        .expect("the configuration layer");
    assert_eq!(raw.spec.layer, ConfigLayer::Configuration);
    assert!(backend.has("eth0", &net("192.0.2.10/24")));
    assert!(backend.has("eth0", &net("2001:db8::10/64")));
    assert_eq!(
        harness.expect::<NodeAddress>("routed").await.spec.addresses,
        vec![net("192.0.2.10/24"), net("2001:db8::10/64")]
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_configuration_layer_beats_the_operator_layer() {
    let (harness, backend) = start().await;
    operator::add_address_with_scope(
        &*harness.state(),
        "eth0",
        net("192.0.2.10/24"),
        AddressScope::Link,
    )
    .await
    .unwrap();
    harness.settle().await;
    apply(&harness, config(&["192.0.2.10/24"], "10.244.0.0/16")).await;

    let winner = merged(&harness, "eth0/192.0.2.10/24").await.unwrap();
    assert_eq!(winner.spec.layer, ConfigLayer::Configuration);
    assert_eq!(
        backend.scope_of("eth0", &net("192.0.2.10/24")),
        Some(AddressScope::Global)
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_address_dropped_from_the_config_leaves_the_link() {
    let (harness, backend) = start().await;
    apply(
        &harness,
        config(&["192.0.2.10/24", "192.0.2.11/24"], "10.244.0.0/16"),
    )
    .await;
    assert!(backend.has("eth0", &net("192.0.2.11/24")));

    apply(&harness, config(&["192.0.2.10/24"], "10.244.0.0/16")).await;
    assert!(!backend.has("eth0", &net("192.0.2.11/24")));
    assert!(backend.has("eth0", &net("192.0.2.10/24")));
    assert!(merged(&harness, "eth0/192.0.2.11/24").await.is_none());
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_no_k8s_filter_follows_the_config_subnets() {
    let (harness, backend) = start().await;
    assert_eq!(
        harness
            .expect::<NodeAddressFilter>("no-k8s")
            .await
            .spec
            .exclude_subnets,
        vec![net("10.244.0.0/16"), net("10.96.0.0/12")],
        "Kubernetes' defaults without a config"
    );
    backend.add_by_hand("eth0", net("10.200.3.4/24")).unwrap();
    apply(&harness, config(&["192.0.2.10/24"], "10.200.0.0/16")).await;

    assert_eq!(
        harness
            .expect::<NodeAddressFilter>("no-k8s")
            .await
            .spec
            .exclude_subnets,
        vec![net("10.200.0.0/16"), net("10.96.0.0/12")]
    );
    assert_eq!(
        harness
            .expect::<NodeAddress>("routed-no-k8s")
            .await
            .spec
            .addresses,
        vec![net("192.0.2.10/24")]
    );
    harness.shutdown().await;
}
