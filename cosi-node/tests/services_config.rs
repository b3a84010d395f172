//! From the machine config to services: the `kubelet` spec from `machine.kubelet` and one spec
//! per `ServiceConfig` document, applied through the config family's `ConfigApplier`.
//!
//! The mapping rules run on the harness (in-memory state, paused clock). The end-to-end tests
//! run a real engine and real processes, and wait on events and resources, never on time:
//! the demo's story (an unknown kubelet flag crash-loops the kubelet; a patch that deletes
//! the flag makes it healthy), a document change that restarts only its service, and a
//! removed document that stops its service.

mod services_support;

use std::sync::Arc;
use std::time::Duration;

use cosi_controllers::testing::Harness;
use cosi_controllers::Engine;
use cosi_core::{ListOptions, ResourceSpec, State, StateExt};
use cosi_node::config::restart::RestartSignal;
use cosi_node::config::{transforms, ApplyMode, ApplyRequest, ConfigApplier};
use cosi_node::services::{
    register_config_controllers, Health, HealthCheck, ImageResolver, Probe, Program, RestartPolicy,
    ServiceConfigController, ServiceSpec, ServiceSpecController, ServiceState, ServiceStatus,
    ServiceStatusController, Supervisor, SupervisorOptions, KUBELET_SERVICE_CONTROLLER,
};
use cosi_state::{MemoryOptions, MemoryState};
use services_support::*;

/// The main document of every config here; `{kubelet}` is the `machine.kubelet` section.
fn main_document(kubelet: &str) -> String {
    format!(
        "version: v1alpha1
machine:
  type: worker
  token: t0k3n
{kubelet}cluster:
  name: demo
  controlPlane:
    endpoint: https://192.0.2.1:6443
"
    )
}

const KUBELET: &str = "  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.31.0
    extraArgs:
      max-pods: '110'
      node-ip: 192.0.2.10
";

/// Three service documents: every field of `db`, an exec check with default timings; an
/// HTTP check with its own timings on `web`; a TCP check on `cache`.
const DOCUMENTS: &str = "---
apiVersion: v1alpha1
kind: ServiceConfig
name: db
command: /usr/bin/db
args: [--port=5432, --data=/var/lib/db]
environment: {DB_MODE: primary}
workingDirectory: /var/lib/db
restart: on-failure
healthCheck: {exec: [/usr/bin/db-ping, -q]}
stopTimeout: 3s
---
apiVersion: v1alpha1
kind: ServiceConfig
name: web
command: /usr/bin/web
dependsOn: [db, kubelet]
healthCheck: {http: 'http://127.0.0.1:8080/ready', initialDelay: 2s, period: 10s, timeout: 1s}
---
apiVersion: v1alpha1
kind: ServiceConfig
name: cache
command: /usr/bin/cache
restart: never
healthCheck: {tcp: '127.0.0.1:6379', period: 30s}
";

fn config() -> String {
    main_document(KUBELET) + DOCUMENTS
}

/// The config family's fan-out and this family's spec controllers on the harness, and an
/// applier over its state.
async fn node() -> (Harness, ConfigApplier) {
    let harness = Harness::new();
    transforms::register(harness.engine()).unwrap();
    register_config_controllers(harness.engine()).unwrap();
    harness.start().await;
    let (signal, _restarts) = RestartSignal::new();
    let applier = ConfigApplier::new(harness.state(), Arc::new(signal));
    (harness, applier)
}

async fn apply(harness: &Harness, applier: &ConfigApplier, config: &str) {
    applier
        .apply(ApplyRequest::config(config, ApplyMode::NoReboot, "test"))
        .await
        .unwrap();
    harness.settle().await;
}

async fn patch(harness: &Harness, applier: &ConfigApplier, patch: &str) {
    applier
        .apply(ApplyRequest::patches([patch], ApplyMode::NoReboot, "test"))
        .await
        .unwrap();
    harness.settle().await;
}

