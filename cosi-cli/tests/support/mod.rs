//! What the CLI's tests share: a cluster of in-process nodes on loopback ports — each the real
//! API server over mutual TLS with certificates from `cosictl gen`, a memory store with
//! published definitions, the real machine config (cosi-node's applier: decoding, validation,
//! patches, versions) and in-memory services — and ways to run the `cosictl` binary or the
//! library against them.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clap::Parser;
use cosi_api::auth::StatePolicy;
use cosi_api::codec::Codec;
use cosi_api::machine::{
    self as api, ApplyOutcome, EventStream, EventTail, LogRequest, LogStream, Machine,
    ServiceAction, ServiceStatus, VersionInfo,
};
use cosi_api::pki::CertifiedKey;
use cosi_api::server::{ApiServer, Security, ServerHandle, StateService};
use cosi_api::testing::TestMachine;
use cosi_core::{
    CreateOptions, Registry, Resource, ResourceDefinition, ResourceSpec, Sensitivity, State,
    Version,
};
use cosi_node::config::apply::{ApplyInput, ApplyMode, ApplyRequest, ConfigApplier};
use cosi_node::config::restart::RestartSignal;
use cosi_node::config::MachineConfig;
use cosi_state::MemoryState;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

/// A test type with print columns.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Note {
    pub text: String,
    pub tags: Vec<String>,
}

impl ResourceSpec for Note {
    const TYPE: &'static str = "Notes.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["nt"])
            .with_print_column("Text", ".text")
            .with_print_column("First Tag", ".tags[0]")
    }
}

/// A sensitive test type.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Secret {
    pub value: String,
}

impl ResourceSpec for Secret {
    const TYPE: &'static str = "Secrets.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_sensitivity(Sensitivity::Sensitive)
    }
}

/// The node's machine: the real config applier, services from cosi-api's test node.
pub struct NodeMachine {
    pub applier: ConfigApplier,
    pub services: TestMachine,
}

fn node_mode(mode: api::ApplyMode) -> ApplyMode {
    match mode {
        api::ApplyMode::Auto => ApplyMode::Auto,
        api::ApplyMode::NoReboot => ApplyMode::NoReboot,
        api::ApplyMode::Reboot => ApplyMode::Reboot,
        api::ApplyMode::Staged => ApplyMode::Staged,
        api::ApplyMode::Try => ApplyMode::Try,
    }
}

fn api_mode(mode: ApplyMode) -> api::ApplyMode {
    match mode {
        ApplyMode::Auto => api::ApplyMode::Auto,
        ApplyMode::NoReboot => api::ApplyMode::NoReboot,
        ApplyMode::Reboot => api::ApplyMode::Reboot,
        ApplyMode::Staged => api::ApplyMode::Staged,
        ApplyMode::Try => api::ApplyMode::Try,
    }
}

#[async_trait]
impl Machine for NodeMachine {
    async fn apply_configuration(
        &self,
        request: api::ApplyRequest,
    ) -> cosi_core::Result<ApplyOutcome> {
        let input = if request.patches.is_empty() {
            ApplyInput::Config(request.data)
        } else {
            ApplyInput::Patches(request.patches)
        };
        let outcome = self
            .applier
            .apply(ApplyRequest {
                input,
                mode: node_mode(request.mode),
                dry_run: request.dry_run,
                try_timeout: request.try_timeout,
                expected_version: request.expected_version.map(Version::new),
                actor: request.actor,
            })
            .await
            .map_err(|e| e.to_state_error())?;
        let version = match outcome.mode {
            ApplyMode::Staged => outcome.persisted_version,
            _ => outcome.active_version,
        };
        Ok(ApplyOutcome {
            mode: api_mode(outcome.mode),
            details: outcome.details,
            warnings: outcome.warnings.iter().map(ToString::to_string).collect(),
            diff: outcome.diff.unified,
            version: version.map_or(0, |v| v.get()),
        })
    }

    async fn services(&self) -> cosi_core::Result<Vec<ServiceStatus>> {
        self.services.services().await
    }

    async fn service_action(&self, id: &str, action: ServiceAction) -> cosi_core::Result<String> {
        self.services.service_action(id, action).await
    }

