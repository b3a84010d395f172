//! The API's front door, refusal by refusal: every case of the issue's table is refused, and
//! nothing changed afterwards (the store's contents and versions, the node's configuration and
//! services are compared before and after). Real TLS on loopback, certificates from the
//! crate's own CA.

mod support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use cosi_api::auth::{ControllerOwners, Role, StatePolicy};
use cosi_api::client::{
    channel, channel_with, ChannelOptions, ClientSecurity, MachineClient, RemoteState,
};
use cosi_api::codec::Codec;
use cosi_api::machine::{ApplyRequest, EventTail, LogRequest, MachineEventPayload, ServiceAction};
use cosi_api::pki::{CertificateAuthority, CertifiedKey, Validity, CERT_VALIDITY};
use cosi_api::server::{ApiServer, Security, ServerHandle, StateService};
use cosi_api::testing::{MachineSnapshot, TestMachine, MACHINE_CONFIG_TYPE};
use cosi_api::tls::{fingerprint_of_pem, Fingerprint};
use cosi_core::{
    CreateOptions, DestroyOptions, Error, Kind, ListOptions, Registry, Resource,
    ResourceDefinition, ResourceSpec, Sensitivity, SharedResource, State, StateExt, UpdateOptions,
    WatchKindOptions, WatchOptions,
};
use cosi_state::MemoryState;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Note {
    text: String,
}
impl ResourceSpec for Note {
    const TYPE: &'static str = "Notes.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Secret {
    key: String,
}
impl ResourceSpec for Secret {
    const TYPE: &'static str = "Secrets.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_sensitivity(Sensitivity::Sensitive)
    }
}

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct MachineConfig {
    hostname: String,
}
impl ResourceSpec for MachineConfig {
    const TYPE: &'static str = MACHINE_CONFIG_TYPE;
    const DEFAULT_NAMESPACE: &'static str = "config";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_sensitivity(Sensitivity::Sensitive)
    }
}

const CONTROLLER: &str = "NoteController";
const TIMEOUT: Duration = Duration::from_secs(20);

fn codec() -> Codec {
    let mut registry = Registry::new();
    registry.register::<Note>().unwrap();
    registry.register::<Secret>().unwrap();
    registry.register::<MachineConfig>().unwrap();
    Codec::new(Arc::new(registry))
}

/// A node: the store seeded with a user note, a controller-owned note, a secret and the
/// machine config; the in-memory machine; a mutual-TLS server.
struct Node {
    store: Arc<MemoryState>,
    machine: Arc<TestMachine>,
    ca: CertificateAuthority,
    server: Option<ServerHandle>,
}

fn localhost() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

impl Node {
    async fn start() -> Node {
        Self::start_with(StatePolicy::new([MACHINE_CONFIG_TYPE])).await
    }

    async fn start_with(policy: StatePolicy) -> Node {
        Self::start_serving(policy, |server| server).await
    }

    /// A node whose server is configured further by `configure`.
    async fn start_serving(
        policy: StatePolicy,
        configure: impl FnOnce(ApiServer) -> ApiServer,
    ) -> Node {
        let store = Arc::new(MemoryState::default());
        let create = |r: SharedResource, owner: Option<&str>| {
            let store = store.clone();
            let owner = owner.map(Arc::from);
            async move { store.create(r, CreateOptions { owner }).await.unwrap() }
        };
        create(
            Resource::new(
                "user",
                Note {
                    text: "mine".into(),
                },
            )
            .into_shared(),
            None,
        )
        .await;
        create(
            Resource::new(
                "owned",
                Note {
                    text: "theirs".into(),
                },
            )
            .into_shared(),
            Some(CONTROLLER),
        )
        .await;
        create(
            Resource::new(
                "api",
                Secret {
                    key: "hunter2".into(),
                },
            )
            .into_shared(),
            None,
        )
        .await;
        create(
            Resource::new(
                "v1alpha1",
                MachineConfig {
                    hostname: "node-1".into(),
                },
            )
            .into_shared(),
            None,
        )
        .await;

        let ca = CertificateAuthority::generate("cosi").unwrap();
        let identity = ca.issue_server(&[localhost()], &[], CERT_VALIDITY).unwrap();
        let machine = Arc::new(TestMachine::new());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = configure(
            ApiServer::new(Security::MutualTls {
                identity,
                client_ca_pem: ca.cert_pem().to_string(),
            })
            .with_state(StateService::new(store.clone(), codec(), policy))
            .with_machine(machine.clone()),
        )
        .serve(listener)
        .unwrap();
        Node {
            store,
            machine,
            ca,
            server: Some(server),
        }
    }

