//! W2 — watch fan-out (`benches/WORKLOADS.md`): K = 100 kind watchers with the default watch
//! options, registered before the writer starts; the writer creates 1,000 resources (value 0,
//! ids made before the clock, labels inside it) then updates each 10 times in rounds (value =
//! round, each a read-modify-write: get, change a copy, update with the version read, retry on
//! a conflict): 11,000 events. The clock runs from the first
//! create until every watcher has seen value 10 on all 1,000 resources. Figures: events delivered
//! per second across all watchers (K × 11,000 / wall time), wall time, whether any watcher had to
//! catch up (compacted events, resyncs); and, in the same process, the same fan-out through a
//! `tokio::sync::broadcast` channel of `Arc`s, as a ratio. The same run is repeated with the
//! history window raised to 16,384 events (`w2.history16k.*`), the setting the reference needed,
//! so exact delivery can be compared side by side. `--history default` or `--history exact`
//! runs only one of the two (and no broadcast baseline): what the side-by-side suite runs.
//!
//! Every watcher checks what it sees: each event's version is its value + 1, exact events move
//! one version at a time, catch-ups never go backwards, and an exact watcher sees exactly 11,000
//! events.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::args::{parse_env, RunArgs};
use benches::backend::{memory_state, memory_state_with_history};
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_ids, item_index, item_with_id, BenchItem};
use benches::report::Report;
use benches::rmw::read_modify_write;
use clap::{Parser, ValueEnum};
use cosi_core::{
    downcast_ref, CreateOptions, Event, Resource, ResourceSpec, State, Version, Watch,
    WatchKindOptions,
};
use tokio::sync::broadcast;

const WATCHERS: usize = 100;
const DEFAULT_ITEMS: usize = 1_000;
const ROUNDS: i64 = 10;
/// The history window the reference needed to complete W2.
const REFERENCE_HISTORY: usize = 16_384;
/// Most events a watcher takes per `recv_batch`.
const BATCH: usize = 1024;
/// A run that takes longer than this has lost events: fail instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    exit_on_error("w2", run())
}

/// Which history windows to run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum History {
    /// The default watch options (figures `w2.*`).
    Default,
    /// An exact history of 16,384 events, the reference's setting (figures `w2.history16k.*`).
    Exact,
}

/// W2 — watch fan-out.
#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
    /// Run only this history window, without the broadcast baseline (default: both, and the
    /// baseline).
    #[arg(long)]
    history: Option<History>,
}

fn bench_item(value: i64, label: String) -> BenchItem {
    BenchItem { value, label }
}