async fn spec_ids(harness: &Harness) -> Vec<String> {
    harness
        .list::<ServiceSpec>()
        .await
        .iter()
        .map(|r| r.metadata.id().to_string())
        .collect()
}

async fn versions(harness: &Harness) -> Vec<(String, u64)> {
    harness
        .list::<ServiceSpec>()
        .await
        .iter()
        .map(|r| (r.metadata.id().to_string(), r.metadata.version().get()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn the_kubelet_runs_its_image_with_extra_args_as_flags() {
    // Given a config with a kubelet image and two extra args
    let (harness, applier) = node().await;

    // When it is applied
    apply(&harness, &applier, &config()).await;

    // Then the kubelet spec runs the image with `--key=value` flags in name order, and checks
    // the kubelet's default health endpoint
    let kubelet = harness.expect::<ServiceSpec>("kubelet").await;
    assert_eq!(
        kubelet.spec,
        ServiceSpec::new(Program::Image("ghcr.io/siderolabs/kubelet:v1.31.0".into()))
            .with_args(["--max-pods=110", "--node-ip=192.0.2.10"])
            .with_health(HealthCheck::new(Probe::Http {
                url: "http://127.0.0.1:10248/healthz".into()
            }))
    );
    assert_eq!(kubelet.metadata.owner(), Some(KUBELET_SERVICE_CONTROLLER));
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_kubelet_health_check_follows_its_healthz_flags() {
    let (harness, applier) = node().await;
    let kubelet = "  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.31.0
    extraArgs:
      healthz-bind-address: 0.0.0.0
      healthz-port: '10250'
";
    apply(&harness, &applier, &main_document(kubelet)).await;

    let spec = harness.expect::<ServiceSpec>("kubelet").await.spec.clone();
    assert_eq!(
        spec.health.map(|h| h.probe),
        Some(Probe::Http {
            url: "http://127.0.0.1:10250/healthz".into()
        })
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_kubelet_image_that_is_a_path_runs_that_program() {
    let (harness, applier) = node().await;
    apply(
        &harness,
        &applier,
        &main_document("  kubelet:\n    image: /usr/local/bin/kubelet\n"),
    )
    .await;

    let spec = harness.expect::<ServiceSpec>("kubelet").await.spec.clone();
    assert_eq!(
        spec.program,
        Program::Command("/usr/local/bin/kubelet".into())
    );
    assert!(spec.enabled);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_kubelet_without_an_image_is_skipped() {
    // Given the spec controllers driving a supervisor
    let (harness, applier) = node().await;
    let supervisor = Supervisor::new(SupervisorOptions::default()).unwrap();
    harness
        .register(ServiceSpecController::new(supervisor.clone()))
        .unwrap();
    harness
        .register(ServiceStatusController::new(supervisor.clone()))
        .unwrap();

    // When the config's kubelet section has extra args but no image
    apply(
        &harness,
        &applier,
        &main_document("  kubelet:\n    extraArgs:\n      max-pods: '110'\n"),
    )
    .await;

    // Then the kubelet spec is disabled, and the kubelet is skipped
    let spec = harness.expect::<ServiceSpec>("kubelet").await;
    assert!(!spec.spec.enabled);
    let status = harness.expect::<ServiceStatus>("kubelet").await;
    assert_eq!(status.spec.state, ServiceState::Skipped);
    assert_eq!(
        status.spec.last_event.as_deref(),
        Some("Service skipped: disabled in its spec")
    );
    assert_eq!(status.spec.pid, None);
    supervisor.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn each_service_document_becomes_one_spec_named_after_it() {
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;

    assert_eq!(spec_ids(&harness).await, ["cache", "db", "kubelet", "web"]);
    for id in ["cache", "db", "web"] {
        let spec = harness.expect::<ServiceSpec>(id).await;
        assert_eq!(
            spec.metadata.owner(),
            Some(ServiceConfigController::NAME),
            "{id}"
        );
    }
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_document_s_fields_map_onto_its_spec() {
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;

    let db = harness.expect::<ServiceSpec>("db").await.spec.clone();
    assert_eq!(db.program, Program::Command("/usr/bin/db".into()));
    assert_eq!(db.args, ["--port=5432", "--data=/var/lib/db"]);
    assert_eq!(
        db.environment,
        [("DB_MODE".to_string(), "primary".to_string())].into()
    );
    assert_eq!(db.working_dir.as_deref(), Some("/var/lib/db"));
    assert_eq!(db.restart, RestartPolicy::OnFailure);
    assert_eq!(db.stop_timeout, Duration::from_secs(3));
    assert!(db.enabled);
    let web = harness.expect::<ServiceSpec>("web").await.spec.clone();
    assert_eq!(web.depends_on, ["db", "kubelet"]);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn what_a_document_leaves_out_takes_the_spec_defaults() {
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;

    // `web` names no restart policy, stop timeout, environment or working directory
    let web = harness.expect::<ServiceSpec>("web").await.spec.clone();
    let defaults = ServiceSpec::command("/usr/bin/web");
    assert_eq!(web.restart, defaults.restart);
    assert_eq!(web.stop_timeout, Duration::from_secs(10));
    assert!(web.environment.is_empty());
    assert_eq!(web.working_dir, None);
    assert!(web.args.is_empty());
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_exec_health_check_becomes_an_exec_probe_with_the_default_timings() {
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;

    let db = harness.expect::<ServiceSpec>("db").await.spec.clone();
    assert_eq!(
        db.health,
        Some(HealthCheck {
            probe: Probe::Exec {
                command: "/usr/bin/db-ping".into(),
                args: vec!["-q".into()],
            },
            initial_delay: Duration::from_secs(1),
            period: Duration::from_secs(5),
            timeout: Duration::from_millis(500),
        })
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn tcp_and_http_health_checks_map_directly_and_keep_their_durations() {
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;

    let web = harness.expect::<ServiceSpec>("web").await.spec.clone();
    assert_eq!(
        web.health,
        Some(HealthCheck {
            probe: Probe::Http {
                url: "http://127.0.0.1:8080/ready".into()
            },
            initial_delay: Duration::from_secs(2),
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
        })
    );
    let cache = harness.expect::<ServiceSpec>("cache").await.spec.clone();
    assert_eq!(
        cache.health,
        Some(HealthCheck {
            probe: Probe::Tcp {
                address: "127.0.0.1:6379".into()
            },
            initial_delay: Duration::from_secs(1),
            period: Duration::from_secs(30),
            timeout: Duration::from_millis(500),
        })
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn changing_one_document_rewrites_only_its_spec() {
    // Given the three services and the kubelet
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;
    let before = versions(&harness).await;

    // When `web` gets an argument
    patch(
        &harness,
        &applier,
        "apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\nargs: [--verbose]\n",
    )
    .await;

    // Then only `web`'s spec has a new version
    let after = versions(&harness).await;
    let changed: Vec<&str> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(_, (id, _))| id.as_str())
        .collect();
    assert_eq!(changed, ["web"]);
    assert_eq!(
        harness.expect::<ServiceSpec>("web").await.spec.args,
        ["--verbose"]
    );
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_apply_that_leaves_the_services_alone_writes_no_spec() {
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;
    let before = versions(&harness).await;

    patch(
        &harness,
        &applier,
        "machine:\n  nodeLabels:\n    zone: eu-1a\n",
    )
    .await;

    assert_eq!(versions(&harness).await, before);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn removing_a_document_removes_its_spec() {
    let (harness, applier) = node().await;
    apply(&harness, &applier, &config()).await;

    patch(
        &harness,
        &applier,
        "apiVersion: v1alpha1\nkind: ServiceConfig\nname: cache\n$patch: delete\n",
    )
    .await;

    harness.expect_absent::<ServiceSpec>("cache").await;
    assert_eq!(spec_ids(&harness).await, ["db", "kubelet", "web"]);
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn only_the_active_config_feeds_services() {
    // Given a staged config: persisted, not active
    let (harness, applier) = node().await;
    applier
        .apply(ApplyRequest::config(config(), ApplyMode::Staged, "test"))
        .await
        .unwrap();
    harness.settle().await;

    // Then nothing runs from it
    assert!(spec_ids(&harness).await.is_empty());
    harness.shutdown().await;
}

// --- End to end: a real engine, real processes ---

/// The demo's node: the config fan-out, the spec controllers, a supervisor running the
/// kubelet image as `demo-kubelet`, and an applier.
struct Node {
    engine: Engine,
    state: Arc<dyn State>,
    supervisor: Supervisor,
    applier: ConfigApplier,
}

impl Node {
    fn start() -> Node {
        let state: Arc<dyn State> = Arc::new(MemoryState::new(MemoryOptions::default()));
        let engine = Engine::new(state.clone());
        let supervisor = Supervisor::new(SupervisorOptions {
            resolver: ImageResolver::new().with_image(
                "ghcr.io/siderolabs/kubelet",
                DEMO_KUBELET,
                Vec::<String>::new(),
            ),
            ..options()
        })
        .unwrap();
        transforms::register(&engine).unwrap();
        register_config_controllers(&engine).unwrap();
        engine
            .register(ServiceSpecController::new(supervisor.clone()))
            .unwrap();
        engine
            .register(ServiceStatusController::new(supervisor.clone()))
            .unwrap();
        engine.start();
        let (signal, _restarts) = RestartSignal::new();
        let applier = ConfigApplier::new(state.clone(), Arc::new(signal));
        Node {
            engine,
            state,
            supervisor,
            applier,
        }
    }

    async fn apply(&self, request: ApplyRequest) {
        self.applier.apply(request).await.unwrap();
    }

    async fn stop(self) {
        self.supervisor.shutdown().await;
        self.engine.shutdown().await;
    }
}

/// A loopback port nobody listens on now (the kernel's pick), for the kubelet's healthz.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_kubelet_flag_crash_loops_the_kubelet_until_a_patch_deletes_it() {
    // Given a node whose kubelet image runs demo-kubelet
    let node = Node::start();
    let mut events = node.supervisor.events(0);
    let port = free_port();

    // When a config gives the kubelet a flag it does not know
    let kubelet = format!(
        "  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.31.0
    extraArgs:
      healthz-port: '{port}'
      no-such-flag: 'true'
"
    );
    node.apply(ApplyRequest::config(
        main_document(&kubelet),
        ApplyMode::NoReboot,
        "admin",
    ))
    .await;

    // Then the kubelet crash-loops, and its last event says why
    let crash = "Process exited with code 1: unknown flag: --no-such-flag";
    for _ in 0..3 {
        let failed = wait_state(&mut events, "kubelet", ServiceState::Failed).await;
        assert_eq!(failed.event.message, crash);
    }
    let status = status_where(&node.state, "kubelet", "a counted crash loop", |s| {
        s.state == ServiceState::Failed && s.restarts >= 3
    })
    .await;
    assert_eq!(status.last_event.as_deref(), Some(crash));
    let stderr: Vec<String> = node
        .supervisor
        .tail("kubelet", 1)
        .unwrap()
        .iter()
        .map(|l| l.text.clone())
        .collect();
    assert_eq!(stderr, ["unknown flag: --no-such-flag"]);

    // When a patch deletes the flag
    node.apply(ApplyRequest::patches(
        ["machine:\n  kubelet:\n    extraArgs:\n      no-such-flag:\n        $patch: delete\n"],
        ApplyMode::NoReboot,
        "admin",
    ))
    .await;

    // Then the kubelet runs without it and becomes healthy
    let healthy = wait_event(&mut events, "kubelet", "a passing health check", |r| {
        r.event.health == Health::Ok
    })
    .await;
    assert_eq!(healthy.event.message, "Health check successful");
    let status = status_where(&node.state, "kubelet", "healthy", |s| {
        s.state == ServiceState::Running && s.health == Health::Ok
    })
    .await;
    assert_eq!(
        status.last_event.as_deref(),
        Some("Health check successful")
    );
    let info = node.supervisor.get("kubelet").unwrap();
    assert_eq!(info.spec.args, [format!("--healthz-port={port}")]);
    assert_eq!(info.pid, status.pid);
    // The image ran as the program the resolver maps its repository to
    let resolved =
        format!("Resolved image \"ghcr.io/siderolabs/kubelet:v1.31.0\" to {DEMO_KUBELET}");
    assert!(
        info.events.iter().any(|e| e.message == resolved),
        "{:?}",
        info.events
    );
    assert!(running(info.pid.unwrap()));
    node.stop().await;
}

fn sleeper(name: &str, seconds: u32) -> String {
    format!(
        "---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: {name}\ncommand: /bin/sleep\nargs: ['{seconds}']\n"
    )
}

/// Applies a config with services `a` and `b` (each a `sleep`) and waits for both to run;
/// returns their pids.
async fn two_sleepers(node: &Node) -> (u32, u32) {
    let text = main_document("") + &sleeper("a", 600) + &sleeper("b", 600);
    node.apply(ApplyRequest::config(text, ApplyMode::NoReboot, "admin"))
        .await;
    let mut pids = Vec::new();
    for id in ["a", "b"] {
        let status = status_where(&node.state, id, "Running", |s| {
            s.state == ServiceState::Running
        })
        .await;
        pids.push(status.pid.unwrap());
    }
    (pids[0], pids[1])
}

fn starts(supervisor: &Supervisor, id: &str) -> usize {
    supervisor
        .get(id)
        .unwrap()
        .events
        .iter()
        .filter(|e| e.state == ServiceState::Starting)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_one_service_document_restarts_only_that_service() {
    // Given two running services from the config
    let node = Node::start();
    let (a, b) = two_sleepers(&node).await;

    // When `a`'s arguments change
    node.apply(ApplyRequest::patches(
        ["apiVersion: v1alpha1\nkind: ServiceConfig\nname: a\nargs: ['601']\n"],
        ApplyMode::NoReboot,
        "admin",
    ))
    .await;

    // Then `a` runs as a new process, and `b` kept its process and was never restarted
    let restarted = status_where(&node.state, "a", "a new process", |s| {
        s.state == ServiceState::Running && s.pid.is_some_and(|pid| pid != a)
    })
    .await;
    assert!(!running(a));
    assert!(running(restarted.pid.unwrap()));
    assert_eq!(node.supervisor.get("a").unwrap().spec.args, ["601"]);
    let other = node.supervisor.get("b").unwrap();
    assert_eq!(other.pid, Some(b));
    assert!(running(b));
    assert_eq!(starts(&node.supervisor, "b"), 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_service_document_stops_its_service() {
    // Given two running services from the config
    let node = Node::start();
    let (a, b) = two_sleepers(&node).await;

    // When `b`'s document is deleted
    node.apply(ApplyRequest::patches(
        ["apiVersion: v1alpha1\nkind: ServiceConfig\nname: b\n$patch: delete\n"],
        ApplyMode::NoReboot,
        "admin",
    ))
    .await;

    // Then its status goes, its process is gone, and `a` runs on
    tokio::time::timeout(
        PATIENCE,
        node.state
            .watch_for(&ServiceStatus::kind().pointer("b"), |r| r.is_none()),
    )
    .await
    .expect("b's status to go")
    .unwrap();
    assert!(!running(b));
    assert!(node
        .state
        .list(&ServiceSpec::kind(), &ListOptions::default())
        .await
        .unwrap()
        .iter()
        .all(|r| r.metadata().id() != "b"));
    assert_eq!(node.supervisor.ids(), ["a", "kubelet"]);
    assert_eq!(node.supervisor.get("a").unwrap().pid, Some(a));
    assert!(running(a));
    node.stop().await;
}
