//! W3 — reconcile chain (BENCHMARKS.md): two controllers, C1 reads A and writes B (same id,
//! B.value = A.value + 1), C2 reads B and writes C (C.value = B.value + 1). Phase 1: create
//! N = 10,000 A (value = i); time until every C exists with value i + 2. Phase 2: 5 rounds of
//! updating every A (value = i + round·10⁶) as fast as possible; time from the first update until
//! every C equals i + 5·10⁶ + 2. Figures: phase 1 time and items/s, phase 2 time, reconcile
//! counts of C1 and C2 (they show coalescing). Run twice: with level-triggered transform
//! controllers ([`Transform`]) and with per-item queue controllers ([`QueueTransform`]).
//!
//! Both variants run on the in-memory state with default options and an engine with default
//! options (controller statuses are published, as in production). As a same-process baseline
//! (this machine is shared and noisy), each run also times the writes the chain implies done
//! directly on a fresh store, without controllers: phase 1 = N creates each of A, B and C;
//! phase 2 = 5 rounds of N updates each of A, B and C. `vs_raw` is chain time / raw time. Completion is observed through
//! a kind watch on C; afterwards every B and C is read back and checked, and the controllers'
//! error counters must be zero.
//!
//! [`Transform`]: cosi_controllers::Transform
//! [`QueueTransform`]: cosi_controllers::QueueTransform

use std::process::ExitCode;
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_id, item_index};
use cosi_controllers::{Engine, Transform};
use cosi_core::{
    downcast, downcast_ref, CreateOptions, Event, ListOptions, Resource, ResourceSpec, State,
    UpdateOptions, Watch, WatchKindOptions,
};
use serde::{Deserialize, Serialize};

const DEFAULT_ITEMS: usize = 10_000;
const ROUNDS: i64 = 5;
const ROUND_STEP: i64 = 1_000_000;
/// Items a queue controller reconciles at once.
const QUEUE_CONCURRENCY: usize = 4;
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Level,
    Queue,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Level => "level",
            Variant::Queue => "queue",
        }
    }
}

fn main() -> ExitCode {
    exit_on_error("w3", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    let items = args.n.unwrap_or(DEFAULT_ITEMS);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| WorkloadError::new(format!("cannot start the tokio runtime: {e}")))?;
    println!(
        "# w3: reconcile chain A -> C1 -> B -> C2 -> C, N = {items}, {ROUNDS} update rounds, {} runs \
         per variant, in-memory state and engine with default options, queue concurrency \
         {QUEUE_CONCURRENCY}",
        args.runs
    );
    let mut report = Report3::default();
    for variant in [Variant::Level, Variant::Queue] {
        for run in 1..=args.runs {
            let outcome = runtime.block_on(run_chain(variant, items))?;
            let raw = runtime.block_on(raw_writes(items))?;
            println!(
                "# {} run {run}: phase 1 {:.1} ms, phase 2 {:.1} ms, reconciles C1 {} C2 {}; \
                 raw writes: phase 1 {:.1} ms, phase 2 {:.1} ms",
                variant.name(),
                outcome.phase1.as_secs_f64() * 1e3,
                outcome.phase2.as_secs_f64() * 1e3,
                outcome.reconciles_c1,
                outcome.reconciles_c2,
                raw.0.as_secs_f64() * 1e3,
                raw.1.as_secs_f64() * 1e3,
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
        (raw1, raw2): (Duration, Duration),
    ) {
        let name = |figure: &str| format!("w3.{}.{figure}", variant.name());
        self.0
            .record(&name("phase1"), outcome.phase1.as_secs_f64(), "s");
        self.0
            .record_rate(&name("phase1_rate"), items, outcome.phase1, "items/s");
        self.0
            .record(&name("phase2"), outcome.phase2.as_secs_f64(), "s");
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
    }
}

struct ChainRun {
    phase1: Duration,
    phase2: Duration,
    reconciles_c1: u64,
    reconciles_c2: u64,
}

async fn run_chain(variant: Variant, items: usize) -> Result<ChainRun, WorkloadError> {
    let state = memory_state();
    let engine = Engine::new(state.clone());
    let c1 = Transform::<ChainA, ChainB>::same_id("C1", |a: &ChainA| {
        Some(ChainB {
            value: a.value + 1,
            label: a.label.clone(),
        })
    });
    let c2 = Transform::<ChainB, ChainC>::same_id("C2", |b: &ChainB| {
        Some(ChainC {
            value: b.value + 1,
            label: b.label.clone(),
        })
    });
    let registered = match variant {
        Variant::Level => engine.register(c1).and_then(|()| engine.register(c2)),
        Variant::Queue => engine
            .register_queue(c1.into_queue(QUEUE_CONCURRENCY))
            .and_then(|()| engine.register_queue(c2.into_queue(QUEUE_CONCURRENCY))),
    };
    registered.map_err(|e| WorkloadError::new(format!("registration failed: {e}")))?;
    engine.start();

    // Phase 1
    let watch = state
        .watch_kind(&ChainC::kind(), WatchKindOptions::default())
        .await?;
    let waiter = tokio::spawn(wait_for_values(watch, items, |i| i as i64 + 2));
    let start = Instant::now();
    let mut versions = Vec::with_capacity(items);
    for i in 0..items {
        let a = Resource::new(
            item_id(i),
            ChainA {
                value: i as i64,
                label: format!("item {i}"),
            },
        );
        let stored = state
            .create(a.into_shared(), CreateOptions::default())
            .await?;
        versions.push(downcast::<ChainA>(stored)?);
    }
    let phase1_done = join(waiter).await?;
    let phase1 = phase1_done - start;
    check_chain(&*state, items, 0).await?;

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
    let mut initial = vec![i64::MIN; items];
    'bootstrap: while let Some(batch) = watch.recv_batch(BATCH).await {
        for event in batch {
            match event {
                Event::Created { resource, .. } => {
                    if let Some(i) = item_index(resource.metadata().id()) {
                        initial[i] = downcast_ref::<ChainC>(&*resource)?.spec.value;
                    }
                }
                Event::Bootstrapped { .. } => break 'bootstrap,
                _ => {}
            }
        }
    }
    let final_value = move |i: usize| i as i64 + ROUNDS * ROUND_STEP + 2;
    let waiter = tokio::spawn(wait_for_values(watch, items, final_value));
    let start = Instant::now();
    for round in 1..=ROUNDS {
        for (i, stored) in versions.iter_mut().enumerate() {
            let mut next = (**stored).clone();
            next.spec.value = i as i64 + round * ROUND_STEP;
            let written = state
                .update(next.into_shared(), UpdateOptions::default())
                .await?;
            *stored = downcast::<ChainA>(written)?;
        }
    }
    let phase2_done = join(waiter).await?;
    let phase2 = phase2_done - start;
    check_chain(&*state, items, ROUNDS * ROUND_STEP).await?;

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
        reconciles_c1: s1.reconciles,
        reconciles_c2: s2.reconciles,
    })
}

