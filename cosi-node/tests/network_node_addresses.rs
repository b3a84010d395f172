//! Node addresses derived from address statuses, on the in-memory backend through the whole
//! chain (paused clock, no sleeps): `default` is sticky, `accumulative` never shrinks, `routed`
//! leaves out external addresses, and a filter's variants leave out its subnets.

use std::collections::BTreeMap;
use std::sync::Arc;

use cosi_controllers::testing::Harness;
use cosi_core::{CreateOptions, Resource, ResourceSpec};
use cosi_node::network::node_address::PreviousNodeAddresses;
use cosi_node::network::{
    self, derive_node_addresses, AddressFamily, AddressScope, AddressStatus, Cmdline,
    MemoryBackend, NodeAddress, NodeAddressFilter,
};
use ipnet::IpNet;
use proptest::prelude::*;

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn nets(texts: &[&str]) -> Vec<IpNet> {
    texts.iter().map(|t| net(t)).collect()
}

async fn start() -> (Harness, MemoryBackend) {
    let backend = MemoryBackend::with_links(["lo", "eth0", "eth1", "external"]);
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

async fn node_address(harness: &Harness, id: &str) -> Vec<IpNet> {
    harness
        .expect::<NodeAddress>(id)
        .await
        .spec
        .addresses
        .clone()
}

#[tokio::test(start_paused = true)]
async fn loopback_alone_gives_no_node_address() {
    let (harness, _backend) = start().await;
    assert_eq!(node_address(&harness, "current").await, Vec::<IpNet>::new());
    harness.expect_absent::<NodeAddress>("default").await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn current_is_sorted_ipv4_first_and_skips_link_local_addresses() {
    let (harness, backend) = start().await;
    for (link, address) in [
        ("eth1", "2001:db8::5/64"),
        ("eth0", "198.51.100.2/24"),
        ("eth0", "192.0.2.2/24"),
        ("eth0", "169.254.3.3/16"),
        ("eth1", "fe80::1/64"),
    ] {
        backend.add_by_hand(link, net(address)).unwrap();
    }
    harness.settle().await;
    assert_eq!(
        node_address(&harness, "current").await,
        nets(&["192.0.2.2/24", "198.51.100.2/24", "2001:db8::5/64"])
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn default_is_sticky_while_its_address_stays() {
    // Given a node whose only address becomes its default
    let (harness, backend) = start().await;
    backend.add_by_hand("eth0", net("198.51.100.9/24")).unwrap();
    harness.settle().await;
    assert_eq!(
        node_address(&harness, "default").await,
        nets(&["198.51.100.9/24"])
    );

    // When an address that sorts first appears, the default stays
    backend.add_by_hand("eth1", net("192.0.2.1/24")).unwrap();
    harness.settle().await;
    assert_eq!(
        node_address(&harness, "default").await,
        nets(&["198.51.100.9/24"])
    );

    // When the default's address goes, the first remaining one takes over
    backend.remove_by_hand("eth0", &net("198.51.100.9/24"));
    harness.settle().await;
    assert_eq!(
        node_address(&harness, "default").await,
        nets(&["192.0.2.1/24"])
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn accumulative_keeps_addresses_that_went_away() {
    let (harness, backend) = start().await;
    backend.add_by_hand("eth0", net("192.0.2.1/24")).unwrap();
    harness.settle().await;
    backend.remove_by_hand("eth0", &net("192.0.2.1/24"));
    backend.add_by_hand("eth0", net("192.0.2.2/24")).unwrap();
    harness.settle().await;
    assert_eq!(
        node_address(&harness, "current").await,
        nets(&["192.0.2.2/24"])
    );
    assert_eq!(
        node_address(&harness, "accumulative").await,
        nets(&["192.0.2.1/24", "192.0.2.2/24"])
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn routed_leaves_out_external_addresses() {
    let (harness, backend) = start().await;
    backend.add_by_hand("eth0", net("192.0.2.1/24")).unwrap();
    backend
        .add_by_hand("external", net("203.0.113.50/32"))
        .unwrap();
    harness.settle().await;
    assert_eq!(
        node_address(&harness, "current").await,
        nets(&["192.0.2.1/24", "203.0.113.50/32"])
    );
    assert_eq!(
        node_address(&harness, "routed").await,
        nets(&["192.0.2.1/24"])
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_no_k8s_variants_leave_out_pod_and_service_subnets() {
    // Given a node with a node address and addresses in the default pod and service subnets
    let (harness, backend) = start().await;
    for address in ["192.0.2.1/24", "10.244.0.1/24", "10.96.0.10/32"] {
        backend.add_by_hand("eth0", net(address)).unwrap();
    }
    harness.settle().await;

    // Then every -no-k8s variant holds only the node address
    let filter = harness.expect::<NodeAddressFilter>("no-k8s").await;
    assert_eq!(
        filter.spec.exclude_subnets,
        nets(&["10.244.0.0/16", "10.96.0.0/12"])
    );
    for id in ["current-no-k8s", "routed-no-k8s", "accumulative-no-k8s"] {
        assert_eq!(
            node_address(&harness, id).await,
            nets(&["192.0.2.1/24"]),
            "{id}"
        );
    }
    assert_eq!(node_address(&harness, "current").await.len(), 3);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_filter_that_goes_away_takes_its_variants_along() {
    // Given a filter that keeps only one subnet
    let (harness, backend) = start().await;
    backend.add_by_hand("eth0", net("192.0.2.1/24")).unwrap();
    backend.add_by_hand("eth0", net("198.51.100.1/24")).unwrap();
    let only_lab = NodeAddressFilter {
        include_subnets: nets(&["198.51.100.0/24"]),
        exclude_subnets: vec![],
    };
    harness
        .state()
        .create(
            Resource::new("only-lab", only_lab).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    harness.settle().await;
    assert_eq!(
        node_address(&harness, "routed-only-lab").await,
        nets(&["198.51.100.1/24"])
    );

    // When the filter is destroyed, its variants are destroyed too
    harness
        .state()
        .destroy(
            &NodeAddressFilter::kind().pointer("only-lab"),
            Default::default(),
        )
        .await
        .unwrap();
    harness.settle().await;
    for id in [
        "current-only-lab",
        "routed-only-lab",
        "accumulative-only-lab",
    ] {
        harness.expect_absent::<NodeAddress>(id).await;
    }
    harness.expect::<NodeAddress>("routed-no-k8s").await;
    harness.shutdown().await;
}

fn status(address: IpNet, link: &str) -> AddressStatus {
    AddressStatus {
        address,
        local: None,
        broadcast: None,
        link_index: 1,
        link_name: link.to_string(),
        family: AddressFamily::of(&address),
        scope: AddressScope::Global,
        flags: vec![],
    }
}

fn any_address() -> impl Strategy<Value = IpNet> {
    prop_oneof![
        (any::<[u8; 4]>(), 8u8..=32).prop_map(|(a, p)| IpNet::new(
            std::net::Ipv4Addr::from(a).into(),
            p
        )
        .unwrap()),
        (any::<[u16; 8]>(), 16u8..=128).prop_map(|(a, p)| IpNet::new(
            std::net::Ipv6Addr::from(a).into(),
            p
        )
        .unwrap()),
    ]
}

proptest! {
    #[test]
    fn derived_sets_keep_their_invariants(
        first in proptest::collection::vec((any_address(), prop_oneof![Just("eth0"), Just("external")]), 0..12),
        second in proptest::collection::vec((any_address(), prop_oneof![Just("eth0"), Just("external")]), 0..12),
        exclude in proptest::collection::vec(any_address(), 0..3),
    ) {
        let filters = BTreeMap::from([("f".to_string(), NodeAddressFilter { include_subnets: vec![], exclude_subnets: exclude })]);
        let to_statuses = |v: &[(IpNet, &str)]| v.iter().map(|(a, l)| status(*a, l)).collect::<Vec<_>>();
        let one = derive_node_addresses(&to_statuses(&first), &filters, &PreviousNodeAddresses::default());
        let previous = PreviousNodeAddresses {
            default: one.get("default").map(|d| d.addresses[0]),
            accumulative: one["accumulative"].addresses.clone(),
        };
        let two = derive_node_addresses(&to_statuses(&second), &filters, &previous);
        // accumulative never shrinks
        for a in &one["accumulative"].addresses {
            prop_assert!(two["accumulative"].addresses.contains(a));
        }
        for kind in ["current", "routed", "accumulative"] {
            // filtered variants are subsets of their kind, and sorted without duplicates
            let all = &two[kind].addresses;
            for a in &two[&format!("{kind}-f")].addresses {
                prop_assert!(all.contains(a));
            }
            let mut sorted = all.clone();
            cosi_node::network::node_address::sort_addresses(&mut sorted);
            prop_assert_eq!(&sorted, all);
        }
        // routed is current without external
        for a in &two["routed"].addresses {
            prop_assert!(two["current"].addresses.contains(a));
        }
        // the default is current whenever current is non-empty, and stays put if still current
        if let Some(d) = two.get("default") {
            if !two["current"].addresses.is_empty() {
                prop_assert!(two["current"].addresses.contains(&d.addresses[0]));
            }
            if let Some(p) = previous.default {
                if two["current"].addresses.contains(&p) {
                    prop_assert_eq!(d.addresses[0], p);
                }
            }
        }
    }
}
