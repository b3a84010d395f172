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
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::process::Command;

use super::spec::Probe;
use super::{process, reaper};

/// Runs `probe` once, failing if it takes longer than `timeout`.
pub async fn probe(probe: &Probe, timeout: Duration) -> Result<(), String> {
    match probe {
        Probe::Exec { command, args } => exec(command, args, timeout).await,
        Probe::Tcp { address } => {
            match tokio::time::timeout(timeout, TcpStream::connect(address.as_str())).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(io_reason(&e)),
                Err(_) => Err(format!(
                    "connecting to {address} timed out after {timeout:?}"
                )),
            }
        }
        Probe::Http { url } => match tokio::time::timeout(timeout, http_get(url)).await {
            Ok(result) => result,
            Err(_) => Err(format!("GET {url} timed out after {timeout:?}")),
        },
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

async fn exec(command: &str, args: &[String], timeout: Duration) -> Result<(), String> {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = reaper::spawn(&mut cmd).map_err(|e| format!("{command}: {}", io_reason(&e)))?;
    let pid = child.id().unwrap_or(0);
    let mut stderr = child.stderr.take();
    let outcome = tokio::time::timeout(timeout, async {
        let mut text = String::new();
        if let Some(pipe) = stderr.as_mut() {
            // Bounded: a probe's complaint is one line, not a log.
            let _ = pipe.take(4096).read_to_string(&mut text).await;
        }
        (child.wait().await, text)
    })
    .await;
    let result = match outcome {
        Ok((Ok(status), text)) if status.success() => {
            let _ = text;
            Ok(())
        }
        Ok((Ok(status), text)) => {
            let last = text.lines().rev().find(|l| !l.trim().is_empty());
            let code = status
                .code()
                .map_or_else(|| "a signal".to_string(), |c| format!("code {c}"));
            Err(match last {
                Some(line) => format!("{command} exited with {code}: {}", line.trim()),
                None => format!("{command} exited with {code}"),
            })
        }
        Ok((Err(e), _)) => Err(format!("{command}: {}", io_reason(&e))),
        Err(_) => {
            let _ = process::signal_group(pid, Signal::SIGKILL);
            let _ = child.wait().await;
            Err(format!("{command} timed out after {timeout:?}"))
        }
    };
    // Whatever the probe forked goes with it.
    let _ = process::signal_group(pid, Signal::SIGKILL);
    reaper::forget(pid);
    result
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
