//! Health probes: exec a command, connect over TCP, or send an HTTP GET, each bounded by the
//! check's timeout. A probe returns `Ok` or the reason it failed, in the words an operator
//! reads after "Health check failed: " (`connection refused`, `HTTP 500 from GET ...`).
//!
//! This module probes once; the supervisor's runner decides when and what a result means.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio::process::Command;

use super::ledger::{Ledger, GROUP_TOKEN_VAR};
use super::spec::Probe;
use super::{process, reaper};

/// Where an exec probe's process group is recorded ([`super::ledger`]), so that what a
/// killed daemon left probing is killed when the next one starts: the ledger, and the name
/// the records give (`<service>/health`).
pub(crate) type ProbeRecords<'a> = Option<(&'a Ledger, &'a str)>;

/// How much of an exec probe's stderr is kept (its end) for the failure's reason.
const STDERR_TAIL: usize = 4096;

/// Runs `probe` once, failing if it takes longer than `timeout`.
pub async fn probe(probe: &Probe, timeout: Duration) -> Result<(), String> {
    probe_until(probe, timeout, std::future::pending(), None)
        .await
        // Never taken: a pending cancel never completes.
        .unwrap_or_else(|| Err("probe cancelled".to_string()))
}

/// [`probe`], given up as soon as `cancel` completes (`None` then). An exec probe's process
/// group is killed and its process reaped before this returns, so a stopped check leaves no
/// process behind; with `records`, the group is recorded while it runs.
pub(crate) async fn probe_until(
    probe: &Probe,
    timeout: Duration,
    cancel: impl std::future::Future<Output = ()>,
    records: ProbeRecords<'_>,
) -> Option<Result<(), String>> {
    let network = match probe {
        Probe::Exec { command, args } => {
            return exec(command, args, timeout, cancel, records).await
        }
        Probe::Tcp { address } => futures::future::Either::Left(tcp(address, timeout)),
        Probe::Http { url } => futures::future::Either::Right(http(url, timeout)),
    };
    tokio::select! {
        result = network => Some(result),
        () = cancel => None,
    }
}

async fn tcp(address: &str, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(io_reason(&e)),
        Err(_) => Err(format!(
            "connecting to {address} timed out after {timeout:?}"
        )),
    }
}

async fn http(url: &str, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, http_get(url)).await {
        Ok(result) => result,
        Err(_) => Err(format!("GET {url} timed out after {timeout:?}")),
    }
}

/// An I/O error as a short lower-case reason (`connection refused`).
pub(crate) fn io_reason(error: &io::Error) -> String {
    use io::ErrorKind::*;
    match error.kind() {
        kind @ (ConnectionRefused | ConnectionReset | ConnectionAborted | TimedOut | NotFound
        | PermissionDenied | AddrNotAvailable | HostUnreachable | NetworkUnreachable) => {
            kind.to_string()
        }
        _ => error.to_string(),
    }
}

/// Kills the probe's process group if the probe is dropped before its process was reaped
/// (its task aborted): whatever it started does not outlive it.
struct GroupGuard {
    pid: u32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = process::signal_group(self.pid, Signal::SIGKILL);
        }
    }
}

async fn exec(
    command: &str,
    args: &[String],
    timeout: Duration,
    cancel: impl std::future::Future<Output = ()>,
    records: ProbeRecords<'_>,
) -> Option<Result<(), String>> {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let spawn = |cmd: &mut Command| {
        let child = reaper::spawn(cmd)?;
        // Invariant: a child just spawned has not been waited for, so it has its pid.
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("started without a pid"))?;
        Ok((child, pid))
    };
    let spawned = match records {
        Some((ledger, name)) => {
            let token = ledger.token(name);
            cmd.env(GROUP_TOKEN_VAR, &token);
            ledger.start(name, token, || spawn(&mut cmd))
        }
        None => spawn(&mut cmd).map(|started| (started, None)),
    };
    let ((mut child, pid), record) = match spawned {
        Ok(spawned) => spawned,
        Err(e) => return Some(Err(format!("{command}: {}", io_reason(&e)))),
    };
    let mut guard = GroupGuard { pid, armed: true };
    let mut stderr = child.stderr.take();
    let outcome = {
        let work = tokio::time::timeout(timeout, async {
            let text = match stderr.as_mut() {
                Some(pipe) => stderr_tail(pipe).await,
                None => String::new(),
            };
            (child.wait().await, text)
        });
        tokio::select! {
            outcome = work => Some(outcome),
            () = cancel => None,
        }
    };
    let result = match outcome {
        None => None,
        Some(Ok((Ok(status), _))) if status.success() => Some(Ok(())),
        Some(Ok((Ok(status), text))) => {
            let last = text.lines().rev().find(|l| !l.trim().is_empty());
            let code = status
                .code()
                .map_or_else(|| "a signal".to_string(), |c| format!("code {c}"));
            Some(Err(match last {
                Some(line) => format!("{command} exited with {code}: {}", line.trim()),
                None => format!("{command} exited with {code}"),
            }))
        }
        Some(Ok((Err(e), _))) => Some(Err(format!("{command}: {}", io_reason(&e)))),
        Some(Err(_)) => Some(Err(format!("{command} timed out after {timeout:?}"))),
    };
    // Whatever the probe forked goes with it; a probe cut short (timeout, cancel) is killed
    // and reaped here.
    let _ = process::signal_group(pid, Signal::SIGKILL);
    let _ = child.wait().await;
    guard.armed = false;
    reaper::forget(pid);
    if let (Some((ledger, _)), Some(record)) = (records, &record) {
        ledger.release(record);
    }
    result
}

/// The last [`STDERR_TAIL`] bytes a probe writes to stderr (its complaint is its last line,
/// not a log). The pipe is read to its end: a probe that writes more than a pipe holds must
/// not stall on it.
async fn stderr_tail(pipe: &mut (impl AsyncRead + Unpin)) -> String {
    let mut tail = Vec::with_capacity(2 * STDERR_TAIL);
    let mut buffer = [0u8; STDERR_TAIL];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.extend_from_slice(&buffer[..n]);
                if tail.len() > STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
        }
    }
    String::from_utf8_lossy(&tail).into_owned()
}

async fn http_get(url: &str) -> Result<(), String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("invalid URL {url:?}: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("invalid URL {url:?}: only http:// is supported"));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("invalid URL {url:?}: no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = TcpStream::connect((host.trim_matches(['[', ']']), port))
        .await
        .map_err(|e| io_reason(&e))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {host}:{port}: {e}"))?;
    let driver = tokio::spawn(connection);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let request = Request::get(path)
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("invalid request for {url:?}: {e}"))?;
    let response = sender.send_request(request).await;
    driver.abort();
    let response = response.map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status();
    if status.is_success() || status.is_redirection() {
        Ok(())
    } else {
        Err(format!("HTTP {} from GET {url}", status.as_u16()))
    }
}
