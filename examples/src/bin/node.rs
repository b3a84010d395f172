//! `node`: the reference node daemon. Every family of `cosi-node` on one engine, its state on
//! disk, served through the API of `cosi-api` with mutual TLS and roles. A daemon author can
//! copy it; every decision it makes is written down here.
//!
//! ```text
//! node --state-dir DIR --ca pki/ca.pem --cert pki/server.pem --key pki/server-key.pem
//!      [--listen 127.0.0.1:50000] [--hostname NAME]
//!      [--registry-dir DIR [--registry-ttl 30s]] [--etcd URL ... [--etcd-prefix KEY]]
//!      [--network memory [--link NAME ...] | --network netlink] [--cmdline 'ip=...']
//!      [--image REPOSITORY=PROGRAM ...]
//! node --print-graph dot|text [same node flags]
//! ```
//!
//! A node's first minutes with `cosictl` (whose `gen` writes the files above):
//!
//! ```text
//! cosictl gen ca --out pki && cosictl gen certs --out pki --address 127.0.0.1
//! cosictl gen config demo https://127.0.0.1:6443 --hostname node-1 --pki pki
//! node --state-dir state --ca pki/ca.pem --cert pki/server.pem --key pki/server-key.pem
//! #  listening on 127.0.0.1:50000 (maintenance, fingerprint 7e7d…)
//! cosictl -n 127.0.0.1 apply-config --insecure --cert-fingerprint 7e7d… -f controlplane.yaml
//! #  listening on 127.0.0.1:50000 (mutual TLS)
//! COSICONFIG=$PWD/cosiconfig cosictl -n 127.0.0.1 services
//! ```
//!
//! # What it prints
//!
//! On stdout, one line each time the API starts serving, and nothing else:
//!
//! - `listening on ADDR (maintenance, fingerprint HEX)`: no config yet. HEX is the SHA-256 of
//!   the server certificate's public key, what a client pins (`ClientSecurity::Pinned`);
//! - `listening on ADDR (mutual TLS)`: the node has a config (at start, or once the first
//!   config is applied in maintenance: the switch prints this second line).
//!
//! A reader of stdout that went away (a closed pipe) does not stop the node: a line it cannot
//! print is logged as a warning, and the node serves on.
//!
//! Logs go to stderr through `tracing`, filtered by `RUST_LOG` (e.g. `RUST_LOG=info`,
//! `RUST_LOG=cosi_node=debug`); the default is `warn`, so a demo shows no noise.
//!
//! # State
//!
//! `--state-dir` holds `state.redb` (the store) and `services/` (service log files and the
//! records of the process groups the supervisor started). The store is one state routed by
//! namespace ([`cosi_node::node::NodeStore`] lists them and why): `config` (the machine config,
//! its history) and `cluster` (the node identity) are on disk — they survive restarts;
//! `runtime`, `network-config`, `network`, `cluster-raw` and `meta` are in memory, rebuilt by
//! the controllers at every start. One daemon per state directory: a second one is refused by
//! the store's lock.
//!
//! # Security: maintenance, then mutual TLS
//!
//! The node presents the server certificate of `--cert`/`--key` (what `gen` writes, signed by
//! the cluster CA) in both modes; a certificate `--ca` did not issue is refused at start, as
//! clients verify the node against that CA (its validity period is not checked: a node whose
//! clock is off at boot still starts). **Without an active config** it serves
//! `Security::Maintenance`: server-only TLS, and only `ApplyConfiguration` is accepted (any
//! other call is refused as not authorized); clients pin the key's fingerprint, printed on the
//! ready line and stable across restarts (the key is the operator's, not generated). **Once a
//! config is active** — at start, or when the first apply makes it so — it serves
//! `Security::MutualTls` on the same address: clients present a certificate signed by `--ca`,
//! and their roles come from it (reader, operator, admin). The switch stops the maintenance
//! server gracefully — the apply's answer is delivered first — but does not wait on
//! maintenance callers: a call still open whose request has not arrived (an unauthenticated
//! caller may open one and never send it) ends at once with `Unavailable` and "the node left
//! maintenance mode; connect with mutual TLS" ([`examples::maintenance::LEFT_MAINTENANCE`]).
//! It then serves mutual TLS on the same listening socket — it is never closed, so the port
//! cannot be taken meanwhile, and clients that connect during the switch are answered by the
//! new server — and prints the new ready line. A node never goes back to maintenance. A
//! maintenance apply is accepted only while no config is active
//! ([`examples::maintenance::MaintenanceMachine`]), one at a time: a call the maintenance
//! server took in before it stopped cannot change the configured node.
//!
//! The State service serves the whole store with [`cosi_api::auth::StatePolicy`]: the machine
//! config and its history are written only by `ApplyConfiguration` (so validation cannot be
//! bypassed); every resource a controller, the engine's status publisher or the definitions'
//! publisher owns is never written over the API; the machine config is sensitive (admins
//! only). Definitions are published in `meta` at start, so clients resolve types and aliases.
//!
//! # Services and images
//!
//! Services run as real processes under the supervisor, each in its own process group; the
//! daemon is their child subreaper and reaps what they leave behind. The config's
//! `machine.kubelet.image` names an image; the node runs no containers, so an image's
//! repository maps to a program (`--image REPOSITORY=PROGRAM`, repeatable). Without a mapping
//! for it, `ghcr.io/siderolabs/kubelet` runs `node-kubelet` from this program's directory (the
//! demo workload, built with this package). An image with no mapping fails its service with a
//! message naming the repository; an absolute path as the image runs that program.
//!
//! # Network and members
//!
//! `--network memory` (the default) is an in-memory network with the links of `--link`
//! (default `lo` and `eth0`); `--network netlink` (feature `netlink`, Linux) uses the
//! kernel's. `--cmdline` is a kernel command line whose `ip=` arguments put addresses on
//! links (the `cmdline` address layer, as `ip=192.0.2.10:::24::eth0:off`); the config's
//! `machine.network.interfaces` adds the `configuration` layer. An address for a link that
//! does not exist is accepted — the link may come later (a device probed late; a link made by
//! hand with `--network netlink`) and the address is added then — but not silently: a warning
//! names the link it waits for (`address 192.0.2.10/24: waiting for link "eth9", which does
//! not exist`), and until the link comes the address is a `PendingAddress` in `network` saying
//! the same (`cosictl get pendingaddresses`). Members come from a registry:
//! `--registry-dir` (a directory the nodes of one machine share; an entry expires after
//! `--registry-ttl`, at least 1s, without a refresh) and/or `--etcd` (feature `etcd`).
//! `--hostname` is the hostname while the config names none (the config's
//! `machine.network.hostname` wins); it is held to the config's rule (an RFC 1123 name), and
//! any other is a bad flag.
//!
//! # Restarts
//!
//! - **`reboot` restarts the runtime in place**: the process and its API stay up. The runtime
//!   (controllers, supervisor, applier) is stopped — services first, dependents before what
//!   they depend on — and started again, and the start makes the persisted config active. The
//!   API follows the new runtime: the machine service reaches whichever runtime runs (calls
//!   made while it restarts get a retryable `Unavailable`), and the State service serves the
//!   same store, which is not restarted — **in-flight watches continue** and see the old
//!   services go and the new ones come; a log follow ends when its service stops (follow
//!   again); an event stream continues. `MachineStatus` (`runtime`, id `machine`) counts the
//!   starts in its `boot` field.
//! - **A pending `try` is reverted by any restart** (in place or of the process): `try` never
//!   writes the persisted config, and every start makes the persisted config active. A
//!   **`staged`** config becomes active at the next start.
//! - **SIGTERM, SIGINT or SIGHUP** (the terminal it ran in closed; there is no file to
//!   reload, and its default, dying on the spot, would leave the services running until the
//!   next start): the API stops (open streams, and calls whose request is still arriving,
//!   end with `Unavailable`; calls being answered get up to 10 s), the services
//!   stop in dependency order, the controllers stop, the store finishes its writes and closes;
//!   exit code 0.
//! - **SIGKILL** leaves the services running; the next start of the daemon on the same state
//!   directory kills every process group the records name before any service starts (logged
//!   as a warning), so no orphan survives it.
//!
//! `--print-graph dot|text` prints the controller graph of a node with the given flags (the
//! registries named as they would be) and exits, touching no state, no directory and no port.
//!
//! Exit codes: 0 after a clean shutdown, 1 when the node cannot start or fails, 2 for bad
//! flags.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use cosi_api::auth::{ControllerOwners, StatePolicy};
use cosi_api::codec::Codec;
use cosi_api::machine::Machine;
use cosi_api::pki::CertifiedKey;
use cosi_api::server::{ApiServer, Security, ServerHandle, StateService, DEFAULT_STOP_REASON};
use cosi_core::{Registry, State, StateExt};
use cosi_node::cluster::{
    AffiliateRegistry, DirectoryRegistry, DirectoryRegistryOptions, MemoryRegistry,
};
use cosi_node::config::{MachineConfig, ACTIVE};
use cosi_node::network::{Cmdline, MemoryBackend, NetworkBackend};
use cosi_node::node::{self, Node, NodeOptions, NodeParts, NodeStore, APPLY_ONLY_TYPES};
use cosi_node::services::{ImageResolver, SupervisorOptions};
use examples::machine::NodeMachine;
use examples::maintenance::{MaintenanceMachine, LEFT_MAINTENANCE};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

