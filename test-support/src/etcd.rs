//! [`EtcdServer`]: a private single-node etcd for tests, examples and benchmarks.
//!
//! It runs `/usr/bin/etcd` (or a given binary) on free loopback ports with a fresh temporary data
//! directory. The process is supervised by a small `sh` wrapper that reads the server's stdin
//! pipe: when this process goes away for any reason (drop, panic, exit with the server in a
//! `static`), the pipe closes and the wrapper kills etcd and removes the data directory, so no
//! server outlives the test run that started it.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cosi_core::{Error, Result};

/// Where Debian's `etcd-server` package installs the server.
pub const DEFAULT_ETCD_BINARY: &str = "/usr/bin/etcd";

/// How long a server may take to start serving clients.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The log line etcd 3.4+ (zap logger) prints once clients can connect.
const READY_MARKER: &str = "serving client traffic";

// The wrapper: runs etcd in the background and waits on its stdin. A `stop` line kills etcd and
// keeps the data (for restarts); end of input (the owner is gone) kills etcd and removes it.
// Only etcd keeps the stderr pipe open (the wrapper's own stderr goes to /dev/null), so the log
// reader sees the pipe close as soon as etcd exits.
const SUPERVISOR: &str = r#"data="$1"; shift
exec 3>&2 2>/dev/null
"$@" </dev/null 2>&3 3>&- &
pid=$!
exec 3>&-
while read -r line; do
  if [ "$line" = stop ]; then kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; exit 0; fi
done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
rm -rf "$data"
"#;

/// A running single-node etcd on loopback, killed (and its data removed) when dropped.
///
/// ```
/// # fn main() -> cosi_core::Result<()> {
/// use cosi_test_support::etcd::EtcdServer;
/// let mut server = EtcdServer::start()?;
/// assert!(server.endpoint().starts_with("http://127.0.0.1:"));
/// server.stop();
/// assert!(!server.is_running());
/// server.restart()?;
/// assert!(server.is_running());
/// # Ok(()) }
/// ```
pub struct EtcdServer {
    binary: PathBuf,
    data_dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    running: Option<Running>,
}

struct Running {
    wrapper: Child,
    control: ChildStdin,
}

impl EtcdServer {
    /// Starts `/usr/bin/etcd`.
    pub fn start() -> Result<Self> {
        Self::start_binary(DEFAULT_ETCD_BINARY)
    }

