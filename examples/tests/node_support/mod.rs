//! What the `node` daemon tests share: certificates from `cosi_api::pki` in a temporary
//! directory, real `node` processes whose stdout lines are the events a test waits on, API
//! clients per role, and configs.
//!
//! Every wait is on an event (a line, a watch event, a process exit) under [`PATIENCE`], a
//! bound that only fails a test, never paces one.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cosi_api::auth::Role;
use cosi_api::client::{channel, ClientSecurity, MachineClient, RemoteState};
use cosi_api::codec::Codec;
use cosi_api::machine::{ApplyMode, ApplyRequest};
use cosi_api::pki::{CertificateAuthority, CertifiedKey, CERT_VALIDITY};
use cosi_api::tls::{fingerprint_of_pem, Fingerprint};
use cosi_core::{downcast_ref, AnyResource, Registry, ResourceSpec, StateExt};
use cosi_node::node::{MachineStage, MachineStatus};
use cosi_node::services::ServiceStatus;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The generous bound on any wait.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The daemon.
pub const NODE: &str = env!("CARGO_BIN_EXE_node");

/// A cluster's certificates, written where a daemon reads them.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: CertificateAuthority,
    pub ca_path: PathBuf,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    pub server: CertifiedKey,
}

impl Pki {
    /// A CA and a server certificate for 127.0.0.1.
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("cosi").unwrap();
        let (ca_path, _) = ca.certified().write_pem(dir.path(), "ca").unwrap();
        let server = ca
            .issue_server(
                &["127.0.0.1".parse().unwrap()],
                &["localhost"],
                CERT_VALIDITY,
            )
            .unwrap();
        let (cert_path, key_path) = server.write_pem(dir.path(), "node").unwrap();
        Pki {
            dir,
            ca,
            ca_path,
            cert_path,
            key_path,
            server,
        }
    }

    /// The pin of the server certificate's key.
    pub fn fingerprint(&self) -> Fingerprint {
        fingerprint_of_pem(&self.server.cert_pem).unwrap()
    }

    /// A client certificate with `role`, named after it (`admin`, `operator`, `reader`).
    pub fn client(&self, role: Role) -> CertifiedKey {
        let name = role.as_str().trim_start_matches("os:");
        self.ca.issue_client(name, role, CERT_VALIDITY).unwrap()
    }
}

/// Every type a node stores, for the clients' codec.
pub fn codec() -> Codec {
    let mut registry = Registry::new();
    cosi_node::node::register_types(&mut registry).unwrap();
    Codec::new(Arc::new(registry))
}

/// A client of a node: its State and its machine service.
pub struct Client {
    pub state: RemoteState,
    pub machine: MachineClient,
}

pub fn client(address: SocketAddr, security: ClientSecurity) -> Client {
    let channel = channel(address, None, security).unwrap();
    Client {
        state: RemoteState::new(channel.clone(), codec()),
        machine: MachineClient::new(channel),
    }
}

/// A mutual-TLS client with `role`.
pub fn mtls(pki: &Pki, address: SocketAddr, role: Role) -> Client {
    client(
        address,
        ClientSecurity::MutualTls {
            ca_pem: pki.ca.cert_pem().to_string(),
            identity: pki.client(role),
        },
    )
}

/// A maintenance client pinning the node's key.
pub fn pinned(pki: &Pki, address: SocketAddr) -> Client {
    client(
        address,
        ClientSecurity::Pinned {
            fingerprints: vec![pki.fingerprint()],
        },
    )
}

/// How the API serves, from a ready line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Maintenance { fingerprint: String },
    MutualTls,
}

/// The command that runs `node` on `state` with the certificates of `pki`, stdout piped,
/// stderr inherited (the test's output shows the daemon's logs). Not killed with its handle:
/// a [`Daemon`] stops it with SIGTERM, so that its services stop with it.
pub fn command(pki: &Pki, state: &Path, listen: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(NODE);
    command
        .arg("--state-dir")
        .arg(state)
        .arg("--listen")
        .arg(listen)
        .arg("--ca")
        .arg(&pki.ca_path)
        .arg("--cert")
        .arg(&pki.cert_path)
        .arg("--key")
        .arg(&pki.key_path)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    command
}

