//! The demo's story, end to end, as a specification: two real `node` daemons and the real
//! `cosictl` binary, from `gen` to the config history. Each step asserts what the operator
//! reads — config versions, service states, last events, log lines, history entries — from
//! the binary's own output (tables parsed by their columns), not the demo's prose.
//!
//! Restarts (persisted config and node id kept, a pending `try` reverted) and a SIGKILLed
//! daemon (no orphaned services after its next start) are specified in `node_restarts.rs`
//! and `node_shutdown.rs`.
//!
//! `cosictl` is the binary of the `cosi-cli` package, found beside this package's `node`
//! (`cargo test --workspace` builds both); when it is missing, the test builds it first.

mod node_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use cosi_api::client::ClientSecurity;
use cosi_api::pki::CertifiedKey;
use cosi_node::cluster::Member;
use cosi_node::config::NodeLabels;
use cosi_node::services::{Health, ServiceState, ServiceStatus};
use node_support::*;
use tokio::io::AsyncBufReadExt;

/// The misspelled kubelet flag.
const TYPO: &str = "sync-frequncy";

/// The real `cosictl`, built if missing.
fn cosictl_binary() -> PathBuf {
    let path = Path::new(NODE).with_file_name("cosictl");
    if !path.is_file() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "cosi-cli", "--bin", "cosictl"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building cosictl failed");
    }
    path
}

/// What a run of `cosictl` printed.
#[derive(Debug)]
struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// A cluster folder: the files of `cosictl gen` and the client config.
struct Cluster {
    dir: tempfile::TempDir,
    cosictl: PathBuf,
}

impl Cluster {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs `cosictl` in the cluster folder with its client config.
    async fn run(&self, args: &[&str]) -> Output {
        let output = tokio::time::timeout(PATIENCE, self.command(args).output())
            .await
            .expect("cosictl finishes")
            .unwrap();
        Output {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        }
    }

    /// Runs `cosictl`, expecting success; returns its output stream.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert_eq!((out.code, out.stderr.as_str()), (0, ""), "cosictl {args:?}");
        out.stdout
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.cosictl);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("COSICONFIG", self.path("cosiconfig"))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Starts a daemon named `name` with `ip` on eth0, on the files of `gen`.
    fn start(&self, name: &str, ip: &str) -> Daemon {
        let mut command = tokio::process::Command::new(NODE);
        command
            .current_dir(self.dir.path())
            .args(["--state-dir", name, "--listen", "127.0.0.1:0"])
            .args(["--ca", "pki/ca.pem", "--cert", "pki/server.pem"])
            .args(["--key", "pki/server-key.pem", "--registry-dir", "registry"])
            .args(["--registry-ttl", "3s", "--hostname", name])
            .arg("--cmdline")
            .arg(format!("ip={ip}:::24::eth0:off"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        Daemon::spawn(command)
    }

    /// A typed admin client of the node at `address`, for the test's own waits.
    fn admin(&self, address: std::net::SocketAddr) -> Client {
        let pki = self.path("pki");
        client(
            address,
            ClientSecurity::MutualTls {
                ca_pem: std::fs::read_to_string(pki.join("ca.pem")).unwrap(),
                identity: CertifiedKey::read_pem(
                    &pki.join("admin.pem"),
                    &pki.join("admin-key.pem"),
                )
                .unwrap(),
            },
        )
    }
}

/// The rows of a `cosictl` table, each a map from column name to cell. Columns start where
/// their header names start (names are separated by at least two spaces).
fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header = lines.next().expect("a header line");
    let columns = header_columns(header);
    lines.map(|line| row(&columns, line)).collect()
}

fn header_columns(header: &str) -> Vec<(usize, String)> {
    let mut columns = Vec::new();
    let mut at = 0;
    while at < header.len() {
        let rest = &header[at..];
        let start = at + (rest.len() - rest.trim_start().len());
        let rest = &header[start..];
        let end = rest.find("  ").map_or(header.len(), |e| start + e);
        columns.push((start, header[start..end].to_string()));
        at = end;
    }
    columns
}

fn row(columns: &[(usize, String)], line: &str) -> BTreeMap<String, String> {
    let mut cells = BTreeMap::new();
    for (i, (start, name)) in columns.iter().enumerate() {
        let end = columns.get(i + 1).map_or(line.len(), |(next, _)| *next);
        let cell = line.get(*start..end.min(line.len())).unwrap_or("");
        cells.insert(name.clone(), cell.trim().to_string());
    }
    cells
}

/// The given columns of every row.
fn columns(rows: &[BTreeMap<String, String>], names: &[&str]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|row| names.iter().map(|name| row[*name].clone()).collect())
        .collect()
}

fn strings(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|row| row.iter().map(|cell| cell.to_string()).collect())
        .collect()
}

