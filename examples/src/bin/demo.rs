//! `demo`: a node's life told through its API. It generates a cluster's certificates in a
//! temporary directory, starts two real `node` daemons on loopback ports (a controlplane and a
//! worker, sharing a directory registry), and narrates what an operator sees, running every
//! command through the same code as `cosictl` ([`cosi_cli::run`]):
//!
//! 1. there is no shell: the only way in is the API (a client without a certificate is refused);
//! 2. `services`, `get members`, `get addresses`, `get mc -o yaml`;
//! 3. a node label added with `--mode no-reboot`;
//! 4. a label tried with `--mode try --timeout 10s`, watched until the node rolls it back;
//! 5. a label key with a space: rejected with its field path, the config unchanged;
//! 6. an unknown kubelet flag: accepted, the kubelet crash-loops, `services` and `logs` say why;
//! 7. the fix, `$patch: delete` of that flag: the kubelet healthy again;
//! 8. the config history, and a dry run of a further change with its diff.
//!
//! Run it with `cargo run -p examples --bin demo` (about 30 s after the build). Under `cargo
//! run` it builds the `node` and `node-kubelet` binaries of this package first (cargo builds
//! only the binary it runs); otherwise it expects them beside its own executable.
//!
//! The demo waits on events (a daemon's ready line, a watch of the resource it needs), never on
//! time; every wait is bounded so that a broken node fails the demo with its log's path instead
//! of hanging. The daemons' logs go to files in the temporary directory; both daemons are
//! stopped with SIGTERM at the end (or when the demo fails), which stops their services.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use cosi_api::client::{channel, ClientSecurity, RemoteState};
use cosi_api::codec::Codec;
use cosi_api::pki::CertifiedKey;
use cosi_core::{downcast_ref, AnyResource, ListOptions, Registry, ResourceSpec, State, StateExt};
use cosi_node::cluster::Member;
use cosi_node::config::NodeLabels;
use cosi_node::services::{Health, ServiceState, ServiceStatus};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::Notify;

/// The bound on any wait: it only fails a broken demo, it never paces one.
const PATIENCE: Duration = Duration::from_secs(30);

/// How long the tried label lives.
const TRY_TIMEOUT: &str = "10s";

/// The misspelled kubelet flag of step 6.
const TYPO: &str = "sync-frequncy";

type Result<T> = std::result::Result<T, String>;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("\ndemo failed: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<()> {
    let binaries = Binaries::find()?;
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    // The demo works in its directory, so that the commands it shows name short paths.
    std::env::set_current_dir(dir.path()).map_err(|e| format!("cannot enter {dir:?}: {e}"))?;
    match story(&binaries).await {
        Ok(()) => {
            say(&format!(
                "The demo took {:.1} s.",
                started.elapsed().as_secs_f64()
            ));
            Ok(())
        }
        Err(error) => {
            let kept = dir.keep();
            Err(format!(
                "{error}\n(the daemons' logs and state are kept in {})",
                kept.display()
            ))
        }
    }
}