fn run() -> Result<(), WorkloadError> {
    let cli: Cli = parse_env()?;
    let args = cli.run;
    let items = args.n.unwrap_or(DEFAULT_ITEMS);
    let events_per_watcher = items * (ROUNDS as usize + 1);
    let runtime = args.runtime()?;
    println!(
        "# w2: watch fan-out, {WATCHERS} kind watchers (default options), {items} items x \
         {} events, {} runs, in-memory state with default options",
        ROUNDS + 1,
        args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    println!(
        "# runtime: {} beside the main thread, which runs the writer",
        RunArgs::describe_runtime(&runtime)
    );
    let mut report = Report::default();
    let mut catch_ups = Vec::new();
    for run in 1..=args.runs {
        let delivered = (WATCHERS * events_per_watcher) as f64;
        let mut walls = Vec::new();
        let configurations = [(History::Default, "w2"), (History::Exact, "w2.history16k")];
        for (history, prefix) in configurations
            .into_iter()
            .filter(|(history, _)| cli.history.is_none_or(|only| only == *history))
        {
            let state = match history {
                History::Default => memory_state(),
                History::Exact => memory_state_with_history(REFERENCE_HISTORY),
            };
            let store = runtime.block_on(store_fan_out(state, items))?;
            println!(
                "# run {run} {prefix}: wall {:.1} ms, {} of {WATCHERS} watchers caught up \
                 ({} compacted events, {} resyncs), {} events received in {} batches",
                store.wall.as_secs_f64() * 1e3,
                store.caught_up_watchers,
                store.compacted_events,
                store.resyncs,
                store.events_received,
                store.batches,
            );
            if store.caught_up_watchers > 0 {
                catch_ups.push(format!("{prefix} run {run}: {}", store.caught_up_watchers));
            }
            let wall = store.wall.as_secs_f64();
            report.record(
                &format!("{prefix}.events_delivered"),
                delivered / wall,
                "events/s",
            );
            report.record(
                &format!("{prefix}.events_received"),
                store.events_received as f64 / wall,
                "events/s",
            );
            report.record(&format!("{prefix}.wall"), wall, "s");
            report.record(
                &format!("{prefix}.caught_up_watchers"),
                store.caught_up_watchers as f64,
                "watchers",
            );
            report.record(
                &format!("{prefix}.compacted_events"),
                store.compacted_events as f64,
                "events",
            );
            report.record(
                &format!("{prefix}.resyncs"),
                store.resyncs as f64,
                "resyncs",
            );
            walls.push((prefix, store.wall));
        }
        if cli.history.is_some() {
            continue;
        }
        let baseline = runtime.block_on(broadcast_fan_out(items))?;
        println!(
            "# run {run} broadcast: wall {:.1} ms",
            baseline.as_secs_f64() * 1e3
        );
        report.record(
            "w2.broadcast.events_delivered",
            delivered / baseline.as_secs_f64(),
            "events/s",
        );
        for (prefix, wall) in walls {
            report.record(
                &format!("{prefix}.vs_broadcast"),
                wall.as_secs_f64() / baseline.as_secs_f64(),
                "x",
            );
        }
    }
    if catch_ups.is_empty() {
        println!("# catch-up: none - every watcher received every event exactly, in every run");
    } else {
        println!(
            "# catch-up: watchers fell behind the history window and received a compacted \
             catch-up (watchers per run: {})",
            catch_ups.join(", ")
        );
    }
    println!(
        "# events_delivered: {WATCHERS} x {events_per_watcher} / wall (the WORKLOADS.md figure); \
         events_received: events actually received / wall (lower when watchers caught up)"
    );
    println!(
        "# w2.history16k: history window raised to {REFERENCE_HISTORY}, as the reference was run"
    );
    println!("# *.vs_broadcast: store wall time / broadcast-channel wall time (lower is better)");
    report.print();
    Ok(())
}

/// What one store run measured.
struct StoreRun {
    wall: Duration,
    caught_up_watchers: usize,
    compacted_events: usize,
    resyncs: usize,
    events_received: usize,
    batches: usize,
}

/// What one watcher saw.
struct WatcherOutcome {
    finished: Instant,
    batches: usize,
    events: usize,
    compacted: usize,
    resyncs: usize,
}

async fn store_fan_out(state: Arc<dyn State>, items: usize) -> Result<StoreRun, WorkloadError> {
    let kind = BenchItem::kind();
    let mut watchers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        let watch = state.watch_kind(&kind, WatchKindOptions::default()).await?;
        watchers.push(tokio::spawn(follow(watch, items)));
    }

    // Ids before the clock; the writer formats the labels inside it.
    let ids = item_ids(items);
    let start = Instant::now();
    let outcomes = tokio::time::timeout(DEADLINE, async {
        // The writer runs on this thread (the main thread, in `block_on`), the watchers on the
        // runtime's workers, as the other workloads run theirs.
        write_rounds(Arc::clone(&state), ids).await?;
        let mut outcomes = Vec::with_capacity(WATCHERS);
        for watcher in watchers {
            outcomes.push(join(watcher).await?);
        }
        Ok::<_, WorkloadError>(outcomes)
    })
    .await
    .map_err(|_| {
        WorkloadError::new(format!(
            "the writer did not finish or the watchers did not all see value {ROUNDS} on {items} \
             resources within {DEADLINE:?}"
        ))
    })??;

    let finished = outcomes.iter().map(|o| o.finished).max().unwrap_or(start);
    let caught_up_watchers = outcomes
        .iter()
        .filter(|o| o.compacted > 0 || o.resyncs > 0)
        .count();
    let exact_events = items * (ROUNDS as usize + 1);
    for (index, outcome) in outcomes.iter().enumerate() {
        if outcome.compacted == 0 && outcome.resyncs == 0 {
            ensure(outcome.events == exact_events, || {
                format!(
                    "watcher {index} received {} events without catching up, expected exactly \
                     {exact_events}",
                    outcome.events
                )
            })?;
        }
    }
    Ok(StoreRun {
        wall: finished - start,
        caught_up_watchers,
        compacted_events: outcomes.iter().map(|o| o.compacted).sum(),
        resyncs: outcomes.iter().map(|o| o.resyncs).sum(),
        events_received: outcomes.iter().map(|o| o.events).sum(),
        batches: outcomes.iter().map(|o| o.batches).sum(),
    })
}

