//! W3 — reconcile chain (`benches/WORKLOADS.md`): two controllers, C1 reads A and writes B
//! (same id, B.value = A.value + 1), C2 reads B and writes C (C.value = B.value + 1). Phase 1:
//! create N = 10,000 A (value = i; ids made before the clock, labels inside it); time until
//! every C exists with value i + 2. Phase 2: 5 rounds of read-modify-write updates of every A
//! (value = i + round·10⁶: get, change a copy, update with the version read, retry on a
//! conflict) as fast as possible; time from the first update until every C equals
//! i + 5·10⁶ + 2. Figures: phase 1 time and items/s, phase 2 time, the process's CPU time in
//! each phase (all threads: with the wall time, how much work a phase did and how well it used
//! the cores), reconcile counts of C1 and C2 (they show coalescing) and how often each controller's map function ran per phase (the
//! reference prints the same "transform calls"). Three variants (`--variant`, default all):
//!
//! - `level`: level-triggered transform controllers ([`Transform`]);
//! - `queue`: per-item queue controllers ([`QueueTransform`]) at concurrency 1 holding a
//!   finalizer on each input, what the reference's queue transform does by default — the
//!   headline queue figure;
//! - `queue4`: the same at concurrency 4.
//!
//! Every variant runs on the in-memory state with default options and an engine with default
//! options (controller statuses are published, as in production). As a same-process baseline
//! (this machine is shared and noisy), each run also times the writes the chain implies done
//! directly on a fresh store, without controllers: phase 1 = N creates each of A, B and C;
//! phase 2 = 5 rounds of N updates each of A (read-modify-write), B and C. `vs_raw` is chain
//! time / raw time. Completion is observed through a kind watch on C; afterwards every B and C is
//! read back and checked, and the controllers' error counters must be zero; the queue variants
//! also find their finalizer on every A and B.
//!
//! [`Transform`]: cosi_controllers::Transform
//! [`QueueTransform`]: cosi_controllers::QueueTransform

use std::process::ExitCode;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use benches::args::{parse_env, RunArgs};
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::cpu::process_cpu;
use benches::item::{item_ids, item_index, item_with_id};
use benches::rmw::read_modify_write;
use clap::{Parser, ValueEnum};
use cosi_controllers::{Engine, Transform};
use cosi_core::{
    downcast, downcast_ref, CreateOptions, Event, ListOptions, ResourceSpec, SharedResource, State,
    UpdateOptions, Watch, WatchKindOptions,
};
use serde::{Deserialize, Serialize};

const DEFAULT_ITEMS: usize = 10_000;
const ROUNDS: i64 = 5;
const ROUND_STEP: i64 = 1_000_000;
/// A phase that takes longer than this has lost a change: fail instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);
const BATCH: usize = 4096;

macro_rules! chain_type {
    ($name:ident, $ty:literal) => {
        /// A link of the chain; spec `{ value, label }` like the benchmark resource.
        #[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
        struct $name {
            value: i64,
            label: String,
        }
        impl ResourceSpec for $name {
            const TYPE: &'static str = $ty;
            const DEFAULT_NAMESPACE: &'static str = "bench";
        }
    };
}

chain_type!(ChainA, "ChainAs.bench.cosi.dev");
chain_type!(ChainB, "ChainBs.bench.cosi.dev");
chain_type!(ChainC, "ChainCs.bench.cosi.dev");

/// The controllers the chain runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Variant {
    /// Level-triggered transforms.
    Level,
    /// Per-item queue transforms, concurrency 1, a finalizer held on each input.
    Queue,
    /// Per-item queue transforms, concurrency 4, a finalizer held on each input.
    Queue4,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Level => "level",
            Variant::Queue => "queue",
            Variant::Queue4 => "queue4",
        }
    }

    /// Items a queue controller reconciles at once (`None`: level-triggered).
    fn concurrency(self) -> Option<usize> {
        match self {
            Variant::Level => None,
            Variant::Queue => Some(1),
            Variant::Queue4 => Some(4),
        }
    }

    /// Whether each controller holds a finalizer on its inputs (the queue variants, like the
    /// reference's queue transform).
    fn finalizers(self) -> bool {
        self.concurrency().is_some()
    }
}