async fn config_version(cluster: &Cluster) -> String {
    let rows = table(&cluster.ok(&["get", "mc", "active"]).await);
    assert_eq!(rows.len(), 1);
    rows[0]["VERSION"].clone()
}

async fn kubelet(
    client: &Client,
    what: &str,
    condition: impl Fn(&ServiceStatus) -> bool + Send + Sync,
) {
    wait_for::<ServiceStatus>(client, "kubelet", what, |s| condition(&s.spec)).await;
}

/// The cells of a line of `cosictl events` (padded by at least three spaces; a long cell
/// pushes the next ones right, as the stream cannot know widths ahead).
fn cells(line: &str) -> Vec<String> {
    line.split("   ")
        .map(str::trim)
        .filter(|cell| !cell.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every kept event of the node, as cells, up to and including the first whose source starts
/// with `last` (the stream follows; it is stopped there).
async fn event_lines(cluster: &Cluster, last: &str) -> Vec<Vec<String>> {
    let mut child = cluster
        .command(&["events", "--tail", "-1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut events = Vec::new();
    loop {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no event {last:?} in {events:#?}"))
            .unwrap()
            .expect("the event stream runs");
        let cells = cells(&line);
        if cells[0] == "NODE" {
            continue;
        }
        let done = cells[3].starts_with(last);
        events.push(cells);
        if done {
            break;
        }
    }
    child.kill().await.unwrap();
    events
}

fn healthy(status: &ServiceStatus) -> bool {
    status.state == ServiceState::Running && status.health == Health::Ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_life_through_cosictl() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster {
        dir,
        cosictl: cosictl_binary(),
    };

    // The cluster's files, and two nodes in maintenance
    cluster.ok(&["gen", "ca", "--out", "pki"]).await;
    cluster
        .ok(&["gen", "certs", "--out", "pki", "--address", "127.0.0.1"])
        .await;
    let mut cp = cluster.start("cp-1", "192.0.2.10");
    let mut worker = cluster.start("worker-1", "192.0.2.11");
    let (cp_address, cp_mode) = cp.ready().await;
    let (worker_address, worker_mode) = worker.ready().await;
    let endpoint = cp_address.to_string();
    cluster
        .ok(&[
            "gen",
            "config",
            "demo",
            "https://127.0.0.1:6443",
            "--hostname",
            "cp-1",
            "--pki",
            "pki",
            "--endpoints",
            &endpoint,
        ])
        .await;

    // The first configs, through the maintenance API pinned by fingerprint
    for (daemon, address, mode, file, hostname) in [
        (&mut cp, cp_address, cp_mode, "controlplane.yaml", "cp-1"),
        (
            &mut worker,
            worker_address,
            worker_mode,
            "worker.yaml",
            "worker-1",
        ),
    ] {
        let Mode::Maintenance { fingerprint } = mode else {
            panic!("{hostname} started with a config: {mode:?}");
        };
        let path = cluster.path(file);
        let port = examples::starter::free_port().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let text = examples::starter::for_node(&text, hostname, port).unwrap();
        std::fs::write(&path, text).unwrap();
        let out = cluster
            .ok(&[
                "-n",
                &address.to_string(),
                "apply-config",
                "--insecure",
                "--cert-fingerprint",
                &fingerprint,
                "-f",
                file,
            ])
            .await;
        assert_eq!(
            out.lines().next(),
            Some("Applied configuration without a reboot")
        );
        assert_eq!(daemon.ready().await, (address, Mode::MutualTls));
    }
    let admin = cluster.admin(cp_address);

    // A reader may not read the machine config
    let refused = cluster
        .run(&["--context", "demo-reader", "get", "mc"])
        .await;
    assert_eq!(
        (
            refused.code,
            refused.stdout.as_str(),
            refused.stderr.as_str()
        ),
        (
            1,
            "",
            format!(
                "error: node {cp_address} refused get config/MachineConfigs.config.cosi.dev: \
                 not authorized: reader (os:reader) may not read a sensitive type; it needs a \
                 client certificate with role os:admin (see `cosictl config contexts`)\n"
            )
            .as_str()
        )
    );

    // Services, members, addresses, config
    kubelet(&admin, "a healthy kubelet", healthy).await;
    kubelet(&cluster.admin(worker_address), "a healthy kubelet", healthy).await;
    for member in ["cp-1", "worker-1"] {
        wait_for::<Member>(&admin, member, "a member with its address and type", |m| {
            !m.spec.addresses.is_empty() && !m.spec.machine_type.is_empty()
        })
        .await;
    }
    let both = format!("{cp_address},{worker_address}");
    let services = table(&cluster.ok(&["-n", &both, "services"]).await);
    assert_eq!(
        columns(
            &services,
            &["NODE", "SERVICE", "STATE", "HEALTH", "LAST EVENT"]
        ),
        strings(&[
            &[
                &endpoint,
                "kubelet",
                "Running",
                "OK",
                "Health check successful"
            ],
            &[
                &worker_address.to_string(),
                "kubelet",
                "Running",
                "OK",
                "Health check successful"
            ],
        ])
    );
    let members = table(&cluster.ok(&["get", "members"]).await);
    assert_eq!(
        columns(
            &members,
            &["NODE", "ID", "HOSTNAME", "MACHINE TYPE", "ADDRESSES"]
        ),
        strings(&[
            &[
                &endpoint,
                "cp-1",
                "cp-1",
                "controlplane",
                "[\"192.0.2.10\"]"
            ],
            &[
                &endpoint,
                "worker-1",
                "worker-1",
                "worker",
                "[\"192.0.2.11\"]"
            ],
        ])
    );
    let addresses = table(&cluster.ok(&["get", "addresses"]).await);
    assert_eq!(
        columns(&addresses, &["ID", "ADDRESS", "LINK"]),
        strings(&[
            &["eth0/192.0.2.10/24", "192.0.2.10/24", "eth0"],
            &["lo/127.0.0.1/8", "127.0.0.1/8", "lo"],
        ])
    );
    let yaml = cluster.ok(&["get", "mc", "active", "-o", "yaml"]).await;
    assert!(yaml.contains("\n  id: active\n  version: 1\n"), "{yaml}");
    assert!(yaml.contains("\n      hostname: cp-1\n"), "{yaml}");

    // A label without a reboot: version 2, the label live
    let out = cluster
        .ok(&[
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {zone: eu-west-1a}}}",
            "--mode",
            "no-reboot",
        ])
        .await;
    assert!(
        out.starts_with(&format!(
            "patched MachineConfigs.config.cosi.dev/active at the node {cp_address}\n\
             Applied configuration without a reboot\n"
        )),
        "{out}"
    );
    assert_eq!(config_version(&cluster).await, "2");
    // The labels are derived from the active config by a controller: wait for it.
    wait_for::<NodeLabels>(&admin, NodeLabels::ID, "the zone label", |l| {
        l.spec.labels.contains_key("zone")
    })
    .await;
    let labels = table(&cluster.ok(&["get", "labels"]).await);
    assert_eq!(
        columns(&labels, &["VERSION", "LABELS"]),
        strings(&[&["2", "{\"zone\":\"eu-west-1a\"}"]])
    );

    // A tried label, rolled back by the node after its timeout, as a watch shows it
    let mut watch = cluster
        .command(&["get", "labels", "--watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut rows = Vec::new();
    let mut header = Vec::new();
    for i in 0..4 {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("a watch line")
            .unwrap()
            .expect("the watch runs");
        if i == 0 {
            header = header_columns(&line);
            continue;
        }
        rows.push(row(&header, &line));
        if i == 1 {
            // The watch has its bootstrap: now the try.
            let out = cluster
                .ok(&[
                    "patch",
                    "mc",
                    "-p",
                    "{machine: {nodeLabels: {canary: \"true\"}}}",
                    "--mode",
                    "try",
                    "--timeout",
                    "2s",
                ])
                .await;
            assert!(
                out.contains(
                    "The config is applied in 'try' mode and will be automatically reverted \
                     back in 2s\n"
                ),
                "{out}"
            );
        }
    }
    watch.kill().await.unwrap();
    assert_eq!(
        columns(&rows, &["*", "VERSION", "LABELS"]),
        strings(&[
            &["+", "2", "{\"zone\":\"eu-west-1a\"}"],
            &["", "3", "{\"canary\":\"true\",\"zone\":\"eu-west-1a\"}"],
            &["", "4", "{\"zone\":\"eu-west-1a\"}"],
        ])
    );
    assert_eq!(config_version(&cluster).await, "4");

    // A label key with a space: rejected with its path, nothing changed
    let rejected = cluster
        .run(&[
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {\"team name\": platform}}}",
        ])
        .await;
    assert_eq!(
        (rejected.code, rejected.stdout.as_str(), rejected.stderr.as_str()),
        (
            1,
            "",
            format!(
                "error: node {cp_address} rejected patch config/MachineConfigs.config.cosi.dev/active: \
                 MachineConfig: invalid machine.nodeLabels[\"team name\"]: invalid label key \
                 \"team name\": label key \"team name\" contains ' ': only letters, digits, '-', '_' \
                 and '.' are allowed\n"
            )
            .as_str()
        )
    );
    assert_eq!(config_version(&cluster).await, "4");

    // An unknown kubelet flag: accepted; the kubelet fails and says why
    let typo = format!("{{machine: {{kubelet: {{extraArgs: {{{TYPO}: 5s}}}}}}}}");
    cluster
        .ok(&["patch", "mc", "-p", &typo, "--mode", "no-reboot"])
        .await;
    assert_eq!(config_version(&cluster).await, "5");
    let failed = format!("Process exited with code 1: unknown flag: --{TYPO}");
    kubelet(&admin, "the kubelet failing on its flag", |s| {
        // A few restarts in, the backoff (0.5 s doubling) leaves the failure on show for
        // seconds: long enough for the operator's `services` below to read it.
        s.state == ServiceState::Failed
            && s.last_event.as_deref() == Some(failed.as_str())
            && s.restarts >= 4
    })
    .await;
    let services = table(&cluster.ok(&["services"]).await);
    assert_eq!(
        columns(&services, &["SERVICE", "STATE", "LAST EVENT"]),
        strings(&[&["kubelet", "Failed", &failed]])
    );
    let logs = cluster.ok(&["logs", "kubelet", "--tail", "1"]).await;
    assert_eq!(logs, format!("unknown flag: --{TYPO}\n"));

    // The fix: the flag deleted, the kubelet healthy again
    let fix = format!("{{machine: {{kubelet: {{extraArgs: {{{TYPO}: {{$patch: delete}}}}}}}}}}");
    cluster
        .ok(&["patch", "mc", "-p", &fix, "--mode", "no-reboot"])
        .await;
    kubelet(&admin, "a healthy kubelet", healthy).await;
    let services = table(&cluster.ok(&["services"]).await);
    assert_eq!(
        columns(&services, &["SERVICE", "STATE", "HEALTH", "LAST EVENT"]),
        strings(&[&["kubelet", "Running", "OK", "Health check successful"]])
    );

    // The node's events tell the same story: every config version, and the kubelet's failure
    // between the typo and its fix
    let events = event_lines(&cluster, "version 6").await;
    let config: Vec<Vec<String>> = events
        .iter()
        .filter(|cells| cells[2] == "config")
        .map(|cells| cells[3..].to_vec())
        .collect();
    assert_eq!(
        config,
        strings(&[
            &[
                "version 1",
                "no-reboot by caller (no role): +19 -0: v1alpha1"
            ],
            &[
                "version 2",
                "no-reboot by admin (os:admin): +2 -0: machine.nodeLabels"
            ],
            &[
                "version 3",
                "try by admin (os:admin): +1 -0: machine.nodeLabels.canary"
            ],
            &[
                "version 4",
                "rollback by node: +0 -1: machine.nodeLabels.canary"
            ],
            &[
                "version 5",
                "no-reboot by admin (os:admin): +1 -0: machine.kubelet.extraArgs.sync-frequncy"
            ],
            &[
                "version 6",
                "no-reboot by admin (os:admin): +0 -1: machine.kubelet.extraArgs.sync-frequncy"
            ],
        ])
    );
    // The log is in time order: the typo's config event comes before the kubelet's failure it
    // caused (though the event is recorded after the config writes the kubelet reacts to), and
    // the fix, applied once the failure was seen, after it.
    let position = |wanted: &dyn Fn(&Vec<String>) -> bool| events.iter().position(wanted);
    let before_at = position(&|cells| cells[3] == "version 5").unwrap();
    let fix_at = position(&|cells| cells[3] == "version 6").unwrap();
    let failed_at = position(&|cells| {
        cells[2..]
            == [
                "service".to_string(),
                "kubelet".to_string(),
                format!("Failed: {failed}"),
            ]
    })
    .expect("the kubelet's failure is an event");
    assert!(before_at < failed_at && failed_at < fix_at, "{events:#?}");

    // The history, and a dry run that changes nothing
    let history = table(&cluster.ok(&["get", "history"]).await);
    assert_eq!(
        columns(&history, &["ID", "MODE", "ACTOR", "ACTIVE", "PERSISTED"]),
        strings(&[
            &["00000001", "no-reboot", "caller (no role)", "1", "1"],
            &["00000002", "no-reboot", "admin (os:admin)", "2", "2"],
            &["00000003", "try", "admin (os:admin)", "3", "2"],
            &["00000004", "rollback", "node", "4", "2"],
            &["00000005", "no-reboot", "admin (os:admin)", "5", "3"],
            &["00000006", "no-reboot", "admin (os:admin)", "6", "4"],
        ])
    );
    assert_eq!(
        history[2]["CHANGES"], "+1 -0: machine.nodeLabels.canary",
        "the try's change"
    );
    let dry = cluster
        .ok(&[
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {tier: gold}}}",
            "--dry-run",
        ])
        .await;
    assert!(dry.starts_with("Dry run summary:\n"), "{dry}");
    assert!(dry.contains("\n+    tier: gold\n"), "{dry}");
    assert_eq!(config_version(&cluster).await, "6");

    // Both daemons stop cleanly
    for daemon in [cp, worker] {
        let status = daemon.signal(nix::sys::signal::Signal::SIGTERM).await;
        assert_eq!(status.code(), Some(0));
    }
}