    fn address(&self) -> std::net::SocketAddr {
        self.server.as_ref().unwrap().local_addr()
    }

    fn security_for(&self, identity: CertifiedKey) -> ClientSecurity {
        ClientSecurity::MutualTls {
            ca_pem: self.ca.cert_pem().to_string(),
            identity,
        }
    }

    fn client(&self, role: Role) -> (RemoteState, MachineClient) {
        let identity = self
            .ca
            .issue_client(&format!("{role}-user"), role, CERT_VALIDITY)
            .unwrap();
        self.client_with(self.security_for(identity))
    }

    fn client_with(&self, security: ClientSecurity) -> (RemoteState, MachineClient) {
        let channel = channel(self.address(), None, security).unwrap();
        (
            RemoteState::new(channel.clone(), codec()),
            MachineClient::new(channel),
        )
    }

    /// Everything a refused call must leave as it was.
    async fn snapshot(
        &self,
    ) -> (
        Vec<(
            String,
            String,
            u64,
            Option<String>,
            Option<serde_json::Value>,
        )>,
        MachineSnapshot,
    ) {
        let mut resources = Vec::new();
        for kind in [Note::kind(), Secret::kind(), MachineConfig::kind()] {
            for r in self
                .store
                .list(&kind, &ListOptions::default())
                .await
                .unwrap()
            {
                let md = r.metadata();
                resources.push((
                    md.resource_type().to_string(),
                    md.id().to_string(),
                    md.version().get(),
                    md.owner().map(str::to_string),
                    r.spec_value().ok(),
                ));
            }
        }
        (resources, self.machine.snapshot())
    }
}

fn assert_not_authorized<T: std::fmt::Debug>(what: &str, result: cosi_core::Result<T>) {
    match result {
        Err(Error::AccessDenied { message, .. }) if message.starts_with("not authorized") => {}
        other => panic!("{what}: expected a not-authorized refusal, got {other:?}"),
    }
}

/// A refused connection: the call fails in transport (the handshake), not with an answer.
fn assert_connection_refused<T: std::fmt::Debug>(what: &str, result: cosi_core::Result<T>) {
    match result {
        Err(Error::Backend {
            retryable: true, ..
        }) => {}
        other => panic!("{what}: expected the connection to be refused, got {other:?}"),
    }
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(TIMEOUT, f)
        .await
        .expect("refused in time")
}

/// Every call a client can make with these credentials fails to connect.
async fn nothing_gets_through(node: &Node, security: ClientSecurity) {
    let before = node.snapshot().await;
    let (state, machine) = node.client_with(security);
    assert_connection_refused(
        "get",
        within(state.get(&Note::kind().pointer("user"))).await,
    );
    assert_connection_refused(
        "create",
        within(state.create(
            Resource::new("intruder", Note::default()).into_shared(),
            CreateOptions::default(),
        ))
        .await,
    );
    assert_connection_refused(
        "destroy",
        within(state.destroy(&Note::kind().pointer("user"), DestroyOptions::default())).await,
    );
    let apply = ApplyRequest {
        data: b"hostname: evil\n".to_vec(),
        ..Default::default()
    };
    assert_connection_refused(
        "apply",
        tokio::time::timeout(TIMEOUT, machine.apply_configuration(apply))
            .await
            .unwrap(),
    );
    assert_connection_refused(
        "restart",
        tokio::time::timeout(
            TIMEOUT,
            machine.service_action("etcd", ServiceAction::Restart),
        )
        .await
        .unwrap(),
    );
    assert_eq!(
        node.snapshot().await,
        before,
        "a refused connection changed something"
    );
}

#[tokio::test]
async fn client_certificate_from_another_ca_is_refused() {
    let node = Node::start().await;
    let other = CertificateAuthority::generate("cosi").unwrap();
    let identity = other
        .issue_client("mallory", Role::Admin, CERT_VALIDITY)
        .unwrap();
    nothing_gets_through(&node, node.security_for(identity)).await;
}