/// W3 — reconcile chain.
#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
    /// Run only this variant (default: all three).
    #[arg(long)]
    variant: Option<Variant>,
    /// Skip the raw-writes baseline (and its `*_vs_raw` ratios): for profiling the chain alone.
    #[arg(long)]
    no_baseline: bool,
}

fn main() -> ExitCode {
    exit_on_error("w3", run())
}

fn run() -> Result<(), WorkloadError> {
    let cli: Cli = parse_env()?;
    let args = cli.run;
    let items = args.n.unwrap_or(DEFAULT_ITEMS);
    let runtime = args.runtime()?;
    println!(
        "# w3: reconcile chain A -> C1 -> B -> C2 -> C, N = {items}, {ROUNDS} update rounds, {} runs \
         per variant, in-memory state and engine with default options; queue variants hold a \
         finalizer on each input",
        args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    println!(
        "# runtime: {} beside the main thread, which runs the writer",
        RunArgs::describe_runtime(&runtime)
    );
    let variants = match cli.variant {
        Some(variant) => vec![variant],
        None => vec![Variant::Level, Variant::Queue, Variant::Queue4],
    };
    let mut report = Report3::default();
    for variant in variants {
        for run in 1..=args.runs {
            let outcome = runtime.block_on(run_chain(variant, items))?;
            let raw = if cli.no_baseline {
                None
            } else {
                Some(runtime.block_on(raw_writes(items))?)
            };
            println!(
                "# {} run {run}: phase 1 {:.1} ms (CPU {:.1} ms), phase 2 {:.1} ms (CPU {:.1} \
                 ms), reconciles C1 {} C2 {}, map calls C1/C2 phase 1 {}/{} phase 2 {}/{}, \
                 writer conflicts {}, phase 2 writer {:.1} ms{}",
                variant.name(),
                outcome.phase1.as_secs_f64() * 1e3,
                outcome.phase1_cpu.as_secs_f64() * 1e3,
                outcome.phase2.as_secs_f64() * 1e3,
                outcome.phase2_cpu.as_secs_f64() * 1e3,
                outcome.reconciles_c1,
                outcome.reconciles_c2,
                outcome.calls[0][0],
                outcome.calls[0][1],
                outcome.calls[1][0],
                outcome.calls[1][1],
                outcome.conflicts,
                outcome.writer2.as_secs_f64() * 1e3,
                raw.map_or(String::new(), |(phase1, phase2)| format!(
                    "; raw writes: phase 1 {:.1} ms, phase 2 {:.1} ms",
                    phase1.as_secs_f64() * 1e3,
                    phase2.as_secs_f64() * 1e3
                )),
            );
            report.record(variant, items, &outcome, raw);
        }
    }
    report.0.print();
    Ok(())
}

#[derive(Default)]
struct Report3(benches::report::Report);

impl Report3 {
    fn record(
        &mut self,
        variant: Variant,
        items: usize,
        outcome: &ChainRun,
        raw: Option<(Duration, Duration)>,
    ) {
        let name = |figure: &str| format!("w3.{}.{figure}", variant.name());
        self.0
            .record(&name("phase1"), outcome.phase1.as_secs_f64(), "s");
        self.0
            .record_rate(&name("phase1_rate"), items, outcome.phase1, "items/s");
        self.0
            .record(&name("phase2"), outcome.phase2.as_secs_f64(), "s");
        self.0
            .record(&name("phase1_cpu"), outcome.phase1_cpu.as_secs_f64(), "s");
        self.0
            .record(&name("phase2_cpu"), outcome.phase2_cpu.as_secs_f64(), "s");
        if let Some((raw1, raw2)) = raw {
            self.0.record(
                &name("phase1_vs_raw"),
                outcome.phase1.as_secs_f64() / raw1.as_secs_f64(),
                "x",
            );
            self.0.record(
                &name("phase2_vs_raw"),
                outcome.phase2.as_secs_f64() / raw2.as_secs_f64(),
                "x",
            );
        }
        self.0.record(
            &name("reconciles_c1"),
            outcome.reconciles_c1 as f64,
            "reconciles",
        );
        self.0.record(
            &name("reconciles_c2"),
            outcome.reconciles_c2 as f64,
            "reconciles",
        );
        for (phase, calls) in outcome.calls.iter().enumerate() {
            for (controller, &count) in calls.iter().enumerate() {
                self.0.record(
                    &name(&format!("phase{}_c{}_calls", phase + 1, controller + 1)),
                    count as f64,
                    "calls",
                );
            }
        }
    }
}

struct ChainRun {
    phase1: Duration,
    phase2: Duration,
    /// CPU time of the whole process during each phase (all threads).
    phase1_cpu: Duration,
    phase2_cpu: Duration,
    reconciles_c1: u64,
    reconciles_c2: u64,
    /// Map-function calls per phase (1, 2), per controller (C1, C2).
    calls: [[u64; 2]; 2],
    /// Version conflicts the phase-2 writer retried.
    conflicts: usize,
    /// How long the phase-2 writer took for its updates (the reference prints the same).
    writer2: Duration,
}

/// How often each controller's map function ran.
#[derive(Default)]
struct Calls([AtomicU64; 2]);

impl Calls {
    fn count(&self, controller: usize) {
        self.0[controller].fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> [u64; 2] {
        [0, 1].map(|c| self.0[c].load(Ordering::Relaxed))
    }
}

fn chain_a(value: i64, label: String) -> ChainA {
    ChainA { value, label }
}

async fn run_chain(variant: Variant, items: usize) -> Result<ChainRun, WorkloadError> {
    let state = memory_state();
    let engine = Engine::new(state.clone());
    let calls = Arc::new(Calls::default());
    let c1 = Transform::<ChainA, ChainB>::same_id("C1", {
        let calls = calls.clone();
        move |a: &ChainA| {
            calls.count(0);
            Some(ChainB {
                value: a.value + 1,
                label: a.label.clone(),
            })
        }
    });
    let c2 = Transform::<ChainB, ChainC>::same_id("C2", {
        let calls = calls.clone();
        move |b: &ChainB| {
            calls.count(1);
            Some(ChainC {
                value: b.value + 1,
                label: b.label.clone(),
            })
        }
    });
    let registered = match variant.concurrency() {
        None => engine.register(c1).and_then(|()| engine.register(c2)),
        Some(concurrency) => engine
            .register_queue(c1.with_finalizers().into_queue(concurrency))
            .and_then(|()| engine.register_queue(c2.with_finalizers().into_queue(concurrency))),
    };
    registered.map_err(|e| WorkloadError::new(format!("registration failed: {e}")))?;
    engine.start();

    // Phase 1: ids before the clock, labels inside it.
    let kind = ChainA::kind();
    let ids = item_ids(items);
    let watch = state
        .watch_kind(&ChainC::kind(), WatchKindOptions::default())
        .await?;
    let waiter = tokio::spawn(wait_for_values(watch, items, |i| i as i64 + 2));
    let cpu_start = process_cpu()?;
    let start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let a = item_with_id(&kind, id, i, i as i64, chain_a);
        state
            .create(a.into_shared(), CreateOptions::default())
            .await?;
    }
    let phase1_done = join(waiter).await?;
    let phase1 = phase1_done - start;
    let phase1_cpu = process_cpu()? - cpu_start;
    let phase1_calls = calls.read();
    check_chain(&*state, items, 0, variant.finalizers()).await?;

    // Phase 2: a fresh watch, drained of its bootstrap before the clock starts.
    let mut watch = state
        .watch_kind(
            &ChainC::kind(),
            WatchKindOptions {
                bootstrap: true,
                ..WatchKindOptions::default()
            },
        )
        .await?;
    'bootstrap: while let Some(batch) = watch.recv_batch(BATCH).await {
        for event in batch {
            if let Event::Bootstrapped { .. } = event {
                break 'bootstrap;
            }
        }
    }
    let final_value = move |i: usize| i as i64 + ROUNDS * ROUND_STEP + 2;
    let waiter = tokio::spawn(wait_for_values(watch, items, final_value));
    let mut conflicts = 0;
    let cpu_start = process_cpu()?;
    let start = Instant::now();
    for round in 1..=ROUNDS {
        for (i, id) in ids.iter().enumerate() {
            let target = i as i64 + round * ROUND_STEP;
            let written = read_modify_write::<ChainA>(&*state, &kind.pointer(id.clone()), |a| {
                a.value = target
            })
            .await?;
            conflicts += written.conflicts;
        }
    }
    let writer2 = start.elapsed();
    let phase2_done = join(waiter).await?;
    let phase2 = phase2_done - start;
    let phase2_cpu = process_cpu()? - cpu_start;
    let all_calls = calls.read();
    check_chain(&*state, items, ROUNDS * ROUND_STEP, variant.finalizers()).await?;

    let status = |name: &str| {
        engine
            .status(name)
            .ok_or_else(|| WorkloadError::new(format!("no status for controller {name}")))
    };
    let (s1, s2) = (status("C1")?, status("C2")?);
    ensure(s1.errors == 0 && s2.errors == 0, || {
        format!(
            "controllers failed: C1 {} errors ({:?}), C2 {} errors ({:?})",
            s1.errors, s1.last_error, s2.errors, s2.last_error
        )
    })?;
    let report = engine.shutdown().await;
    ensure(report.aborted == 0, || {
        format!("{} controller tasks did not stop", report.aborted)
    })?;
    Ok(ChainRun {
        phase1,
        phase2,
        phase1_cpu,
        phase2_cpu,
        reconciles_c1: s1.reconciles,
        reconciles_c2: s2.reconciles,
        calls: [phase1_calls, [0, 1].map(|c| all_calls[c] - phase1_calls[c])],
        conflicts,
        writer2,
    })
}

