//! Restarts of the `node` daemon, with real processes: what survives a restart of the
//! process (the persisted config, the node identity), what a restart reverts (a pending
//! `try`) or makes active (a `staged` config), and `reboot`, which restarts the runtime in
//! place with the process and its API up.

mod node_support;

use std::time::Duration;

use cosi_api::auth::Role;
use cosi_api::machine::{ApplyMode, ApplyRequest};
use cosi_core::{Event, ListOptions, ResourceSpec, State, StateExt, WatchOptions};
use cosi_node::cluster::{Identity, LOCAL};
use cosi_node::config::{ConfigHistory, MachineConfig, ACTIVE, PERSISTED};
use cosi_node::node::{MachineStage, MachineStatus};
use futures::StreamExt;
use nix::sys::signal::Signal;
use node_support::*;

const LABEL_PATCH: &str = "machine:\n  nodeLabels:\n    tier: gold\n";

async fn apply(client: &Client, patch: &str, mode: ApplyMode) -> cosi_api::machine::ApplyOutcome {
    client
        .machine
        .apply_configuration(ApplyRequest {
            patches: vec![patch.as_bytes().to_vec()],
            mode,
            try_timeout: (mode == ApplyMode::Try).then_some(Duration::from_secs(600)),
            ..ApplyRequest::default()
        })
        .await
        .unwrap()
}

async fn config_of(
    client: &Client,
    id: &str,
) -> std::sync::Arc<cosi_core::Resource<MachineConfig>> {
    client
        .state
        .get_typed::<MachineConfig>(&MachineConfig::pointer(id))
        .await
        .unwrap()
}

fn labels(config: &cosi_core::Resource<MachineConfig>) -> Vec<String> {
    config
        .spec
        .config()
        .machine()
        .node_labels
        .keys()
        .cloned()
        .collect()
}

async fn node_id(client: &Client) -> String {
    client
        .state
        .get_typed::<Identity>(&Identity::kind().pointer(LOCAL))
        .await
        .unwrap()
        .spec
        .node_id
        .clone()
}

#[tokio::test]
async fn a_restarted_daemon_keeps_its_config_versions_and_node_id() {
    // Given a configured node with a changed config
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    apply(&admin, LABEL_PATCH, ApplyMode::NoReboot).await;
    let active = config_of(&admin, ACTIVE).await;
    let persisted = config_of(&admin, PERSISTED).await;
    let id = wait_for::<Identity>(&admin, LOCAL, "the node id", |_| true)
        .await
        .spec
        .node_id
        .clone();

    // When the daemon stops and starts again on its state directory
    assert!(node.signal(Signal::SIGTERM).await.success());
    let mut node = Daemon::start(&pki, state.path(), &[]);

    // Then it serves mutual TLS at once, with the same configs and node id
    let (address, mode) = node.ready().await;
    assert_eq!(mode, Mode::MutualTls);
    let admin = mtls(&pki, address, Role::Admin);
    booted(&admin, 1).await;
    let active_now = config_of(&admin, ACTIVE).await;
    let persisted_now = config_of(&admin, PERSISTED).await;
    assert_eq!(active_now.metadata.version(), active.metadata.version());
    assert_eq!(
        persisted_now.metadata.version(),
        persisted.metadata.version()
    );
    assert_eq!(active_now.spec, active.spec);
    assert_eq!(labels(&active_now), ["tier"]);
    assert_eq!(node_id(&admin).await, id);
}

#[tokio::test]
async fn a_restart_of_the_daemon_reverts_a_pending_try() {
    // Given a node with a pending try that adds a label
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    let tried = apply(&admin, LABEL_PATCH, ApplyMode::Try).await;
    assert_eq!((tried.mode, tried.version), (ApplyMode::Try, 2));
    assert_eq!(labels(&*config_of(&admin, ACTIVE).await), ["tier"]);

    // When the daemon restarts
    assert!(node.signal(Signal::SIGTERM).await.success());
    let mut node = Daemon::start(&pki, state.path(), &[]);
    let (address, _) = node.ready().await;

    // Then the active config is the persisted one again, and the history says the start did it
    let admin = mtls(&pki, address, Role::Admin);
    booted(&admin, 1).await;
    let active = config_of(&admin, ACTIVE).await;
    assert_eq!(active.metadata.version().get(), 3);
    assert!(labels(&active).is_empty());
    let history = admin
        .state
        .list_typed::<ConfigHistory>(&ConfigHistory::kind(), &ListOptions::default())
        .await
        .unwrap();
    let modes: Vec<&str> = history.iter().map(|h| h.spec.mode.as_str()).collect();
    assert_eq!(modes, ["no-reboot", "try", "start"]);
}