/// The kubelet image repository mapped to `node-kubelet` unless `--image` maps it.
const KUBELET_REPOSITORY: &str = "ghcr.io/siderolabs/kubelet";
/// The program run for it, looked up beside this one.
const KUBELET_PROGRAM: &str = "node-kubelet";
/// How long a stopping API server waits for the calls it is answering (a caller holding a
/// call open without sending its request is not waited for).
const SERVER_GRACE: Duration = Duration::from_secs(10);

/// The reference node daemon: every node family on one engine, served over the API.
#[derive(Parser, Debug)]
#[command(name = "node", version)]
struct Flags {
    /// Where the node keeps its state: the store (`state.redb`) and `services/` (logs,
    /// process records). Created if missing.
    #[arg(long, required_unless_present = "print_graph")]
    state_dir: Option<PathBuf>,
    /// The API's address (a port 0 picks a free one; the ready line says which).
    #[arg(long, default_value = "127.0.0.1:50000")]
    listen: SocketAddr,
    /// The cluster CA certificate (PEM): client certificates must be signed by it.
    #[arg(long, required_unless_present = "print_graph")]
    ca: Option<PathBuf>,
    /// The node's server certificate (PEM).
    #[arg(long, required_unless_present = "print_graph")]
    cert: Option<PathBuf>,
    /// The server certificate's private key (PEM).
    #[arg(long, required_unless_present = "print_graph")]
    key: Option<PathBuf>,
    /// The hostname while the config names none (an RFC 1123 name, as the config's).
    #[arg(long, value_parser = parse_hostname)]
    hostname: Option<String>,
    /// A directory the nodes of this machine share to find each other (the directory
    /// registry). Created if missing.
    #[arg(long)]
    registry_dir: Option<PathBuf>,
    /// How long a node's entry in the registry lives without a refresh (refreshed at a third
    /// of it; at least 1s).
    #[arg(long, default_value = "30s", value_parser = parse_registry_ttl)]
    registry_ttl: Duration,
    /// An etcd endpoint for the etcd member registry (repeatable; feature `etcd`).
    #[arg(long = "etcd")]
    etcd_endpoints: Vec<String>,
    /// The key prefix of the etcd registry.
    #[arg(long, requires = "etcd_endpoints")]
    etcd_prefix: Option<String>,
    /// Where addresses go.
    #[arg(long, value_enum, default_value_t = NetworkKind::Memory)]
    network: NetworkKind,
    /// A link of the in-memory network (repeatable; a Linux link name, as the config's).
    #[arg(long = "link", default_values_t = ["lo".to_string(), "eth0".to_string()], value_parser = parse_link)]
    links: Vec<String>,
    /// A kernel command line; its `ip=` arguments put addresses on links.
    #[arg(long, default_value = "")]
    cmdline: String,
    /// `REPOSITORY=PROGRAM`: run PROGRAM for images of REPOSITORY (repeatable).
    #[arg(long = "image", value_parser = parse_image)]
    images: Vec<(String, PathBuf)>,
    /// Print the controller graph and exit.
    #[arg(long, value_enum)]
    print_graph: Option<GraphFormat>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum NetworkKind {
    /// An in-memory network with the links of `--link`.
    Memory,
    /// The kernel's addresses (feature `netlink`, Linux).
    Netlink,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum GraphFormat {
    /// Graphviz DOT.
    Dot,
    /// One block per controller with its inputs and outputs.
    Text,
}

fn parse_image(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((repository, program)) if !repository.is_empty() && !program.is_empty() => {
            Ok((repository.to_string(), PathBuf::from(program)))
        }
        _ => Err(format!("{text:?} is not REPOSITORY=PROGRAM")),
    }
}

/// The least registry TTL: etcd leases are whole seconds (a shorter TTL would mean one thing
/// to etcd and another to the directory registry), and a zero one expires every entry at once.
const MIN_REGISTRY_TTL: Duration = Duration::from_secs(1);

fn parse_registry_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if ttl < MIN_REGISTRY_TTL {
        return Err(format!(
            "a registry TTL is at least {}",
            humantime::format_duration(MIN_REGISTRY_TTL)
        ));
    }
    Ok(ttl)
}