async fn join<T>(
    handle: tokio::task::JoinHandle<Result<T, WorkloadError>>,
) -> Result<T, WorkloadError> {
    handle
        .await
        .map_err(|e| WorkloadError::new(format!("task failed: {e}")))?
}

/// Creates every item with value 0, then updates every item once per round (value = round),
/// each update a read-modify-write.
async fn write_rounds(state: Arc<dyn State>, ids: Vec<Arc<str>>) -> Result<(), WorkloadError> {
    let kind = BenchItem::kind();
    for (i, id) in ids.iter().enumerate() {
        state
            .create(
                item_with_id(&kind, id, i, 0, bench_item).into_shared(),
                CreateOptions::default(),
            )
            .await?;
    }
    for round in 1..=ROUNDS {
        for id in &ids {
            let pointer = kind.pointer(Arc::clone(id));
            let written =
                read_modify_write::<BenchItem>(&*state, &pointer, |spec| spec.value = round)
                    .await?;
            ensure(
                written.stored.metadata.version() == Version::new(round as u64 + 1),
                || {
                    format!(
                        "update {round} of {pointer} stored version {}",
                        written.stored.metadata.version()
                    )
                },
            )?;
        }
    }
    Ok(())
}

/// Consumes a kind watch until every item has been seen at the last round's value, checking
/// every event on the way.
async fn follow(mut watch: Watch, items: usize) -> Result<WatcherOutcome, WorkloadError> {
    // Last value seen per item; -1 = not seen.
    let mut seen = vec![-1_i64; items];
    let mut done = 0;
    let mut outcome = WatcherOutcome {
        finished: Instant::now(),
        batches: 0,
        events: 0,
        compacted: 0,
        resyncs: 0,
    };
    // After a resync, the full contents arrive as `Created` events at any value.
    let mut rebuilding = false;
    while done < items {
        let batch = watch.recv_shared(BATCH).await.ok_or_else(|| {
            WorkloadError::new(format!(
                "watch ended after {} events with {done} of {items} items done",
                outcome.events
            ))
        })?;
        outcome.batches += 1;
        for event in &batch {
            let exact = !event.is_compacted() && !rebuilding;
            let is_created = matches!(event, Event::Created { .. });
            match event {
                Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                    outcome.events += 1;
                    if !exact {
                        outcome.compacted += usize::from(!rebuilding);
                    }
                    let item = downcast_ref::<BenchItem>(&**resource)?;
                    let value = item.spec.value;
                    let index = item_index(item.metadata.id())
                        .filter(|&i| i < items)
                        .ok_or_else(|| {
                            WorkloadError::new(format!("unexpected id {}", item.metadata.id()))
                        })?;
                    let previous = seen[index];
                    ensure(
                        item.metadata.version() == Version::new(value as u64 + 1),
                        || {
                            format!(
                                "{} has value {value} at version {}, expected version {}",
                                item.metadata.pointer(),
                                item.metadata.version(),
                                value + 1
                            )
                        },
                    )?;
                    let expected = if exact {
                        if is_created {
                            previous == -1 && value == 0
                        } else {
                            value == previous + 1
                        }
                    } else {
                        value >= previous
                    };
                    ensure(expected, || {
                        format!(
                            "{}: saw value {value} after {previous} ({} event{})",
                            item.metadata.pointer(),
                            if is_created { "created" } else { "updated" },
                            if exact { "" } else { ", catch-up" }
                        )
                    })?;
                    if value == ROUNDS && previous != ROUNDS {
                        done += 1;
                    }
                    seen[index] = value;
                }
                Event::Resync { .. } => {
                    outcome.resyncs += 1;
                    seen.fill(-1);
                    done = 0;
                    rebuilding = true;
                }
                Event::Bootstrapped { .. } => rebuilding = false,
                Event::Noop { .. } => {}
                Event::Destroyed { resource, .. } => {
                    return Err(WorkloadError::new(format!(
                        "unexpected destroyed event for {}",
                        resource.metadata().pointer()
                    )))
                }
                Event::Errored { error } => {
                    return Err(WorkloadError::new(format!("watch errored: {error}")))
                }
                other => {
                    return Err(WorkloadError::new(format!(
                        "unexpected {} event",
                        other.type_name()
                    )))
                }
            }
        }
    }
    outcome.finished = Instant::now();
    Ok(outcome)
}

