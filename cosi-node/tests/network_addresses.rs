//! The address chain on the in-memory backend, driven by the controller harness (paused
//! clock, no sleeps): layered specs merge with the highest layer winning, the spec controller
//! applies them holding a finalizer, a removed spec removes its address before the spec is
//! destroyed, and statuses mirror what the backend holds.

use std::sync::Arc;
use std::time::Duration;

use cosi_controllers::testing::Harness;
use cosi_core::{CreateOptions, Phase, Resource, ResourceSpec};
use cosi_node::namespaces;
use cosi_node::network::{
    self, operator, AddressScope, AddressSpec, AddressSpecController, AddressStatus,
    BackendOperation, Cmdline, ConfigLayer, MemoryBackend, PendingAddress,
};
use ipnet::IpNet;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

async fn start(cmdline: &str) -> (Harness, MemoryBackend) {
    let backend = MemoryBackend::with_links(["lo", "eth0", "eth1"]);
    let harness = Harness::new();
    network::register(
        harness.engine(),
        Arc::new(backend.clone()),
        Cmdline::parse(cmdline).unwrap(),
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
async fn defaults_and_cmdline_produce_layered_specs_that_reach_the_backend() {
    // Given a node started with one ip= argument
    let (harness, backend) = start("ip=192.0.2.5:::24::eth0:off").await;

    // Then both lower layers are in network-config under their layered ids
    let raw = harness
        .get_at::<AddressSpec>(
            &AddressSpec::kind_in(namespaces::NETWORK_CONFIG).pointer("cmdline/eth0/192.0.2.5/24"),
        )
        .await
        .expect("the cmdline layer");
    assert_eq!(raw.spec.layer, ConfigLayer::Cmdline);
    let lo = merged(&harness, "lo/127.0.0.1/8")
        .await
        .expect("the default layer, merged");
    assert_eq!(lo.spec.scope, AddressScope::Host);
    // And both are applied, held by the spec controller's finalizer, and observed
    assert!(backend.has("eth0", &net("192.0.2.5/24")));
    assert!(backend.has("lo", &net("127.0.0.1/8")));
    let eth0 = merged(&harness, "eth0/192.0.2.5/24").await.unwrap();
    assert!(eth0
        .metadata
        .finalizers()
        .contains(AddressSpecController::NAME));
    let status = harness.expect::<AddressStatus>("eth0/192.0.2.5/24").await;
    assert_eq!(status.spec.link_name, "eth0");
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_highest_layer_wins_and_the_next_takes_over_when_it_leaves() {
    // Given the cmdline states an address with global scope
    let (harness, backend) = start("ip=192.0.2.5:::24::eth0:off").await;
    assert_eq!(
        merged(&harness, "eth0/192.0.2.5/24")
            .await
            .unwrap()
            .spec
            .layer,
        ConfigLayer::Cmdline
    );

    // When the operator layer states the same address with link scope
    let state = harness.state();
    operator::add_address_with_scope(&*state, "eth0", net("192.0.2.5/24"), AddressScope::Link)
        .await
        .unwrap();
    harness.settle().await;

    // Then the operator's spec wins the merge
    let winner = merged(&harness, "eth0/192.0.2.5/24").await.unwrap();
    assert_eq!(winner.spec.layer, ConfigLayer::Operator);
    assert_eq!(winner.spec.scope, AddressScope::Link);
    // And the kernel holds it with the winner's scope
    assert_eq!(
        backend.scope_of("eth0", &net("192.0.2.5/24")),
        Some(AddressScope::Link)
    );

    // When the operator withdraws it, the cmdline's spec is the winner again
    operator::remove_address(&*state, "eth0", net("192.0.2.5/24"))
        .await
        .unwrap();
    harness.settle().await;
    let winner = merged(&harness, "eth0/192.0.2.5/24").await.unwrap();
    assert_eq!(winner.spec.layer, ConfigLayer::Cmdline);
    assert_eq!(winner.spec.scope, AddressScope::Global);
    assert_eq!(
        backend.scope_of("eth0", &net("192.0.2.5/24")),
        Some(AddressScope::Global)
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn removing_the_only_spec_removes_the_address_then_destroys_the_merged_spec() {
    // Given an operator address applied on eth1
    let (harness, backend) = start("").await;
    let state = harness.state();
    operator::add_address(&*state, "eth1", net("198.51.100.4/24"))
        .await
        .unwrap();
    harness.settle().await;
    assert!(backend.has("eth1", &net("198.51.100.4/24")));

    // When the operator withdraws it
    operator::remove_address(&*state, "eth1", net("198.51.100.4/24"))
        .await
        .unwrap();
    harness.settle().await;

    // Then the address left the link, and the merged spec and the status are gone
    assert!(!backend.has("eth1", &net("198.51.100.4/24")));
    assert!(merged(&harness, "eth1/198.51.100.4/24").await.is_none());
    harness
        .expect_absent::<AddressStatus>("eth1/198.51.100.4/24")
        .await;
    assert_eq!(backend.calls(), (2, 1), "lo and eth1 added, eth1 removed");
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_spec_stays_tearing_down_while_its_address_cannot_be_removed() {
    // Given an applied operator address, and a backend that fails the next two removals
    let (harness, backend) = start("").await;
    let state = harness.state();
    operator::add_address(&*state, "eth0", net("192.0.2.8/24"))
        .await
        .unwrap();
    harness.settle().await;
    backend.fail_next(BackendOperation::Remove, 2);
    harness.expect_errors("AddressSpecController");

    // When the operator withdraws it
    operator::remove_address(&*state, "eth0", net("192.0.2.8/24"))
        .await
        .unwrap();
    harness.settle().await;

    // Then the merged spec is held tearing down by the finalizer, the address still there
    let held = merged(&harness, "eth0/192.0.2.8/24")
        .await
        .expect("held by its finalizer");
    assert_eq!(held.metadata.phase(), Phase::TearingDown);
    assert!(held
        .metadata
        .finalizers()
        .contains(AddressSpecController::NAME));
    assert!(backend.has("eth0", &net("192.0.2.8/24")));

    // When the backoffs pass, the removal succeeds and the spec is destroyed
    harness.advance(Duration::from_secs(60)).await;
    harness.advance(Duration::from_secs(60)).await;
    assert!(!backend.has("eth0", &net("192.0.2.8/24")));
    assert!(merged(&harness, "eth0/192.0.2.8/24").await.is_none());
    assert!(harness.status(AddressSpecController::NAME).await.errors >= 2);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_add_is_retried_after_backoff() {
    // Given a backend that fails the next add
    let (harness, backend) = start("").await;
    backend.fail_next(BackendOperation::Add, 1);
    harness.expect_errors("AddressSpecController");

    // When the operator states an address
    operator::add_address(&*harness.state(), "eth0", net("192.0.2.9/24"))
        .await
        .unwrap();
    harness.settle().await;
    assert!(!backend.has("eth0", &net("192.0.2.9/24")));

    // Then it is applied once the restart backoff has passed
    harness.advance(Duration::from_secs(60)).await;
    assert!(backend.has("eth0", &net("192.0.2.9/24")));
    harness.expect::<AddressStatus>("eth0/192.0.2.9/24").await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_spec_for_a_missing_link_is_applied_when_the_link_appears() {
    // Given an address for a link that does not exist yet
    let (harness, backend) = start("").await;
    operator::add_address(&*harness.state(), "eth9", net("203.0.113.1/24"))
        .await
        .unwrap();
    harness.settle().await;
    assert!(!backend.has("eth9", &net("203.0.113.1/24")));
    assert_eq!(harness.status(AddressSpecController::NAME).await.errors, 0);

    // When the link appears (the backend's subscription wakes the controller)
    backend.add_link("eth9");
    harness.settle().await;

    // Then the address is applied and observed
    assert!(backend.has("eth9", &net("203.0.113.1/24")));
    harness.expect::<AddressStatus>("eth9/203.0.113.1/24").await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_address_waiting_for_its_link_is_pending_naming_the_link_until_the_link_appears() {
    // Given a cmdline address for a link that does not exist
    let (harness, backend) = start("ip=192.0.2.10:::24::eth9:off").await;

    // Then it is pending, saying which link it waits for
    let pending = harness.expect::<PendingAddress>("eth9/192.0.2.10/24").await;
    assert_eq!(
        pending.spec,
        PendingAddress {
            address: net("192.0.2.10/24"),
            link_name: "eth9".into(),
            reason: "waiting for link \"eth9\", which does not exist".into(),
        }
    );

    // When the link appears
    backend.add_link("eth9");
    harness.settle().await;

    // Then the address is applied and no longer pending
    assert!(backend.has("eth9", &net("192.0.2.10/24")));
    harness
        .expect_absent::<PendingAddress>("eth9/192.0.2.10/24")
        .await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_address_added_by_hand_shows_as_a_status_and_is_never_removed() {
    // Given a running chain with one operator address
    let (harness, backend) = start("").await;
    let state = harness.state();
    operator::add_address(&*state, "eth0", net("192.0.2.10/24"))
        .await
        .unwrap();
    harness.settle().await;

    // When someone adds an address by hand
    backend
        .add_by_hand("eth1", net("198.51.100.77/24"))
        .unwrap();
    harness.settle().await;

    // Then it shows as a status
    let status = harness
        .expect::<AddressStatus>("eth1/198.51.100.77/24")
        .await;
    assert_eq!(status.spec.link_name, "eth1");

    // And after the controllers removed the spec'd address, the hand-made one is still there
    operator::remove_address(&*state, "eth0", net("192.0.2.10/24"))
        .await
        .unwrap();
    harness.settle().await;
    assert!(!backend.has("eth0", &net("192.0.2.10/24")));
    assert!(backend.has("eth1", &net("198.51.100.77/24")));
    harness
        .expect::<AddressStatus>("eth1/198.51.100.77/24")
        .await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_applied_address_removed_by_hand_is_put_back() {
    // Given an applied operator address
    let (harness, backend) = start("").await;
    operator::add_address(&*harness.state(), "eth0", net("192.0.2.11/24"))
        .await
        .unwrap();
    harness.settle().await;

    // When it disappears from the link behind the controllers' back
    assert!(backend.remove_by_hand("eth0", &net("192.0.2.11/24")));
    harness.settle().await;

    // Then the spec controller puts it back
    assert!(backend.has("eth0", &net("192.0.2.11/24")));
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_layered_spec_whose_id_does_not_match_changes_nothing() {
    // Given a running chain
    let (harness, backend) = start("").await;

    // When a user writes an operator spec under an id that names another address
    let spec = AddressSpec::new("eth0", net("192.0.2.12/24"), ConfigLayer::Operator);
    let wrong = Resource::new_in(
        namespaces::NETWORK_CONFIG,
        "operator/eth0/192.0.2.99/24",
        spec,
    );
    harness
        .state()
        .create(wrong.into_shared(), CreateOptions::default())
        .await
        .unwrap();
    harness.settle().await;

    // Then nothing is merged or applied, and no controller failed
    assert!(merged(&harness, "eth0/192.0.2.12/24").await.is_none());
    assert!(merged(&harness, "eth0/192.0.2.99/24").await.is_none());
    assert!(!backend.has("eth0", &net("192.0.2.12/24")));
    assert_eq!(harness.status("AddressMergeController").await.errors, 0);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_operator_address_is_refused_naming_the_field() {
    let (harness, _backend) = start("").await;
    let err = operator::add_address(&*harness.state(), "eth 0", net("192.0.2.1/24"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spec.linkName"), "{err}");
    let raw = harness
        .state()
        .list(
            &AddressSpec::kind_in(namespaces::NETWORK_CONFIG),
            &Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(raw.len(), 1, "only the default lo spec: {raw:?}");
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_layered_specs_costs_few_reconciles() {
    // Given a running chain
    let (harness, backend) = start("").await;
    let before = harness.status("AddressMergeController").await.reconciles;

    // When 100 operator addresses are written back to back
    let state = harness.state();
    for i in 0..100u32 {
        let address = IpNet::new(
            std::net::Ipv4Addr::new(10, 0, (i / 250) as u8, (i % 250 + 1) as u8).into(),
            16,
        )
        .unwrap();
        operator::add_address(&*state, "eth0", address)
            .await
            .unwrap();
    }
    harness.settle().await;

    // Then all are applied, and the merge ran far fewer times than there were writes
    assert_eq!(harness.list::<AddressStatus>().await.len(), 101);
    assert_eq!(backend.calls().0, 101);
    let merges = harness.status("AddressMergeController").await.reconciles - before;
    assert!(merges < 20, "{merges} merge reconciles for 100 writes");
    harness.shutdown().await;
}