fn parse_link(text: &str) -> Result<String, String> {
    cosi_node::config::validate::link_name(text)?;
    Ok(text.to_string())
}

fn parse_hostname(text: &str) -> Result<String, String> {
    cosi_node::config::validate::hostname(text)?;
    Ok(text.to_string())
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    init_logs();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            complain(&format!("cannot start the async runtime: {error}"));
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async {
        match flags.print_graph {
            Some(format) => print_graph(&flags, format),
            None => run(flags).await,
        }
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            complain(&error);
            ExitCode::FAILURE
        }
    }
}

/// Says what went wrong on stderr. A closed stderr must not turn the exit code into a panic's
/// (`eprintln!` panics when it cannot write).
fn complain(message: &str) {
    let _ = writeln!(std::io::stderr(), "node: {message}");
}

fn init_logs() {
    let filter = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(filter) => filter,
        Err(error) => {
            if std::env::var_os("RUST_LOG").is_some() {
                complain(&format!(
                    "RUST_LOG is not a log filter ({error}); logging warnings"
                ));
            }
            tracing_subscriber::EnvFilter::new("warn")
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// The registry names the flags ask for, and stand-ins by those names (for the graph).
fn registry_names(flags: &Flags) -> Vec<&'static str> {
    let mut names = Vec::new();
    if flags.registry_dir.is_some() {
        names.push("directory");
    }
    if !flags.etcd_endpoints.is_empty() {
        names.push("etcd");
    }
    names
}

/// Refuses the flags that need a feature this build lacks (also when only printing the
/// graph: it is the graph of a node that could run).
fn check_features(flags: &Flags) -> Result<(), String> {
    if flags.network == NetworkKind::Netlink && !cfg!(all(target_os = "linux", feature = "netlink"))
    {
        return Err(
            "--network netlink: this node was built without the `netlink` feature (Linux only)"
                .into(),
        );
    }
    if !flags.etcd_endpoints.is_empty() && !cfg!(feature = "etcd") {
        return Err(format!(
            "--etcd {}: this node was built without the `etcd` feature",
            flags.etcd_endpoints.join(",")
        ));
    }
    Ok(())
}

fn print_graph(flags: &Flags, format: GraphFormat) -> Result<(), String> {
    check_features(flags)?;
    let parts = NodeParts {
        network: Arc::new(MemoryBackend::default()),
        cmdline: Cmdline::default(),
        registries: registry_names(flags)
            .into_iter()
            .map(|name| Arc::new(MemoryRegistry::named(name)) as Arc<dyn AffiliateRegistry>)
            .collect(),
        default_hostname: flags.hostname.clone(),
    };
    let graph = node::graph(&parts).map_err(|e| e.to_string())?;
    let text = match format {
        GraphFormat::Dot => graph.to_dot(),
        GraphFormat::Text => graph.to_text(),
    };
    // Not print!, which panics when the reader has gone (`node --print-graph dot | head`).
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("printing the graph: {e}"))
}

