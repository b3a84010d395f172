//! Three real node processes sharing a registry directory (no etcd): each lists all three
//! members; a SIGKILLed node leaves the others' lists once its file's TTL passes, and comes
//! back with the same node id when restarted on its state directory.

mod cluster_peers;

use cluster_peers::{killed_node_expires_and_returns, three_nodes, Registry};

#[test]
fn three_nodes_sharing_a_directory_list_three_members() {
    let root = tempfile::tempdir().unwrap();
    let registry = Registry::Directory(root.path().join("registry"));
    let (peers, ids) = three_nodes(root.path(), &registry);
    assert_eq!(ids.len(), 3);
    assert_eq!(peers.len(), 3);
}

#[test]
fn a_killed_node_expires_and_returns_with_the_same_identity() {
    let root = tempfile::tempdir().unwrap();
    let registry = Registry::Directory(root.path().join("registry"));
    killed_node_expires_and_returns(root.path(), &registry);
}
