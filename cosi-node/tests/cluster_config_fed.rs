//! The local node follows the machine config: its hostname and machine type (the config
//! family's `Hostname` and `MachineType`) become the `LocalNode` and so the local affiliate and
//! the node's own member. Controller harness, paused clock.

use cosi_controllers::testing::Harness;
use cosi_core::{CreateOptions, Resource, ResourceSpec, StateExt, UpdateOptions};
use cosi_node::cluster::{
    self, Affiliate, Identity, LocalNode, LocalNodeController, Member, LOCAL,
};
use cosi_node::config::{Hostname, MachineRole, MachineType};

async fn start() -> Harness {
    let harness = Harness::new();
    cluster::register_with_config(harness.engine(), vec![]).unwrap();
    harness.start().await;
    harness
}

#[tokio::test(start_paused = true)]
async fn the_local_node_follows_the_config_hostname_and_machine_type() {
    let harness = start().await;
    harness.expect_absent::<LocalNode>(LOCAL).await;

    // When the config fan-out states a hostname and a role
    let state = harness.state();
    let hostname = Hostname {
        hostname: "node-7".into(),
    };
    state
        .create(
            Resource::new(Hostname::ID, hostname).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let role = MachineType {
        machine_type: MachineRole::ControlPlane,
    };
    state
        .create(
            Resource::new(MachineType::ID, role).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    harness.settle().await;

    // Then the local node, the local affiliate and the node's own member carry them
    let node = harness.expect::<LocalNode>(LOCAL).await;
    assert_eq!(node.metadata.owner(), Some(LocalNodeController::NAME));
    assert_eq!(node.spec.hostname, "node-7");
    assert_eq!(node.spec.machine_type, "controlplane");
    let id = harness.expect::<Identity>(LOCAL).await.spec.node_id.clone();
    assert_eq!(
        harness.expect::<Affiliate>(&id).await.spec.nodename,
        "node-7"
    );
    assert_eq!(
        harness.expect::<Member>("node-7").await.spec.machine_type,
        "controlplane"
    );

    // When the hostname changes, the member moves to the new name
    state
        .modify(
            Resource::new(
                Hostname::ID,
                Hostname {
                    hostname: "node-8".into(),
                },
            ),
            UpdateOptions::default(),
            |r| {
                r.spec.hostname = "node-8".into();
                Ok(())
            },
        )
        .await
        .unwrap();
    harness.settle().await;
    harness.expect_absent::<Member>("node-7").await;
    harness.expect::<Member>("node-8").await;

    // When the config states no hostname any more, there is no local node
    state
        .destroy(&Hostname::kind().pointer(Hostname::ID), Default::default())
        .await
        .unwrap();
    harness.settle().await;
    harness.expect_absent::<LocalNode>(LOCAL).await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_default_hostname_names_the_local_node_until_the_config_names_one() {
    // Given a node whose daemon was given a default hostname, and no config
    let harness = Harness::new();
    harness
        .engine()
        .register(LocalNodeController::with_default_hostname("node-from-flag"))
        .unwrap();
    cluster::register(harness.engine(), vec![]).unwrap();
    harness.start().await;

    // Then the local node carries the default, with an unknown machine type
    let node = harness.expect::<LocalNode>(LOCAL).await;
    assert_eq!(node.spec.hostname, "node-from-flag");
    assert_eq!(node.spec.machine_type, "unknown");

    // When the config names a hostname, it wins
    let hostname = Hostname {
        hostname: "node-from-config".into(),
    };
    harness
        .state()
        .create(
            Resource::new(Hostname::ID, hostname).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    harness.settle().await;
    assert_eq!(
        harness.expect::<LocalNode>(LOCAL).await.spec.hostname,
        "node-from-config"
    );

    // When the config stops naming one, the default is back
    harness
        .state()
        .destroy(&Hostname::kind().pointer(Hostname::ID), Default::default())
        .await
        .unwrap();
    harness.settle().await;
    assert_eq!(
        harness.expect::<LocalNode>(LOCAL).await.spec.hostname,
        "node-from-flag"
    );
    harness.shutdown().await;
}