/// Every path flag of a running node (required unless printing the graph).
struct Paths {
    state_dir: PathBuf,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn paths(flags: &Flags) -> Result<Paths, String> {
    // Invariant: clap requires each of these unless --print-graph is given.
    let take = |path: &Option<PathBuf>, flag: &str| {
        path.clone().ok_or_else(|| format!("--{flag} is required"))
    };
    Ok(Paths {
        state_dir: take(&flags.state_dir, "state-dir")?,
        ca: take(&flags.ca, "ca")?,
        cert: take(&flags.cert, "cert")?,
        key: take(&flags.key, "key")?,
    })
}

/// The TLS material, read and checked before anything starts, so a bad file is an error at
/// start rather than when the node leaves maintenance.
struct Tls {
    identity: CertifiedKey,
    ca_pem: String,
    fingerprint: String,
}

fn read_tls(paths: &Paths) -> Result<Tls, String> {
    let read = |flag: &str, path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|e| format!("--{flag} {}: {e}", path.display()))
    };
    let identity = CertifiedKey {
        cert_pem: read("cert", &paths.cert)?,
        key_pem: read("key", &paths.key)?,
    };
    let ca_pem = read("ca", &paths.ca)?;
    cosi_api::tls::server_mutual(&identity, &ca_pem).map_err(|e| {
        format!(
            "--cert {}, --key {}, --ca {}: {e}",
            paths.cert.display(),
            paths.key.display(),
            paths.ca.display()
        )
    })?;
    // Otherwise the node would start, and be unreachable once it leaves maintenance: clients
    // verify it against the CA.
    cosi_api::tls::check_issued_by(&identity, &ca_pem).map_err(|e| {
        format!(
            "--cert {} was not issued by --ca {}: {e}",
            paths.cert.display(),
            paths.ca.display()
        )
    })?;
    let fingerprint = cosi_api::tls::fingerprint_of_pem(&identity.cert_pem)
        .map_err(|e| format!("--cert {}: {e}", paths.cert.display()))?;
    Ok(Tls {
        identity,
        ca_pem,
        fingerprint: fingerprint.to_string(),
    })
}