/// The writes the chain implies, done directly on a fresh store: returns the phase 1 and
/// phase 2 times.
async fn raw_writes(items: usize) -> Result<(Duration, Duration), WorkloadError> {
    let state = memory_state();
    let spec = |value: i64, i: usize| (value, format!("item {i}"));
    let start = Instant::now();
    let mut stored: Vec<[cosi_core::SharedResource; 3]> = Vec::with_capacity(items);
    for i in 0..items {
        let (v, label) = spec(i as i64, i);
        let a = Resource::new(
            item_id(i),
            ChainA {
                value: v,
                label: label.clone(),
            },
        );
        let b = Resource::new(
            item_id(i),
            ChainB {
                value: v + 1,
                label: label.clone(),
            },
        );
        let c = Resource::new(
            item_id(i),
            ChainC {
                value: v + 2,
                label,
            },
        );
        stored.push([
            state
                .create(a.into_shared(), CreateOptions::default())
                .await?,
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
        for (i, resources) in stored.iter_mut().enumerate() {
            let v = i as i64 + round * ROUND_STEP;
            let mut a = (*downcast::<ChainA>(resources[0].clone())?).clone();
            a.spec.value = v;
            let mut b = (*downcast::<ChainB>(resources[1].clone())?).clone();
            b.spec.value = v + 1;
            let mut c = (*downcast::<ChainC>(resources[2].clone())?).clone();
            c.spec.value = v + 2;
            resources[0] = state
                .update(a.into_shared(), UpdateOptions::default())
                .await?;
            resources[1] = state
                .update(b.into_shared(), UpdateOptions::default())
                .await?;
            resources[2] = state
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

/// Reads every B and C back and checks their values, owners and count.
async fn check_chain(state: &dyn State, items: usize, offset: i64) -> Result<(), WorkloadError> {
    let bs = state.list(&ChainB::kind(), &ListOptions::default()).await?;
    let cs = state.list(&ChainC::kind(), &ListOptions::default()).await?;
    ensure(bs.len() == items && cs.len() == items, || {
        format!(
            "expected {items} B and C, found {} and {}",
            bs.len(),
            cs.len()
        )
    })?;
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
