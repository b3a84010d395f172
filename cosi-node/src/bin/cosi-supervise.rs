//! `cosi-supervise`: a daemon-like host of the service supervisor, for the tests that kill it.
//!
//! It runs the supervisor the way the node daemon does (a state directory, the child
//! subreaper on) over the services of a YAML file (`id: ServiceSpec` map), and prints what
//! happens on stdout, one line each, so a test can wait on the line it needs:
//!
//! - `leftover <service> <pgid> <pid,pid,...>` for each group an earlier run left behind and
//!   the sweep killed;
//! - `ready` once the services are applied;
//! - `event <service> <State> <message>` for every service event;
//! - `log <service> <line>` for every line a service prints.
//!
//! SIGTERM stops the services (dependents first) and exits 0.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use cosi_node::services::{EventItem, LogItem, ServiceSpec, Supervisor, SupervisorOptions};
use tokio::signal::unix::{signal, SignalKind};

/// Runs services from a YAML file under the supervisor.
#[derive(Parser, Debug)]
#[command(name = "cosi-supervise")]
struct Flags {
    /// The state directory (logs, process group records).
    #[arg(long)]
    state_dir: PathBuf,
    /// A YAML map of service id → ServiceSpec.
    #[arg(long)]
    services: PathBuf,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cosi-supervise: cannot start a runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(flags)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("cosi-supervise: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(flags: Flags) -> Result<(), String> {
    let text = std::fs::read_to_string(&flags.services)
        .map_err(|e| format!("{}: {e}", flags.services.display()))?;
    let services: BTreeMap<String, ServiceSpec> =
        serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", flags.services.display()))?;
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let supervisor = Supervisor::new(SupervisorOptions {
        state_dir: Some(flags.state_dir.clone()),
        reap_orphans: true,
        ..SupervisorOptions::default()
    })
    .map_err(|e| e.to_string())?;
    for leftover in supervisor.leftovers() {
        let pids: Vec<String> = leftover.killed.iter().map(u32::to_string).collect();
        println!(
            "leftover {} {} {}",
            leftover.service,
            leftover.pgid,
            pids.join(",")
        );
    }
    let mut events = supervisor.events(0);
    tokio::spawn(async move {
        while let Some(item) = events.next().await {
            if let EventItem::Event(record) = item {
                println!(
                    "event {} {} {}",
                    record.service, record.event.state, record.event.message
                );
            }
        }
    });
    for (id, spec) in services {
        supervisor.apply(&id, spec).map_err(|e| e.to_string())?;
        let mut logs = supervisor.logs(&id, 0, true).map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            while let Some(item) = logs.next().await {
                if let LogItem::Line(line) = item {
                    println!("log {id} {}", line.text);
                }
            }
        });
    }
    println!("ready");
    let _ = terminate.recv().await;
    supervisor.shutdown().await;
    println!("stopped");
    Ok(())
}