/// The writes the chain implies, done directly on a fresh store: the A updates as the chain's
/// writer makes them (read-modify-write), B and C from the values last stored, as a controller
/// writes its outputs. Returns the phase 1 and phase 2 times.
async fn raw_writes(items: usize) -> Result<(Duration, Duration), WorkloadError> {
    let state = memory_state();
    let ids = item_ids(items);
    let (kind_a, kind_b, kind_c) = (ChainA::kind(), ChainB::kind(), ChainC::kind());
    let start = Instant::now();
    let mut stored: Vec<[SharedResource; 2]> = Vec::with_capacity(items);
    for (i, id) in ids.iter().enumerate() {
        let v = i as i64;
        let a = item_with_id(&kind_a, id, i, v, chain_a);
        let b = item_with_id(&kind_b, id, i, v + 1, |value, label| ChainB {
            value,
            label,
        });
        let c = item_with_id(&kind_c, id, i, v + 2, |value, label| ChainC {
            value,
            label,
        });
        state
            .create(a.into_shared(), CreateOptions::default())
            .await?;
        stored.push([
            state
                .create(b.into_shared(), CreateOptions::default())
                .await?,
            state
                .create(c.into_shared(), CreateOptions::default())
                .await?,
        ]);
    }
    let phase1 = start.elapsed();
    let start = Instant::now();
    for round in 1..=ROUNDS {
        for (i, (id, outputs)) in ids.iter().zip(&mut stored).enumerate() {
            let v = i as i64 + round * ROUND_STEP;
            read_modify_write::<ChainA>(&*state, &kind_a.pointer(id.clone()), |a| a.value = v)
                .await?;
            let mut b = (*downcast::<ChainB>(outputs[0].clone())?).clone();
            b.spec.value = v + 1;
            let mut c = (*downcast::<ChainC>(outputs[1].clone())?).clone();
            c.spec.value = v + 2;
            outputs[0] = state
                .update(b.into_shared(), UpdateOptions::default())
                .await?;
            outputs[1] = state
                .update(c.into_shared(), UpdateOptions::default())
                .await?;
        }
    }
    Ok((phase1, start.elapsed()))
}

