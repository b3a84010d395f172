//! A test peer, not part of the API: one node running the network and cluster families on its
//! own disk state, driven by the multi-process member tests (`tests/cluster_processes*.rs`).
//!
//! ```text
//! cosi-cluster-peer --state-dir DIR --hostname NAME --address CIDR --ttl-ms N
//!                   (--directory DIR | --etcd URL [--prefix KEY])
//! ```
//!
//! The address goes on a link `eth0` of an in-memory network through the cmdline layer, so
//! the published addresses come through the whole address chain. The peer prints one line per
//! event on stdout:
//!
//! - `identity <nodeId>` once the node id is known;
//! - `members <nodename>=<nodeId>[!stale] ...` (sorted by nodename) whenever the members change.
//!
//! It stops cleanly at the end of its stdin or on SIGTERM.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use cosi_controllers::{ControllerStatus, Engine};
use cosi_core::Registry;
use cosi_core::{
    downcast_ref, Event, ResourceSpec, State, StateExt, UpdateOptions, WatchKindOptions,
};
use cosi_node::cluster::{
    self, AffiliateRegistry, DirectoryRegistry, DirectoryRegistryOptions, Identity, LocalNode,
    Member, LOCAL,
};
use cosi_node::network::{self, Cmdline, MemoryBackend};
use cosi_state::{DiskOptions, DiskState};
use tokio::io::AsyncBufReadExt;

struct Args {
    state_dir: PathBuf,
    hostname: String,
    address: String,
    ttl: Duration,
    directory: Option<PathBuf>,
    etcd: Option<String>,
    prefix: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}"))?;
        let value = words
            .next()
            .ok_or_else(|| format!("--{name} needs a value"))?;
        values.insert(name.to_string(), value);
    }
    let mut take = |name: &str| values.remove(name);
    let required =
        |value: Option<String>, name: &str| value.ok_or_else(|| format!("--{name} is required"));
    let args = Args {
        state_dir: required(take("state-dir"), "state-dir")?.into(),
        hostname: required(take("hostname"), "hostname")?,
        address: required(take("address"), "address")?,
        ttl: Duration::from_millis(
            required(take("ttl-ms"), "ttl-ms")?
                .parse()
                .map_err(|e| format!("--ttl-ms: {e}"))?,
        ),
        directory: take("directory").map(PathBuf::from),
        etcd: take("etcd"),
        prefix: take("prefix"),
    };
    if let Some(unknown) = values.keys().next() {
        return Err(format!("unknown flag --{unknown}"));
    }
    if args.directory.is_some() == args.etcd.is_some() {
        return Err("give exactly one of --directory and --etcd".into());
    }
    Ok(args)
}

fn registry(args: &Args) -> Result<Arc<dyn AffiliateRegistry>, String> {
    if let Some(directory) = &args.directory {
        return Ok(Arc::new(DirectoryRegistry::start(
            DirectoryRegistryOptions::new(directory, args.ttl),
        )));
    }
    #[cfg(feature = "etcd")]
    if let Some(endpoint) = &args.etcd {
        let mut options = cluster::EtcdRegistryOptions::new([endpoint.clone()]).with_ttl(args.ttl);
        options.max_backoff = Duration::from_millis(500);
        options.timeout = Duration::from_secs(2);
        if let Some(prefix) = &args.prefix {
            options = options.with_prefix(prefix.clone());
        }
        return Ok(Arc::new(cluster::EtcdRegistry::start(options)));
    }
    Err(format!(
        "--etcd {:?} (prefix {:?}): this peer was built without the etcd feature",
        args.etcd, args.prefix
    ))
}

/// Every type this node stores, so the disk backend decodes them on load.
fn registry_of_types() -> Result<Registry, String> {
    let mut registry = Registry::new();
    network::register_types(&mut registry).map_err(|e| e.to_string())?;
    cluster::register_types(&mut registry).map_err(|e| e.to_string())?;
    registry
        .register::<ControllerStatus>()
        .map_err(|e| e.to_string())?;
    Ok(registry)
}

