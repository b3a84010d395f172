//! The registries on their own, with real files and a real etcd: what another node publishes
//! shows up in the view (woken by the registry's notice, not by time), and hostile entries — a
//! malformed document, a node id that does not match its key, values too large to list in one
//! reply, entries no lease holds — are skipped without disturbing the valid ones. A node whose
//! own etcd key is overwritten or deleted by a peer puts it back (woken by an etcd watch).

#[cfg(feature = "etcd")]
use std::collections::BTreeMap;
use std::time::Duration;

use cosi_node::cluster::{
    encode_node_id, encode_remote, Affiliate, AffiliateRegistry, DirectoryRegistry,
    DirectoryRegistryOptions, RegistryHealth, RegistryView,
};

/// Bounds every wait; only a broken system takes this long.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

fn affiliate(n: u8, hostname: &str) -> Affiliate {
    Affiliate {
        node_id: encode_node_id(&[n; 32]),
        addresses: vec!["192.0.2.1".parse().unwrap()],
        hostname: hostname.into(),
        nodename: hostname.into(),
        operating_system: "cosi-node (test)".into(),
        machine_type: "worker".into(),
        conditions: vec![],
    }
}

/// A lease that outlives the test, as every node's entry is held by one.
#[cfg(feature = "etcd")]
async fn etcd_lease(client: &mut etcd_client::Client) -> i64 {
    client.lease_grant(600, None).await.unwrap().id()
}

