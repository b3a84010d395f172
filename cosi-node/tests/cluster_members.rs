//! The cluster family on the in-memory state with an in-memory registry, driven by the
//! controller harness (paused clock, no sleeps): identity, the local affiliate, discovery into
//! `cluster-raw`, the merge by node id, members by node name (and who keeps a node name two
//! affiliates claim), and stale members while a registry is unreachable. Plus the identity
//! kept across a restart on the disk backend.

use std::net::IpAddr;
use std::sync::Arc;

use cosi_controllers::testing::Harness;
use cosi_controllers::Engine;
use cosi_core::Registry;
use cosi_core::{CreateOptions, Resource, ResourceSpec, StateExt};
use cosi_node::cluster::{
    self, encode_node_id, Affiliate, AffiliateDiscoveryController, AffiliateMergeController,
    AffiliateRegistry, Condition, Identity, LocalAffiliateController, LocalNode, Member,
    MemberController, MemoryRegistry, NodeIdentityController, LOCAL,
};
use cosi_node::namespaces;
use cosi_node::network::NodeAddress;
use cosi_state::{DiskOptions, DiskState};

fn node_id(n: u8) -> String {
    encode_node_id(&[n; 32])
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn remote(n: u8, nodename: &str, addresses: &[&str]) -> Affiliate {
    Affiliate {
        node_id: node_id(n),
        addresses: addresses.iter().map(|a| ip(a)).collect(),
        hostname: format!("{nodename}.example.dev"),
        nodename: nodename.to_string(),
        operating_system: "cosi-node (test)".into(),
        machine_type: "worker".into(),
        conditions: vec![],
    }
}

async fn start(registries: Vec<MemoryRegistry>) -> Harness {
    let harness = Harness::new();
    let registries = registries
        .into_iter()
        .map(|r| Arc::new(r) as Arc<dyn AffiliateRegistry>)
        .collect();
    cluster::register(harness.engine(), registries).unwrap();
    harness.start().await;
    harness
}

async fn describe_local_node(harness: &Harness, hostname: &str, addresses: &[&str]) {
    let state = harness.state();
    let node = LocalNode {
        hostname: hostname.into(),
        nodename: String::new(),
        machine_type: "controlplane".into(),
    };
    state
        .create(
            Resource::new(LOCAL, node).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let routed = NodeAddress {
        addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
    };
    state
        .create(
            Resource::new("routed-no-k8s", routed).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    harness.settle().await;
}

async fn local_id(harness: &Harness) -> String {
    harness.expect::<Identity>(LOCAL).await.spec.node_id.clone()
}

#[tokio::test(start_paused = true)]
async fn a_node_gets_a_base62_identity_once() {
    let harness = start(vec![]).await;
    let identity = harness.expect::<Identity>(LOCAL).await;
    assert_eq!(identity.spec.node_id.len(), 43);
    assert!(identity
        .spec
        .node_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric()));
    assert_eq!(identity.metadata.version().get(), 1);
    assert_eq!(
        harness
            .status(NodeIdentityController::NAME)
            .await
            .reconciles,
        1
    );
    harness.shutdown().await;
}

#[tokio::test]
async fn the_identity_survives_a_restart_on_the_disk_backend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let types = || {
        let mut registry = Registry::new();
        cluster::register_types(&mut registry).unwrap();
        Arc::new(registry)
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let disk = Arc::new(
            DiskState::open(&path, DiskOptions::default(), types())
                .await
                .unwrap(),
        );
        let engine = Engine::new(disk.clone());
        engine.register(NodeIdentityController).unwrap();
        engine.start();
        let identity = disk
            .watch_for(&Identity::kind().pointer(LOCAL), |r| r.is_some())
            .await
            .unwrap()
            .unwrap();
        ids.push(
            cosi_core::downcast_ref::<Identity>(&*identity)
                .unwrap()
                .spec
                .node_id
                .clone(),
        );
        engine.shutdown().await;
        disk.close().await;
    }
    assert_eq!(ids[0], ids[1]);
}

#[tokio::test(start_paused = true)]
async fn the_local_affiliate_carries_names_role_os_and_routed_no_k8s_addresses() {
    let registry = MemoryRegistry::new();
    let harness = start(vec![registry.clone()]).await;
    describe_local_node(&harness, "node-1", &["192.0.2.1/24"]).await;

    let id = local_id(&harness).await;
    let affiliate = harness.expect::<Affiliate>(&id).await;
    assert_eq!(
        affiliate.metadata.owner(),
        Some(LocalAffiliateController::NAME)
    );
    assert_eq!(affiliate.spec.hostname, "node-1");
    assert_eq!(
        affiliate.spec.nodename, "node-1",
        "the nodename defaults to the hostname"
    );
    assert_eq!(affiliate.spec.machine_type, "controlplane");
    assert!(affiliate.spec.operating_system.starts_with("cosi-node ("));
    assert_eq!(affiliate.spec.addresses, vec![ip("192.0.2.1")]);
    // And the registry was handed exactly that
    assert_eq!(registry.published(), Some(affiliate.spec.clone()));
    // And the local node is a member of its own cluster
    let member = harness.expect::<Member>("node-1").await;
    assert_eq!(member.spec.node_id, id);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn other_nodes_arrive_raw_per_registry_and_become_members_by_nodename() {
    let registry = MemoryRegistry::new();
    let harness = start(vec![registry.clone()]).await;
    registry.put(remote(1, "node-2", &["192.0.2.2"]));
    harness.settle().await;

    let raw = harness
        .get_at::<Affiliate>(
            &Affiliate::kind_in(namespaces::CLUSTER_RAW).pointer(format!("memory/{}", node_id(1))),
        )
        .await
        .expect("the raw affiliate");
    assert_eq!(
        raw.metadata.owner(),
        Some("AffiliateDiscoveryController.memory")
    );
    let merged = harness.expect::<Affiliate>(&node_id(1)).await;
    assert_eq!(
        merged.metadata.owner(),
        Some(AffiliateMergeController::NAME)
    );
    let member = harness.expect::<Member>("node-2").await;
    assert_eq!(member.spec.addresses, vec![ip("192.0.2.2")]);
    assert_eq!(member.spec.machine_type, "worker");
    assert_eq!(member.metadata.owner(), Some(MemberController::NAME));

    // When the node's entry expires, its member goes
    registry.expire(&node_id(1));
    harness.settle().await;
    harness.expect_absent::<Member>("node-2").await;
    harness.expect_absent::<Affiliate>(&node_id(1)).await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn two_registries_reporting_one_node_merge_into_one_affiliate() {
    let (first, second) = (MemoryRegistry::new(), MemoryRegistry::named("second"));
    let harness = Harness::new();
    harness
        .register(AffiliateDiscoveryController::new(Arc::new(first.clone())))
        .unwrap();
    harness
        .register(AffiliateDiscoveryController::new(Arc::new(second.clone())))
        .unwrap();
    harness.register(AffiliateMergeController).unwrap();
    harness.register(MemberController).unwrap();
    harness.start().await;

    first.put(remote(3, "node-3", &["192.0.2.3"]));
    harness.settle().await;
    let mut newer = remote(3, "node-3", &["198.51.100.3"]);
    newer.hostname = "renamed.example.dev".into();
    newer.machine_type = "unknown".into();
    second.put(newer);
    harness.settle().await;

    let merged = harness.expect::<Affiliate>(&node_id(3)).await;
    assert_eq!(
        merged.spec.addresses,
        vec![ip("192.0.2.3"), ip("198.51.100.3")]
    );
    assert_eq!(
        merged.spec.hostname, "renamed.example.dev",
        "the freshest non-empty field"
    );
    assert_eq!(
        merged.spec.machine_type, "worker",
        "unknown does not override"
    );
    assert_eq!(harness.list::<Member>().await.len(), 1);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn members_go_stale_while_the_registry_is_unreachable_and_recover() {
    let registry = MemoryRegistry::new();
    let harness = start(vec![registry.clone()]).await;
    registry.put(remote(4, "node-4", &["192.0.2.4"]));
    harness.settle().await;
    assert!(harness
        .expect::<Member>("node-4")
        .await
        .spec
        .conditions
        .is_empty());

    // When the registry becomes unreachable, the member stays, marked stale
    registry.set_reachable(false);
    harness.settle().await;
    let member = harness.expect::<Member>("node-4").await;
    assert_eq!(member.spec.conditions.len(), 1);
    assert_eq!(member.spec.conditions[0].condition, Condition::STALE);
    assert!(member.spec.conditions[0]
        .message
        .contains("registry memory unreachable"));

    // When it is back, the condition is gone
    registry.set_reachable(true);
    harness.settle().await;
    assert!(harness
        .expect::<Member>("node-4")
        .await
        .spec
        .conditions
        .is_empty());
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_registry_echo_of_this_node_is_not_a_second_affiliate() {
    let registry = MemoryRegistry::new();
    let harness = start(vec![registry.clone()]).await;
    describe_local_node(&harness, "node-1", &["192.0.2.1/24"]).await;
    // The registry reports this node back, as etcd and the directory do
    registry.put(registry.published().expect("published"));
    harness.settle().await;

    let raw = harness
        .state()
        .list(
            &Affiliate::kind_in(namespaces::CLUSTER_RAW),
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(raw.is_empty(), "{raw:?}");
    assert_eq!(harness.list::<Member>().await.len(), 1);
    assert_eq!(
        harness.status(AffiliateMergeController::NAME).await.errors,
        0
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn affiliates_without_a_nodename_are_not_members() {
    let registry = MemoryRegistry::new();
    let harness = start(vec![registry.clone()]).await;
    registry.put(remote(5, "", &["192.0.2.5"]));
    harness.settle().await;
    harness.expect::<Affiliate>(&node_id(5)).await;
    assert!(harness.list::<Member>().await.is_empty());
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_local_affiliate_keeps_its_nodename_against_a_remote_one_with_a_lower_node_id() {
    let registry = MemoryRegistry::new();
    let harness = start(vec![registry.clone()]).await;
    // A peer publishes the lowest node id with this node's nodename, before this node does
    registry.put(remote(0, "node-1", &["203.0.113.66"]));
    harness.settle().await;
    harness.expect::<Affiliate>(&node_id(0)).await;

    // When this node publishes its own affiliate
    describe_local_node(&harness, "node-1", &["192.0.2.1/24"]).await;
    let id = local_id(&harness).await;

    // Then the member is this node
    let member = harness.expect::<Member>("node-1").await;
    assert_eq!(member.spec.node_id, id);
    assert_eq!(member.spec.addresses, vec![ip("192.0.2.1")]);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_remote_newcomer_with_a_lower_node_id_does_not_take_a_held_nodename() {
    let registry = MemoryRegistry::new();
    let harness = start(vec![registry.clone()]).await;
    registry.put(remote(5, "node-2", &["192.0.2.2"]));
    harness.settle().await;
    harness.expect::<Member>("node-2").await;

    // When another node claims the nodename with a lower node id
    registry.put(remote(1, "node-2", &["203.0.113.66"]));
    harness.settle().await;

    // Then the member stays the node that held it
    harness.expect::<Affiliate>(&node_id(1)).await;
    let member = harness.expect::<Member>("node-2").await;
    assert_eq!(member.spec.node_id, node_id(5));
    assert_eq!(member.spec.addresses, vec![ip("192.0.2.2")]);
    harness.shutdown().await;
}