/// The steps, in the demo's directory.
async fn story(binaries: &Binaries) -> Result<()> {
    let demo = Demo::new(Path::new(""));

    heading("0. A cluster's files");
    let pki = demo.path("pki");
    demo.cosictl(&["gen", "ca", "--out", &pki], Show::Quiet)
        .await?;
    demo.cosictl(
        &["gen", "certs", "--out", &pki, "--address", "127.0.0.1"],
        Show::Quiet,
    )
    .await?;
    say("A CA, the nodes' server certificate, and client certificates for three roles");
    say("(admin, operator, reader) are in pki/. Starting two node daemons on them:");
    let mut cp = NodeProcess::start(binaries, &demo.dir, "cp-1", "192.0.2.10").await?;
    let mut worker = NodeProcess::start(binaries, &demo.dir, "worker-1", "192.0.2.11").await?;
    for node in [&cp, &worker] {
        say(&format!("  {}: {}", node.name, node.ready));
    }
    demo.cosictl(
        &[
            "gen",
            "config",
            "demo",
            "https://127.0.0.1:6443",
            "--hostname",
            "cp-1",
            "--pki",
            &pki,
            "--out",
            ".",
            "--endpoints",
            &cp.address.to_string(),
        ],
        Show::Quiet,
    )
    .await?;
    let cp_config = demo.starter("controlplane.yaml", "cp-1", examples::starter::free_port()?)?;
    let worker_config = demo.starter("worker.yaml", "worker-1", examples::starter::free_port()?)?;
    say("`cosictl gen config` wrote the starter configs and the client config (cosiconfig,");
    say("whose current context is the admin's). The worker's copy gets its own hostname, and");
    say("each kubelet its own health port, as both nodes share this machine.");

    heading("1. There is no shell: the only way in is the API");
    say("A node without a config serves only ApplyConfiguration, over TLS that the client");
    say("pins by the key's fingerprint (printed above):");
    for (node, config) in [(&mut cp, &cp_config), (&mut worker, &worker_config)] {
        let address = node.address.to_string();
        demo.cosictl(
            &[
                "-n",
                &address,
                "apply-config",
                "--insecure",
                "--cert-fingerprint",
                &node.fingerprint,
                "-f",
                config,
            ],
            Show::Lines(1),
        )
        .await?;
        node.next_ready().await?;
        say(&format!("  {}: {}", node.name, node.ready));
    }
    say("Configured, each node now wants a client certificate signed by the cluster CA.");
    say("A client without one:");
    let refused = without_certificate(&demo, cp.address).await;
    say(&format!("  {refused}"));
    say("A reader's certificate reads the node, but not its machine config (secrets):");
    let reader = ["--context", "demo-reader"];
    demo.cosictl_expecting(&[&reader[..], &["get", "mc"]].concat(), 1)
        .await?;

    heading("2. What runs, who is there, which addresses, which config");
    let admin = demo.admin(cp.address)?;
    for member in ["cp-1", "worker-1"] {
        // A member shows what its node published: wait until that includes its address and
        // machine type (a node publishes as soon as it knows itself, then what it learns).
        let what = format!("{member} in the member list with its address and type");
        wait_for::<Member>(&admin, member, &what, |m| {
            !m.addresses.is_empty() && !m.machine_type.is_empty()
        })
        .await?;
    }
    let both = format!("{},{}", cp.address, worker.address);
    wait_for::<ServiceStatus>(&admin, "kubelet", "a healthy kubelet", healthy).await?;
    wait_for::<ServiceStatus>(
        &demo.admin(worker.address)?,
        "kubelet",
        "a healthy kubelet",
        healthy,
    )
    .await?;
    demo.cosictl(&["-n", &both, "services"], Show::All).await?;
    demo.cosictl(&["get", "members"], Show::All).await?;
    demo.cosictl(&["get", "addresses"], Show::All).await?;
    demo.cosictl(&["get", "mc", "active", "-o", "yaml"], Show::All)
        .await?;

    heading("3. A node label, live without a reboot");
    demo.cosictl(
        &[
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {zone: eu-west-1a}}}",
            "--mode",
            "no-reboot",
        ],
        Show::All,
    )
    .await?;
    wait_for::<NodeLabels>(&admin, NodeLabels::ID, "the zone label", |l| {
        l.labels.contains_key("zone")
    })
    .await?;
    demo.cosictl(&["get", "labels"], Show::All).await?;
    demo.cosictl(&["get", "mc", "active"], Show::All).await?;

    heading("4. A change on trial: rolled back unless confirmed");
    demo.cosictl(
        &[
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {canary: \"true\"}}}",
            "--mode",
            "try",
            "--timeout",
            TRY_TIMEOUT,
        ],
        Show::All,
    )
    .await?;
    say(&format!(
        "Watching the labels (+ created, - destroyed, blank: updated) for {TRY_TIMEOUT}:"
    ));
    demo.watch_until(&["get", "labels", "--watch"], |rows| {
        let tried = rows.iter().position(|row| row.contains("canary"));
        tried.is_some_and(|at| rows[at + 1..].iter().any(|row| !row.contains("canary")))
    })
    .await?;
    say("The node rolled the tried config back by itself.");

    heading("5. A bad change is refused before it lands");
    demo.cosictl_expecting(
        &[
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {\"team name\": platform}}}",
        ],
        1,
    )
    .await?;
    demo.cosictl(&["get", "mc", "active"], Show::All).await?;
    say("Same version: nothing changed.");

    heading("6. A valid config, a failing service");
    let typo = format!("{{machine: {{kubelet: {{extraArgs: {{{TYPO}: 5s}}}}}}}}");
    demo.cosictl(
        &["patch", "mc", "-p", &typo, "--mode", "no-reboot"],
        Show::Lines(2),
    )
    .await?;
    wait_for::<ServiceStatus>(&admin, "kubelet", "the kubelet failing", |s| {
        // A few restarts in (the backoff doubles from 0.5 s), so that the failure stays on
        // show while the operator looks.
        s.state == ServiceState::Failed
            && s.last_event.as_deref().is_some_and(|e| e.contains(TYPO))
            && s.restarts >= 3
    })
    .await?;
    say("The config is valid (the node cannot know every kubelet flag); the kubelet is not:");
    demo.cosictl(&["services"], Show::All).await?;
    demo.cosictl(&["logs", "kubelet", "--tail", "2"], Show::All)
        .await?;

    heading("7. The fix: delete the flag");
    let fix = format!("{{machine: {{kubelet: {{extraArgs: {{{TYPO}: {{$patch: delete}}}}}}}}}}");
    demo.cosictl(
        &["patch", "mc", "-p", &fix, "--mode", "no-reboot"],
        Show::Lines(2),
    )
    .await?;
    wait_for::<ServiceStatus>(&admin, "kubelet", "a healthy kubelet", healthy).await?;
    demo.cosictl(&["services"], Show::All).await?;

    heading("8. What changed on this node, and what a change would do");
    demo.cosictl(&["get", "history"], Show::All).await?;
    demo.cosictl(
        &[
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {tier: gold}}}",
            "--dry-run",
        ],
        Show::All,
    )
    .await?;
    demo.cosictl(&["get", "mc", "active"], Show::All).await?;
    say("A dry run changes nothing: same version.");

    heading("Done");
    for node in [cp, worker] {
        let name = node.name;
        let status = node.stop().await?;
        say(&format!(
            "{name} stopped on SIGTERM ({status}): services stopped, store closed."
        ));
    }
    Ok(())
}