/// Follows C until every item `i` has `target(i)`; returns when the last one got there.
/// Catch-ups carry the latest state and a resync re-delivers everything, so both are handled.
async fn wait_for_values(
    mut watch: Watch,
    items: usize,
    target: impl Fn(usize) -> i64 + Send + 'static,
) -> Result<Instant, WorkloadError> {
    let follow = async move {
        let mut reached = vec![false; items];
        let mut count = 0;
        while let Some(batch) = watch.recv_batch(BATCH).await {
            for event in batch {
                match event {
                    Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                        let Some(i) = item_index(resource.metadata().id()) else {
                            continue;
                        };
                        let value = downcast_ref::<ChainC>(&*resource)?.spec.value;
                        let now = value == target(i);
                        if now != reached[i] {
                            reached[i] = now;
                            if now {
                                count += 1;
                            } else {
                                count -= 1;
                            }
                        }
                    }
                    Event::Resync { .. } => {
                        reached.iter_mut().for_each(|r| *r = false);
                        count = 0;
                    }
                    Event::Errored { error } => return Err(WorkloadError::from(error)),
                    _ => {}
                }
            }
            if count == items {
                return Ok(Instant::now());
            }
        }
        Err(WorkloadError::new("the watch on C ended early"))
    };
    tokio::time::timeout(DEADLINE, follow)
        .await
        .map_err(|_| WorkloadError::new(format!("C did not converge within {DEADLINE:?}")))?
}

