//! Two `node` daemons sharing one registry directory (the demo's setup: a controlplane and a
//! worker on loopback) find each other: each lists both as members.

mod node_support;

use std::collections::BTreeMap;

use cosi_api::auth::Role;
use cosi_core::{Event, ResourceSpec, State, WatchKindOptions};
use cosi_node::cluster::Member;
use node_support::*;

/// Watches the members of `client`'s node until both `names` are there; returns them by name
/// with their machine types.
async fn members_until(client: &Client, names: [&str; 2]) -> BTreeMap<String, String> {
    let mut watch = client
        .state
        .watch_kind(
            &Member::kind(),
            WatchKindOptions {
                bootstrap: true,
                ..WatchKindOptions::default()
            },
        )
        .await
        .unwrap();
    let mut members = BTreeMap::new();
    tokio::time::timeout(PATIENCE, async {
        while let Some(event) = watch.recv().await {
            match event {
                Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                    let member = cosi_core::downcast::<Member>(resource).unwrap();
                    members.insert(
                        member.metadata.id().to_string(),
                        member.spec.machine_type.clone(),
                    );
                }
                Event::Destroyed { resource, .. } => {
                    members.remove(resource.metadata().id());
                }
                _ => {}
            }
            if names.iter().all(|n| members.contains_key(*n)) {
                return;
            }
        }
        panic!("the member watch ended");
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for members {names:?}; saw {members:?}"));
    members
}

#[tokio::test]
async fn two_daemons_sharing_a_registry_directory_list_each_other_as_members() {
    // Given a controlplane and a worker sharing a registry directory
    let pki = Pki::new();
    let registry = tempfile::tempdir().unwrap();
    let registry_dir = registry.path().to_str().unwrap();
    let flags = ["--registry-dir", registry_dir, "--registry-ttl", "3s"];
    let (a_state, b_state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = configured(
        &pki,
        a_state.path(),
        &config("node-a", "controlplane"),
        &flags,
    )
    .await;
    let b = configured(&pki, b_state.path(), &config("node-b", "worker"), &flags).await;

    // Then each lists both, with their machine types
    let expected = BTreeMap::from([
        ("node-a".to_string(), "controlplane".to_string()),
        ("node-b".to_string(), "worker".to_string()),
    ]);
    for node in [&a, &b] {
        let reader = mtls(&pki, node.address(), Role::Reader);
        assert_eq!(members_until(&reader, ["node-a", "node-b"]).await, expected);
    }
}