/// Whether a kubelet status is running and healthy.
fn healthy(status: &ServiceStatus) -> bool {
    status.state == ServiceState::Running && status.health == Health::Ok
}

fn heading(text: &str) {
    println!("\n## {text}\n");
}

fn say(text: &str) {
    println!("{text}");
}

/// What a mutual-TLS node answers a client that presents no certificate.
async fn without_certificate(demo: &Demo, address: SocketAddr) -> String {
    let ca_pem = match std::fs::read_to_string(demo.dir.join("pki/ca.pem")) {
        Ok(pem) => pem,
        Err(e) => return format!("cannot read the CA: {e}"),
    };
    let state = match channel(address, None, ClientSecurity::ServerOnly { ca_pem }) {
        Ok(channel) => RemoteState::new(channel, codec()),
        Err(e) => return format!("no channel: {e}"),
    };
    match state.list(&Member::kind(), &ListOptions::default()).await {
        Ok(_) => "it was served: this is a bug".into(),
        // TLS 1.3 checks the client's certificate after the client has finished its side of
        // the handshake, so the refusal reaches the client as a closed connection, not as an
        // error naming the certificate: say what it means, then what the client saw.
        Err(error) => format!(
            "refused: the node ends the TLS handshake of a client without a certificate \
             (the client saw: {error})"
        ),
    }
}

/// Every type a node stores, so that the demo's own waits read typed resources.
fn codec() -> Codec {
    let mut registry = Registry::new();
    cosi_node::node::register_types(&mut registry).expect("the node's types register");
    Codec::new(Arc::new(registry))
}

/// Watches `id` of `S` on `state` until `condition` holds.
async fn wait_for<S: ResourceSpec>(
    state: &RemoteState,
    id: &str,
    what: &str,
    condition: impl Fn(&S) -> bool + Send + Sync,
) -> Result<()> {
    let pointer = S::kind().pointer(id);
    let watched = state.watch_for(&pointer, |r: Option<&dyn AnyResource>| {
        r.and_then(|r| downcast_ref::<S>(r).ok())
            .is_some_and(|r| condition(&r.spec))
    });
    match bounded(watched, what).await? {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(format!("{pointer} went away while waiting for {what}")),
        Err(e) => Err(format!("watching {pointer} for {what}: {e}")),
    }
}

async fn bounded<T>(future: impl Future<Output = T>, what: &str) -> Result<T> {
    tokio::time::timeout(PATIENCE, future)
        .await
        .map_err(|_| format!("no {what} within {PATIENCE:?}"))
}

/// Where the daemon binaries are.
struct Binaries {
    node: PathBuf,
}

