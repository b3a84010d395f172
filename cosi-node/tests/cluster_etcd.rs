//! Three real node processes sharing one real etcd: each lists all three members; a SIGKILLed
//! node leaves the others' lists once its lease expires (etcd deletes its key and their
//! watches report it), and comes back with the same node id when restarted on its state
//! directory. While etcd is down the members stay, marked stale, and recover when it returns.
#![cfg(feature = "etcd")]

mod cluster_peers;

use std::sync::atomic::{AtomicUsize, Ordering};

use cluster_peers::{killed_node_expires_and_returns, three_nodes, Registry};
use cosi_test_support::etcd::EtcdServer;

fn registry(server: &EtcdServer) -> Registry {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    Registry::Etcd {
        endpoint: server.endpoint(),
        prefix: format!(
            "/cosi-test-{}-{}/affiliates/",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ),
    }
}

#[test]
fn three_nodes_sharing_etcd_list_three_members() {
    let server = EtcdServer::start().expect("etcd starts");
    let root = tempfile::tempdir().unwrap();
    let (peers, ids) = three_nodes(root.path(), &registry(&server));
    assert_eq!(ids.len(), 3);
    assert_eq!(peers.len(), 3);
}

#[test]
fn a_killed_node_expires_after_its_lease_and_returns_with_the_same_identity() {
    let server = EtcdServer::start().expect("etcd starts");
    let root = tempfile::tempdir().unwrap();
    killed_node_expires_and_returns(root.path(), &registry(&server));
}

#[test]
fn members_go_stale_while_etcd_is_down_and_recover_when_it_returns() {
    let mut server = EtcdServer::start().expect("etcd starts");
    let root = tempfile::tempdir().unwrap();
    let (peers, ids) = three_nodes(root.path(), &registry(&server));

    // When etcd goes down, every node keeps its members, the others marked stale
    server.stop();
    for peer in &peers {
        peer.wait_stale_members(&ids);
    }

    // When it returns, they are fresh again
    server.restart().expect("etcd restarts");
    for peer in &peers {
        peer.wait_members(&ids);
    }
}
