//! Crash loop — a crash-looping service never slows the daemon down.
//!
//! One engine on a two-worker runtime (the daemon's shape) runs the service controllers over a
//! supervisor and an unrelated controller: a transform `Ping → Pong`. The figure is that
//! controller's reconcile latency: from writing `Ping.seq = i` to seeing `Pong.seq = i` in a
//! watch, N times in a row. It is measured twice in each run: `idle` (the supervisor has no
//! service) and `looping` (one service, `sh -c 'echo crashing >&2; exit 1'`, restarted with a
//! 1 ms backoff: every restart is a real fork/exec, its output captured, five events and their
//! status writes), with the orphan reaper on as in the daemon.
//! `crash_loop.looping.restarts_per_s` says how hard the loop ran.
//!
//! `--runs R` (default 3), `--n N` samples per measurement (default 2000). Prints the spread
//! and median of each figure (median / p99 latency in microseconds).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::report::Report;
use cosi_controllers::{Backoff, Engine, Transform};
use cosi_core::{
    CreateOptions, Event, Resource, ResourceSpec, StateExt, UpdateOptions, WatchOptions,
};
use cosi_node::services::{
    RestartPolicy, ServiceSpec, ServiceSpecController, ServiceStatusController, Supervisor,
    SupervisorOptions,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Ping {
    seq: u64,
}

impl ResourceSpec for Ping {
    const TYPE: &'static str = "Pings.bench.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "bench";
}

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Pong {
    seq: u64,
}

impl ResourceSpec for Pong {
    const TYPE: &'static str = "Pongs.bench.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "bench";
}

/// What one measurement found.
struct Measurement {
    latencies: Vec<Duration>,
    restarts_per_s: f64,
}

fn main() -> ExitCode {
    exit_on_error("crash_loop", run())
}

fn run() -> Result<(), WorkloadError> {
    let mut args = RunArgs::from_env()?;
    if std::env::args().all(|a| !a.starts_with("--runs")) {
        args.runs = 3;
    }
    let n = args.n.unwrap_or(2000);
    // Two workers unless told otherwise, whatever the machine.
    args.workers.get_or_insert(2);
    let runtime = args.runtime()?;
    println!(
        "# crash_loop: reconcile latency of an unrelated controller (write Ping, see Pong), \
         {n} samples, {} runs, {}, idle vs one service crash-looping with a 1 ms backoff",
        args.runs,
        RunArgs::describe_runtime(&runtime)
    );
    println!("# machine: {}", benches::machine::describe());
    let mut report = Report::default();
    for _ in 0..args.runs {
        for (name, looping) in [("idle", false), ("looping", true)] {
            let mut m = runtime.block_on(measure(looping, n))?;
            m.latencies.sort_unstable();
            let at = |q: f64| m.latencies[((m.latencies.len() - 1) as f64 * q) as usize];
            report.record(
                &format!("crash_loop.{name}.p50"),
                at(0.5).as_secs_f64() * 1e6,
                "us",
            );
            report.record(
                &format!("crash_loop.{name}.p99"),
                at(0.99).as_secs_f64() * 1e6,
                "us",
            );
            if looping {
                report.record(
                    "crash_loop.looping.restarts_per_s",
                    m.restarts_per_s,
                    "restarts/s",
                );
            }
        }
    }
    report.print();
    Ok(())
}

async fn measure(looping: bool, n: usize) -> Result<Measurement, WorkloadError> {
    let state = memory_state();
    let engine = Engine::new(state.clone());
    let supervisor = Supervisor::new(SupervisorOptions {
        restart_backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(1)),
        // As the daemon runs it: the orphan reaper scans /proc on every SIGCHLD.
        reap_orphans: true,
        ..SupervisorOptions::default()
    })
    .map_err(|e| WorkloadError::new(e.to_string()))?;
    let failed = |e: cosi_controllers::RegistrationError| WorkloadError::new(e.to_string());
    engine
        .register(ServiceSpecController::new(supervisor.clone()))
        .map_err(failed)?;
    engine
        .register(ServiceStatusController::new(supervisor.clone()))
        .map_err(failed)?;
    engine
        .register(Transform::<Ping, Pong>::same_id(
            "bench.PingPong",
            |p: &Ping| Some(Pong { seq: p.seq }),
        ))
        .map_err(failed)?;
    engine.start();

    let restarts = || supervisor.get("crasher").map_or(0, |i| i.restarts);
    if looping {
        let spec = ServiceSpec::command("/bin/sh")
            .with_args(["-c", "echo crashing >&2; exit 1"])
            .with_restart(RestartPolicy::Always);
        state
            .create(
                Resource::new_in("runtime", "crasher", spec).into_shared(),
                CreateOptions::default(),
            )
            .await?;
        // Wait until the loop is in full swing.
        let mut changes = supervisor.subscribe();
        while restarts() < 20 {
            changes
                .changed()
                .await
                .map_err(|_| WorkloadError::new("the supervisor went away"))?;
        }
    }

    let pong = Pong::kind().pointer("p");
    let mut watch = state.watch(&pong, WatchOptions::default()).await?;
    let before = restarts();
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(n);
    for seq in 0..=n as u64 {
        let written = Instant::now();
        state
            .modify(
                Resource::new("p", Ping::default()),
                UpdateOptions::default(),
                |r| {
                    r.spec.seq = seq;
                    Ok(())
                },
            )
            .await?;
        loop {
            let event = watch
                .recv()
                .await
                .ok_or_else(|| WorkloadError::new("the Pong watch ended"))?;
            let resource = match &event {
                Event::Created { resource, .. } | Event::Updated { resource, .. } => resource,
                _ => continue,
            };
            let seen = resource.spec_any().downcast_ref::<Pong>().map(|p| p.seq);
            if seen == Some(seq) {
                break;
            }
        }
        // The first round trip creates both resources; it is not a sample.
        if seq > 0 {
            latencies.push(written.elapsed());
        }
    }
    let elapsed = started.elapsed();
    let restarts_per_s = (restarts() - before) as f64 / elapsed.as_secs_f64();
    if looping {
        ensure(restarts() > before, || {
            "the service did not restart during the measurement".to_string()
        })?;
    }
    supervisor.shutdown().await;
    let report = engine.shutdown().await;
    ensure(report.aborted == 0, || {
        format!("{} controllers aborted", report.aborted)
    })?;
    Ok(Measurement {
        latencies,
        restarts_per_s,
    })
}
