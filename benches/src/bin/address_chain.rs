//! Address chain probe (cosi-node's network family, not a `benches/WORKLOADS.md` workload): 1,000
//! address specs over the five layers, from a layer change to `NodeAddress` settled, on the
//! in-memory state and the in-memory network backend.
//!
//! Each layer states 200 specs on `eth0`; consecutive layers overlap by half (layer k states
//! addresses k·100 … k·100+199), so the 1,000 specs merge into 600 addresses, 400 of them
//! contested between two layers. Two phases, each timed from the first write until
//! `NodeAddress[current]` holds exactly the expected addresses:
//!
//! - `initial`: all 1,000 layered specs are written back to back into a running chain;
//! - `config_change`: the configuration layer's 200 specs are replaced by 200 others (200
//!   destroys, 200 creates), so 100 addresses leave the kernel, 100 contested ones fall back to
//!   the operator layer and 200 new ones arrive.
//!
//! Each phase reports the time until `NodeAddress` settled, the time until the whole chain has
//! drained (every merged spec applied and held by its finalizer, every withdrawn one torn down
//! and destroyed), and the reconciles per controller up to then: far fewer reconciles than
//! writes show the chain coalescing.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::report::Report;
use cosi_controllers::Engine;
use cosi_core::{AnyResource, CreateOptions, Resource, ResourceSpec, State, StateExt};
use cosi_node::namespaces;
use cosi_node::network::{
    AddressMergeController, AddressSpec, AddressSpecController, AddressStatusController,
    ConfigLayer, MemoryBackend, NodeAddress, NodeAddressController,
};
use ipnet::IpNet;

const SPECS_PER_LAYER: usize = 200;
const CONTROLLERS: [&str; 4] = [
    AddressMergeController::NAME,
    AddressSpecController::NAME,
    AddressStatusController::NAME,
    NodeAddressController::NAME,
];
/// A chain that has not settled by then has lost a change: fail instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    exit_on_error("address_chain", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    ensure(args.n.is_none(), || {
        "--n: the size is fixed (1,000 specs)".to_string()
    })?;
    let runtime = args.runtime()?;
    println!(
        "# address_chain: {} specs over {} layers ({SPECS_PER_LAYER} each), {} runs, in-memory state and network",
        SPECS_PER_LAYER * ConfigLayer::ALL.len(),
        ConfigLayer::ALL.len(),
        args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    let mut report = Report::default();
    for run in 1..=args.runs {
        let phases = runtime.block_on(measure())?;
        for (phase, elapsed, drained, reconciles) in phases {
            let counts: Vec<String> = CONTROLLERS
                .iter()
                .zip(&reconciles)
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            println!(
                "# run {run}, {phase}: NodeAddress settled {:.1} ms, chain drained {:.1} ms; reconciles: {}",
                elapsed.as_secs_f64() * 1e3,
                drained.as_secs_f64() * 1e3,
                counts.join(", ")
            );
            report.record_ms(
                &format!("address_chain.{phase}.node_address_settled"),
                elapsed,
            );
            report.record_ms(&format!("address_chain.{phase}.chain_drained"), drained);
            for (controller, n) in CONTROLLERS.iter().zip(&reconciles) {
                report.record(
                    &format!("address_chain.{phase}.reconciles.{controller}"),
                    *n as f64,
                    "reconciles",
                );
            }
        }
    }
    report.print();
    Ok(())
}

fn address(n: usize) -> IpNet {
    let host = Ipv4Addr::new(10, 1, (n / 250) as u8, (n % 250 + 1) as u8);
    IpNet::new(host.into(), 16).expect("a /16 is valid")
}

fn layered(layer: ConfigLayer, n: usize) -> Resource<AddressSpec> {
    let spec = AddressSpec::new("eth0", address(n), layer);
    Resource::new_in(namespaces::NETWORK_CONFIG, spec.layered_id(), spec)
}

