//! The netlink backend on a real kernel, inside a network namespace each test creates (a veth
//! pair; documentation-range addresses that exist only inside it; no traffic leaves it): the
//! machine config adds an address → it is in the kernel and in `AddressStatus`; the config
//! drops it → it leaves both; an address added by hand shows as a status and stays. The
//! whole address chain runs on a thread that entered the namespace, so its netlink sockets
//! belong to it; the test checks the kernel with `ip -n <namespace>`, and waits on watch
//! events, never on time.
//!
//! A test that cannot create its namespace fails, naming what is missing; it never skips.
#![cfg(all(target_os = "linux", feature = "netlink"))]

use std::sync::Arc;
use std::time::Duration;

use cosi_controllers::Engine;
use cosi_core::{Resource, ResourceSpec, State, StateExt, UpdateOptions};
use cosi_node::config::{MachineConfig, ACTIVE};
use cosi_node::network::{
    self, operator, AddressRequest, AddressScope, AddressStatus, Cmdline, NetlinkBackend,
    NetworkBackend, PendingAddress,
};
use cosi_state::{MemoryOptions, MemoryState};
use cosi_test_support::netns::Namespace;
use ipnet::IpNet;

/// Bounds every wait; only a broken system takes this long.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

/// The address chain on the namespace's kernel.
async fn start_chain() -> (Arc<dyn State>, Engine) {
    start_chain_with(Cmdline::default()).await
}

/// The address chain on the namespace's kernel, with the `ip=` addresses of `cmdline`.
async fn start_chain_with(cmdline: Cmdline) -> (Arc<dyn State>, Engine) {
    let state: Arc<dyn State> = Arc::new(MemoryState::new(MemoryOptions::default()));
    let backend = NetlinkBackend::connect().expect("netlink sockets in the namespace");
    let engine = Engine::new(state.clone());
    network::register(&engine, Arc::new(backend), cmdline).unwrap();
    engine.start();
    (state, engine)
}