#[tokio::test]
async fn a_staged_config_becomes_active_at_the_next_start() {
    // Given a node with a staged label
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    let staged = apply(&admin, LABEL_PATCH, ApplyMode::Staged).await;
    assert_eq!((staged.mode, staged.version), (ApplyMode::Staged, 2));
    assert!(labels(&*config_of(&admin, ACTIVE).await).is_empty());

    // When the daemon restarts
    assert!(node.signal(Signal::SIGTERM).await.success());
    let mut node = Daemon::start(&pki, state.path(), &[]);
    let (address, _) = node.ready().await;

    // Then the staged config is active
    let admin = mtls(&pki, address, Role::Admin);
    let status = booted(&admin, 1).await;
    let active = config_of(&admin, ACTIVE).await;
    assert_eq!(labels(&active), ["tier"]);
    assert_eq!(
        status.spec.config_version,
        Some(active.metadata.version().get())
    );
}

#[tokio::test]
async fn reboot_restarts_the_runtime_in_place_with_the_api_up() {
    // Given a configured node running its kubelet, and a watch on the node's status
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let pid = node.pid();
    let admin = mtls(&pki, node.address(), Role::Admin);
    booted(&admin, 1).await;
    let kubelet = running_pid(&admin, "kubelet").await;
    let mut status = admin
        .state
        .watch(
            &MachineStatus::kind().pointer(MachineStatus::ID),
            WatchOptions::default(),
        )
        .await
        .unwrap();

    // When a label is applied in reboot mode
    let applied = apply(&admin, LABEL_PATCH, ApplyMode::Reboot).await;
    assert_eq!((applied.mode, applied.version), (ApplyMode::Reboot, 2));

    // Then the watch opened before the reboot sees the second start, with the new config
    let second = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = status.recv().await {
            if let Event::Created { resource, .. } | Event::Updated { resource, .. } = event {
                let status = cosi_core::downcast::<MachineStatus>(resource).unwrap();
                if status.spec.boot == 2 && status.spec.stage == MachineStage::Running {
                    return status;
                }
            }
        }
        panic!("the status watch ended across the reboot")
    })
    .await
    .expect("the second start");
    let active = config_of(&admin, ACTIVE).await;
    assert_eq!(labels(&active), ["tier"]);
    assert_eq!(
        second.spec.config_version,
        Some(active.metadata.version().get())
    );

    // And it is the same process, still answering on the same connection, with a new kubelet
    assert!(node.is_running());
    assert_eq!(node.pid(), pid);
    assert_eq!(
        admin.machine.version().await.unwrap().arch,
        std::env::consts::ARCH
    );
    running_pid_except(&admin, "kubelet", Some(kubelet)).await;
    assert!(!alive(kubelet), "the first run's kubelet {kubelet} is gone");
    assert_eq!(node.seen.len(), 2, "no new ready line: {:?}", node.seen);
}

#[tokio::test]
async fn a_log_follow_ends_when_a_reboot_stops_its_service() {
    // Given a follower of the kubelet's log
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    running_pid(&admin, "kubelet").await;
    first_log_line(&admin, "kubelet").await;
    let mut lines = admin
        .machine
        .logs(cosi_api::machine::LogRequest {
            service: "kubelet".into(),
            tail: None,
            follow: true,
        })
        .await
        .unwrap()
        .boxed();

    // When the node reboots
    apply(&admin, LABEL_PATCH, ApplyMode::Reboot).await;

    // Then the follower reads the kubelet's whole life, to its last words, and its stream
    // ends without error
    let mut text = String::new();
    let ended = tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = lines.next().await {
            text.push_str(&String::from_utf8(chunk.unwrap()).unwrap());
        }
    })
    .await;
    assert!(ended.is_ok(), "the follow did not end; it read {text:?}");
    let read: Vec<&str> = text.lines().collect();
    assert_eq!(read.len(), 2, "{text}");
    assert!(
        read[0].starts_with("demo-kubelet: node node-1: serving healthz on 127.0.0.1:"),
        "{text}"
    );
    assert_eq!(read[1], "demo-kubelet: received SIGTERM, shutting down");
    booted(&admin, 2).await;
}

#[tokio::test]
async fn a_reboot_is_told_by_two_config_events_the_apply_and_the_start() {
    // Given a reader of the node's events from now on
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    let mut events = admin
        .machine
        .events(cosi_api::machine::EventTail::None)
        .await
        .unwrap()
        .boxed();

    // When a label is applied in reboot mode
    let applied = apply(&admin, LABEL_PATCH, ApplyMode::Reboot).await;

    // Then the stream, which goes on across the reboot, tells the apply (the persisted
    // version it wrote) and then the start that made it active
    let mut configs = Vec::new();
    while configs.len() < 2 {
        let event = tokio::time::timeout(PATIENCE, events.next())
            .await
            .expect("an event")
            .expect("the event stream goes on across the reboot")
            .unwrap();
        if let cosi_api::machine::MachineEventPayload::Config {
            version,
            mode,
            message,
        } = event.payload
        {
            configs.push((version, mode, message));
        }
    }
    let active = config_of(&admin, ACTIVE).await.metadata.version().get();
    assert_eq!(
        configs,
        [
            (
                applied.version,
                ApplyMode::Reboot,
                "reboot by admin (os:admin): +2 -0: machine.nodeLabels".to_string()
            ),
            (
                active,
                ApplyMode::Reboot,
                "start by node: +2 -0: machine.nodeLabels".to_string()
            ),
        ]
    );
}