    async fn logs(&self, request: LogRequest) -> cosi_core::Result<LogStream> {
        self.services.logs(request).await
    }

    async fn events(&self, tail: EventTail) -> cosi_core::Result<EventStream> {
        self.services.events(tail).await
    }

    async fn version(&self) -> cosi_core::Result<VersionInfo> {
        self.services.version().await
    }
}

/// The registry every test node serves.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    cosi_node::config::register_types(&mut registry).unwrap();
    registry.register::<Note>().unwrap();
    registry.register::<Secret>().unwrap();
    registry
}

/// One node.
pub struct TestNode {
    /// The name to pass with -n.
    pub name: String,
    pub address: SocketAddr,
    pub state: Arc<MemoryState>,
    pub machine: Arc<NodeMachine>,
    handle: Option<ServerHandle>,
}

impl TestNode {
    /// Stops serving; the address then refuses connections.
    pub async fn stop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown().await.unwrap();
        }
    }

    /// The stored resource, read directly from the node's store.
    pub async fn read(&self, pointer: &cosi_core::Pointer) -> cosi_core::SharedResource {
        self.state.get(pointer).await.unwrap()
    }

    /// The active machine config's version.
    pub async fn config_version(&self) -> u64 {
        self.read(&MachineConfig::pointer("active"))
            .await
            .metadata()
            .version()
            .get()
    }
}

/// The starter config, as `gen config` writes it.
pub fn starter_config(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("controlplane.yaml")).unwrap()
}

/// A cluster: a folder with the PKI and client config from `cosictl gen`, and its nodes.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<TestNode>,
}