fn network(flags: &Flags) -> Result<Arc<dyn NetworkBackend>, String> {
    match flags.network {
        NetworkKind::Memory => Ok(Arc::new(MemoryBackend::with_links(flags.links.iter()))),
        NetworkKind::Netlink => netlink(),
    }
}

#[cfg(all(target_os = "linux", feature = "netlink"))]
fn netlink() -> Result<Arc<dyn NetworkBackend>, String> {
    cosi_node::network::NetlinkBackend::connect()
        .map(|backend| Arc::new(backend) as Arc<dyn NetworkBackend>)
        .map_err(|e| format!("--network netlink: {e}"))
}

#[cfg(not(all(target_os = "linux", feature = "netlink")))]
fn netlink() -> Result<Arc<dyn NetworkBackend>, String> {
    // Invariant: check_features refused --network netlink in this build.
    Err("--network netlink: not in this build".into())
}

fn registries(flags: &Flags) -> Result<Vec<Arc<dyn AffiliateRegistry>>, String> {
    let mut registries: Vec<Arc<dyn AffiliateRegistry>> = Vec::new();
    if let Some(directory) = &flags.registry_dir {
        registries.push(Arc::new(DirectoryRegistry::start(
            DirectoryRegistryOptions::new(directory, flags.registry_ttl),
        )));
    }
    if !flags.etcd_endpoints.is_empty() {
        registries.push(etcd_registry(flags)?);
    }
    Ok(registries)
}

#[cfg(feature = "etcd")]
fn etcd_registry(flags: &Flags) -> Result<Arc<dyn AffiliateRegistry>, String> {
    let mut options = cosi_node::cluster::EtcdRegistryOptions::new(flags.etcd_endpoints.clone())
        .with_ttl(flags.registry_ttl);
    if let Some(prefix) = &flags.etcd_prefix {
        options = options.with_prefix(prefix.clone());
    }
    Ok(Arc::new(cosi_node::cluster::EtcdRegistry::start(options)))
}

#[cfg(not(feature = "etcd"))]
fn etcd_registry(_flags: &Flags) -> Result<Arc<dyn AffiliateRegistry>, String> {
    // Invariant: check_features refused --etcd in this build.
    Err("--etcd: not in this build".into())
}

/// Image repositories → programs: the flags' mappings, and the kubelet's default.
fn resolver(flags: &Flags) -> Result<ImageResolver, String> {
    let mut resolver = ImageResolver::new();
    let mut kubelet_mapped = false;
    for (repository, program) in &flags.images {
        kubelet_mapped |= repository == KUBELET_REPOSITORY;
        resolver = resolver.with_image(
            repository,
            program.display().to_string(),
            Vec::<String>::new(),
        );
    }
    if !kubelet_mapped {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this program's directory: {e}"))?;
        let program = exe.with_file_name(KUBELET_PROGRAM);
        resolver = resolver.with_image(
            KUBELET_REPOSITORY,
            program.display().to_string(),
            Vec::<String>::new(),
        );
    }
    Ok(resolver)
}

