//! The machine service end to end over loopback: configuration apply (dry run, diff,
//! expected version, validation errors naming the field), services, logs (tail, follow),
//! events, version. The node side is the in-memory `TestMachine`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use cosi_api::client::{channel, ClientSecurity, MachineClient};
use cosi_api::machine::{
    ApplyMode, ApplyRequest, EventTail, LogRequest, MachineEventPayload, ServiceAction,
};
use cosi_api::server::{ApiServer, Security, ServerHandle};
use cosi_api::testing::TestMachine;
use cosi_core::Error;
use futures::StreamExt;
use tokio::net::TcpListener;

const TIMEOUT: Duration = Duration::from_secs(20);

async fn node() -> (Arc<TestMachine>, MachineClient, ServerHandle) {
    let machine = Arc::new(TestMachine::new());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = ApiServer::new(Security::Plaintext)
        .with_machine(machine.clone())
        .serve(listener)
        .unwrap();
    let client =
        MachineClient::new(channel(server.local_addr(), None, ClientSecurity::Plaintext).unwrap());
    (machine, client, server)
}

fn apply(yaml: &str) -> ApplyRequest {
    ApplyRequest {
        data: yaml.as_bytes().to_vec(),
        ..Default::default()
    }
}

#[tokio::test]
async fn apply_resolves_the_mode_and_returns_the_diff() {
    let (machine, client, _server) = node().await;
    let first = client
        .apply_configuration(apply("hostname: node-1\n"))
        .await
        .unwrap();
    assert_eq!((first.mode, first.version), (ApplyMode::NoReboot, 1));
    let second = client
        .apply_configuration(apply("hostname: node-2\n"))
        .await
        .unwrap();
    assert_eq!(
        second.diff,
        "--- a\n+++ b\n-hostname: node-1\n+hostname: node-2\n"
    );
    assert_eq!(
        machine.snapshot().config.as_deref(),
        Some("hostname: node-2\n")
    );
}

#[tokio::test]
async fn patches_reach_the_node_with_the_caller_as_actor() {
    let (machine, client, _server) = node().await;
    let request = ApplyRequest {
        patches: vec![b"hostname: node-3\n".to_vec()],
        actor: "spoofed by the client".into(),
        ..Default::default()
    };
    client.apply_configuration(request).await.unwrap();
    let received = machine.last_apply().unwrap();
    assert_eq!(received.patches, vec![b"hostname: node-3\n".to_vec()]);
    assert!(received.data.is_empty());
    // A plaintext caller is trusted as an admin with no certificate name.
    assert_eq!(received.actor, "caller (os:admin)");
}

#[tokio::test]
async fn data_and_patches_together_are_refused() {
    let (machine, client, _server) = node().await;
    let request = ApplyRequest {
        data: b"hostname: node-1\n".to_vec(),
        patches: vec![b"hostname: node-3\n".to_vec()],
        ..Default::default()
    };
    let error = client.apply_configuration(request).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("patches: give either a whole configuration (data) or patches, not both"),
        "{error}"
    );
    assert_eq!(machine.last_apply(), None);
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let (machine, client, _server) = node().await;
    client
        .apply_configuration(apply("hostname: node-1\n"))
        .await
        .unwrap();
    let before = machine.snapshot();
    let dry = ApplyRequest {
        dry_run: true,
        ..apply("hostname: node-2\n")
    };
    let outcome = client.apply_configuration(dry).await.unwrap();
    assert!(
        outcome.details.starts_with("Dry run summary"),
        "{}",
        outcome.details
    );
    assert_eq!(
        outcome.diff,
        "--- a\n+++ b\n-hostname: node-1\n+hostname: node-2\n"
    );
    assert_eq!(machine.snapshot(), before);
}

