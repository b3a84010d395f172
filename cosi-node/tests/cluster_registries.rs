//! The registries on their own, with real files and a real etcd: what another node publishes
//! shows up in the view (woken by the registry's notice, not by time), and hostile entries — a
//! malformed document, a node id that does not match its key, values too large to list in one
//! reply — are skipped without disturbing the valid ones.

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
    use cosi_node::cluster::{EtcdRegistry, EtcdRegistryOptions};
    use cosi_test_support::etcd::EtcdServer;

    let server = EtcdServer::start().expect("etcd starts");
    let prefix = format!("/cosi-registry-test-{}/", std::process::id());
    let mut client = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    // Hostile entries: garbage, a value naming another node, a key that is no node id
    client
        .put(
            format!("{prefix}{}", encode_node_id(&[7; 32])),
            "{garbage",
            None,
        )
        .await
        .unwrap();
    client
        .put(
            format!("{prefix}{}", encode_node_id(&[8; 32])),
            encode_remote(&affiliate(9, "liar")),
            None,
        )
        .await
        .unwrap();
    client
        .put(
            format!("{prefix}not-a-node-id"),
            encode_remote(&affiliate(6, "odd")),
            None,
        )
        .await
        .unwrap();

    let options = EtcdRegistryOptions::new([server.endpoint()])
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(2));
    let registry = EtcdRegistry::start(options);
    let mine = affiliate(1, "node-1");
    registry.publish(Some(mine.clone()));
    let view = wait_view(&registry, |v| v.affiliates.contains_key(&mine.node_id)).await;
    assert_eq!(view.health, RegistryHealth::Healthy);
    assert_eq!(view.affiliates.len(), 1, "{:?}", view.affiliates.keys());

    // When another node publishes a valid affiliate, the watch brings it
    let other = affiliate(2, "node-2");
    client
        .put(
            format!("{prefix}{}", other.node_id),
            encode_remote(&other),
            None,
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

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_registry_lists_past_oversized_values_and_publishes_itself() {
    use cosi_node::cluster::{EtcdRegistry, EtcdRegistryOptions};
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

    let options = EtcdRegistryOptions::new([server.endpoint()])
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(30));
    let registry = EtcdRegistry::start(options);
    let mine = affiliate(1, "node-1");
    registry.publish(Some(mine.clone()));

    // Then the registry connects, skips them, lists the valid one and publishes this node
    let view = wait_view(&registry, |v| v.affiliates.contains_key(&mine.node_id)).await;
    assert_eq!(view.health, RegistryHealth::Healthy);
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
