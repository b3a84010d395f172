//! W6 — memory (`benches/WORKLOADS.md`): bytes per stored resource at N = 100,000 and 1,000,000
//! (resident-size delta / N) against the raw size of the values held.
//!
//! One measurement: start the runtime and an empty in-memory state (default options), read the
//! resident size (`VmRSS`), create N benchmark resources, read it again; the difference over N
//! is `w6.nN.store`. Then, with the store still alive (so freed memory is not reused and
//! hidden), the same N resources built and held in a plain `Vec<Arc<Resource>>` give
//! `w6.nN.arc_vec`: what the resources themselves cost in this representation, without the
//! store's index, history and bookkeeping. `w6.nN.raw` is the payload: id bytes + label bytes +
//! the 8-byte value. Afterwards every stored resource is listed and checked.
//!
//! Resident size only ever shows what the allocator kept, and an allocator keeps freed memory
//! for reuse, so each measurement runs in a fresh process: with `--runs R` this binary runs
//! itself R times per N (environment variable `BENCHES_W6_CHILD`) and reports the medians.
//! `--n N` measures only that N.

use std::process::{Command, ExitCode};
use std::sync::Arc;

use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_id, new_item, BenchItem};
use benches::output::parse_figures;
use benches::peak_rss::current_rss_bytes;
use benches::report::Report;
use cosi_core::{downcast_ref, CreateOptions, ListOptions, Resource, ResourceSpec, Version};

const DEFAULT_NS: [usize; 2] = [100_000, 1_000_000];
/// Set in the environment of the child process that takes one measurement.
const CHILD: &str = "BENCHES_W6_CHILD";

fn main() -> ExitCode {
    exit_on_error("w6", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    if std::env::var_os(CHILD).is_some() {
        let n = args
            .n
            .ok_or_else(|| WorkloadError::new("a measurement child needs --n"))?;
        return measure_once(&args, n);
    }
    let ns = args.n.map_or(DEFAULT_NS.to_vec(), |n| vec![n]);
    println!(
        "# w6: memory per stored resource, N = {ns:?}, {} runs (one process each), in-memory \
         state with default options; size_of::<Resource<BenchItem>>() = {} bytes",
        args.runs,
        std::mem::size_of::<Resource<BenchItem>>()
    );
    println!("# machine: {}", benches::machine::describe());
    let exe = std::env::current_exe()
        .map_err(|e| WorkloadError::new(format!("cannot find this binary to re-run: {e}")))?;
    let mut report = Report::default();
    for &n in &ns {
        for run in 1..=args.runs {
            let output = Command::new(&exe)
                .args(args.child_args(n))
                .env(CHILD, "1")
                .output()
                .map_err(|e| WorkloadError::new(format!("cannot start {}: {e}", exe.display())))?;
            let stdout = String::from_utf8_lossy(&output.stdout);
            ensure(output.status.success(), || {
                format!(
                    "measurement at N = {n} failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                )
            })?;
            let figures = parse_figures(&stdout)?;
            let detail: Vec<String> = figures
                .iter()
                .map(|f| format!("{} {:.1} {}", f.name, f.median, f.unit))
                .collect();
            println!("# N = {n} run {run}: {}", detail.join(", "));
            for figure in figures {
                report.record(&figure.name, figure.median, &figure.unit);
            }
        }
    }
    println!(
        "# w6.nN.store: resident-size delta / N of the stored resources; arc_vec: the same \
         resources in a Vec<Arc<_>>; raw: id + label + value bytes; *_vs_*: ratios"
    );
    report.print();
    Ok(())
}

/// One measurement at `n`, printed as a one-run report.
fn measure_once(args: &RunArgs, n: usize) -> Result<(), WorkloadError> {
    let runtime = args.runtime()?;
    let state = memory_state();
    let before = current_rss_bytes()?;
    runtime.block_on(async {
        for i in 0..n {
            state
                .create(
                    new_item(i, i as i64).into_shared(),
                    CreateOptions::default(),
                )
                .await?;
        }
        Ok::<(), WorkloadError>(())
    })?;
    let stored = current_rss_bytes()?;

    // Built while the store is alive, so this does not reuse memory the store freed.
    let vec_before = current_rss_bytes()?;
    let held: Vec<Arc<Resource<BenchItem>>> = (0..n)
        .map(|i| {
            let mut item = new_item(i, i as i64);
            item.metadata.set_version(Version::FIRST);
            Arc::new(item)
        })
        .collect();
    let vec_after = current_rss_bytes()?;
    let raw: usize = (0..n)
        .map(|i| item_id(i).len() + format!("item {i}").len() + std::mem::size_of::<i64>())
        .sum();

    let listed = runtime.block_on(state.list(&BenchItem::kind(), &ListOptions::default()))?;
    ensure(listed.len() == n, || {
        format!("list returned {} resources, expected {n}", listed.len())
    })?;
    for (i, resource) in listed.iter().enumerate() {
        let item = downcast_ref::<BenchItem>(&**resource)?;
        ensure(
            item.metadata.id() == held[i].metadata.id() && item.spec == held[i].spec,
            || {
                format!(
                    "list position {i}: got {}, expected item {i}",
                    item.metadata.id()
                )
            },
        )?;
    }

    let per_item = |bytes: u64| bytes as f64 / n as f64;
    let store = per_item(stored.saturating_sub(before));
    let arc_vec = per_item(vec_after.saturating_sub(vec_before));
    let raw = raw as f64 / n as f64;
    let mut report = Report::default();
    report.record(&format!("w6.n{n}.store"), store, "B/item");
    report.record(&format!("w6.n{n}.arc_vec"), arc_vec, "B/item");
    report.record(&format!("w6.n{n}.raw"), raw, "B/item");
    report.record(&format!("w6.n{n}.store_vs_raw"), store / raw, "x");
    report.record(&format!("w6.n{n}.store_vs_arc_vec"), store / arc_vec, "x");
    report.print();
    Ok(())
}