impl Binaries {
    /// Beside this executable; built first when run by cargo.
    fn find() -> Result<Binaries> {
        let me = std::env::current_exe().map_err(|e| format!("where am I? {e}"))?;
        let dir = me.parent().ok_or("the executable has no directory")?;
        if let Some(cargo) = std::env::var_os("CARGO") {
            println!("Building the node daemon (cargo build -p examples --bin node)...");
            let mut build = std::process::Command::new(cargo);
            build.args([
                "build",
                "--quiet",
                "-p",
                "examples",
                "--bin",
                "node",
                "--bin",
                "node-kubelet",
            ]);
            if dir.file_name().is_some_and(|name| name == "release") {
                build.arg("--release");
            }
            let status = build
                .status()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !status.success() {
                return Err(format!("building the node daemon failed ({status})"));
            }
        }
        for name in ["node", "node-kubelet"] {
            if !dir.join(name).is_file() {
                return Err(format!(
                    "{} is missing: build it with `cargo build -p examples`",
                    dir.join(name).display()
                ));
            }
        }
        Ok(Binaries {
            node: dir.join("node"),
        })
    }
}

/// A running `node` daemon.
struct NodeProcess {
    name: &'static str,
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// Its last ready line.
    ready: String,
    address: SocketAddr,
    /// Of its server key, from the maintenance ready line.
    fingerprint: String,
    log: PathBuf,
}

impl NodeProcess {
    /// Starts `node` named `name` with `ip` on its `eth0`, and waits for its ready line.
    async fn start(binaries: &Binaries, dir: &Path, name: &'static str, ip: &str) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let pki = dir.join("pki");
        let mut child = Command::new(&binaries.node)
            .arg("--state-dir")
            .arg(dir.join(name))
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--ca")
            .arg(pki.join("ca.pem"))
            .arg("--cert")
            .arg(pki.join("server.pem"))
            .arg("--key")
            .arg(pki.join("server-key.pem"))
            .arg("--registry-dir")
            .arg(dir.join("registry"))
            .args(["--registry-ttl", "3s", "--hostname", name])
            .arg("--cmdline")
            .arg(format!("ip={ip}:::24::eth0:off"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binaries.node.display()))?;
        let stdout = child.stdout.take().ok_or("the daemon has no stdout")?;
        let mut node = NodeProcess {
            name,
            child,
            lines: BufReader::new(stdout).lines(),
            ready: String::new(),
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            fingerprint: String::new(),
            log,
        };
        node.next_ready().await?;
        let fingerprint = node
            .ready
            .split_once("fingerprint ")
            .and_then(|(_, rest)| rest.strip_suffix(')'))
            .ok_or_else(|| format!("{name} did not start in maintenance: {}", node.ready))?;
        node.fingerprint = fingerprint.to_string();
        Ok(node)
    }

    /// Waits for the next `listening on ADDR (...)` line.
    async fn next_ready(&mut self) -> Result<()> {
        let what = format!("ready line from {}", self.name);
        let line = bounded(self.lines.next_line(), &what)
            .await?
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{} exited; its log is {}", self.name, self.log.display()))?;
        let address = line
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_once(' '))
            .and_then(|(address, _)| address.parse().ok())
            .ok_or_else(|| format!("{} said {line:?}", self.name))?;
        self.address = address;
        self.ready = line;
        Ok(())
    }

    /// SIGTERM, then the exit.
    async fn stop(mut self) -> Result<std::process::ExitStatus> {
        self.terminate();
        bounded(self.child.wait(), "exit after SIGTERM")
            .await?
            .map_err(|e| e.to_string())
    }

    fn terminate(&mut self) {
        if let (Ok(None), Some(pid)) = (self.child.try_wait(), self.child.id()) {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
    }
}

impl Drop for NodeProcess {
    /// A daemon left running (the demo failed) gets SIGTERM, so it stops its services.
    fn drop(&mut self) {
        self.terminate();
    }
}

/// How much of a command's output to print.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Show {
    Quiet,
    /// The first N lines.
    Lines(usize),
    All,
}

/// The demo's directory and its client config.
struct Demo {
    dir: PathBuf,
}

