//! `demo-kubelet`: the workload the service tests and the demo supervise.
//!
//! It behaves like a kubelet where a supervisor can see it: its flags are parsed strictly (an
//! unknown one is refused with `unknown flag: --NAME` on stderr and exit code 1, as the real
//! kubelet does), it serves `GET /healthz` on loopback (`--healthz-bind-address`,
//! `--healthz-port`; port 0 picks a free port), logs a line every `--sync-frequency`, and exits
//! 0 on SIGTERM or SIGINT. It is a real program, not a stub: the supervisor runs it,
//! health-checks it over HTTP and restarts it.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};

/// A kubelet-like workload: strict flags, a health endpoint, a log line now and then.
#[derive(Parser, Debug)]
#[command(name = "demo-kubelet", version, about)]
struct Flags {
    /// Address of the health endpoint.
    #[arg(long, default_value = "127.0.0.1")]
    healthz_bind_address: IpAddr,
    /// Port of the health endpoint (0 = any free port).
    #[arg(long, default_value_t = 10248)]
    healthz_port: u16,
    /// The node name to report instead of the hostname.
    #[arg(long)]
    hostname_override: Option<String>,
    /// The node's IP address.
    #[arg(long)]
    node_ip: Option<IpAddr>,
    /// Labels to register the node with (`key=value,...`).
    #[arg(long)]
    node_labels: Option<String>,
    /// How often the sync loop runs (and logs), e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    sync_frequency: Duration,
    /// Log verbosity.
    #[arg(long, short = 'v', default_value_t = 0)]
    v: u8,
}

fn main() -> ExitCode {
    let flags = match Flags::try_parse() {
        Ok(flags) => flags,
        Err(error) => return refuse(error),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("demo-kubelet: cannot start: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("demo-kubelet: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Reports a flag error the way the kubelet does, exit code 1.
fn refuse(error: clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            print!("{error}");
            ExitCode::SUCCESS
        }
        ErrorKind::UnknownArgument => {
            let flag = match error.get(ContextKind::InvalidArg) {
                Some(ContextValue::String(arg)) => arg.split('=').next().unwrap_or(arg).to_string(),
                _ => "?".to_string(),
            };
            eprintln!("unknown flag: {flag}");
            ExitCode::FAILURE
        }
        _ => {
            eprint!("{}", error.render());
            ExitCode::FAILURE
        }
    }
}

async fn serve(flags: Flags) -> Result<(), String> {
    let address = SocketAddr::new(flags.healthz_bind_address, flags.healthz_port);
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let node = flags
        .hostname_override
        .clone()
        .unwrap_or_else(|| "localhost".to_string());
    // Before the first line: whoever reads it may stop the kubelet and expect a clean exit.
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    println!("demo-kubelet: node {node}: serving healthz on {local}");
    if let Some(labels) = &flags.node_labels {
        println!("demo-kubelet: registering node {node} with labels {labels}");
    }
    if let Some(ip) = flags.node_ip {
        println!("demo-kubelet: node IP {ip}");
    }
    let mut sync = tokio::time::interval(flags.sync_frequency);
    sync.tick().await;
    let mut syncs = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(async move {
                            let service = hyper::service::service_fn(answer);
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                    // Out of descriptors, say: the queued connection stays queued, so an
                    // immediate retry would fail the same way in a busy loop.
                    Err(e) => {
                        eprintln!("demo-kubelet: accept failed: {e}; retrying in 100 ms");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                }
            }
            _ = sync.tick() => {
                syncs += 1;
                println!("demo-kubelet: sync loop {syncs}: node {node} is ready");
                if flags.v >= 2 {
                    eprintln!("demo-kubelet: sync loop {syncs} took 0 pods");
                }
            }
            _ = terminate.recv() => {
                println!("demo-kubelet: received SIGTERM, shutting down");
                return Ok(());
            }
            _ = interrupt.recv() => {
                println!("demo-kubelet: received SIGINT, shutting down");
                return Ok(());
            }
        }
    }
}

async fn answer(
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body) = match request.uri().path() {
        "/healthz" => (StatusCode::OK, "ok"),
        _ => (StatusCode::NOT_FOUND, "not found"),
    };
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    Ok(response)
}
