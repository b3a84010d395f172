//! Catch-up probe (not a `benches/WORKLOADS.md` workload; it isolates one cost of W2–W4): what a
//! kind watcher that fell behind the history window costs to catch up. N items are created, then
//! K of them (spread evenly over the ids) are updated once; a watch resumed at the bookmark before
//! the updates is behind the default window (4,096 events) and receives one compacted event per
//! changed item. Timed: opening that watch and receiving the K events, repeated
//! [`WATCHES_PER_RUN`] times per run (the figure is the mean per catch-up). K = 5,000 (just past
//! the window, the common case) and K = N/10 (at least 5,000); N must be at least 5,000. As a
//! same-process baseline, `list` of all N items
//! (O(N)) is timed alike; `*_vs_list` is catch-up time / list time. A catch-up that costs
//! O(changed) keeps `k5000` flat as N grows; an O(N) one grows with N like `list`.
//!
//! Every catch-up is checked: exactly K compacted updates, in id order, carrying the new values.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_index, new_item, BenchItem};
use benches::report::Report;
use cosi_core::{
    downcast, downcast_ref, CreateOptions, Event, ListOptions, Resource, ResourceSpec, State,
    UpdateOptions, Watch, WatchKindOptions,
};

const DEFAULT_ITEMS: usize = 100_000;
/// Changes since the watcher's position in the first case: just past the default window.
const SMALL_GAP: usize = 5_000;
/// Catch-ups (and lists) timed per run.
const WATCHES_PER_RUN: u32 = 20;
/// Most events taken per `recv_batch`.
const BATCH: usize = 4096;
/// A catch-up that takes longer than this has lost events: fail instead of hanging.
const DEADLINE: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    exit_on_error("catch_up", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    let items = args.n.unwrap_or(DEFAULT_ITEMS);
    // Fewer changes than the window holds would be delivered exactly, not caught up.
    ensure(items >= SMALL_GAP, || {
        format!("--n: at least {SMALL_GAP} items, so that {SMALL_GAP} changes overrun the window")
    })?;
    let gaps = [("k5000", SMALL_GAP), ("k_n10", (items / 10).max(SMALL_GAP))];
    let runtime = args.runtime()?;
    println!(
        "# catch_up: N = {items}, K = {} and {}, {WATCHES_PER_RUN} catch-ups per run, {} runs, \
         in-memory state with default options",
        gaps[0].1, gaps[1].1, args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    let mut report = Report::default();
    for run in 1..=args.runs {
        for (name, gap) in gaps {
            let (catch_up, list) = runtime.block_on(measure(items, gap))?;
            println!(
                "# run {run}, {name}: catch-up {:.3} ms, list {:.3} ms",
                catch_up.as_secs_f64() * 1e3,
                list.as_secs_f64() * 1e3
            );
            report.record_ms(&format!("catch_up.{name}"), catch_up);
            report.record(
                &format!("catch_up.{name}_vs_list"),
                catch_up.as_secs_f64() / list.as_secs_f64(),
                "x",
            );
        }
    }
    report.print();
    Ok(())
}

/// Mean time of one catch-up over `gap` changes among `items`, and of one list of all items.
async fn measure(items: usize, gap: usize) -> Result<(Duration, Duration), WorkloadError> {
    let state = memory_state();
    for i in 0..items {
        state
            .create(new_item(i, 0).into_shared(), CreateOptions::default())
            .await?;
    }
    let since = head_bookmark(&*state).await?;
    let stride = (items / gap.max(1)).max(1);
    let changed: Vec<usize> = (0..items).step_by(stride).take(gap).collect();
    let pointer = |i: usize| BenchItem::kind().pointer(Arc::from(benches::item::item_id(i)));
    for &i in &changed {
        let current = downcast::<BenchItem>(state.get(&pointer(i)).await?)?;
        let mut next = Resource::clone(&current);
        next.spec.value = i as i64 + 1;
        state
            .update(next.into_shared(), UpdateOptions::default())
            .await?;
    }

    let start = Instant::now();
    for _ in 0..WATCHES_PER_RUN {
        let options = WatchKindOptions {
            since: Some(since.clone()),
            ..Default::default()
        };
        let mut watch = state.watch_kind(&BenchItem::kind(), options).await?;
        receive_catch_up(&mut watch, &changed).await?;
    }
    let catch_up = start.elapsed() / WATCHES_PER_RUN;

    let start = Instant::now();
    for _ in 0..WATCHES_PER_RUN {
        let listed = state
            .list(&BenchItem::kind(), &ListOptions::default())
            .await?;
        ensure(listed.len() == items, || {
            format!("list returned {} items, expected {items}", listed.len())
        })?;
    }
    let list = start.elapsed() / WATCHES_PER_RUN;
    Ok((catch_up, list))
}

/// The bookmark of the latest change, from a bootstrap's closing marker.
async fn head_bookmark(state: &dyn State) -> Result<cosi_core::Bookmark, WorkloadError> {
    let options = WatchKindOptions {
        bootstrap: true,
        ..Default::default()
    };
    let mut watch = state.watch_kind(&BenchItem::kind(), options).await?;
    let deadline = Instant::now() + DEADLINE;
    while Instant::now() < deadline {
        let Some(batch) = watch.recv_batch(BATCH).await else {
            break;
        };
        if let Some(Event::Bootstrapped { bookmark }) = batch.last() {
            return Ok(bookmark.clone());
        }
    }
    Err(WorkloadError::new("the bootstrap never ended"))
}

/// Receives the catch-up and checks it is one compacted update per changed item, in id order.
async fn receive_catch_up(watch: &mut Watch, changed: &[usize]) -> Result<(), WorkloadError> {
    let mut seen = 0;
    let timeout = tokio::time::timeout(DEADLINE, async {
        while seen < changed.len() {
            let Some(batch) = watch.recv_batch(BATCH).await else {
                return Err(WorkloadError::new("the watch ended during the catch-up"));
            };
            for event in batch {
                let Event::Updated {
                    resource,
                    compacted: true,
                    ..
                } = event
                else {
                    return Err(WorkloadError::new(format!(
                        "expected a compacted update, got {event:?}"
                    )));
                };
                let index = item_index(resource.metadata().id());
                let value = downcast_ref::<BenchItem>(&*resource)
                    .ok()
                    .map(|r| r.spec.value);
                let expected = changed.get(seen).copied();
                ensure(
                    index == expected && value == expected.map(|i| i as i64 + 1),
                    || {
                        format!(
                            "catch-up event {seen} is {} with value {value:?}, expected item \
                             {expected:?} with its new value",
                            resource.metadata().id()
                        )
                    },
                )?;
                seen += 1;
            }
        }
        Ok(())
    });
    timeout
        .await
        .map_err(|_| WorkloadError::new("the catch-up did not arrive within the deadline"))?
}
