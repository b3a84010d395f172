//! The `node` daemon's machine service, end to end with real processes: applies refused with
//! their field path and nothing changed, services and their logs, the node's events, the
//! build's version.

mod node_support;

use cosi_api::auth::Role;
use cosi_api::machine::{
    ApplyMode, ApplyRequest, EventTail, LogRequest, MachineEventPayload, ServiceAction,
};
use cosi_core::{Error, StateExt};
use cosi_node::config::{MachineConfig, ACTIVE};
use futures::StreamExt;
use node_support::*;

async fn active_version(client: &Client) -> u64 {
    client
        .state
        .get_typed::<MachineConfig>(&MachineConfig::pointer(ACTIVE))
        .await
        .unwrap()
        .metadata
        .version()
        .get()
}

/// The next item of a stream that must go on.
async fn next<T>(stream: &mut futures::stream::BoxStream<'_, T>, what: &str) -> T {
    tokio::time::timeout(PATIENCE, stream.next())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .unwrap_or_else(|| panic!("the stream ended before {what}"))
}

async fn node() -> (Pki, tempfile::TempDir, Daemon) {
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    (pki, state, node)
}

#[tokio::test]
async fn an_invalid_patch_is_refused_with_its_field_path_and_changes_nothing() {
    let (pki, _state, node) = node().await;
    let admin = mtls(&pki, node.address(), Role::Admin);

    let refused = admin
        .machine
        .apply_configuration(ApplyRequest {
            patches: vec![b"machine:\n  nodeLabels:\n    \"bad key\": x\n".to_vec()],
            mode: ApplyMode::NoReboot,
            ..ApplyRequest::default()
        })
        .await
        .unwrap_err();

    match &refused {
        Error::InvalidArgument { field, .. } => {
            assert_eq!(field, "machine.nodeLabels[\"bad key\"]", "{refused}")
        }
        other => panic!("expected an invalid argument, got {other:?}"),
    }
    assert_eq!(active_version(&admin).await, 1);
}

#[tokio::test]
async fn a_stale_expected_version_is_a_conflict_and_changes_nothing() {
    let (pki, _state, node) = node().await;
    let admin = mtls(&pki, node.address(), Role::Admin);

    let refused = admin
        .machine
        .apply_configuration(ApplyRequest {
            patches: vec![b"machine: {nodeLabels: {a: b}}".to_vec()],
            expected_version: Some(7),
            ..ApplyRequest::default()
        })
        .await
        .unwrap_err();

    assert!(refused.is_version_conflict(), "{refused:?}");
    assert_eq!(active_version(&admin).await, 1);
}

#[tokio::test]
async fn an_unknown_service_is_not_found() {
    let (pki, _state, node) = node().await;
    let operator = mtls(&pki, node.address(), Role::Operator);

    let action = operator
        .machine
        .service_action("nope", ServiceAction::Restart)
        .await
        .unwrap_err();
    assert!(action.is_not_found(), "{action:?}");
    let logs = operator
        .machine
        .logs(LogRequest {
            service: "nope".into(),
            tail: None,
            follow: false,
        })
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(logs.is_not_found(), "{logs:?}");
}

#[tokio::test]
async fn logs_tail_a_services_output_then_follow_its_new_lines() {
    let (pki, _state, node) = node().await;
    let operator = mtls(&pki, node.address(), Role::Operator);
    running_pid(&operator, "kubelet").await;

    // The kubelet's first line, read by a follower
    let mut lines = operator
        .machine
        .logs(LogRequest {
            service: "kubelet".into(),
            tail: None,
            follow: true,
        })
        .await
        .unwrap()
        .flat_map(|chunk| {
            let text = String::from_utf8(chunk.unwrap()).unwrap();
            futures::stream::iter(text.lines().map(str::to_string).collect::<Vec<_>>())
        })
        .boxed();
    let first = next(&mut lines, "a log line").await;
    assert!(
        first.starts_with("demo-kubelet: node node-1: serving healthz on 127.0.0.1:"),
        "{first}"
    );

    // When the kubelet restarts, the follower reads the old process's last line and the new
    // one's first
    operator
        .machine
        .service_action("kubelet", ServiceAction::Restart)
        .await
        .unwrap();
    assert_eq!(
        next(&mut lines, "a log line").await,
        "demo-kubelet: received SIGTERM, shutting down"
    );
    let again = next(&mut lines, "a log line").await;
    assert!(
        again.starts_with("demo-kubelet: node node-1: serving healthz on 127.0.0.1:"),
        "{again}"
    );
}