#[tokio::test]
async fn expired_client_certificate_is_refused() {
    let node = Node::start().await;
    let identity = node
        .ca
        .issue_client_with(
            "old-admin",
            &["os:admin"],
            Validity::expired(Duration::from_secs(3600)),
        )
        .unwrap();
    nothing_gets_through(&node, node.security_for(identity)).await;
}

#[tokio::test]
async fn connection_without_client_certificate_is_refused() {
    let node = Node::start().await;
    nothing_gets_through(
        &node,
        ClientSecurity::ServerOnly {
            ca_pem: node.ca.cert_pem().to_string(),
        },
    )
    .await;
}

#[tokio::test]
async fn reader_reading_a_sensitive_type_is_refused() {
    let node = Node::start().await;
    let before = node.snapshot().await;
    let (state, _) = node.client(Role::Reader);
    assert_not_authorized("get", state.get(&Secret::kind().pointer("api")).await);
    assert_not_authorized(
        "list",
        state.list(&Secret::kind(), &ListOptions::default()).await,
    );
    assert_not_authorized(
        "watch kind",
        state
            .watch_kind(&Secret::kind(), WatchKindOptions::default())
            .await,
    );
    assert_not_authorized(
        "watch",
        state
            .watch(&Secret::kind().pointer("api"), WatchOptions::default())
            .await,
    );
    assert_not_authorized(
        "get machine config",
        state.get(&MachineConfig::kind().pointer("v1alpha1")).await,
    );
    // Public types stay readable, and the refusal changed nothing.
    assert_eq!(
        state
            .list(&Note::kind(), &ListOptions::default())
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(node.snapshot().await, before);
}

#[tokio::test]
async fn definitions_of_sensitive_types_stay_listable_for_readers() {
    let node = Node::start().await;
    // The node publishes its registry's definitions (`get rd`).
    codec().registry().publish(&*node.store).await.unwrap();
    let (reader, _) = node.client(Role::Reader);
    let definitions = reader
        .list_typed::<ResourceDefinition>(
            &ResourceDefinition::definition().kind(),
            &ListOptions::default(),
        )
        .await
        .unwrap();
    let secret = definitions
        .iter()
        .find(|d| d.metadata.id() == Secret::TYPE)
        .expect("the sensitive type's definition is listed");
    assert_eq!(secret.spec.sensitivity, Sensitivity::Sensitive);
    assert!(definitions
        .iter()
        .any(|d| d.metadata.id() == MACHINE_CONFIG_TYPE));
    // The definition is visible; the resources are not.
    assert_not_authorized(
        "list secrets",
        reader.list(&Secret::kind(), &ListOptions::default()).await,
    );
}

#[tokio::test]
async fn operator_reading_a_sensitive_type_is_refused_and_admin_reads_it() {
    let node = Node::start().await;
    let (operator, _) = node.client(Role::Operator);
    assert_not_authorized("get", operator.get(&Secret::kind().pointer("api")).await);
    let (admin, _) = node.client(Role::Admin);
    let secret = admin
        .get_typed::<Secret>(&Secret::kind().pointer("api"))
        .await
        .unwrap();
    assert_eq!(secret.spec.key, "hunter2");
}

#[tokio::test]
async fn reader_restarting_a_service_is_refused() {
    let node = Node::start().await;
    let before = node.snapshot().await;
    let (_, machine) = node.client(Role::Reader);
    for action in [
        ServiceAction::Restart,
        ServiceAction::Stop,
        ServiceAction::Start,
    ] {
        assert_not_authorized(
            "service action",
            machine.service_action("etcd", action).await,
        );
    }
    // What a reader may do on the machine service.
    assert_eq!(machine.services().await.unwrap().len(), 2);
    assert_eq!(machine.version().await.unwrap().tag, "v0.1.0");
    assert_eq!(node.snapshot().await, before);
}

#[tokio::test]
async fn operator_restarts_a_service() {
    let node = Node::start().await;
    let (_, machine) = node.client(Role::Operator);
    machine
        .service_action("etcd", ServiceAction::Restart)
        .await
        .unwrap();
    assert_eq!(
        node.machine.snapshot().services[0],
        ("etcd".to_string(), "Running".to_string(), 1)
    );
}

#[tokio::test]
async fn operator_applying_configuration_is_refused() {
    let node = Node::start().await;
    let before = node.snapshot().await;
    let (_, machine) = node.client(Role::Operator);
    let apply = ApplyRequest {
        data: b"hostname: node-2\n".to_vec(),
        ..Default::default()
    };
    assert_not_authorized("apply", machine.apply_configuration(apply.clone()).await);
    assert_eq!(node.snapshot().await, before);
    // An admin may.
    let (_, admin) = node.client(Role::Admin);
    assert_eq!(admin.apply_configuration(apply).await.unwrap().version, 1);
}

#[tokio::test]
async fn reader_and_operator_writing_through_the_state_service_are_refused() {
    let node = Node::start().await;
    let before = node.snapshot().await;
    for role in [Role::Reader, Role::Operator] {
        let (state, _) = node.client(role);
        assert_not_authorized(
            "create",
            state
                .create(
                    Resource::new("new", Note::default()).into_shared(),
                    CreateOptions::default(),
                )
                .await,
        );
        let user = state.get(&Note::kind().pointer("user")).await.unwrap();
        assert_not_authorized("update", state.update(user, UpdateOptions::default()).await);
        assert_not_authorized(
            "destroy",
            state
                .destroy(&Note::kind().pointer("user"), DestroyOptions::default())
                .await,
        );
    }
    assert_eq!(node.snapshot().await, before);
}

#[tokio::test]
async fn admin_writing_a_controller_owned_resource_is_refused() {
    let node = Node::start().await;
    let before = node.snapshot().await;
    let (state, _) = node.client(Role::Admin);
    let owned = Note::kind().pointer("owned");
    let stored = state.get(&owned).await.unwrap();
    assert_not_authorized(
        "update as the controller",
        state
            .update(stored.clone(), UpdateOptions::owned_by(Some(CONTROLLER)))
            .await,
    );
    assert_not_authorized(
        "update as nobody",
        state.update(stored, UpdateOptions::default()).await,
    );
    assert_not_authorized(
        "destroy",
        state
            .destroy(
                &owned,
                DestroyOptions {
                    owner: Some(CONTROLLER.into()),
                },
            )
            .await,
    );
    assert_not_authorized(
        "teardown",
        state.teardown_remote(&owned, Some(CONTROLLER)).await,
    );
    assert_not_authorized(
        "teardown and destroy",
        state.teardown_and_destroy_remote(&owned, None).await,
    );
    assert_not_authorized(
        "add a finalizer",
        state.add_finalizer(&owned, &["mine"]).await,
    );
    assert_not_authorized(
        "create as a controller",
        state
            .create(
                Resource::new("claimed", Note::default()).into_shared(),
                CreateOptions {
                    owner: Some(CONTROLLER.into()),
                },
            )
            .await,
    );
    assert_eq!(node.snapshot().await, before);
    // A user-owned resource is the admin's to write.
    state
        .update_with_conflicts::<Note, _>(
            &Note::kind().pointer("user"),
            UpdateOptions::default(),
            |r| {
                r.spec.text = "changed".into();
                Ok(())
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn admin_writing_a_type_a_controller_outputs_is_refused() {
    // Notes are NoteController's output: even a resource it does not own yet (or never will)
    // is not the admin's to create, change or remove, since the controller would meet it.
    let policy = StatePolicy::new([MACHINE_CONFIG_TYPE])
        .with_controller_owners(ControllerOwners::Named([CONTROLLER.to_string()].into()))
        .with_controller_outputs([(Note::TYPE.to_string(), [CONTROLLER.to_string()].into())]);
    let node = Node::start_with(policy).await;
    let before = node.snapshot().await;
    let (state, _) = node.client(Role::Admin);
    assert_not_authorized(
        "create where the controller writes",
        state
            .create(
                Resource::new("pre-empted", Note::default()).into_shared(),
                CreateOptions::default(),
            )
            .await,
    );
    let user = Note::kind().pointer("user");
    let stored = state.get(&user).await.unwrap();
    assert_not_authorized(
        "update an unowned resource of the type",
        state.update(stored, UpdateOptions::default()).await,
    );
    assert_not_authorized(
        "destroy an unowned resource of the type",
        state.destroy(&user, DestroyOptions::default()).await,
    );
    assert_not_authorized("teardown", state.teardown_remote(&user, None).await);
    assert_eq!(node.snapshot().await, before);
    // Types no controller writes stay the admin's.
    state
        .create(
            Resource::new("admin", Secret { key: "new".into() }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn writing_the_machine_config_through_the_state_service_is_refused_for_everyone() {
    let node = Node::start().await;
    let before = node.snapshot().await;
    let pointer = MachineConfig::kind().pointer("v1alpha1");
    for role in [Role::Reader, Role::Operator, Role::Admin] {
        let (state, _) = node.client(role);
        let fresh = Resource::new(
            "other",
            MachineConfig {
                hostname: "evil".into(),
            },
        );
        assert_not_authorized(
            "create",
            state
                .create(fresh.into_shared(), CreateOptions::default())
                .await,
        );
        let mut forged = Resource::new(
            "v1alpha1",
            MachineConfig {
                hostname: "evil".into(),
            },
        );
        forged.metadata.set_version(cosi_core::Version::new(1));
        assert_not_authorized(
            "update",
            state
                .update(forged.into_shared(), UpdateOptions::default())
                .await,
        );
        assert_not_authorized(
            "destroy",
            state.destroy(&pointer, DestroyOptions::default()).await,
        );
        assert_not_authorized("teardown", state.teardown_remote(&pointer, None).await);
    }
    assert_eq!(node.snapshot().await, before);
}

#[tokio::test]
async fn refusal_is_distinguishable_from_an_owner_conflict() {
    // Only NoteController counts as a controller here, so a write claiming another owner
    // reaches the store and meets its owner rule.
    let policy = StatePolicy::new([MACHINE_CONFIG_TYPE])
        .with_controller_owners(ControllerOwners::Named([CONTROLLER.to_string()].into()));
    let node = Node::start_with(policy).await;
    let (state, _) = node.client(Role::Admin);
    let user = state.get(&Note::kind().pointer("user")).await.unwrap();
    // The store's own owner rule: a real owner conflict, not a refusal.
    let conflict = state
        .update(user, UpdateOptions::owned_by(Some("someone")))
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, Error::OwnerConflict { .. }),
        "{conflict:?}"
    );
    let (reader, _) = node.client(Role::Reader);
    let refused = reader
        .get(&Secret::kind().pointer("api"))
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::AccessDenied { .. }), "{refused:?}");
}

#[tokio::test]
async fn client_certificate_with_an_unknown_role_is_refused_everything() {
    let node = Node::start().await;
    let before = node.snapshot().await;
    let identity = node
        .ca
        .issue_client_with(
            "future",
            &["os:future"],
            Validity::for_duration(CERT_VALIDITY),
        )
        .unwrap();
    let (state, machine) = node.client_with(node.security_for(identity));
    assert_not_authorized("get", state.get(&Note::kind().pointer("user")).await);
    assert_not_authorized("version", machine.version().await);
    assert_eq!(node.snapshot().await, before);
}

/// Maintenance mode: a node without configuration, a self-signed server certificate, clients
/// that pin its key fingerprint.
struct MaintenanceNode {
    machine: Arc<TestMachine>,
    fingerprint: Fingerprint,
    server: ServerHandle,
}

async fn maintenance_node() -> MaintenanceNode {
    maintenance_node_serving(|server| server).await
}

async fn maintenance_node_serving(
    configure: impl FnOnce(ApiServer) -> ApiServer,
) -> MaintenanceNode {
    let identity = cosi_api::pki::self_signed_server(&[localhost()], &[]).unwrap();
    let fingerprint = fingerprint_of_pem(&identity.cert_pem).unwrap();
    let machine = Arc::new(TestMachine::new());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = configure(ApiServer::new(Security::Maintenance { identity }))
        .with_state(StateService::new(
            Arc::new(MemoryState::default()),
            codec(),
            StatePolicy::new([MACHINE_CONFIG_TYPE]),
        ))
        .with_machine(machine.clone())
        .serve(listener)
        .unwrap();
    MaintenanceNode {
        machine,
        fingerprint,
        server,
    }
}

#[tokio::test]
async fn maintenance_mode_accepts_only_apply_configuration_from_a_pinned_client() {
    let node = maintenance_node().await;
    let channel = channel(
        node.server.local_addr(),
        None,
        ClientSecurity::Pinned {
            fingerprints: vec![node.fingerprint],
        },
    )
    .unwrap();
    let machine = MachineClient::new(channel.clone());
    let state = RemoteState::new(channel, codec());
    assert_not_authorized("version", machine.version().await);
    assert_not_authorized(
        "restart",
        machine.service_action("etcd", ServiceAction::Restart).await,
    );
    assert_not_authorized("get", state.get(&Note::kind().pointer("user")).await);
    assert_not_authorized(
        "create",
        state
            .create(
                Resource::new("n", Note::default()).into_shared(),
                CreateOptions::default(),
            )
            .await,
    );
    assert_eq!(
        node.machine.snapshot().version,
        0,
        "refusals changed nothing"
    );
    let applied = machine
        .apply_configuration(ApplyRequest {
            data: b"hostname: node-1\n".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(applied.version, 1);
    assert_eq!(
        node.machine.snapshot().config.as_deref(),
        Some("hostname: node-1\n")
    );
}

#[tokio::test]
async fn maintenance_callers_are_counted_per_address() {
    let node = maintenance_node_serving(|server| server.with_max_connections_per_caller(1)).await;
    let from = |local: &str| {
        let options = ChannelOptions {
            local_address: Some(local.parse().unwrap()),
            ..Default::default()
        };
        let security = ClientSecurity::Pinned {
            fingerprints: vec![node.fingerprint],
        };
        MachineClient::new(channel_with(node.server.local_addr(), None, security, options).unwrap())
    };
    let dry_run = || ApplyRequest {
        data: b"hostname: node-1\n".to_vec(),
        dry_run: true,
        ..Default::default()
    };
    // One address holds its one connection...
    let first = from("127.0.0.1");
    within(first.apply_configuration(dry_run())).await.unwrap();
    let second = from("127.0.0.1");
    assert_connection_refused(
        "a second connection from the same address",
        within(second.apply_configuration(dry_run())).await,
    );
    // ...and another address (the operator's) has a place of its own.
    let other = from("127.0.0.2");
    within(other.apply_configuration(dry_run())).await.unwrap();
    within(first.apply_configuration(dry_run())).await.unwrap();
    assert_eq!(
        node.machine.snapshot().version,
        0,
        "dry runs changed nothing"
    );
}

#[tokio::test]
async fn maintenance_client_with_the_wrong_pin_is_refused() {
    let node = maintenance_node().await;
    let wrong = Fingerprint([7; 32]);
    let channel = channel(
        node.server.local_addr(),
        None,
        ClientSecurity::Pinned {
            fingerprints: vec![wrong],
        },
    )
    .unwrap();
    let machine = MachineClient::new(channel);
    let result = machine
        .apply_configuration(ApplyRequest {
            data: b"hostname: evil\n".to_vec(),
            ..Default::default()
        })
        .await;
    assert_connection_refused("apply with a wrong pin", result);
    assert_eq!(node.machine.snapshot().version, 0);
}

#[tokio::test]
async fn certificate_roles_are_read_per_connection() {
    // One server, three callers at once: each gets what its own certificate allows.
    let node = Node::start().await;
    let (reader, _) = node.client(Role::Reader);
    let (admin, _) = node.client(Role::Admin);
    let kind: Kind = Secret::kind();
    let options = ListOptions::default();
    let (r, a) = tokio::join!(reader.list(&kind, &options), admin.list(&kind, &options));
    assert_not_authorized("reader list", r);
    assert_eq!(a.unwrap().len(), 1);
}

#[tokio::test]
async fn a_caller_past_its_connection_limit_is_refused_and_other_callers_are_served() {
    let node = Node::start_serving(StatePolicy::new([MACHINE_CONFIG_TYPE]), |server| {
        server.with_max_connections_per_caller(1)
    })
    .await;
    let user = Note::kind().pointer("user");
    // One certificate, two connections: the first is served and stays open.
    let identity = node
        .ca
        .issue_client("reader-user", Role::Reader, CERT_VALIDITY)
        .unwrap();
    let (first, _) = node.client_with(node.security_for(identity.clone()));
    within(first.get(&user)).await.unwrap();
    let (second, _) = node.client_with(node.security_for(identity));
    assert_connection_refused("a second connection", within(second.get(&user)).await);
    // Another certificate has places of its own.
    let (other, _) = node.client(Role::Operator);
    within(other.get(&user)).await.unwrap();
    // And the first connection still serves its caller.
    within(first.get(&user)).await.unwrap();
}

#[tokio::test]
async fn a_caller_past_its_open_call_limit_is_refused_and_other_callers_are_served() {
    let node = Node::start_serving(StatePolicy::new([MACHINE_CONFIG_TYPE]), |server| {
        server.with_max_calls_per_caller(2)
    })
    .await;
    let before = node.snapshot().await;
    let (reader, _) = node.client(Role::Reader);
    // Two watches hold both of the reader's places, over one connection.
    let mut watches = Vec::new();
    for _ in 0..2 {
        watches.push(
            within(reader.watch(&Note::kind().pointer("user"), WatchOptions::default()))
                .await
                .unwrap(),
        );
    }
    match within(reader.get(&Note::kind().pointer("user"))).await {
        Err(Error::Backend {
            message,
            retryable: true,
            ..
        }) => assert_eq!(
            message,
            "ResourceExhausted: os:reader-user (os:reader) has 2 calls open, as many as one caller \
             may; end some of its watches or log follows, or retry later"
        ),
        other => panic!("a third call: expected ResourceExhausted, got {other:?}"),
    }
    assert_eq!(node.snapshot().await, before);
    // Another certificate has places of its own, and writes reach the reader's open watches.
    let (admin, _) = node.client(Role::Admin);
    within(admin.modify(
        Resource::new(
            "user",
            Note {
                text: String::new(),
            },
        ),
        UpdateOptions::default(),
        |note| {
            note.spec.text = "changed".into();
            Ok(())
        },
    ))
    .await
    .unwrap();
    for watch in &mut watches {
        loop {
            match within(watch.recv()).await.expect("the watch is open") {
                cosi_core::Event::Updated { resource, .. } => {
                    let note = cosi_core::downcast::<Note>(resource).unwrap();
                    assert_eq!(note.spec.text, "changed");
                    break;
                }
                cosi_core::Event::Errored { error } => panic!("the watch ended: {error}"),
                _ => {}
            }
        }
    }
}

#[tokio::test]
async fn a_counted_caller_s_streams_deliver_through_the_smallest_byte_budget() {
    // The smallest budget: a response is made only once every earlier one of the caller has
    // been written, so each stream moves only if the bytes it sent are given back.
    let node = Node::start_serving(StatePolicy::new([MACHINE_CONFIG_TYPE]), |server| {
        server.with_max_bytes_per_caller(cosi_api::server::MIN_BYTES_PER_CALLER)
    })
    .await;
    let (reader, machine) = node.client(Role::Reader);
    let mut watch = within(reader.watch_kind(&Note::kind(), WatchKindOptions::default()))
        .await
        .unwrap();
    let mut logs = within(machine.logs(LogRequest {
        service: "etcd".into(),
        tail: Some(0),
        follow: true,
    }))
    .await
    .unwrap()
    .boxed();
    let mut events = within(machine.events(EventTail::None))
        .await
        .unwrap()
        .boxed();
    for i in 0..5 {
        let text = format!("line {i}");
        node.machine.log("etcd", &text);
        node.machine.publish_event(MachineEventPayload::Service {
            service: "etcd".into(),
            state: "Running".into(),
            message: text.clone(),
        });
        node.store
            .modify(
                Resource::new("user", Note::default()),
                UpdateOptions::default(),
                |note| {
                    note.spec.text = text.clone();
                    Ok(())
                },
            )
            .await
            .unwrap();
        assert_eq!(
            within(logs.next()).await.unwrap().unwrap(),
            format!("{text}\n").into_bytes()
        );
        match within(events.next()).await.unwrap().unwrap().payload {
            MachineEventPayload::Service { message, .. } => assert_eq!(message, text),
            other => panic!("expected a service event, got {other:?}"),
        }
        match within(watch.recv()).await.unwrap() {
            cosi_core::Event::Updated { resource, .. } => {
                let note = resource.as_any().downcast_ref::<Resource<Note>>().unwrap();
                assert_eq!(note.spec.text, text);
            }
            other => panic!("expected an update, got {other:?}"),
        }
    }
    // A list too, every resource in turn.
    let listed = within(reader.list(&Note::kind(), &ListOptions::default()))
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
}