/// What the API serves, in one security mode.
struct Api {
    state: StateService,
    machine: Arc<NodeMachine>,
    /// The node's state, where the maintenance gate looks for an active config.
    node_state: Arc<dyn State>,
    tls: Tls,
}

impl Api {
    fn serve(&self, listener: TcpListener, configured: bool) -> Result<ServerHandle, String> {
        let security = if configured {
            Security::MutualTls {
                identity: self.tls.identity.clone(),
                client_ca_pem: self.tls.ca_pem.clone(),
            }
        } else {
            Security::Maintenance {
                identity: self.tls.identity.clone(),
            }
        };
        // A maintenance caller is unauthenticated: it may configure the node, and only once.
        let machine: Arc<dyn Machine> = if configured {
            self.machine.clone()
        } else {
            Arc::new(MaintenanceMachine::new(
                self.machine.clone(),
                self.node_state.clone(),
            ))
        };
        let server = ApiServer::new(security)
            .with_state(self.state.clone())
            .with_machine(machine)
            .serve(listener)
            .map_err(|e| format!("serving the API: {e}"))?;
        let address = server.local_addr();
        if configured {
            tracing::info!(%address, "serving the API over mutual TLS");
            announce(&format!("listening on {address} (mutual TLS)"));
        } else {
            tracing::info!(%address, fingerprint = %self.tls.fingerprint, "serving the API in maintenance mode");
            announce(&format!(
                "listening on {address} (maintenance, fingerprint {})",
                self.tls.fingerprint
            ));
        }
        Ok(server)
    }
}

/// Prints a ready line on stdout. Whoever read it may be gone (a closed pipe): the node
/// serves on regardless — `println!` would panic, and the services would outlive the daemon.
fn announce(line: &str) {
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        tracing::warn!(%error, line, "cannot print the ready line on stdout; serving on");
    }
}