#[tokio::test]
async fn events_tell_config_changes_and_service_states_then_follow() {
    let (pki, _state, node) = node().await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    running_pid(&admin, "kubelet").await;

    // Every event kept: the first config (applied in maintenance), and the kubelet running
    let mut events = admin
        .machine
        .events(EventTail::All)
        .await
        .unwrap()
        .map(|event| event.unwrap().payload)
        .boxed();
    // (the history entry is written just after the config it records, so the kubelet may
    // start before it is logged)
    let (mut config, mut kubelet_running) = (None, false);
    while config.is_none() || !kubelet_running {
        match next(&mut events, "the first config and the kubelet running").await {
            MachineEventPayload::Config {
                version,
                mode,
                message,
            } => {
                assert!(config.is_none(), "one config event: {message}");
                config = Some((version, mode, message));
            }
            MachineEventPayload::Service { service, state, .. } => {
                assert_eq!(service, "kubelet");
                kubelet_running |= state == "Running";
            }
        }
    }
    let (version, mode, message) = config.unwrap();
    assert_eq!((version, mode), (1, ApplyMode::NoReboot));
    assert!(
        message.starts_with("no-reboot by caller (no role): "),
        "{message}"
    );

    // When a label is applied, a live config event names the caller
    admin
        .machine
        .apply_configuration(ApplyRequest {
            patches: vec![b"machine: {nodeLabels: {tier: gold}}".to_vec()],
            mode: ApplyMode::NoReboot,
            ..ApplyRequest::default()
        })
        .await
        .unwrap();
    loop {
        if let MachineEventPayload::Config {
            version,
            mode,
            message,
        } = next(&mut events, "the label's config event").await
        {
            assert_eq!((version, mode), (2, ApplyMode::NoReboot));
            assert_eq!(
                message,
                "no-reboot by admin (os:admin): +2 -0: machine.nodeLabels"
            );
            break;
        }
    }
}

#[tokio::test]
async fn version_names_the_build() {
    let (pki, _state, node) = node().await;
    let reader = mtls(&pki, node.address(), Role::Reader);

    let version = reader.machine.version().await.unwrap();

    assert_eq!(version.tag, format!("v{}", env!("CARGO_PKG_VERSION")));
    assert!(version.rust_version.starts_with("rustc "), "{version:?}");
    assert_eq!(version.arch, std::env::consts::ARCH);
    assert_eq!(version.os, std::env::consts::OS);
    // Built from a git checkout: the short revision; from a source tarball: nothing.
    assert!(
        version.sha.is_empty()
            || (version.sha.len() == 12 && version.sha.chars().all(|c| c.is_ascii_hexdigit())),
        "{version:?}"
    );
}

#[tokio::test]
async fn a_log_reader_that_stops_reading_never_slows_the_service_and_learns_what_it_missed() {
    // Given a kubelet that logs two lines a millisecond
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let chatty =
        config("node-1", "worker").replace(QUIET_SYNC, "sync-frequency: 1ms\n      v: '2'");
    let node = configured(&pki, state.path(), &chatty, &[]).await;
    let address = node.address();
    let reader = mtls(&pki, address, Role::Reader);
    running_pid(&reader, "kubelet").await;
    let follow = || LogRequest {
        service: "kubelet".into(),
        tail: Some(0),
        follow: true,
    };

    // And a follower that stops reading (a 1 KiB receive window, so the node's buffers fill)
    let slow = cosi_api::client::channel_with(
        address,
        None,
        cosi_api::client::ClientSecurity::MutualTls {
            ca_pem: pki.ca.cert_pem().to_string(),
            identity: pki.client(Role::Reader),
        },
        cosi_api::client::ChannelOptions {
            stream_window: Some(1024),
            ..Default::default()
        },
    )
    .unwrap();
    let mut stalled = cosi_api::client::MachineClient::new(slow)
        .logs(follow())
        .await
        .unwrap()
        .boxed();

    // When a reader that keeps up sees the kubelet go on far past every buffer
    let mut fast = reader
        .machine
        .logs(follow())
        .await
        .unwrap()
        .map(|chunk| String::from_utf8(chunk.unwrap()).unwrap())
        .boxed();
    let mut seen = String::new();
    while !seen.contains("sync loop 4000:") {
        seen = next(&mut fast, "the kubelet's sync loop 4000").await;
    }

    // Then the stalled reader, reading again, is told how many lines it skipped
    let mut read = String::new();
    while !read.contains(" lines skipped: the reader fell behind the service]\n") {
        let chunk = next(&mut stalled, "a skipped-lines marker").await.unwrap();
        read = String::from_utf8(chunk).unwrap();
    }
    let marker = read
        .lines()
        .find(|l| l.ends_with(" lines skipped: the reader fell behind the service]"))
        .unwrap();
    let skipped: u64 = marker
        .strip_prefix('[')
        .and_then(|m| m.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count in {marker:?}"));
    assert!(skipped > 0, "{marker}");
}
