//! `many_kinds` — memory of many small kinds: not a BENCHMARKS.md workload, a probe of what a
//! node with a thousand mostly quiet kinds holds in the in-memory state (default options).
//!
//! One measurement: read the resident size (`VmRSS`), start an in-memory state, open 100
//! watchers, each following 10 of the 1,000 kinds (one kind watch per kind, bootstrapped) and
//! keeping a view of them, then run a mixed write load: 10 resources per kind, then 4,200
//! rounds in which every kind gets one write — an update (read-modify-write) 70 % of the time, a
//! create or a destroy 15 % each, keeping 1 to 20 resources per kind — so each kind sees more
//! changes than the default 4,096-event history window. A last write per kind marks the end;
//! once every watcher has seen it in all its kinds, read the resident size again. Figures:
//! `many_kinds.rss` (MiB, after the load, watchers caught up), `many_kinds.per_kind` (KiB: the
//! growth over the load divided by the kind count), `many_kinds.peak_rss` (MiB, `VmHWM`),
//! `many_kinds.writes` (ops/s). Every watcher's view must equal the listed contents of its
//! kinds, version for version, or the probe fails.
//!
//! Resident size only shows what the allocator kept, so each measurement runs in a fresh
//! process: with `--runs R` this binary runs itself R times (environment variable
//! `BENCHES_MANY_KINDS_CHILD`) and reports the medians. `--n N` sets the kind count (with fewer
//! than 100 kinds, one watcher per kind).

use std::collections::HashMap;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_id, new_item, BenchItem};
use benches::output::parse_figures;
use benches::peak_rss::{current_rss_bytes, peak_rss_mib};
use benches::report::Report;
use cosi_core::{
    downcast_ref, CreateOptions, DestroyOptions, Event, Kind, ListOptions, Metadata, Resource,
    SharedResource, State, UpdateOptions, Watch, WatchKindOptions,
};
use tokio::task::JoinSet;

const DEFAULT_KINDS: usize = 1_000;
const WATCHERS: usize = 100;
/// Rounds of the mixed load: one write per kind each, past the default 4,096-event window.
const ROUNDS: usize = 4_200;
const INITIAL_ITEMS: usize = 10;
const MAX_ITEMS: usize = 20;
/// The id of the last write to every kind (sorts after every item id).
const DONE: &str = "zz-done";
/// Most events a watcher takes per `recv_batch`.
const BATCH: usize = 256;
/// A run that takes longer than this has lost events: fail instead of hanging.
const DEADLINE: Duration = Duration::from_secs(300);
/// Set in the environment of the child process that takes one measurement.
const CHILD: &str = "BENCHES_MANY_KINDS_CHILD";

