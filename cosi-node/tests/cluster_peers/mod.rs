//! Real node processes for the member tests: each runs the `cosi-cluster-peer` binary on its
//! own disk state directory and reports identity and members line by line. Waits are on those
//! lines (events), bounded by a generous timeout that only fails the test.
// Shared by the directory and etcd suites; each uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bounds every wait; only a broken system takes this long.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(60);

/// A lease long enough to survive a loaded machine's pauses, short enough for a test.
pub const TTL_MS: u64 = 2000;

/// Where the peers publish.
#[derive(Clone, Debug)]
pub enum Registry {
    /// A shared directory.
    Directory(PathBuf),
    /// An etcd endpoint and a key prefix.
    Etcd { endpoint: String, prefix: String },
}

/// One member as a `members` line reports it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Seen {
    pub node_id: String,
    pub stale: bool,
}

/// A running node process.
pub struct Peer {
    pub hostname: String,
    state_dir: PathBuf,
    address: String,
    registry: Registry,
    child: Child,
    _stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    /// Starts a node named `hostname` with `address`, keeping its state under `root`.
    pub fn spawn(root: &Path, hostname: &str, address: &str, registry: &Registry) -> Peer {
        Self::launch(
            root.join(hostname),
            hostname.to_string(),
            address.to_string(),
            registry.clone(),
        )
    }

    fn launch(state_dir: PathBuf, hostname: String, address: String, registry: Registry) -> Peer {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cosi-cluster-peer"));
        command
            .arg("--state-dir")
            .arg(&state_dir)
            .args(["--hostname", &hostname, "--address", &address])
            .args(["--ttl-ms", &TTL_MS.to_string()]);
        match &registry {
            Registry::Directory(dir) => {
                command.arg("--directory").arg(dir);
            }
            Registry::Etcd { endpoint, prefix } => {
                command.args(["--etcd", endpoint, "--prefix", prefix]);
            }
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the peer binary runs");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            hostname,
            state_dir,
            address,
            registry,
            child,
            _stdin: stdin,
            lines,
        }
    }

    /// Reads lines until one satisfies `accept`, failing the test after [`EVENT_TIMEOUT`].
    pub fn wait_for(&self, what: &str, accept: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + EVENT_TIMEOUT;
        let mut last = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if accept(&line) => return line,
                Ok(line) => last = Some(line),
                Err(_) => panic!(
                    "{}: no line with {what} within {EVENT_TIMEOUT:?}; last line: {last:?}",
                    self.hostname
                ),
            }
        }
    }

    /// The node id it reports.
    pub fn identity(&self) -> String {
        let line = self.wait_for("its identity", |l| l.starts_with("identity "));
        line["identity ".len()..].to_string()
    }

    /// Waits until its members are exactly `expected` (nodename → node id), none stale.
    pub fn wait_members(&self, expected: &BTreeMap<String, String>) {
        let want: BTreeMap<String, Seen> = expected
            .iter()
            .map(|(n, id)| {
                (
                    n.clone(),
                    Seen {
                        node_id: id.clone(),
                        stale: false,
                    },
                )
            })
            .collect();
        self.wait_for(&format!("members {want:?}"), |l| {
            members(l).as_ref() == Some(&want)
        });
    }

    /// Waits until its members are `expected`, every one of them stale but its own.
    pub fn wait_stale_members(&self, expected: &BTreeMap<String, String>) {
        let want: BTreeMap<String, Seen> = expected
            .iter()
            .map(|(n, id)| {
                let stale = *n != self.hostname;
                (
                    n.clone(),
                    Seen {
                        node_id: id.clone(),
                        stale,
                    },
                )
            })
            .collect();
        self.wait_for(&format!("stale members {want:?}"), |l| {
            members(l).as_ref() == Some(&want)
        });
    }

    /// SIGKILLs the process, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the same node again on the same state directory.
    pub fn restart(&mut self) {
        self.kill();
        let again = Self::launch(
            self.state_dir.clone(),
            self.hostname.clone(),
            self.address.clone(),
            self.registry.clone(),
        );
        *self = again;
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The members of a `members ...` line, `None` for other lines.
pub fn members(line: &str) -> Option<BTreeMap<String, Seen>> {
    let rest = line.strip_prefix("members")?;
    let mut out = BTreeMap::new();
    for entry in rest.split_whitespace() {
        let (name, id) = entry.split_once('=')?;
        let (node_id, stale) = match id.strip_suffix("!stale") {
            Some(id) => (id, true),
            None => (id, false),
        };
        out.insert(
            name.to_string(),
            Seen {
                node_id: node_id.to_string(),
                stale,
            },
        );
    }
    Some(out)
}

/// Starts three nodes and waits until each lists all three; returns them and their ids.
pub fn three_nodes(root: &Path, registry: &Registry) -> (Vec<Peer>, BTreeMap<String, String>) {
    let peers: Vec<Peer> = [
        ("node-a", "192.0.2.1/24"),
        ("node-b", "192.0.2.2/24"),
        ("node-c", "192.0.2.3/24"),
    ]
    .iter()
    .map(|(name, address)| Peer::spawn(root, name, address, registry))
    .collect();
    let ids: BTreeMap<String, String> = peers
        .iter()
        .map(|p| (p.hostname.clone(), p.identity()))
        .collect();
    for peer in &peers {
        peer.wait_members(&ids);
    }
    (peers, ids)
}

/// A killed node leaves the others' members after its TTL and returns with the same id.
pub fn killed_node_expires_and_returns(root: &Path, registry: &Registry) {
    let (mut peers, ids) = three_nodes(root, registry);

    // When node-c is SIGKILLed, the others list two members once its lease expires
    peers[2].kill();
    let mut without = ids.clone();
    without.remove("node-c");
    for peer in &peers[..2] {
        peer.wait_members(&without);
    }

    // When it restarts on its state, it has the same node id and all list three again
    peers[2].restart();
    assert_eq!(
        peers[2].identity(),
        ids["node-c"],
        "the node id survives the restart"
    );
    for peer in &peers {
        peer.wait_members(&ids);
    }
}