/// Reads every B and C back and checks their values, owners and count; with `finalizers`,
/// also that C1 holds its finalizer on every A and C2 on every B.
async fn check_chain(
    state: &dyn State,
    items: usize,
    offset: i64,
    finalizers: bool,
) -> Result<(), WorkloadError> {
    let as_ = state.list(&ChainA::kind(), &ListOptions::default()).await?;
    let bs = state.list(&ChainB::kind(), &ListOptions::default()).await?;
    let cs = state.list(&ChainC::kind(), &ListOptions::default()).await?;
    ensure(
        as_.len() == items && bs.len() == items && cs.len() == items,
        || {
            format!(
                "expected {items} A, B and C, found {}, {} and {}",
                as_.len(),
                bs.len(),
                cs.len()
            )
        },
    )?;
    if finalizers {
        let held =
            |resource: &SharedResource, by: &str| resource.metadata().finalizers().contains(by);
        for (a, b) in as_.iter().zip(&bs) {
            ensure(held(a, "C1") && held(b, "C2"), || {
                format!(
                    "{}: finalizers {:?} on A and {:?} on B, expected C1 on A and C2 on B",
                    a.metadata().id(),
                    a.metadata().finalizers(),
                    b.metadata().finalizers()
                )
            })?;
        }
    }
    for (i, (b, c)) in bs.iter().zip(&cs).enumerate() {
        let b = downcast_ref::<ChainB>(&**b)?;
        let c = downcast_ref::<ChainC>(&**c)?;
        let expected_b = i as i64 + offset + 1;
        ensure(
            b.spec.value == expected_b
                && c.spec.value == expected_b + 1
                && b.metadata.owner() == Some("C1")
                && c.metadata.owner() == Some("C2"),
            || {
                format!(
                    "item {i}: B = {} (owner {:?}), C = {} (owner {:?}), expected {} and {}",
                    b.spec.value,
                    b.metadata.owner(),
                    c.spec.value,
                    c.metadata.owner(),
                    expected_b,
                    expected_b + 1
                )
            },
        )?;
    }
    Ok(())
}

async fn join<T>(
    handle: tokio::task::JoinHandle<Result<T, WorkloadError>>,
) -> Result<T, WorkloadError> {
    handle
        .await
        .map_err(|e| WorkloadError::new(format!("task failed: {e}")))?
}