impl Cluster {
    /// `count` nodes, each with the starter config applied (config version 1) and notes `a`
    /// and `b` in namespace `test`.
    pub async fn start(count: usize) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let out = |args: &[&str]| {
            let mut argv = vec!["cosictl"];
            argv.extend_from_slice(args);
            cosi_cli::args::Cli::parse_from(argv)
        };
        for cli in [
            out(&["gen", "ca", "--out", pki.to_str().unwrap()]),
            out(&[
                "gen",
                "certs",
                "--out",
                pki.to_str().unwrap(),
                "--address",
                "127.0.0.1",
            ]),
            out(&[
                "gen",
                "config",
                "demo",
                "https://127.0.0.1:6443",
                "--hostname",
                "node-1",
                "--out",
                dir.path().to_str().unwrap(),
                "--pki",
                pki.to_str().unwrap(),
            ]),
        ] {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            let code = cosi_cli::run(cli, &mut cosi_cli::session::Io::new(&mut o, &mut e)).await;
            assert_eq!(code, 0, "{}", String::from_utf8_lossy(&e));
        }
        let identity =
            CertifiedKey::read_pem(&pki.join("server.pem"), &pki.join("server-key.pem")).unwrap();
        let ca = std::fs::read_to_string(pki.join("ca.pem")).unwrap();
        let config = starter_config(dir.path());
        let mut nodes = Vec::new();
        for _ in 0..count {
            nodes.push(start_node(&identity, &ca, &config).await);
        }
        Cluster { dir, nodes }
    }

    /// The client config file `gen config` wrote.
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("cosiconfig")
    }

    /// `-n` for every node.
    pub fn all_nodes(&self) -> String {
        self.nodes
            .iter()
            .map(|n| n.name.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Runs the `cosictl` binary with this cluster's client config.
    pub async fn cosictl(&self, args: &[&str]) -> Output {
        self.cosictl_with(args, &[]).await
    }

    /// Runs the `cosictl` binary with extra environment variables.
    pub async fn cosictl_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_cosictl"));
        command
            .args(args)
            .env("COSICONFIG", self.config_path())
            .env_remove("EDITOR")
            .env_remove("COSICTL_EDITOR")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        for (key, value) in env {
            command.env(key, value);
        }
        let output = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .expect("cosictl finished")
            .unwrap();
        Output {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }
}

/// What a run of the binary printed.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Starts a node serving mutual TLS on a loopback port.
pub async fn start_node(identity: &CertifiedKey, ca: &str, config: &str) -> TestNode {
    let state = Arc::new(MemoryState::default());
    let registry = Arc::new(registry());
    registry.publish(&*state).await.unwrap();
    let (signal, _restarts) = RestartSignal::new();
    let applier = ConfigApplier::new(state.clone(), Arc::new(signal));
    applier
        .apply(ApplyRequest::config(config, ApplyMode::NoReboot, "test"))
        .await
        .unwrap();
    for (id, text, tags) in [("a", "hello", vec!["x", "y"]), ("b", "world", vec![])] {
        let note = Note {
            text: text.into(),
            tags: tags.into_iter().map(str::to_string).collect(),
        };
        state
            .create(
                Resource::new(id, note).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    let machine = Arc::new(NodeMachine {
        applier,
        services: TestMachine::new(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let policy = StatePolicy::new([MachineConfig::TYPE]);
    let handle = ApiServer::new(Security::MutualTls {
        identity: identity.clone(),
        client_ca_pem: ca.to_string(),
    })
    .with_state(StateService::new(
        state.clone(),
        Codec::new(registry),
        policy,
    ))
    .with_machine(machine.clone())
    .serve(listener)
    .unwrap();
    TestNode {
        name: address.to_string(),
        address,
        state,
        machine,
        handle: Some(handle),
    }
}

/// Serves `services` with the cluster's server certificate over mutual TLS (a node of the
/// test's own making): the node's address, and the server (which serves until dropped).
pub async fn serve(
    cluster: &Cluster,
    services: impl FnOnce(ApiServer) -> ApiServer,
) -> (String, ServerHandle) {
    let pki = cluster.dir.path().join("pki");
    let identity =
        CertifiedKey::read_pem(&pki.join("server.pem"), &pki.join("server-key.pem")).unwrap();
    let ca = std::fs::read_to_string(pki.join("ca.pem")).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = ApiServer::new(Security::MutualTls {
        identity,
        client_ca_pem: ca,
    });
    let handle = services(server).serve(listener).unwrap();
    (address.to_string(), handle)
}

/// What the kind watches of [`KindWatches`] do.
pub enum KindWatch {
    /// Fail at once with this error, sent in the watch's `ERRORED` event (which carries an
    /// error whole, where a status is clipped).
    Fail(cosi_core::Error),
    /// Never open: the server never answers the call.
    Hang,
}

/// A node's store whose kind watches do what [`KindWatch`] says; everything else is `state`'s.
pub struct KindWatches {
    pub state: Arc<MemoryState>,
    pub watch: KindWatch,
}

/// A watch whose only event is `Errored` with the error it holds.
struct Fails(Option<cosi_core::Error>);

#[async_trait]
impl cosi_core::EventSource for Fails {
    async fn next(&mut self) -> Option<cosi_core::Event> {
        self.0
            .take()
            .map(|error| cosi_core::Event::Errored { error })
    }
}

impl State for KindWatches {
    fn get<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
    ) -> cosi_core::Call<'a, cosi_core::SharedResource> {
        self.state.get(pointer)
    }
    fn list<'a>(
        &'a self,
        kind: &'a cosi_core::Kind,
        options: &'a cosi_core::ListOptions,
    ) -> cosi_core::Call<'a, Vec<cosi_core::SharedResource>> {
        self.state.list(kind, options)
    }
    fn create(
        &self,
        resource: cosi_core::SharedResource,
        options: CreateOptions,
    ) -> cosi_core::Call<'_, cosi_core::SharedResource> {
        self.state.create(resource, options)
    }
    fn update(
        &self,
        resource: cosi_core::SharedResource,
        options: cosi_core::UpdateOptions,
    ) -> cosi_core::Call<'_, cosi_core::SharedResource> {
        self.state.update(resource, options)
    }
    fn destroy<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::DestroyOptions,
    ) -> cosi_core::Call<'a, ()> {
        self.state.destroy(pointer, options)
    }
    fn watch<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::WatchOptions,
    ) -> cosi_core::Call<'a, cosi_core::Watch> {
        self.state.watch(pointer, options)
    }
    fn watch_kind<'a>(
        &'a self,
        _: &'a cosi_core::Kind,
        _: cosi_core::WatchKindOptions,
    ) -> cosi_core::Call<'a, cosi_core::Watch> {
        match &self.watch {
            KindWatch::Fail(error) => {
                let error = error.clone();
                cosi_core::Call::pending(
                    async move { Ok(cosi_core::Watch::new(Fails(Some(error)))) },
                )
            }
            KindWatch::Hang => cosi_core::Call::pending(std::future::pending()),
        }
    }
}

