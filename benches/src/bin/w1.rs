//! W1 — state operations (`benches/WORKLOADS.md`): create N = 100,000 resources in the
//! in-memory state (default options), update each once (read-modify-write: get, change a copy,
//! update with the version read, retry on a conflict), list all, destroy all. Ids are made
//! before the clock starts, labels inside the timed loop, as the reference does. Figures:
//! create ops/s, update ops/s, list ms, destroy ops/s, peak RSS MiB; and, in the same process,
//! the same four steps on a plain `DashMap` of `Arc`s, as ratios.
//!
//! Every step checks its result: versions, values, counts, order, and that nothing is left.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_id, item_ids, item_with_id, BenchItem};
use benches::peak_rss;
use benches::report::Report;
use benches::rmw::read_modify_write;
use cosi_core::{
    downcast_ref, CreateOptions, DestroyOptions, Error, ListOptions, Resource, ResourceSpec, State,
    Version,
};
use dashmap::DashMap;

const DEFAULT_N: usize = 100_000;

fn main() -> ExitCode {
    exit_on_error("w1", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    let n = args.n.unwrap_or(DEFAULT_N);
    let runtime = args.runtime()?;
    println!(
        "# w1: state operations, N = {n}, {} runs, in-memory state with default options",
        args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    println!(
        "# runtime: {} beside the main thread, which runs the writer",
        RunArgs::describe_runtime(&runtime)
    );
    let mut report = Report::default();
    for run in 1..=args.runs {
        let rss_reset = peak_rss::reset();
        let rss_before = peak_rss::peak_rss_mib()?;
        let StoreSteps {
            times: store,
            page_faults,
        } = runtime.block_on(async {
            let state = memory_state();
            store_steps(&*state, n).await
        })?;
        // Read right after the store steps, before the baseline allocates anything.
        let peak = peak_rss::peak_rss_mib()?;
        let map = map_steps(n)?;
        println!(
            "# run {run}: create {:.0} ms, update {:.0} ms, list {:.1} ms, destroy {:.0} ms, \
             peak RSS {peak:.1} MiB (at start {rss_before:.1} MiB){}",
            ms(store.create),
            ms(store.update),
            ms(store.list),
            ms(store.destroy),
            if rss_reset {
                ""
            } else {
                " (whole process: VmHWM reset refused)"
            }
        );
        report.record_rate("w1.create", n, store.create, "ops/s");
        report.record_rate("w1.update", n, store.update, "ops/s");
        report.record_ms("w1.list", store.list);
        report.record_rate("w1.destroy", n, store.destroy, "ops/s");
        report.record("w1.peak_rss", peak, "MiB");
        for (step, faults) in ["create", "update", "list", "destroy"]
            .iter()
            .zip(page_faults)
        {
            report.record(&format!("w1.page_faults.{step}"), faults as f64, "faults");
        }
        let construct = construct_only(n);
        report.record_rate("w1.construct", n, construct, "ops/s");
        report.record_rate("w1.map.insert", n, map.create, "ops/s");
        report.record_rate("w1.map.update", n, map.update, "ops/s");
        report.record_ms("w1.map.list", map.list);
        report.record_rate("w1.map.remove", n, map.destroy, "ops/s");
        // Ratios of store time to map time: how many times slower the store is than a bare map.
        report.record("w1.create_vs_map", ratio(store.create, map.create), "x");
        report.record("w1.update_vs_map", ratio(store.update, map.update), "x");
        report.record("w1.list_vs_map", ratio(store.list, map.list), "x");
        report.record("w1.destroy_vs_map", ratio(store.destroy, map.destroy), "x");
    }
    println!("# *_vs_map: store time / plain DashMap time for the same step (lower is better)");
    println!(
        "# w1.construct: building the N resources alone (included in w1.create and w1.map.insert)"
    );
    println!(
        "# w1.page_faults.*: minor page faults of the process during the step (fresh pages \
         touched; the first run of a process pays them, later runs reuse freed memory)"
    );
    report.print();
    Ok(())
}

/// Wall times of the four steps.
struct StepTimes {
    create: Duration,
    update: Duration,
    list: Duration,
    destroy: Duration,
}

/// The store's steps: their wall times and the minor page faults of each (create, update,
/// list, destroy).
struct StoreSteps {
    times: StepTimes,
    page_faults: [u64; 4],
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn ratio(store: Duration, map: Duration) -> f64 {
    store.as_secs_f64() / map.as_secs_f64()
}

async fn store_steps(state: &dyn State, n: usize) -> Result<StoreSteps, WorkloadError> {
    let kind = BenchItem::kind();
    // Ids before the clock (the stored resources share these `Arc`s, so the harness adds 16
    // bytes per item to the peak RSS, not a second copy of every id); labels inside it.
    let ids = item_ids(n);
    let mut page_faults = [0; 4];

    let faults = benches::cpu::minor_faults()?;
    let start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let item = item_with_id(&kind, id, i, i as i64, bench_item);
        let stored = state
            .create(item.into_shared(), CreateOptions::default())
            .await?;
        ensure(stored.metadata().version() == Version::FIRST, || {
            format!(
                "create of {} stored version {}, expected 1",
                stored.metadata().pointer(),
                stored.metadata().version()
            )
        })?;
    }
    let create = start.elapsed();
    page_faults[0] = benches::cpu::minor_faults()? - faults;
    let pointer = |i: usize| kind.pointer(Arc::clone(&ids[i]));

    let faults = benches::cpu::minor_faults()?;
    let start = Instant::now();
    for i in 0..n {
        let pointer = pointer(i);
        let written =
            read_modify_write::<BenchItem>(state, &pointer, |spec| spec.value += 1).await?;
        ensure(written.stored.metadata.version() == Version::new(2), || {
            format!(
                "update of {pointer} stored version {}, expected 2",
                written.stored.metadata.version()
            )
        })?;
        ensure(written.read.spec.value == i as i64, || {
            format!(
                "get of {pointer} read value {}, expected {i}",
                written.read.spec.value
            )
        })?;
    }
    let update = start.elapsed();
    page_faults[1] = benches::cpu::minor_faults()? - faults;

    let faults = benches::cpu::minor_faults()?;
    let start = Instant::now();
    let listed = state.list(&kind, &ListOptions::default()).await?;
    let list = start.elapsed();
    page_faults[2] = benches::cpu::minor_faults()? - faults;
    ensure(listed.len() == n, || {
        format!("list returned {} resources, expected {n}", listed.len())
    })?;
    for (i, resource) in listed.iter().enumerate() {
        let item = downcast_ref::<BenchItem>(&**resource)?;
        let expected_id = item_id(i);
        ensure(
            item.metadata.id() == expected_id
                && item.metadata.version() == Version::new(2)
                && item.spec.value == i as i64 + 1,
            || {
                format!(
                    "list position {i}: got {} version {} value {}, expected {expected_id} \
                     version 2 value {}",
                    item.metadata.id(),
                    item.metadata.version(),
                    item.spec.value,
                    i + 1
                )
            },
        )?;
    }
    drop(listed);

    let faults = benches::cpu::minor_faults()?;
    let start = Instant::now();
    for i in 0..n {
        state
            .destroy(&pointer(i), DestroyOptions::default())
            .await?;
    }
    let destroy = start.elapsed();
    page_faults[3] = benches::cpu::minor_faults()? - faults;
    let left = state.list(&kind, &ListOptions::default()).await?;
    ensure(left.is_empty(), || {
        format!("{} resources left after destroying all", left.len())
    })?;
    match state.get(&pointer(0)).await {
        Err(Error::NotFound { .. }) => {}
        other => {
            return Err(WorkloadError::new(format!(
                "get of destroyed {} returned {other:?}, expected NotFound",
                pointer(0)
            )))
        }
    }

    Ok(StoreSteps {
        times: StepTimes {
            create,
            update,
            list,
            destroy,
        },
        page_faults,
    })
}

fn bench_item(value: i64, label: String) -> BenchItem {
    BenchItem { value, label }
}

/// Builds the N values the create step writes, and nothing else: the part of the create time
/// that is the workload building resources rather than the store storing them.
fn construct_only(n: usize) -> Duration {
    let kind = BenchItem::kind();
    let ids = item_ids(n);
    let start = Instant::now();
    let items: Vec<Arc<Resource<BenchItem>>> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Arc::new(item_with_id(&kind, id, i, i as i64, bench_item)))
        .collect();
    let elapsed = start.elapsed();
    // Keeps the optimiser from dropping the values unbuilt.
    std::hint::black_box(items);
    elapsed
}

/// The same four steps on a plain concurrent map of `Arc`s: the floor the store is measured
/// against.
fn map_steps(n: usize) -> Result<StepTimes, WorkloadError> {
    let map: DashMap<Arc<str>, Arc<Resource<BenchItem>>> = DashMap::new();
    let kind = BenchItem::kind();
    let ids = item_ids(n);

    let start = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let mut item = item_with_id(&kind, id, i, i as i64, bench_item);
        item.metadata.set_version(Version::FIRST);
        let key = item.metadata.pointer().shared_id().clone();
        ensure(map.insert(key, Arc::new(item)).is_none(), || {
            format!("map insert of {id} found a value")
        })?;
    }
    let create = start.elapsed();

    let start = Instant::now();
    for id in &ids {
        let current = map
            .get(id)
            .map(|entry| Arc::clone(&entry))
            .ok_or_else(|| WorkloadError::new(format!("map lost {id}")))?;
        let mut next = Resource::clone(&current);
        next.spec.value += 1;
        next.metadata.set_version(current.metadata.version().next());
        let mut entry = map
            .get_mut(id)
            .ok_or_else(|| WorkloadError::new(format!("map lost {id}")))?;
        ensure(
            entry.metadata.version() == current.metadata.version(),
            || format!("map version of {id} changed under the update"),
        )?;
        *entry = Arc::new(next);
    }
    let update = start.elapsed();

    let start = Instant::now();
    let mut listed: Vec<Arc<Resource<BenchItem>>> =
        map.iter().map(|entry| Arc::clone(entry.value())).collect();
    listed.sort_unstable_by(|a, b| a.metadata.id().cmp(b.metadata.id()));
    let list = start.elapsed();
    ensure(
        listed.len() == n
            && listed
                .iter()
                .enumerate()
                .all(|(i, r)| r.spec.value == i as i64 + 1),
        || "map list returned wrong contents".to_string(),
    )?;
    drop(listed);

    let start = Instant::now();
    for id in &ids {
        ensure(map.remove(id).is_some(), || format!("map lost {id}"))?;
    }
    let destroy = start.elapsed();
    ensure(map.is_empty(), || {
        "map not empty after removing all".to_string()
    })?;

    Ok(StepTimes {
        create,
        update,
        list,
        destroy,
    })
}