/// The same fan-out through a broadcast channel of `Arc`s (capacity above the 11,000 events, so
/// no receiver can lag): the floor the store's delivery is measured against. Returns the wall
/// time from the first send until every receiver has seen the last round on every item.
async fn broadcast_fan_out(items: usize) -> Result<Duration, WorkloadError> {
    let total = items * (ROUNDS as usize + 1);
    let (sender, _) = broadcast::channel::<Arc<Resource<BenchItem>>>(total.next_power_of_two());
    let mut receivers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        let mut receiver = sender.subscribe();
        receivers.push(tokio::spawn(async move {
            let mut seen = vec![-1_i64; items];
            let mut done = 0;
            while done < items {
                let item = receiver
                    .recv()
                    .await
                    .map_err(|e| WorkloadError::new(format!("broadcast receiver: {e}")))?;
                let index = item_index(item.metadata.id())
                    .filter(|&i| i < items)
                    .ok_or_else(|| WorkloadError::new("broadcast: unexpected id"))?;
                ensure(item.spec.value == seen[index] + 1, || {
                    format!("broadcast: value {} after {}", item.spec.value, seen[index])
                })?;
                seen[index] = item.spec.value;
                if item.spec.value == ROUNDS {
                    done += 1;
                }
            }
            Ok::<_, WorkloadError>(Instant::now())
        }));
    }

    let kind = BenchItem::kind();
    let ids = item_ids(items);
    let start = Instant::now();
    // The writer runs on this thread, as in the store's run.
    let writer = async move {
        let mut stored = Vec::with_capacity(items);
        for (i, id) in ids.iter().enumerate() {
            let mut item = item_with_id(&kind, id, i, 0, bench_item);
            item.metadata.set_version(Version::FIRST);
            let item = Arc::new(item);
            send(&sender, Arc::clone(&item))?;
            stored.push(item);
        }
        for round in 1..=ROUNDS {
            for current in &mut stored {
                let mut next = Resource::clone(current);
                next.spec.value = round;
                next.metadata.set_version(current.metadata.version().next());
                *current = Arc::new(next);
                send(&sender, Arc::clone(current))?;
            }
        }
        Ok::<_, WorkloadError>(())
    };
    let finished = tokio::time::timeout(DEADLINE, async {
        writer.await?;
        let mut finished = start;
        for receiver in receivers {
            finished = finished.max(join(receiver).await?);
        }
        Ok::<_, WorkloadError>(finished)
    })
    .await
    .map_err(|_| {
        WorkloadError::new(format!("broadcast receivers not done within {DEADLINE:?}"))
    })??;
    Ok(finished - start)
}

fn send(
    sender: &broadcast::Sender<Arc<Resource<BenchItem>>>,
    item: Arc<Resource<BenchItem>>,
) -> Result<(), WorkloadError> {
    sender
        .send(item)
        .map(drop)
        .map_err(|_| WorkloadError::new("broadcast: every receiver is gone"))
}