    /// Starts the etcd binary at `binary`.
    pub fn start_binary(binary: impl AsRef<Path>) -> Result<Self> {
        let binary = binary.as_ref().to_path_buf();
        if !binary.exists() {
            return Err(failure(format!(
                "{} not found; run scripts/install-deps.sh (installs Debian's etcd-server)",
                binary.display()
            )));
        }
        let unique = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let data_dir =
            std::env::temp_dir().join(format!("cosi-etcd-{}-{unique}", std::process::id()));
        // Free ports are taken by binding port 0 and releasing it; another process could grab
        // one in between, so a failed start is retried on new ports.
        let mut last_error = None;
        for _ in 0..3 {
            let (client_port, peer_port) = free_ports()?;
            let mut server = EtcdServer {
                binary: binary.clone(),
                data_dir: data_dir.clone(),
                client_port,
                peer_port,
                running: None,
            };
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| failure("etcd did not start".into())))
    }

    /// The client URL, e.g. `http://127.0.0.1:40123`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// Whether the server process is running (between [`EtcdServer::stop`] and
    /// [`EtcdServer::restart`] it is not).
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Kills the server (SIGKILL, as a crash would) and keeps its data for [`EtcdServer::restart`].
    pub fn stop(&mut self) {
        if let Some(mut running) = self.running.take() {
            // The wrapper may already be gone; then there is nothing left to stop.
            let _ = running.control.write_all(b"stop\n");
            let _ = running.control.flush();
            let _ = running.wrapper.wait();
        }
    }

    /// Starts the server again on the same ports with the same data.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        self.launch()
    }

    /// Starts the server again on the same ports with no data, as a cluster restored from
    /// nothing: its revisions start over, and watchers of the old data must resync.
    pub fn restart_empty(&mut self) -> Result<()> {
        self.stop();
        std::fs::remove_dir_all(&self.data_dir)
            .map_err(|e| failure(format!("cannot remove {}: {e}", self.data_dir.display())))?;
        self.launch()
    }

    fn launch(&mut self) -> Result<()> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("cosi-etcd-supervisor")
            .arg(&self.data_dir)
            .arg(&self.binary)
            .args(["--name", "cosi-test"])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("cosi-test={peer}")])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failure(format!("cannot run sh to supervise etcd: {e}")))?;
        let (control, stderr) = match (wrapper.stdin.take(), wrapper.stderr.take()) {
            (Some(control), Some(stderr)) => (control, stderr),
            _ => return Err(failure("etcd's pipes were not created".into())),
        };
        let running = Running { wrapper, control };
        // etcd keeps logging for its whole life: a thread drains the pipe so it never blocks,
        // reports readiness once, and keeps the last lines for error messages.
        let recent = Arc::new(Mutex::new(VecDeque::<String>::new()));
        let (ready_tx, ready_rx) = mpsc::channel::<bool>();
        let thread_recent = recent.clone();
        std::thread::spawn(move || {
            let mut ready_tx = Some(ready_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains(READY_MARKER) {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(true);
                    }
                }
                let mut recent = thread_recent.lock().unwrap_or_else(|e| e.into_inner());
                if recent.len() == 20 {
                    recent.pop_front();
                }
                recent.push_back(line);
            }
            if let Some(tx) = ready_tx {
                let _ = tx.send(false);
            }
        });
        self.running = Some(running);
        match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(true) => Ok(()),
            outcome => {
                self.stop();
                let reason = match outcome {
                    Err(_) => format!("did not serve clients within {START_TIMEOUT:?}"),
                    _ => "exited before serving clients".to_string(),
                };
                let log = recent.lock().unwrap_or_else(|e| e.into_inner());
                let log: Vec<&str> = log.iter().map(String::as_str).collect();
                Err(failure(format!(
                    "{} {reason}; run scripts/install-deps.sh if etcd is missing or broken. \
                     Last log lines:\n{}",
                    self.binary.display(),
                    log.join("\n")
                )))
            }
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        if let Some(mut running) = self.running.take() {
            // Closing the control pipe makes the wrapper kill etcd and remove the data.
            drop(running.control);
            let _ = running.wrapper.wait();
        } else {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// Two distinct free loopback ports (both held until both are known, so they differ).
fn free_ports() -> Result<(u16, u16)> {
    let bind = || {
        TcpListener::bind("127.0.0.1:0").map_err(|e| failure(format!("no free loopback port: {e}")))
    };
    let (a, b) = (bind()?, bind()?);
    let port = |l: &TcpListener| {
        l.local_addr()
            .map(|a| a.port())
            .map_err(|e| failure(format!("no free loopback port: {e}")))
    };
    Ok((port(&a)?, port(&b)?))
}

fn failure(message: String) -> Error {
    Error::Backend {
        subject: "etcd server".into(),
        message,
        retryable: false,
        source: None,
    }
}

/// Starts a server; a failure panics with how to install etcd. For tests.
pub fn start_server() -> EtcdServer {
    EtcdServer::start().unwrap_or_else(|e| {
        panic!("cannot start etcd for the tests ({e}); run scripts/install-deps.sh as root")
    })
}

/// One server shared by every test of the calling test binary, started on first use and
/// killed (its data removed) when the binary exits.
pub fn shared_server() -> &'static EtcdServer {
    static SERVER: std::sync::OnceLock<EtcdServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(start_server)
}

/// A key prefix no other test (in this or another process) uses, so tests sharing a server
/// never see each other's keys.
pub fn unique_prefix(test: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("/cosi-test/{}-{n}/{test}/", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_fails_with_the_install_hint() {
        let err = EtcdServer::start_binary("/nonexistent/etcd")
            .err()
            .expect("no server");
        let message = err.to_string();
        assert!(message.contains("/nonexistent/etcd not found"), "{message}");
        assert!(message.contains("scripts/install-deps.sh"), "{message}");
    }

    #[test]
    fn binary_that_exits_at_once_fails_fast_with_its_log_and_the_install_hint() {
        // `ls` rejects etcd's flags on stderr and exits: the start fails at once, quoting it.
        let err = EtcdServer::start_binary("/bin/ls")
            .err()
            .expect("no server");
        let message = err.to_string();
        assert!(
            message.contains("exited before serving clients"),
            "{message}"
        );
        assert!(message.contains("scripts/install-deps.sh"), "{message}");
        assert!(message.contains("--name"), "{message}");
    }

    #[test]
    fn free_ports_are_distinct() {
        let (a, b) = free_ports().unwrap();
        assert_ne!(a, b);
    }
}