#[tokio::test]
async fn apply_with_a_stale_expected_version_conflicts_and_changes_nothing() {
    let (machine, client, _server) = node().await;
    client
        .apply_configuration(apply("hostname: node-1\n"))
        .await
        .unwrap();
    let before = machine.snapshot();
    let stale = ApplyRequest {
        expected_version: Some(0),
        ..apply("hostname: node-2\n")
    };
    let err = client.apply_configuration(stale).await.unwrap_err();
    assert!(matches!(err, Error::VersionConflict { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(machine.snapshot(), before);
}

#[tokio::test]
async fn invalid_configuration_is_refused_naming_the_field() {
    let (machine, client, _server) = node().await;
    let err = client
        .apply_configuration(apply("hostname: 7\n"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "config/MachineConfigs.config.cosi.dev/v1alpha1: invalid hostname: required, a non-empty string"
    );
    assert_eq!(machine.snapshot().version, 0);
}

#[tokio::test]
async fn services_are_listed_started_stopped_and_restarted() {
    let (machine, client, _server) = node().await;
    let ids: Vec<_> = client
        .services()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.state))
        .collect();
    assert_eq!(
        ids,
        [
            ("etcd".into(), "Running".into()),
            ("kubelet".into(), "Stopped".into())
        ]
    );
    client
        .service_action("kubelet", ServiceAction::Start)
        .await
        .unwrap();
    client
        .service_action("etcd", ServiceAction::Stop)
        .await
        .unwrap();
    client
        .service_action("etcd", ServiceAction::Restart)
        .await
        .unwrap();
    assert_eq!(
        machine.snapshot().services,
        [
            ("etcd".into(), "Running".into(), 1),
            ("kubelet".into(), "Running".into(), 0)
        ]
    );
    let err = client
        .service_action("nope", ServiceAction::Start)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "runtime/Services.runtime.cosi.dev/nope: not found"
    );
}

#[tokio::test]
async fn logs_tail_the_last_lines() {
    let (_machine, client, _server) = node().await;
    let request = LogRequest {
        service: "etcd".into(),
        tail: Some(2),
        follow: false,
    };
    let chunks: Vec<_> = client.logs(request).await.unwrap().collect().await;
    let text: String = chunks
        .into_iter()
        .map(|c| String::from_utf8(c.unwrap()).unwrap())
        .collect();
    assert_eq!(text, "etcd line 4\netcd line 5\n");
}

#[tokio::test]
async fn followed_logs_deliver_new_lines() {
    let (machine, client, _server) = node().await;
    let request = LogRequest {
        service: "etcd".into(),
        tail: Some(0),
        follow: true,
    };
    let mut logs = client.logs(request).await.unwrap().boxed();
    machine.log("etcd", "fresh");
    let chunk = tokio::time::timeout(TIMEOUT, logs.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(chunk, b"fresh\n");
}

#[tokio::test]
async fn events_stream_past_and_new_machine_events() {
    let (_machine, client, _server) = node().await;
    client
        .service_action("etcd", ServiceAction::Restart)
        .await
        .unwrap();
    let mut events = client.events(EventTail::All).await.unwrap().boxed();
    let past = tokio::time::timeout(TIMEOUT, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        past.payload,
        MachineEventPayload::Service {
            service: "etcd".into(),
            state: "Running".into(),
            message: "Restart".into()
        }
    );
    client
        .apply_configuration(apply("hostname: node-1\n"))
        .await
        .unwrap();
    let new = tokio::time::timeout(TIMEOUT, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        new.payload,
        MachineEventPayload::Config {
            version: 1,
            mode: ApplyMode::NoReboot,
            message: "applied".into()
        }
    );
    assert!(new.id > past.id);
}

#[tokio::test]
async fn version_reports_the_build() {
    let (_machine, client, _server) = node().await;
    let version = client.version().await.unwrap();
    assert_eq!(
        (version.tag.as_str(), version.os.as_str()),
        ("v0.1.0", std::env::consts::OS)
    );
}

#[tokio::test]
async fn a_follow_stream_ends_when_the_server_stops() {
    let (_machine, client, server) = node().await;
    let request = LogRequest {
        service: "etcd".into(),
        tail: Some(0),
        follow: true,
    };
    let mut logs = client.logs(request).await.unwrap().boxed();
    tokio::time::timeout(TIMEOUT, server.shutdown())
        .await
        .unwrap()
        .unwrap();
    let end = tokio::time::timeout(TIMEOUT, logs.next()).await.unwrap();
    match end {
        Some(Err(e)) => assert!(e.is_retryable(), "{e:?}"),
        other => panic!("expected an unavailable error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stop_ends_a_call_whose_request_is_still_arriving_with_its_reason() {
    use cosi_api::proto::machine::{ApplyConfigurationRequest, ApplyConfigurationResponse};
    use tonic::codegen::http::uri::PathAndQuery;

    // Given a caller holding a call open: its apply begun, its request never sent
    let (machine, _client, server) = node().await;
    let holder = channel(server.local_addr(), None, ClientSecurity::Plaintext).unwrap();
    let (_never_sent, held) = tokio::sync::oneshot::channel::<ApplyConfigurationRequest>();
    let mut grpc = tonic::client::Grpc::new(holder.clone());
    grpc.ready().await.unwrap();
    let mut held_call = Box::pin(
        grpc.client_streaming::<_, _, ApplyConfigurationResponse, _>(
            tonic::Request::new(futures::stream::once(async { held.await.unwrap() })),
            PathAndQuery::from_static(cosi_api::auth::APPLY_CONFIGURATION),
            tonic_prost::ProstCodec::default(),
        ),
    );
    assert!(futures::poll!(&mut held_call).is_pending());
    // (a later call on the same connection is answered after the server took the held one in)
    MachineClient::new(holder).version().await.unwrap();

    // When the server stops, giving a reason
    tokio::time::timeout(TIMEOUT, server.shutdown_because("come back later"))
        .await
        .expect("the stop does not wait for a request that has not arrived")
        .unwrap();

    // Then the held call has ended with Unavailable and the reason, its request still unsent,
    // and the node never saw it
    let status = tokio::time::timeout(TIMEOUT, held_call)
        .await
        .unwrap()
        .expect_err("the held call is ended");
    assert_eq!(
        (status.code(), status.message()),
        (tonic::Code::Unavailable, "come back later")
    );
    assert!(machine.last_apply().is_none());
}