fn main() -> ExitCode {
    exit_on_error("many_kinds", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    let kinds = args.n.unwrap_or(DEFAULT_KINDS);
    if std::env::var_os(CHILD).is_some() {
        return measure_once(&args, kinds);
    }
    println!(
        "# many_kinds: {kinds} kinds, {} watchers, {ROUNDS} rounds of one write per kind, {} \
         runs (one process each), in-memory state with default options",
        WATCHERS.min(kinds),
        args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    let exe = std::env::current_exe()
        .map_err(|e| WorkloadError::new(format!("cannot find this binary to re-run: {e}")))?;
    let mut report = Report::default();
    for run in 1..=args.runs {
        let output = Command::new(&exe)
            .args(args.child_args(kinds))
            .env(CHILD, "1")
            .output()
            .map_err(|e| WorkloadError::new(format!("cannot start {}: {e}", exe.display())))?;
        ensure(output.status.success(), || {
            format!(
                "measurement run {run} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )
        })?;
        let figures = parse_figures(&String::from_utf8_lossy(&output.stdout))?;
        let detail: Vec<String> = figures
            .iter()
            .map(|f| format!("{} {:.1} {}", f.name, f.median, f.unit))
            .collect();
        println!("# run {run}: {}", detail.join(", "));
        for figure in figures {
            report.record(&figure.name, figure.median, &figure.unit);
        }
    }
    report.print();
    Ok(())
}

/// Kind `index`: its own type in the benchmark namespace.
fn kind(index: usize) -> Kind {
    Kind::new("bench", &format!("Kind{index:04}s.bench.cosi.dev"))
}

/// Item `item` of kind `kind`, holding `value`.
fn item(kind: &Kind, item: usize, value: i64) -> SharedResource {
    let mut resource = new_item(item, value);
    resource.metadata = Metadata::new(kind.pointer(item_id(item)));
    resource.into_shared()
}

/// A deterministic pseudo-random sequence (64-bit LCG, high bits), so every run and every build
/// writes the same load.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % bound as u64) as usize
    }
}

fn measure_once(args: &RunArgs, kinds: usize) -> Result<(), WorkloadError> {
    let runtime = args.runtime()?;
    let before = current_rss_bytes()?;
    let state = memory_state();
    let all: Vec<Kind> = (0..kinds).map(kind).collect();
    let (writes, elapsed, views) = runtime.block_on(async {
        let mut watchers = JoinSet::new();
        let count = WATCHERS.min(kinds);
        for w in 0..count {
            let mine: Vec<Kind> = all.iter().skip(w).step_by(count).cloned().collect();
            let mut watches = Vec::new();
            for kind in &mine {
                let options = WatchKindOptions {
                    bootstrap: true,
                    ..WatchKindOptions::default()
                };
                watches.push(state.watch_kind(kind, options).await?);
            }
            watchers.spawn(follow(mine, watches));
        }
        let start = Instant::now();
        let writes = write_load(&*state, &all).await?;
        let elapsed = start.elapsed();
        let mut views = Vec::new();
        while let Some(joined) = tokio::time::timeout(DEADLINE, watchers.join_next())
            .await
            .map_err(|_| WorkloadError::new("the watchers did not all see the end in time"))?
        {
            views.push(joined.map_err(|e| WorkloadError::new(format!("watcher failed: {e}")))??);
        }
        Ok::<_, WorkloadError>((writes, elapsed, views))
    })?;
    let after = current_rss_bytes()?;
    let peak = peak_rss_mib()?;
    runtime.block_on(check_views(&*state, views))?;
    let mut report = Report::default();
    report.record("many_kinds.rss", after as f64 / (1 << 20) as f64, "MiB");
    let grown = after.saturating_sub(before) as f64 / 1024.0;
    report.record("many_kinds.per_kind", grown / kinds as f64, "KiB");
    report.record("many_kinds.peak_rss", peak, "MiB");
    report.record_rate("many_kinds.writes", writes, elapsed, "ops/s");
    report.print();
    Ok(())
}

/// The mixed load, then the end marker in every kind; returns the writes made.
async fn write_load(state: &dyn State, kinds: &[Kind]) -> Result<usize, WorkloadError> {
    let mut live: Vec<Vec<usize>> = vec![(0..INITIAL_ITEMS).collect(); kinds.len()];
    let mut next_item = vec![INITIAL_ITEMS; kinds.len()];
    let mut writes = 0;
    for kind in kinds {
        for i in 0..INITIAL_ITEMS {
            state
                .create(item(kind, i, 0), CreateOptions::default())
                .await?;
            writes += 1;
        }
    }
    let mut random = Lcg(0x5eed);
    for round in 1..=ROUNDS as i64 {
        for (k, kind) in kinds.iter().enumerate() {
            let items = &mut live[k];
            let roll = random.below(100);
            if (roll < 15 && items.len() < MAX_ITEMS) || items.is_empty() {
                let id = next_item[k];
                next_item[k] += 1;
                state
                    .create(item(kind, id, round), CreateOptions::default())
                    .await?;
                items.push(id);
            } else if roll < 30 && items.len() > 1 {
                let id = items.swap_remove(random.below(items.len()));
                state
                    .destroy(&kind.pointer(item_id(id)), DestroyOptions::default())
                    .await?;
            } else {
                let id = items[random.below(items.len())];
                let stored = state.get(&kind.pointer(item_id(id))).await?;
                let mut next: Resource<BenchItem> = downcast_ref::<BenchItem>(&*stored)
                    .map_err(WorkloadError::from)?
                    .clone();
                next.spec.value = round;
                state
                    .update(next.into_shared(), UpdateOptions::default())
                    .await?;
            }
            writes += 1;
        }
    }
    for kind in kinds {
        let mut done = new_item(0, 0);
        done.metadata = Metadata::new(kind.pointer(DONE));
        state
            .create(done.into_shared(), CreateOptions::default())
            .await?;
        writes += 1;
    }
    Ok(writes)
}

/// What a watcher saw of one kind: id → version.
type View = HashMap<String, u64>;

/// One watcher: follows its kinds until each has shown the end marker; returns its views.
async fn follow(kinds: Vec<Kind>, watches: Vec<Watch>) -> Result<Vec<(Kind, View)>, WorkloadError> {
    let mut views: Vec<View> = vec![View::new(); kinds.len()];
    let mut ended = vec![false; kinds.len()];
    let mut pending = JoinSet::new();
    for (index, mut watch) in watches.into_iter().enumerate() {
        pending.spawn(async move { (index, watch.recv_batch(BATCH).await, watch) });
    }
    while let Some(joined) = pending.join_next().await {
        let (index, batch, mut watch) =
            joined.map_err(|e| WorkloadError::new(format!("watch task failed: {e}")))?;
        let batch = batch
            .ok_or_else(|| WorkloadError::new(format!("the watch of {} ended", kinds[index])))?;
        let view = &mut views[index];
        for event in batch {
            match event {
                Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                    let md = resource.metadata();
                    ended[index] |= md.id() == DONE;
                    view.insert(md.id().to_string(), md.version().get());
                }
                Event::Destroyed { resource, .. } => {
                    view.remove(resource.metadata().id());
                }
                Event::Resync { .. } => view.clear(),
                Event::Errored { error } => {
                    return Err(WorkloadError::new(format!(
                        "the watch of {} failed: {error}",
                        kinds[index]
                    )))
                }
                _ => {}
            }
        }
        if !ended[index] {
            pending.spawn(async move { (index, watch.recv_batch(BATCH).await, watch) });
        }
    }
    Ok(kinds.into_iter().zip(views).collect())
}

/// Every watcher's view equals the listed contents of its kinds.
async fn check_views(
    state: &dyn State,
    watchers: Vec<Vec<(Kind, View)>>,
) -> Result<(), WorkloadError> {
    for (kind, view) in watchers.into_iter().flatten() {
        let listed: View = state
            .list(&kind, &ListOptions::default())
            .await?
            .iter()
            .map(|r| (r.metadata().id().to_string(), r.metadata().version().get()))
            .collect();
        ensure(view == listed, || {
            format!("the watcher's view of {kind} differs from its contents")
        })?;
    }
    Ok(())
}
