//! The daemon's API security, end to end with real `node` processes: maintenance mode until
//! the first config, then mutual TLS with roles from client certificates, and every other
//! client refused.

mod node_support;

use cosi_api::auth::Role;
use cosi_api::client::ClientSecurity;
use cosi_api::machine::{ApplyMode, ApplyRequest, ServiceAction};
use cosi_api::pki::{CertificateAuthority, CERT_VALIDITY};
use cosi_api::proto::machine::{ApplyConfigurationRequest, ApplyConfigurationResponse};
use cosi_core::{
    CreateOptions, DestroyOptions, Error, ListOptions, Resource, ResourceSpec, State, StateExt,
};
use cosi_node::config::{MachineConfig, ACTIVE};
use cosi_node::services::{Program, ServiceSpec, ServiceStatus};
use examples::maintenance::{CONFIGURED_REFUSAL, LEFT_MAINTENANCE};
use node_support::*;
use tonic::codegen::http::uri::PathAndQuery;

/// An apply of a node label, in auto mode.
fn label() -> ApplyRequest {
    ApplyRequest {
        patches: vec![b"machine: {nodeLabels: {a: b}}".to_vec()],
        ..ApplyRequest::default()
    }
}

fn assert_not_authorized<T: std::fmt::Debug>(what: &str, result: cosi_core::Result<T>) {
    match result {
        Err(Error::AccessDenied { .. }) => {}
        other => panic!("{what}: expected a permission denial, got {other:?}"),
    }
}