/// A `node` process.
pub struct Daemon {
    pub child: Child,
    /// Its stdout (`None` once [`Daemon::close_stdout`] closed it).
    lines: Option<Lines<BufReader<ChildStdout>>>,
    /// Every stdout line read so far.
    pub seen: Vec<String>,
    /// Its address, from the last ready line.
    pub address: Option<SocketAddr>,
}

impl Daemon {
    /// Starts `node` on `state` with the certificates of `pki`, on any free loopback port.
    pub fn start(pki: &Pki, state: &Path, extra: &[&str]) -> Daemon {
        Self::start_on(pki, state, "127.0.0.1:0", extra)
    }

    pub fn start_on(pki: &Pki, state: &Path, listen: &str, extra: &[&str]) -> Daemon {
        Self::spawn(command(pki, state, listen, extra))
    }

    /// Runs `command` (stdout piped, as [`command`] sets it).
    pub fn spawn(mut command: Command) -> Daemon {
        let mut child = command.spawn().expect("the node daemon starts");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Daemon {
            child,
            lines: Some(lines),
            seen: Vec::new(),
            address: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the daemon runs")
    }

    /// The next stdout line; panics if the daemon exits first.
    pub async fn line(&mut self) -> String {
        let lines = self.lines.as_mut().expect("the daemon's stdout is open");
        let read = tokio::time::timeout(PATIENCE, lines.next_line()).await;
        match read {
            Ok(Ok(Some(line))) => {
                self.seen.push(line.clone());
                line
            }
            Ok(_) => panic!(
                "the daemon's stdout ended; it said {:#?}, and exited {:?}",
                self.seen,
                self.child.try_wait()
            ),
            Err(_) => panic!(
                "timed out waiting for a line; the daemon said {:#?}",
                self.seen
            ),
        }
    }

    /// Waits for the next ready line: the address and the mode.
    pub async fn ready(&mut self) -> (SocketAddr, Mode) {
        let line = self.line().await;
        let rest = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not a ready line: {line:?}"));
        let (address, mode) = rest.split_once(' ').unwrap();
        let address: SocketAddr = address.parse().unwrap();
        let mode = match mode {
            "(mutual TLS)" => Mode::MutualTls,
            other => {
                let fingerprint = other
                    .strip_prefix("(maintenance, fingerprint ")
                    .and_then(|f| f.strip_suffix(')'))
                    .unwrap_or_else(|| panic!("unknown mode in {line:?}"));
                Mode::Maintenance {
                    fingerprint: fingerprint.to_string(),
                }
            }
        };
        self.address = Some(address);
        (address, mode)
    }

    /// Closes the read end of its stdout, as a reader that went away does: its next line
    /// meets a broken pipe.
    pub fn close_stdout(&mut self) {
        self.lines = None;
    }

    pub fn address(&self) -> SocketAddr {
        self.address.expect("the daemon said where it listens")
    }

    /// Sends `signal` and waits for the exit.
    pub async fn signal(mut self, signal: nix::sys::signal::Signal) -> ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("the daemon exits")
            .unwrap()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Daemon {
    /// Stops a daemon the test left running with SIGTERM, not SIGKILL: it then stops its
    /// services itself (a SIGKILLed one would leave them running), even after the test ends.
    fn drop(&mut self) {
        if let (Ok(None), Some(pid)) = (self.child.try_wait(), self.child.id()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
}

/// Starts a daemon on `state`, applies `config` over the pinned maintenance connection and
/// waits until it serves mutual TLS. Returns the daemon.
pub async fn configured(pki: &Pki, state: &Path, config: &str, extra: &[&str]) -> Daemon {
    let mut daemon = Daemon::start(pki, state, extra);
    configure(&mut daemon, pki, config).await;
    daemon
}

/// Applies `config` to a new daemon over the pinned maintenance connection and waits until it
/// serves mutual TLS.
pub async fn configure(daemon: &mut Daemon, pki: &Pki, config: &str) {
    let (address, mode) = daemon.ready().await;
    assert!(matches!(mode, Mode::Maintenance { .. }), "{mode:?}");
    pinned(pki, address)
        .machine
        .apply_configuration(ApplyRequest {
            data: config.as_bytes().to_vec(),
            mode: ApplyMode::Auto,
            ..ApplyRequest::default()
        })
        .await
        .expect("the first config applies");
    let (switched, mode) = daemon.ready().await;
    assert_eq!((switched, mode), (address, Mode::MutualTls));
}

/// The kubelet flag that keeps its sync loop quiet in [`config`] (its log is then exactly its
/// start and stop lines).
pub const QUIET_SYNC: &str = "sync-frequency: 1h";

/// A valid config: a node named `hostname` of `machine_type` with the demo kubelet (its health
/// endpoint on a free port, so parallel nodes do not collide; its sync loop quiet).
pub fn config(hostname: &str, machine_type: &str) -> String {
    format!(
        "version: v1alpha1
machine:
  type: {machine_type}
  token: t0k3n
  network:
    hostname: {hostname}
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.31.0
    extraArgs:
      healthz-port: '0'
      hostname-override: {hostname}
      {QUIET_SYNC}
cluster:
  name: demo
  controlPlane:
    endpoint: https://127.0.0.1:6443
"
    )
}

/// Watches `pointer` over `client` until `condition` holds for it; returns it.
pub async fn wait_for<S: ResourceSpec>(
    client: &Client,
    id: &str,
    what: &str,
    condition: impl Fn(&cosi_core::Resource<S>) -> bool + Send + Sync,
) -> Arc<cosi_core::Resource<S>> {
    let pointer = S::kind().pointer(id);
    let found = tokio::time::timeout(
        PATIENCE,
        client
            .state
            .watch_for(&pointer, |r: Option<&dyn AnyResource>| {
                r.and_then(|r| downcast_ref::<S>(r).ok())
                    .is_some_and(&condition)
            }),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {pointer}: {what}"))
    .unwrap_or_else(|e| panic!("watching {pointer} for {what}: {e}"))
    .unwrap_or_else(|| panic!("{pointer} is absent, waiting for {what}"));
    cosi_core::downcast::<S>(found).unwrap()
}

/// Waits until the service `id` runs; returns its pid.
pub async fn running_pid(client: &Client, id: &str) -> u32 {
    running_pid_except(client, id, None).await
}

/// Waits until the service `id` runs with a pid other than `old`; returns it.
pub async fn running_pid_except(client: &Client, id: &str, old: Option<u32>) -> u32 {
    let status = wait_for::<ServiceStatus>(client, id, "running with a new pid", |s| {
        s.spec.state == cosi_node::services::ServiceState::Running
            && s.spec.pid.is_some()
            && s.spec.pid != old
    })
    .await;
    status.spec.pid.unwrap()
}

/// Waits for the first line of `service`'s output; returns it.
pub async fn first_log_line(client: &Client, service: &str) -> String {
    use futures::StreamExt;
    let mut lines = client
        .machine
        .logs(cosi_api::machine::LogRequest {
            service: service.into(),
            tail: None,
            follow: true,
        })
        .await
        .unwrap();
    let chunk = tokio::time::timeout(PATIENCE, lines.next())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {service}'s first line"))
        .unwrap_or_else(|| panic!("{service}'s log ended before its first line"))
        .unwrap();
    let text = String::from_utf8(chunk).unwrap();
    text.lines().next().unwrap().to_string()
}

/// Waits until the node runs its `boot`-th start with a config.
pub async fn booted(client: &Client, boot: u64) -> Arc<cosi_core::Resource<MachineStatus>> {
    wait_for::<MachineStatus>(client, MachineStatus::ID, "the boot", |s| {
        s.spec.boot == boot && s.spec.stage == MachineStage::Running
    })
    .await
}

/// Whether `pid` names a live process (not a zombie).
pub fn alive(pid: u32) -> bool {
    cosi_node::services::read_stat(pid)
        .unwrap()
        .is_some_and(|stat| stat.state != 'Z')
}