/// A node serving `watches` over the cluster's mutual TLS: its address, and the server.
pub async fn serve_state(cluster: &Cluster, watches: KindWatches) -> (String, ServerHandle) {
    let state = StateService::new(
        Arc::new(watches),
        Codec::new(Arc::new(registry())),
        StatePolicy::default(),
    );
    serve(cluster, |server| server.with_state(state)).await
}

/// An address nothing listens on (a port bound and released).
pub async fn dead_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    address.to_string()
}

/// The RFC 3339 form (nanoseconds) resource timestamps are printed in.
pub fn stamp(time: std::time::SystemTime) -> String {
    humantime::format_rfc3339_nanos(time).to_string()
}

/// An output buffer a test reads while the CLI writes to it.
#[derive(Clone, Default)]
pub struct SharedOutput {
    buffer: Arc<std::sync::Mutex<Vec<u8>>>,
    written: Arc<tokio::sync::Notify>,
}

impl std::io::Write for SharedOutput {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.lock().unwrap().extend_from_slice(bytes);
        self.written.notify_waiters();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedOutput {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.buffer.lock().unwrap().clone()).unwrap()
    }

    /// Waits until the text has at least `lines` lines (a hang guard fails the test after a
    /// minute: the wait is on the output, never on time).
    pub async fn wait_for_lines(&self, lines: usize) -> String {
        let wait = async {
            loop {
                let notified = self.written.notified();
                let text = self.text();
                if text.lines().count() >= lines {
                    return text;
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("no {lines} lines of output: {:?}", self.text()))
    }
}

/// Parses a command line of the library.
pub fn cli(cluster: &Cluster, args: &[&str]) -> cosi_cli::args::Cli {
    let config = cluster.config_path();
    let mut argv = vec!["cosictl", "--config", config.to_str().unwrap()];
    argv.extend_from_slice(args);
    cosi_cli::args::Cli::parse_from(argv)
}

/// Runs `args` through the library with the clock fixed at `now`: exit code, stdout, stderr.
pub async fn run_at(
    cluster: &Cluster,
    now: std::time::SystemTime,
    args: &[&str],
) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let cli = cli(cluster, args);
    let code = {
        let mut io = cosi_cli::session::Io::new(&mut out, &mut err).with_clock(move || now);
        cosi_cli::run(cli, &mut io).await
    };
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// A node in maintenance mode (no config, server-only TLS with a self-signed key) and the
/// fingerprint of its key.
pub async fn start_maintenance_node() -> (TestNode, cosi_api::tls::Fingerprint) {
    let identity = cosi_api::pki::self_signed_server(&["127.0.0.1".parse().unwrap()], &[]).unwrap();
    maintenance_node(identity).await
}

/// A node in maintenance mode presenting the server certificate of `cluster` (so that the
/// cluster's client contexts reach it and hear its refusal).
pub async fn start_maintenance_node_of(
    cluster: &Cluster,
) -> (TestNode, cosi_api::tls::Fingerprint) {
    let pki = cluster.dir.path().join("pki");
    let identity =
        CertifiedKey::read_pem(&pki.join("server.pem"), &pki.join("server-key.pem")).unwrap();
    maintenance_node(identity).await
}

async fn maintenance_node(identity: CertifiedKey) -> (TestNode, cosi_api::tls::Fingerprint) {
    let fingerprint = cosi_api::tls::fingerprint_of_pem(&identity.cert_pem).unwrap();
    let state = Arc::new(MemoryState::default());
    let (signal, _restarts) = RestartSignal::new();
    let machine = Arc::new(NodeMachine {
        applier: ConfigApplier::new(state.clone(), Arc::new(signal)),
        services: TestMachine::new(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let handle = ApiServer::new(Security::Maintenance { identity })
        .with_machine(machine.clone())
        .serve(listener)
        .unwrap();
    let node = TestNode {
        name: address.to_string(),
        address,
        state,
        machine,
        handle: Some(handle),
    };
    (node, fingerprint)
}

/// Writes an executable shell script (an editor for `edit`).
pub fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\nset -e\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}