/// Waits on the registry's notices until `accept` holds for its view.
async fn wait_view(
    registry: &dyn AffiliateRegistry,
    accept: impl Fn(&RegistryView) -> bool,
) -> RegistryView {
    let mut changes = registry.subscribe();
    tokio::time::timeout(EVENT_TIMEOUT, async {
        loop {
            let view = registry.view();
            if accept(&view) {
                return view;
            }
            changes.changed().await.expect("the registry runs");
        }
    })
    .await
    .expect("the view changed in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_registry_reads_valid_files_and_skips_hostile_ones() {
    let dir = tempfile::tempdir().unwrap();
    // Another node's valid file, one whose content names another node, and garbage
    let other = affiliate(2, "node-2");
    std::fs::write(
        dir.path().join(format!("{}.json", other.node_id)),
        encode_remote(&other),
    )
    .unwrap();
    let liar = affiliate(3, "node-3");
    std::fs::write(
        dir.path()
            .join(format!("{}.json", encode_node_id(&[4; 32]))),
        encode_remote(&liar),
    )
    .unwrap();
    std::fs::write(
        dir.path()
            .join(format!("{}.json", encode_node_id(&[5; 32]))),
        b"{not json",
    )
    .unwrap();
    std::fs::write(dir.path().join("README.txt"), b"not an affiliate").unwrap();

    // When this node starts publishing
    let registry = DirectoryRegistry::start(DirectoryRegistryOptions::new(
        dir.path(),
        Duration::from_secs(30),
    ));
    let mine = affiliate(1, "node-1");
    registry.publish(Some(mine.clone()));

    // Then its view holds itself and the valid other node, nothing else
    let view = wait_view(&registry, |v| v.affiliates.len() == 2).await;
    assert_eq!(view.health, RegistryHealth::Healthy);
    assert_eq!(view.affiliates[&other.node_id], other);
    assert_eq!(view.affiliates[&mine.node_id], mine);
    assert!(dir.path().join(format!("{}.json", mine.node_id)).exists());

    // And when it withdraws, its file goes
    registry.publish(None);
    wait_view(&registry, |v| v.affiliates.len() == 1).await;
    assert!(!dir.path().join(format!("{}.json", mine.node_id)).exists());
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_registry_skips_hostile_values_and_follows_valid_ones() {
    use cosi_test_support::etcd::EtcdServer;

    let server = EtcdServer::start().expect("etcd starts");
    let prefix = format!("/cosi-registry-test-{}/", std::process::id());
    let mut client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let leased = Some(etcd_client::PutOptions::new().with_lease(etcd_lease(&mut client).await));
    // Hostile entries: garbage, a value naming another node, a key that is no node id
    client
        .put(
            format!("{prefix}{}", encode_node_id(&[7; 32])),
            "{garbage",
            leased.clone(),
        )
        .await
        .unwrap();
    client
        .put(
            format!("{prefix}{}", encode_node_id(&[8; 32])),
            encode_remote(&affiliate(9, "liar")),
            leased.clone(),
        )
        .await
        .unwrap();
    client
        .put(
            format!("{prefix}not-a-node-id"),
            encode_remote(&affiliate(6, "odd")),
            leased.clone(),
        )
        .await
        .unwrap();

    let mine = affiliate(1, "node-1");
    let (registry, view) = start_publishing(&server, &prefix, Duration::from_secs(2), &mine).await;
    assert_eq!(view.affiliates.len(), 1, "{:?}", view.affiliates.keys());

    // When another node publishes a valid affiliate, the watch brings it
    let other = affiliate(2, "node-2");
    client
        .put(
            format!("{prefix}{}", other.node_id),
            encode_remote(&other),
            leased.clone(),
        )
        .await
        .unwrap();
    let view = wait_view(&registry, |v| v.affiliates.len() == 2).await;
    assert_eq!(view.affiliates[&other.node_id], other);

    // And when it is deleted, it leaves the view
    client
        .delete(format!("{prefix}{}", other.node_id), None)
        .await
        .unwrap();
    wait_view(&registry, |v| v.affiliates.len() == 1).await;
}

/// A registry of `mine` on a fresh prefix of `server`, once its view holds `mine`; and a client
/// of its own.
#[cfg(feature = "etcd")]
async fn etcd_registry_publishing(
    server: &cosi_test_support::etcd::EtcdServer,
    prefix: &str,
    mine: &Affiliate,
) -> (cosi_node::cluster::EtcdRegistry, etcd_client::Client) {
    let client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let (registry, _) = start_publishing(server, prefix, Duration::from_secs(30), mine).await;
    (registry, client)
}

/// An etcd registry on `prefix` with `ttl`, publishing `mine`, once its view holds `mine` and
/// is healthy; and that view.
#[cfg(feature = "etcd")]
async fn start_publishing(
    server: &cosi_test_support::etcd::EtcdServer,
    prefix: &str,
    ttl: Duration,
    mine: &Affiliate,
) -> (cosi_node::cluster::EtcdRegistry, RegistryView) {
    use cosi_node::cluster::{EtcdRegistry, EtcdRegistryOptions};

    let options = EtcdRegistryOptions::new([server.endpoint()])
        .with_prefix(prefix)
        .with_ttl(ttl);
    let registry = EtcdRegistry::start(options);
    registry.publish(Some(mine.clone()));
    let view = wait_view(&registry, |v| v.affiliates.contains_key(&mine.node_id)).await;
    assert_eq!(view.health, RegistryHealth::Healthy);
    (registry, view)
}

/// A node publishing `node-1` through the etcd registry, its key and lease, a client of the
/// same etcd (the peer) and a watch of the key.
#[cfg(feature = "etcd")]
struct PublishedNode {
    _registry: cosi_node::cluster::EtcdRegistry,
    client: etcd_client::Client,
    mine: Affiliate,
    key: String,
    lease: i64,
    events: etcd_client::WatchStream,
    /// Last: fields drop in order, and the server outlives its clients.
    _server: cosi_test_support::etcd::EtcdServer,
}

#[cfg(feature = "etcd")]
impl PublishedNode {
    async fn start() -> Self {
        let server = cosi_test_support::etcd::EtcdServer::start().expect("etcd starts");
        let prefix = format!("/cosi-registry-test-{}/", std::process::id());
        let mine = affiliate(1, "node-1");
        let (registry, mut client) = etcd_registry_publishing(&server, &prefix, &mine).await;
        let key = format!("{prefix}{}", mine.node_id);
        let lease = client.get(key.as_str(), None).await.unwrap().kvs()[0].lease();
        let events = client.watch(key.as_str(), None).await.unwrap();
        PublishedNode {
            _registry: registry,
            client,
            mine,
            key,
            lease,
            events,
            _server: server,
        }
    }

    /// Waits on the watch of the key for the first put after `revision`.
    async fn next_put_after(&mut self, revision: i64) -> etcd_client::KeyValue {
        tokio::time::timeout(EVENT_TIMEOUT, async {
            loop {
                let batch = self
                    .events
                    .message()
                    .await
                    .unwrap()
                    .expect("the watch runs");
                for event in batch.events() {
                    let kv = event.kv().expect("events carry their key");
                    if event.event_type() == etcd_client::EventType::Put
                        && kv.mod_revision() > revision
                    {
                        return kv.clone();
                    }
                }
            }
        })
        .await
        .expect("the key was put again in time")
    }
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_registry_lists_past_oversized_values_and_publishes_itself() {
    use cosi_test_support::etcd::EtcdServer;

    let server = EtcdServer::start().expect("etcd starts");
    let prefix = format!("/cosi-registry-test-{}/", std::process::id());
    let mut client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    // Fourteen leased 1.2 MB values: together past what one reply may carry (tonic's default
    // is 4 MiB, the registry's 16 MiB), and a valid affiliate among them
    let leased = Some(etcd_client::PutOptions::new().with_lease(etcd_lease(&mut client).await));
    for n in 10..24 {
        client
            .put(
                format!("{prefix}{}", encode_node_id(&[n; 32])),
                vec![b' '; 1_200_000],
                leased.clone(),
            )
            .await
            .unwrap();
    }
    let other = affiliate(2, "node-2");
    client
        .put(
            format!("{prefix}{}", other.node_id),
            encode_remote(&other),
            leased.clone(),
        )
        .await
        .unwrap();

    // Then the registry connects, skips them, lists the valid one and publishes this node
    let mine = affiliate(1, "node-1");
    let (_registry, view) =
        start_publishing(&server, &prefix, Duration::from_secs(30), &mine).await;
    assert_eq!(
        view.affiliates,
        BTreeMap::from([
            (mine.node_id.clone(), mine.clone()),
            (other.node_id.clone(), other.clone()),
        ])
    );
    let stored = client
        .get(format!("{prefix}{}", mine.node_id), None)
        .await
        .unwrap();
    assert_eq!(stored.kvs()[0].value(), encode_remote(&mine));
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_registry_puts_its_own_key_again_when_a_peer_overwrites_it() {
    let mut node = PublishedNode::start().await;

    // When a peer puts a forged affiliate, without a lease, under this node's key
    let mut forged = node.mine.clone();
    forged.addresses = vec!["203.0.113.66".parse().unwrap()];
    let put = node
        .client
        .put(node.key.as_str(), encode_remote(&forged), None)
        .await
        .unwrap();

    // Then the node puts its own affiliate back, under its lease
    let restored = node.next_put_after(put.header().unwrap().revision()).await;
    assert_eq!(restored.value(), encode_remote(&node.mine));
    assert_eq!(restored.lease(), node.lease);
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_registry_puts_its_own_key_again_when_a_peer_deletes_it() {
    let mut node = PublishedNode::start().await;

    // When a peer deletes this node's key
    let deleted = node.client.delete(node.key.as_str(), None).await.unwrap();

    // Then the node puts its own affiliate back, under its lease
    let restored = node
        .next_put_after(deleted.header().unwrap().revision())
        .await;
    assert_eq!(restored.value(), encode_remote(&node.mine));
    assert_eq!(restored.lease(), node.lease);
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_registry_puts_its_own_key_again_when_a_peer_puts_its_value_without_the_lease() {
    let mut node = PublishedNode::start().await;

    // When a peer puts the node's own value again, without a lease (it would outlive the node)
    let put = node
        .client
        .put(node.key.as_str(), encode_remote(&node.mine), None)
        .await
        .unwrap();

    // Then the node puts it back under its lease
    let restored = node.next_put_after(put.header().unwrap().revision()).await;
    assert_eq!(restored.value(), encode_remote(&node.mine));
    assert_eq!(restored.lease(), node.lease);
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_registry_ignores_affiliates_that_no_lease_holds() {
    let server = cosi_test_support::etcd::EtcdServer::start().expect("etcd starts");
    let prefix = format!("/cosi-registry-test-{}/", std::process::id());
    let mut client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    // A valid affiliate without a lease, there before the node lists the prefix
    let listed = affiliate(2, "node-2");
    client
        .put(
            format!("{prefix}{}", listed.node_id),
            encode_remote(&listed),
            None,
        )
        .await
        .unwrap();
    let mine = affiliate(1, "node-1");
    let (registry, _) = etcd_registry_publishing(&server, &prefix, &mine).await;
    assert_eq!(
        registry.view().affiliates,
        BTreeMap::from([(mine.node_id.clone(), mine.clone())])
    );

    // When another one arrives without a lease, then a leased one after it
    let watched = affiliate(3, "node-3");
    client
        .put(
            format!("{prefix}{}", watched.node_id),
            encode_remote(&watched),
            None,
        )
        .await
        .unwrap();
    let leased = affiliate(4, "node-4");
    let lease = etcd_lease(&mut client).await;
    client
        .put(
            format!("{prefix}{}", leased.node_id),
            encode_remote(&leased),
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();

    // Then the view holds the leased one and not the other
    let view = wait_view(&registry, |v| v.affiliates.contains_key(&leased.node_id)).await;
    assert_eq!(
        view.affiliates,
        BTreeMap::from([
            (mine.node_id.clone(), mine.clone()),
            (leased.node_id.clone(), leased.clone()),
        ])
    );
}