fn assert_refused_connection<T: std::fmt::Debug>(what: &str, result: cosi_core::Result<T>) {
    match result {
        Err(Error::Backend {
            retryable: true, ..
        }) => {}
        other => panic!("{what}: expected the connection to be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_node_without_config_serves_maintenance_and_accepts_only_an_apply() {
    // Given a node started with no config
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut node = Daemon::start(&pki, state.path(), &[]);

    // Then it serves maintenance, naming its server key's fingerprint
    let (address, mode) = node.ready().await;
    assert_eq!(
        mode,
        Mode::Maintenance {
            fingerprint: pki.fingerprint().to_string()
        }
    );

    // And a pinned client may not read or call anything but apply
    let client = pinned(&pki, address);
    assert_not_authorized("version", client.machine.version().await);
    assert_not_authorized("services", client.machine.services().await);
    assert_not_authorized(
        "get",
        client
            .state
            .get(&MachineConfig::pointer(ACTIVE))
            .await
            .map(|_| ()),
    );

    // When it applies a config
    let applied = client
        .machine
        .apply_configuration(ApplyRequest {
            data: config("node-1", "worker").into_bytes(),
            ..ApplyRequest::default()
        })
        .await
        .unwrap();

    // Then the apply succeeds live, and the node switches to mutual TLS on the same address
    assert_eq!((applied.mode, applied.version), (ApplyMode::NoReboot, 1));
    assert_eq!(node.ready().await, (address, Mode::MutualTls));
}

#[tokio::test]
async fn a_configured_node_grants_what_each_role_may_do() {
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let address = node.address();

    // A reader reads services and their statuses, not the sensitive machine config, and
    // changes nothing
    let reader = mtls(&pki, address, Role::Reader);
    // (the config's services start once the controllers have read it)
    running_pid(&reader, "kubelet").await;
    let services = reader.machine.services().await.unwrap();
    assert_eq!(
        services.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        ["kubelet"]
    );
    let statuses = reader
        .state
        .list(&ServiceStatus::kind(), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(statuses.len(), 1);
    assert_not_authorized(
        "reader get mc",
        reader
            .state
            .get(&MachineConfig::pointer(ACTIVE))
            .await
            .map(|_| ()),
    );
    assert_not_authorized(
        "reader restart",
        reader
            .machine
            .service_action("kubelet", ServiceAction::Restart)
            .await,
    );
    assert_not_authorized(
        "reader apply",
        reader.machine.apply_configuration(label()).await,
    );

    // An operator manages services, and may not apply
    let operator = mtls(&pki, address, Role::Operator);
    assert_eq!(
        operator
            .machine
            .service_action("kubelet", ServiceAction::Restart)
            .await
            .unwrap(),
        "Service \"kubelet\" restarted"
    );
    assert_not_authorized(
        "operator apply",
        operator.machine.apply_configuration(label()).await,
    );

    // An admin reads the machine config and applies
    let admin = mtls(&pki, address, Role::Admin);
    let active = admin
        .state
        .get_typed::<MachineConfig>(&MachineConfig::pointer(ACTIVE))
        .await
        .unwrap();
    assert_eq!(active.metadata.version().get(), 1);
    let applied = admin.machine.apply_configuration(label()).await.unwrap();
    assert_eq!((applied.mode, applied.version), (ApplyMode::NoReboot, 2));
}

#[tokio::test]
async fn a_configured_node_refuses_admin_writes_to_what_its_controllers_write() {
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    running_pid(&admin, "kubelet").await;
    let specs = || async {
        admin
            .state
            .list(&ServiceSpec::kind(), &ListOptions::default())
            .await
            .unwrap()
            .iter()
            .map(|r| (r.metadata().id().to_string(), r.metadata().version()))
            .collect::<Vec<_>>()
    };
    let before = specs().await;
    // A service spec made by hand would run a process the config never named: services come
    // from the config alone, through its controller.
    let rogue = Resource::new(
        "rogue",
        ServiceSpec::new(Program::Command("/bin/sleep".into())),
    );
    assert_not_authorized(
        "admin create of a controller's output type",
        admin
            .state
            .create(rogue.into_shared(), CreateOptions::default())
            .await,
    );
    assert_not_authorized(
        "admin destroy of a controller's output",
        admin
            .state
            .destroy(
                &ServiceSpec::kind().pointer("kubelet"),
                DestroyOptions::default(),
            )
            .await,
    );
    assert_eq!(specs().await, before);
    assert_eq!(
        admin.machine.services().await.unwrap().len(),
        1,
        "no service was added"
    );
}

#[tokio::test]
async fn a_configured_node_refuses_clients_without_a_certificate_of_its_ca() {
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let address = node.address();

    // No client certificate
    let anonymous = client(
        address,
        ClientSecurity::ServerOnly {
            ca_pem: pki.ca.cert_pem().to_string(),
        },
    );
    assert_refused_connection("no certificate", anonymous.machine.version().await);

    // An admin certificate of another CA
    let other = CertificateAuthority::generate("other").unwrap();
    let stranger = client(
        address,
        ClientSecurity::MutualTls {
            ca_pem: pki.ca.cert_pem().to_string(),
            identity: other
                .issue_client("mallory", Role::Admin, CERT_VALIDITY)
                .unwrap(),
        },
    );
    assert_refused_connection("another CA", stranger.machine.version().await);

    // The maintenance way in is closed
    let maintenance = pinned(&pki, address);
    assert_refused_connection(
        "pinned",
        maintenance.machine.apply_configuration(label()).await,
    );

    // And nothing changed
    let admin = mtls(&pki, address, Role::Admin);
    let active = admin
        .state
        .get_typed::<MachineConfig>(&MachineConfig::pointer(ACTIVE))
        .await
        .unwrap();
    assert_eq!(active.metadata.version().get(), 1);
}

/// A maintenance channel to `address`, pinning the node's certificate.
fn pinned_channel(pki: &Pki, address: std::net::SocketAddr) -> tonic::transport::Channel {
    cosi_api::client::channel(
        address,
        None,
        ClientSecurity::Pinned {
            fingerprints: vec![pki.fingerprint()],
        },
    )
    .unwrap()
}

/// The answer to an apply.
type HeldApply = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<tonic::Response<ApplyConfigurationResponse>, tonic::Status>,
            > + Send,
    >,
>;

/// Begins an apply on `channel` whose request is held back until the returned sender sends it.
/// The call is polled once before this returns, which queues it on the channel ahead of any
/// later call on it.
async fn held_apply(
    channel: tonic::transport::Channel,
) -> (
    tokio::sync::oneshot::Sender<ApplyConfigurationRequest>,
    HeldApply,
) {
    let (release, held) = tokio::sync::oneshot::channel::<ApplyConfigurationRequest>();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut call: HeldApply = Box::pin(async move {
        grpc.client_streaming::<_, _, ApplyConfigurationResponse, _>(
            tonic::Request::new(futures::stream::once(async { held.await.unwrap() })),
            PathAndQuery::from_static(cosi_api::auth::APPLY_CONFIGURATION),
            tonic_prost::ProstCodec::default(),
        )
        .await
    });
    assert!(futures::poll!(&mut call).is_pending());
    (release, call)
}

#[tokio::test]
async fn a_maintenance_apply_is_refused_once_a_config_is_active() {
    // Given a node in maintenance, and a pinned caller that has begun an apply but holds back
    // its request
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut node = Daemon::start(&pki, state.path(), &[]);
    let (address, _) = node.ready().await;
    let channel = pinned_channel(&pki, address);
    // (the node takes the held call in before the apply below, made on the same channel)
    let (release, held_apply) = held_apply(channel.clone()).await;

    // When another apply makes a config active, and then the held request arrives
    let applied = cosi_api::client::MachineClient::new(channel)
        .apply_configuration(ApplyRequest {
            data: config("node-1", "worker").into_bytes(),
            ..ApplyRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(applied.version, 1);
    // (the node may have ended the held call already, leaving maintenance: then the request
    // has nowhere to go)
    let _ = release.send(ApplyConfigurationRequest {
        data: config("intruder", "controlplane").into_bytes(),
        ..ApplyConfigurationRequest::default()
    });
    let late = held_apply.await;

    // Then it is refused: an unauthenticated caller changes nothing on a configured node. The
    // request arrived before the maintenance server stopped, and the gate refused it, or it
    // was still arriving, and the switch to mutual TLS ended the call (the gate alone is
    // checked in `examples::maintenance`'s tests)
    let status = late.expect_err("a maintenance apply to a configured node is refused");
    let by_the_gate = cosi_api::status::to_status(
        &Error::AccessDenied {
            subject: "apply configuration".into(),
            message: CONFIGURED_REFUSAL.into(),
        },
        cosi_api::status::Call::Machine,
    );
    let refusal = (status.code(), status.message());
    assert!(
        refusal == (tonic::Code::PermissionDenied, by_the_gate.message())
            || refusal == (tonic::Code::Unavailable, LEFT_MAINTENANCE),
        "{status:?}"
    );
    assert_eq!(node.ready().await, (address, Mode::MutualTls));
    let admin = mtls(&pki, address, Role::Admin);
    let active = admin
        .state
        .get_typed::<MachineConfig>(&MachineConfig::pointer(ACTIVE))
        .await
        .unwrap();
    assert_eq!(
        (
            active.metadata.version().get(),
            active.spec.config().machine().network.hostname.as_deref()
        ),
        (1, Some("node-1"))
    );
}

#[tokio::test]
async fn leaving_maintenance_ends_held_maintenance_calls_at_once() {
    // Given a node in maintenance, and a pinned caller holding a call open: its apply begun,
    // its request never sent
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut node = Daemon::start(&pki, state.path(), &[]);
    let (address, _) = node.ready().await;
    let holder = pinned_channel(&pki, address);
    let (_never_sent, mut held_call) = held_apply(holder.clone()).await;
    // (a later call on the same connection is answered after the node took the held one in)
    assert_not_authorized(
        "version",
        cosi_api::client::MachineClient::new(holder).version().await,
    );

    // When the operator applies a config over another connection
    let applied = pinned(&pki, address)
        .machine
        .apply_configuration(ApplyRequest {
            data: config("node-1", "worker").into_bytes(),
            ..ApplyRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(applied.version, 1);

    // Then the held call ends with Unavailable, saying why, while its request is still held
    // back — the node did not wait for it (the old switch waited 10 s, its grace, and then left
    // the call open): half that grace is far more than ending it takes
    let ended = tokio::time::timeout(LEFT_MAINTENANCE_WITHIN, &mut held_call)
        .await
        .expect("the held call ends without waiting for its request");
    let status = ended.expect_err("a held maintenance call is ended");
    assert_eq!(
        (status.code(), status.message()),
        (
            tonic::Code::Unavailable,
            "the node left maintenance mode; connect with mutual TLS"
        ),
        "{status:?}"
    );

    // And the node serves mutual TLS on the same address
    let (switched, mode) = tokio::time::timeout(LEFT_MAINTENANCE_WITHIN, node.ready())
        .await
        .expect("the node serves mutual TLS without waiting for the held call");
    assert_eq!((switched, mode), (address, Mode::MutualTls));
    let admin = mtls(&pki, address, Role::Admin);
    assert_eq!(
        admin.machine.version().await.unwrap().tag,
        examples::machine::build_version().tag
    );
}

/// Half the grace the daemon gives the calls in flight when it stops a server (10 s): a switch
/// that waited out the grace for a held call misses it, one that did not takes milliseconds.
const LEFT_MAINTENANCE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);
