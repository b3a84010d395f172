//! W5 — durable writes (`benches/WORKLOADS.md`): the disk backend, single writer and 8 concurrent
//! writers, 10,000 creates each with full durability. Figures: acknowledged writes/s; in the same
//! process, the same load against raw redb with the same durability (`Durability::Immediate`, one
//! transaction per write, the same keys and record sizes), whose ratio is the store's overhead;
//! and a plain `fsync` loop's rate on the same file system (a 4 KiB block rewritten in place and
//! fdatasynced), the physical limit for one writer.
//!
//! Every store run checks its result: the number of resources, their values and versions, after
//! reopening the file (the file is the source of truth).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::ReadableDatabase;

use benches::args::RunArgs;
use benches::backend::disk_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_id, new_item, BenchItem};
use benches::report::Report;
use cosi_core::{CreateOptions, ListOptions, Resource, ResourceSpec, State, StateExt, Version};
use redb::{Durability, TableDefinition};

const DEFAULT_N: usize = 10_000;
const WRITERS: usize = 8;
const FSYNC_LOOP: usize = 2_000;

const RAW: TableDefinition<(&str, &str, &str), &[u8]> = TableDefinition::new("raw");

fn main() -> ExitCode {
    exit_on_error("w5", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    let n = args.n.unwrap_or(DEFAULT_N);
    let runtime = args.runtime()?;
    let base = std::env::temp_dir();
    println!(
        "# w5: durable writes, {n} creates per writer, 1 and {WRITERS} writers, {} runs, disk state \
         with default options (Durability::Immediate) in {}",
        args.runs,
        base.display()
    );
    let mut report = Report::default();
    for run in 1..=args.runs {
        let dir = tempfile::tempdir_in(&base).map_err(io("temporary directory"))?;
        let fsync = fsync_loop(&dir.path().join("fsync"))?;
        // Each store load right next to its raw twin: the disk's speed drifts on a shared machine.
        let store1 = runtime.block_on(store_load(&dir.path().join("store1.redb"), 1, n))?;
        let raw1 = raw_load(&dir.path().join("raw1.redb"), 1, n)?;
        let store8 = runtime.block_on(store_load(&dir.path().join("store8.redb"), WRITERS, n))?;
        let raw8 = raw_load(&dir.path().join("raw8.redb"), WRITERS, n)?;
        let rate = |writers: usize, d: Duration| (writers * n) as f64 / d.as_secs_f64();
        println!(
            "# run {run}: store 1 writer {:.0}/s, {WRITERS} writers {:.0}/s; raw redb 1 writer \
             {:.0}/s, {WRITERS} writers {:.0}/s; fsync loop {:.0}/s",
            rate(1, store1),
            rate(WRITERS, store8),
            rate(1, raw1),
            rate(WRITERS, raw8),
            fsync
        );
        report.record("w5.store.1writer", rate(1, store1), "ops/s");
        report.record("w5.store.8writers", rate(WRITERS, store8), "ops/s");
        report.record("w5.raw_redb.1writer", rate(1, raw1), "ops/s");
        report.record("w5.raw_redb.8writers", rate(WRITERS, raw8), "ops/s");
        report.record("w5.fsync_loop", fsync, "ops/s");
        report.record(
            "w5.overhead_vs_raw.1writer",
            store1.as_secs_f64() / raw1.as_secs_f64(),
            "x",
        );
        report.record(
            "w5.overhead_vs_raw.8writers",
            store8.as_secs_f64() / raw8.as_secs_f64(),
            "x",
        );
        report.record("w5.8writers_vs_fsync", rate(WRITERS, store8) / fsync, "x");
    }
    println!(
        "# overhead_vs_raw: store time / raw redb time for the same load (target <= 1.5); \
         8writers_vs_fsync: 8-writer store rate / one-writer fsync rate (target > 1)"
    );
    report.print();
    Ok(())
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> WorkloadError {
    move |e| WorkloadError::new(format!("{what}: {e}"))
}

fn redb_error(e: impl Into<redb::Error>) -> WorkloadError {
    WorkloadError::new(format!("raw redb: {}", e.into()))
}

/// Rewrites one 4 KiB block in place and makes it durable with `fdatasync` (what redb's
/// `Durability::Immediate` commit issues), `FSYNC_LOOP` times; returns the rate per second. In
/// place, like redb's writes into its preallocated file: an appending loop would also measure
/// the file system's metadata journal on every call.
fn fsync_loop(path: &Path) -> Result<f64, WorkloadError> {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::create(path).map_err(io("fsync loop file"))?;
    let block = [0x5au8; 4096];
    file.write_all(&block).map_err(io("fsync loop write"))?;
    file.sync_all().map_err(io("fsync loop fsync"))?;
    let start = Instant::now();
    for _ in 0..FSYNC_LOOP {
        file.seek(SeekFrom::Start(0))
            .map_err(io("fsync loop seek"))?;
        file.write_all(&block).map_err(io("fsync loop write"))?;
        file.sync_data().map_err(io("fsync loop fdatasync"))?;
    }
    Ok(FSYNC_LOOP as f64 / start.elapsed().as_secs_f64())
}

/// `writers` tasks each create `n` resources; returns the wall time, after checking the file.
async fn store_load(path: &Path, writers: usize, n: usize) -> Result<Duration, WorkloadError> {
    let state = Arc::new(disk_state(path).await?);
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let state = state.clone();
            tokio::spawn(async move {
                for i in 0..n {
                    let index = w * n + i;
                    let item = new_item(index, index as i64).into_shared();
                    let stored = state.create(item, CreateOptions::default()).await?;
                    ensure(stored.metadata().version() == Version::FIRST, || {
                        format!(
                            "create of {} stored version {}",
                            item_id(index),
                            stored.metadata().version()
                        )
                    })?;
                }
                Ok::<(), WorkloadError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await
            .map_err(|e| WorkloadError::new(format!("writer task: {e}")))??;
    }
    let elapsed = start.elapsed();
    state.close().await;

    let reopened = disk_state(path).await?;
    let stored = reopened
        .list_typed::<BenchItem>(&BenchItem::kind(), &ListOptions::default())
        .await?;
    ensure(stored.len() == writers * n, || {
        format!(
            "{} resources after reopening, expected {}",
            stored.len(),
            writers * n
        )
    })?;
    for (index, resource) in stored.iter().enumerate() {
        let expected = new_item(index, index as i64);
        ensure(
            resource.metadata.id() == expected.metadata.id()
                && resource.spec == expected.spec
                && resource.metadata.version() == Version::FIRST,
            || format!("resource {index} after reopening: {resource:?}"),
        )?;
    }
    reopened.close().await;
    Ok(elapsed)
}

/// The raw-redb baseline: `writers` threads each commit `n` transactions of one insert of the
/// same key and a record of the same size as the store writes, with `Durability::Immediate`.
/// No batching: redb serializes write transactions, so this is what a store without group
/// commit would get.
fn raw_load(path: &Path, writers: usize, n: usize) -> Result<Duration, WorkloadError> {
    // The same redb configuration as the store's (16 MiB cache): the baseline differs only in
    // what the store adds.
    let mut builder = redb::Database::builder();
    builder.set_cache_size(cosi_state::DiskOptions::default().cache_size);
    let db = Arc::new(builder.create(path).map_err(redb_error)?);
    let record_of = |index: usize| -> Result<Vec<u8>, WorkloadError> {
        let item: Resource<BenchItem> = new_item(index, index as i64);
        let body = serde_json::json!({
            "version": 1,
            "created": 1_764_000_000_000_000_000u64,
            "updated": 1_764_000_000_000_000_000u64,
            "spec": item.spec,
        });
        let mut bytes = vec![1u8];
        serde_json::to_writer(&mut bytes, &body)
            .map_err(|e| WorkloadError::new(format!("encode: {e}")))?;
        Ok(bytes)
    };
    let start = Instant::now();
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || -> Result<(), WorkloadError> {
                for i in 0..n {
                    let index = w * n + i;
                    let record = record_of(index)?;
                    let id = item_id(index);
                    let mut txn = db.begin_write().map_err(redb_error)?;
                    txn.set_durability(Durability::Immediate)
                        .map_err(redb_error)?;
                    {
                        let mut table = txn.open_table(RAW).map_err(redb_error)?;
                        table
                            .insert(
                                (BenchItem::DEFAULT_NAMESPACE, BenchItem::TYPE, id.as_str()),
                                record.as_slice(),
                            )
                            .map_err(redb_error)?;
                    }
                    txn.commit().map_err(redb_error)?;
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .map_err(|_| WorkloadError::new("a raw redb writer panicked"))??;
    }
    let elapsed = start.elapsed();
    let read = db.begin_read().map_err(redb_error)?;
    let table = read.open_table(RAW).map_err(redb_error)?;
    let count = redb::ReadableTableMetadata::len(&table).map_err(redb_error)?;
    ensure(count == (writers * n) as u64, || {
        format!("raw redb holds {count} records, expected {}", writers * n)
    })?;
    Ok(elapsed)
}