/// Makes `addresses` on `veth0` the active machine config's, as an apply would.
async fn configure(state: &dyn State, addresses: &[&str]) {
    let list: String = addresses.iter().map(|a| format!("      - {a}\n")).collect();
    let text = format!(
        "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n    - interface: veth0\n      addresses:\n{list}"
    );
    let mc = MachineConfig::from_text(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
    state
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
}

/// Waits until the status `id` exists (`present`) or is gone.
async fn wait_status(state: &dyn State, id: &str, present: bool) {
    wait_for::<AddressStatus>(state, id, present).await;
}

/// Waits until the resource `id` of type `S` exists (`present`) or is gone.
async fn wait_for<S: ResourceSpec>(state: &dyn State, id: &str, present: bool) {
    let pointer = S::kind().pointer(id.to_string());
    tokio::time::timeout(
        EVENT_TIMEOUT,
        state.watch_for(&pointer, |r| r.is_some() == present),
    )
    .await
    .unwrap_or_else(|_| panic!("{pointer} present={present} not reached in time"))
    .expect("the watch");
}

#[test]
fn an_address_in_the_config_reaches_the_kernel_and_the_status() {
    let ns = Namespace::create();
    let check = ns.kernel();
    ns.enter(move || async move {
        let (state, engine) = start_chain().await;
        configure(&*state, &["192.0.2.10/24"]).await;
        wait_status(&*state, "veth0/192.0.2.10/24", true).await;
        assert!(
            check.kernel_has("veth0", "192.0.2.10/24"),
            "{:?}",
            check.kernel_addresses()
        );
        let status = state
            .get_typed::<AddressStatus>(&AddressStatus::kind().pointer("veth0/192.0.2.10/24"))
            .await
            .unwrap();
        assert_eq!(status.spec.link_name, "veth0");
        engine.shutdown().await;
    });
}

#[test]
fn an_address_removed_from_the_config_leaves_the_kernel_and_the_status() {
    let ns = Namespace::create();
    let check = ns.kernel();
    ns.enter(move || async move {
        let (state, engine) = start_chain().await;
        // Two subnets: deleting a subnet's primary IPv4 address makes the kernel delete that
        // subnet's secondaries too (the spec controller would put them back, later).
        configure(&*state, &["192.0.2.11/24", "198.51.100.12/24"]).await;
        wait_status(&*state, "veth0/192.0.2.11/24", true).await;
        wait_status(&*state, "veth0/198.51.100.12/24", true).await;

        configure(&*state, &["198.51.100.12/24"]).await;
        wait_status(&*state, "veth0/192.0.2.11/24", false).await;
        assert!(
            check.kernel_has("veth0", "198.51.100.12/24"),
            "{:?}",
            check.kernel_addresses()
        );
        assert!(
            !check.kernel_has("veth0", "192.0.2.11/24"),
            "{:?}",
            check.kernel_addresses()
        );
        engine.shutdown().await;
    });
}

#[test]
fn an_address_for_a_link_the_kernel_lacks_is_pending_until_the_link_is_made() {
    let ns = Namespace::create();
    let check = ns.kernel();
    ns.enter(move || async move {
        // Given a cmdline address for veth9, which the namespace does not have
        let cmdline = Cmdline::parse("ip=192.0.2.20:::24::veth9:off").unwrap();
        let (state, engine) = start_chain_with(cmdline).await;

        // Then it is pending, naming the link, and not in the kernel
        wait_for::<PendingAddress>(&*state, "veth9/192.0.2.20/24", true).await;
        let pending = state
            .get_typed::<PendingAddress>(&PendingAddress::kind().pointer("veth9/192.0.2.20/24"))
            .await
            .unwrap();
        assert_eq!(
            pending.spec.reason,
            "waiting for link \"veth9\", which does not exist"
        );
        assert!(
            !check.kernel_has("veth9", "192.0.2.20/24"),
            "{:?}",
            check.kernel_addresses()
        );

        // When someone with a shell makes the link
        check.ip(&[
            "link", "add", "veth9", "type", "veth", "peer", "name", "veth10",
        ]);

        // Then the address reaches the kernel and is no longer pending
        wait_status(&*state, "veth9/192.0.2.20/24", true).await;
        wait_for::<PendingAddress>(&*state, "veth9/192.0.2.20/24", false).await;
        assert!(
            check.kernel_has("veth9", "192.0.2.20/24"),
            "{:?}",
            check.kernel_addresses()
        );
        engine.shutdown().await;
    });
}

#[test]
fn an_address_added_by_hand_shows_as_a_status_and_stays_in_the_kernel() {
    let ns = Namespace::create();
    let check = ns.kernel();
    ns.enter(move || async move {
        let (state, engine) = start_chain().await;
        wait_status(&*state, "lo/127.0.0.1/8", true).await;

        // Someone with a shell adds an address: the subscription reports it.
        check.ip(&["addr", "add", "198.51.100.7/24", "dev", "veth1"]);
        wait_status(&*state, "veth1/198.51.100.7/24", true).await;

        // The controllers then add and remove a stated address: they have reconciled with
        // the hand-made one present, and left it alone.
        operator::add_address(&*state, "veth0", net("192.0.2.12/24"))
            .await
            .unwrap();
        wait_status(&*state, "veth0/192.0.2.12/24", true).await;
        operator::remove_address(&*state, "veth0", net("192.0.2.12/24"))
            .await
            .unwrap();
        wait_status(&*state, "veth0/192.0.2.12/24", false).await;
        assert!(
            check.kernel_has("veth1", "198.51.100.7/24"),
            "{:?}",
            check.kernel_addresses()
        );
        state
            .get(&AddressStatus::kind().pointer("veth1/198.51.100.7/24"))
            .await
            .expect("the hand-made address keeps its status");
        engine.shutdown().await;
    });
}

#[test]
fn an_ipv6_address_on_its_link_with_another_prefix_is_not_reported_as_added() {
    // The kernel holds an IPv6 address once per link, whatever its prefix: a second prefix is
    // refused with EEXIST, which must not read as "already there".
    let ns = Namespace::create();
    let check = ns.kernel();
    ns.enter(move || async move {
        let backend = NetlinkBackend::connect().expect("netlink sockets in the namespace");
        let request = |address: &str| AddressRequest {
            link_name: "veth0".into(),
            address: net(address),
            scope: AddressScope::Global,
        };
        backend
            .add_address(&request("2001:db8::1/64"))
            .await
            .unwrap();
        // Adding the same address again succeeds: it is there.
        backend
            .add_address(&request("2001:db8::1/64"))
            .await
            .unwrap();

        let error = backend
            .add_address(&request("2001:db8::1/80"))
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "add 2001:db8::1/80 to veth0: 2001:db8::1 is already on veth0 as 2001:db8::1/64"
        );
        assert!(
            !check.kernel_has("veth0", "2001:db8::1/80"),
            "{:?}",
            check.kernel_addresses()
        );
    });
}