async fn run(args: Args) -> Result<(), String> {
    let (ip, prefix) = args
        .address
        .split_once('/')
        .ok_or_else(|| format!("--address {:?} needs a prefix length", args.address))?;
    let cmdline =
        Cmdline::parse(&format!("ip={ip}:::{prefix}::eth0:off")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&args.state_dir).map_err(|e| e.to_string())?;
    let disk = Arc::new(
        DiskState::open(
            args.state_dir.join("state.redb"),
            DiskOptions::default(),
            Arc::new(registry_of_types()?),
        )
        .await
        .map_err(|e| e.to_string())?,
    );
    let engine = Engine::new(disk.clone());
    let backend = MemoryBackend::with_links(["lo", "eth0"]);
    network::register(&engine, Arc::new(backend), cmdline).map_err(|e| e.to_string())?;
    cluster::register(&engine, vec![registry(&args)?]).map_err(|e| e.to_string())?;
    let node = LocalNode {
        hostname: args.hostname.clone(),
        nodename: String::new(),
        machine_type: "worker".into(),
    };
    disk.modify(
        cosi_core::Resource::new(LOCAL, node.clone()),
        UpdateOptions::default(),
        |r| {
            r.spec = node.clone();
            Ok(())
        },
    )
    .await
    .map_err(|e| e.to_string())?;

    let identity = disk
        .watch(&Identity::kind().pointer(LOCAL), Default::default())
        .await
        .map_err(|e| e.to_string())?;
    let members = disk
        .watch_kind(
            &Member::kind(),
            WatchKindOptions {
                bootstrap: true,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    engine.start();
    let outcome = report(identity, members).await;
    engine.shutdown().await;
    disk.close().await;
    outcome
}

/// Prints events until stdin ends or SIGTERM arrives.
async fn report(
    mut identity: cosi_core::Watch,
    mut members: cosi_core::Watch,
) -> Result<(), String> {
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let mut known: BTreeMap<String, String> = BTreeMap::new();
    let mut bootstrapped = false;
    let mut printed: Option<String> = None;
    let mut identity_printed = false;
    loop {
        tokio::select! {
            line = stdin.next_line() => match line {
                Ok(Some(_)) => {}
                _ => return Ok(()),
            },
            _ = terminate.recv() => return Ok(()),
            event = identity.recv(), if !identity_printed => match event {
                Some(Event::Created { resource, .. }) | Some(Event::Updated { resource, .. }) => {
                    let id = downcast_ref::<Identity>(&*resource).map_err(|e| e.to_string())?;
                    println!("identity {}", id.spec.node_id);
                    identity_printed = true;
                }
                Some(_) => {}
                None => return Err("the identity watch ended".into()),
            },
            event = members.recv() => {
                match event {
                    Some(Event::Created { resource, .. }) | Some(Event::Updated { resource, .. }) => {
                        let member = downcast_ref::<Member>(&*resource).map_err(|e| e.to_string())?;
                        let stale = if member.spec.conditions.is_empty() { "" } else { "!stale" };
                        known.insert(member.metadata.id().to_string(), format!("{}{stale}", member.spec.node_id));
                    }
                    Some(Event::Destroyed { resource, .. }) => {
                        known.remove(resource.metadata().id());
                    }
                    Some(Event::Bootstrapped { .. }) => bootstrapped = true,
                    Some(_) => {}
                    None => return Err("the member watch ended".into()),
                }
                if bootstrapped {
                    let line = known.iter().map(|(name, id)| format!("{name}={id}")).collect::<Vec<_>>().join(" ");
                    if printed.as_ref() != Some(&line) {
                        println!("members {line}");
                        printed = Some(line);
                    }
                }
            }
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("cosi-cluster-peer: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cosi-cluster-peer: no runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cosi-cluster-peer: {error}");
            ExitCode::FAILURE
        }
    }
}