impl Demo {
    fn new(dir: &Path) -> Self {
        Demo {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The starter config `file` with `hostname` and the kubelet's health port; returns its
    /// path.
    fn starter(&self, file: &str, hostname: &str, port: u16) -> Result<String> {
        let path = self.dir.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
        let text = examples::starter::for_node(&text, hostname, port)
            .map_err(|e| format!("{file}: {e}"))?;
        std::fs::write(&path, text).map_err(|e| format!("{file}: {e}"))?;
        Ok(path.display().to_string())
    }

    /// A typed client of the node at `address`, with the admin's certificate.
    fn admin(&self, address: SocketAddr) -> Result<RemoteState> {
        let pki = self.dir.join("pki");
        let identity = CertifiedKey::read_pem(&pki.join("admin.pem"), &pki.join("admin-key.pem"))
            .map_err(|e| e.to_string())?;
        let ca_pem = std::fs::read_to_string(pki.join("ca.pem")).map_err(|e| e.to_string())?;
        let security = ClientSecurity::MutualTls { ca_pem, identity };
        let channel = channel(address, None, security).map_err(|e| e.to_string())?;
        Ok(RemoteState::new(channel, codec()))
    }

    /// Prints `$ cosictl ARGS`, runs it, prints its output; a non-zero exit is an error.
    async fn cosictl(&self, args: &[&str], show: Show) -> Result<()> {
        self.cosictl_expecting_shown(args, 0, show).await
    }

    /// Like [`Demo::cosictl`], printing everything, and expecting exit code `expected`.
    async fn cosictl_expecting(&self, args: &[&str], expected: i32) -> Result<()> {
        self.cosictl_expecting_shown(args, expected, Show::All)
            .await
    }

    async fn cosictl_expecting_shown(
        &self,
        args: &[&str],
        expected: i32,
        show: Show,
    ) -> Result<()> {
        let mut out = Shown::new(show);
        let mut err = Shown::new(show);
        let code = self.run_cli(args, &mut out, &mut err, None).await;
        if expected != 0 {
            say(&format!("  (exit code {code})"));
        }
        if code != expected {
            return Err(format!(
                "`cosictl {}` exited {code}, not {expected}:\n{}",
                args.join(" "),
                err.text()
            ));
        }
        Ok(())
    }

    /// Runs a watching `cosictl` command, printing its rows, until `done` holds for the rows
    /// printed so far.
    async fn watch_until(
        &self,
        args: &[&str],
        done: impl Fn(&[String]) -> bool + Send + 'static,
    ) -> Result<()> {
        let mut out = Shown::new(Show::All);
        let mut err = Shown::new(Show::All);
        let lines = out.lines.clone();
        let printed = out.printed.clone();
        let stop = async move {
            loop {
                printed.notified().await;
                let rows = lines.lock().expect("the lines' lock").clone();
                if rows.len() > 1 && done(&rows[1..]) {
                    break;
                }
            }
        };
        let code = bounded(
            self.run_cli(args, &mut out, &mut err, Some(Box::pin(stop))),
            "watch's end",
        )
        .await?;
        if code != 0 {
            return Err(format!("the watch exited {code}:\n{}", err.text()));
        }
        Ok(())
    }

    async fn run_cli(
        &self,
        args: &[&str],
        out: &mut Shown,
        err: &mut Shown,
        stop: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
    ) -> i32 {
        if out.show != Show::Quiet {
            say(&format!("$ cosictl {}", quoted(args)));
        }
        let config = self.path("cosiconfig");
        let mut argv = vec!["cosictl", "--config", &config];
        argv.extend_from_slice(args);
        let cli = cosi_cli::args::Cli::parse_from(argv);
        let mut io = cosi_cli::session::Io::new(out, err);
        if let Some(stop) = stop {
            io = io.with_stop(stop);
        }
        cosi_cli::run(cli, &mut io).await
    }
}

/// `args` as a shell would need them typed.
fn quoted(args: &[&str]) -> String {
    let quote = |arg: &&str| {
        if arg.is_empty() || arg.contains(|c: char| " {}'$\"*".contains(c)) {
            format!("'{}'", arg.replace('\'', "'\\''"))
        } else {
            arg.to_string()
        }
    };
    args.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// A writer that prints a command's output, indented, as whole lines arrive, and keeps them.
struct Shown {
    show: Show,
    partial: Vec<u8>,
    lines: Arc<Mutex<Vec<String>>>,
    /// Notified at every printed line.
    printed: Arc<Notify>,
}

impl Shown {
    fn new(show: Show) -> Self {
        Shown {
            show,
            partial: Vec::new(),
            lines: Arc::default(),
            printed: Arc::default(),
        }
    }

    fn text(&self) -> String {
        self.lines.lock().expect("the lines' lock").join("\n")
    }
}

impl Write for Shown {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(buf);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            let mut lines = self.lines.lock().expect("the lines' lock");
            let shown = match self.show {
                Show::Quiet => false,
                Show::Lines(n) => lines.len() < n,
                Show::All => true,
            };
            if shown {
                println!("  {line}");
            }
            lines.push(line);
            drop(lines);
            self.printed.notify_one();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}