type Phase = (&'static str, Duration, Duration, Vec<u64>);

async fn measure() -> Result<Vec<Phase>, WorkloadError> {
    let state = memory_state();
    let engine = Engine::new(state.clone());
    let backend = MemoryBackend::with_links(["eth0"]);
    let backend: Arc<dyn cosi_node::network::NetworkBackend> = Arc::new(backend);
    let register = |r: Result<(), cosi_controllers::RegistrationError>| {
        r.map_err(|e| WorkloadError::new(e.to_string()))
    };
    register(engine.register(AddressMergeController))?;
    register(engine.register(AddressSpecController::new(backend.clone())))?;
    register(engine.register(AddressStatusController::new(backend)))?;
    register(engine.register(NodeAddressController))?;
    engine.start();
    wait_current(&*state, &[]).await?;
    wait_idle(&engine).await?;
    let counts = |engine: &Engine| -> Vec<u64> {
        CONTROLLERS
            .iter()
            .map(|c| engine.status(c).map(|s| s.reconciles).unwrap_or(0))
            .collect()
    };
    let mut phases = Vec::new();

    // Initial: every layer's specs, back to back.
    let before = counts(&engine);
    let start = Instant::now();
    for (k, layer) in ConfigLayer::ALL.into_iter().enumerate() {
        for n in k * 100..k * 100 + SPECS_PER_LAYER {
            state
                .create(layered(layer, n).into_shared(), CreateOptions::default())
                .await?;
        }
    }
    let expected: Vec<IpNet> = (0..(ConfigLayer::ALL.len() - 1) * 100 + SPECS_PER_LAYER)
        .map(address)
        .collect();
    wait_current(&*state, &expected).await?;
    let settled = start.elapsed();
    wait_drained(&*state, expected.len()).await?;
    phases.push((
        "initial",
        settled,
        start.elapsed(),
        delta(&counts(&engine), &before),
    ));

    // Config change: the configuration layer moves to 200 other addresses.
    let configuration = (ConfigLayer::ALL.len() - 1) * 100;
    let before = counts(&engine);
    let start = Instant::now();
    for n in configuration..configuration + SPECS_PER_LAYER {
        let pointer = layered(ConfigLayer::Configuration, n)
            .metadata
            .pointer()
            .clone();
        state.destroy(&pointer, Default::default()).await?;
    }
    let moved = configuration + 1000;
    for n in moved..moved + SPECS_PER_LAYER {
        state
            .create(
                layered(ConfigLayer::Configuration, n).into_shared(),
                CreateOptions::default(),
            )
            .await?;
    }
    let mut expected: Vec<IpNet> = (0..configuration + 100)
        .chain(moved..moved + SPECS_PER_LAYER)
        .map(address)
        .collect();
    cosi_node::network::node_address::sort_addresses(&mut expected);
    wait_current(&*state, &expected).await?;
    let settled = start.elapsed();
    wait_drained(&*state, expected.len()).await?;
    phases.push((
        "config_change",
        settled,
        start.elapsed(),
        delta(&counts(&engine), &before),
    ));

    let report = engine.shutdown().await;
    ensure(report.aborted == 0, || {
        format!("{} controllers did not stop", report.aborted)
    })?;
    Ok(phases)
}

/// Waits (after the timed part) until every reconcile has finished and been counted, so the
/// counts cover exactly one phase. The engine exposes idleness as a probe, not an event, so this
/// checks it every millisecond.
async fn wait_idle(engine: &Engine) -> Result<(), WorkloadError> {
    let deadline = Instant::now() + DEADLINE;
    while !engine.is_idle() {
        ensure(Instant::now() < deadline, || {
            "the engine did not go idle".to_string()
        })?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

fn delta(after: &[u64], before: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Waits until `NodeAddress[current]` holds exactly `expected`.
async fn wait_current(state: &dyn State, expected: &[IpNet]) -> Result<(), WorkloadError> {
    let pointer = NodeAddress::kind().pointer("current");
    let settled = |r: Option<&dyn AnyResource>| {
        r.and_then(|r| cosi_core::downcast_ref::<NodeAddress>(r).ok())
            .is_some_and(|n| n.spec.addresses == expected)
    };
    tokio::time::timeout(DEADLINE, state.watch_for(&pointer, settled))
        .await
        .map_err(|_| {
            WorkloadError::new(format!(
                "NodeAddress current did not settle on {} addresses within {DEADLINE:?}",
                expected.len()
            ))
        })??;
    Ok(())
}

/// Waits until `network` holds exactly `count` merged specs, all running and held by the spec
/// controller's finalizer (so every withdrawn one has been torn down and destroyed).
async fn wait_drained(state: &dyn State, count: usize) -> Result<(), WorkloadError> {
    let kind = AddressSpec::kind_in(namespaces::NETWORK);
    let options = cosi_core::WatchKindOptions {
        bootstrap: true,
        ..Default::default()
    };
    let mut watch = state.watch_kind(&kind, options).await?;
    let mut specs: std::collections::BTreeMap<String, bool> = std::collections::BTreeMap::new();
    let mut bootstrapped = false;
    let drained = |specs: &std::collections::BTreeMap<String, bool>| {
        specs.len() == count && specs.values().all(|ready| *ready)
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let event = tokio::time::timeout_at(deadline, watch.recv())
            .await
            .map_err(|_| {
                WorkloadError::new(format!(
                    "the chain did not drain to {count} specs within {DEADLINE:?}"
                ))
            })?
            .ok_or_else(|| WorkloadError::new("the spec watch ended"))?;
        match event {
            cosi_core::Event::Created { resource, .. }
            | cosi_core::Event::Updated { resource, .. } => {
                let metadata = resource.metadata();
                let ready = metadata.phase() == cosi_core::Phase::Running
                    && metadata.finalizers().contains(AddressSpecController::NAME);
                specs.insert(metadata.id().to_string(), ready);
            }
            cosi_core::Event::Destroyed { resource, .. } => {
                specs.remove(resource.metadata().id());
            }
            cosi_core::Event::Bootstrapped { .. } => bootstrapped = true,
            cosi_core::Event::Errored { error } => return Err(error.into()),
            _ => {}
        }
        if bootstrapped && drained(&specs) {
            return Ok(());
        }
    }
}