async fn run(flags: Flags) -> Result<(), String> {
    check_features(&flags)?;
    let paths = paths(&flags)?;
    let tls = read_tls(&paths)?;
    let cmdline = Cmdline::parse(&flags.cmdline).map_err(|e| format!("--cmdline: {e}"))?;
    // Before anything starts: a signal during the start is not lost, and a port in use fails
    // the start with nothing running yet.
    let mut signals = Signals {
        terminate: signal(SignalKind::terminate()).map_err(|e| e.to_string())?,
        interrupt: signal(SignalKind::interrupt()).map_err(|e| e.to_string())?,
        hangup: signal(SignalKind::hangup()).map_err(|e| e.to_string())?,
    };
    let listener = TcpListener::bind(flags.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", flags.listen))?;

    // Every part that can fail is set up before the state directory is made or the store
    // opened, so a failed start leaves the directory as it found it.
    let parts = NodeParts {
        network: network(&flags)?,
        cmdline,
        registries: registries(&flags)?,
        default_hostname: flags.hostname.clone(),
    };
    let resolver = resolver(&flags)?;

    std::fs::create_dir_all(&paths.state_dir)
        .map_err(|e| format!("--state-dir {}: {e}", paths.state_dir.display()))?;
    let mut registry = Registry::new();
    node::register_types(&mut registry).map_err(|e| e.to_string())?;
    let registry = Arc::new(registry);
    let store = NodeStore::open(&paths.state_dir, registry.clone())
        .await
        .map_err(|e| format!("--state-dir {}: {e}", paths.state_dir.display()))?;
    let options = NodeOptions {
        parts,
        supervisor: SupervisorOptions {
            state_dir: Some(paths.state_dir.join("services")),
            resolver,
            reap_orphans: true,
            ..SupervisorOptions::default()
        },
    };
    let node = Node::start(store.state(), &registry, options).await;
    let outcome = match node {
        Ok(mut node) => {
            let api = Api {
                state: StateService::new(
                    store.state(),
                    Codec::new(registry),
                    StatePolicy::new(APPLY_ONLY_TYPES)
                        .with_controller_owners(ControllerOwners::Named(
                            node.controller_owners().clone(),
                        ))
                        .with_controller_outputs(node.controller_outputs().clone()),
                ),
                machine: Arc::new(NodeMachine::new(node.handle())),
                node_state: store.state(),
                tls,
            };
            // Whatever ends the serving, the node stops: no service outlives the daemon.
            let outcome = serve(&mut node, api, listener, &mut signals).await;
            node.shutdown().await;
            outcome
        }
        Err(error) => Err(error.to_string()),
    };
    if !store.close().await {
        tracing::warn!("the store was still in use at exit; its file is released on exit");
    }
    outcome
}

/// The signals that stop the daemon.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

/// Serves the API on `listener` until a signal (`Ok`) or a failure (`Err`): maintenance until
/// the first config, then mutual TLS; restarts the runtime when an apply asks. Stops the
/// server before it returns.
async fn serve(
    node: &mut Node,
    api: Api,
    listener: TcpListener,
    signals: &mut Signals,
) -> Result<(), String> {
    let state = node.state().clone();
    let mut configured = has_active_config(&*state).await?;
    // The maintenance server gets a second descriptor of the listening socket, and the
    // mutual-TLS server this one: the port is never released between the two (a port given
    // back, even for a moment, can be taken by any outgoing connection on the machine), and
    // connections made during the switch wait in the socket's queue for the second server.
    let (mut spare, first) = if configured {
        (None, listener)
    } else {
        let listener = listener.into_std().map_err(|e| e.to_string())?;
        let spare = listener.try_clone().map_err(|e| e.to_string())?;
        let first = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        (Some(spare), first)
    };
    let mut server = Some(api.serve(first, configured)?);
    let mut config_applied = Box::pin(active_config_exists(state));

    let outcome = loop {
        tokio::select! {
            _ = signals.terminate.recv() => break Ok(()),
            _ = signals.interrupt.recv() => break Ok(()),
            _ = signals.hangup.recv() => break Ok(()),
            request = node.restart_requested() => {
                tracing::info!(
                    persisted_version = %request.persisted_version,
                    fields = ?request.fields,
                    actor = %request.actor,
                    "restarting the node runtime in place"
                );
                if let Err(error) = node.restart().await {
                    break Err(format!("restarting the node runtime: {error}"));
                }
            }
            applied = &mut config_applied, if !configured => {
                if let Err(error) = applied {
                    break Err(format!("watching for the first config: {error}"));
                }
                configured = true;
                // The maintenance server finishes the apply's answer before it stops; a caller
                // holding a call open is told to come back with mutual TLS, not waited for.
                if let Some(maintenance) = server.take() {
                    stop_server(maintenance, LEFT_MAINTENANCE).await;
                }
                // Invariant: a node that started without a config kept a spare descriptor.
                let spare = spare.take().expect("a maintenance start keeps a spare listener");
                let listener = match TcpListener::from_std(spare) {
                    Ok(listener) => listener,
                    Err(error) => break Err(format!("the API's listening socket: {error}")),
                };
                match api.serve(listener, true) {
                    Ok(mutual) => server = Some(mutual),
                    Err(error) => break Err(error),
                }
            }
        }
    };
    if let Some(server) = server {
        stop_server(server, DEFAULT_STOP_REASON).await;
    }
    outcome
}

/// Stops a server gracefully: open streams, and calls whose request is still arriving, end at
/// once with `Unavailable` and `reason`; calls being answered finish. One whose answer takes
/// longer than [`SERVER_GRACE`] is left behind (its connection ends with the process, or stays
/// on the old server's task); the server stops accepting either way, as its accept loop ends
/// on the stop signal.
async fn stop_server(server: ServerHandle, reason: &str) {
    let address = server.local_addr();
    match tokio::time::timeout(SERVER_GRACE, server.shutdown_because(reason)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%address, %error, "the API server stopped with an error"),
        Err(_) => {
            tracing::warn!(%address, "API clients kept their connections open; not waiting for them")
        }
    }
}

async fn has_active_config(state: &dyn State) -> Result<bool, String> {
    match state.get(&MachineConfig::pointer(ACTIVE)).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Resolves once the active config exists.
async fn active_config_exists(state: Arc<dyn State>) -> cosi_core::Result<()> {
    state
        .watch_for(&MachineConfig::pointer(ACTIVE), |r| r.is_some())
        .await
        .map(|_| ())
}
