//! The runtime a workload runs on: tokio's multi-threaded scheduler with one worker per core,
//! and the whole workload — its writer too — as a task on those workers.
//!
//! `Runtime::block_on` would run the writer on the main thread, beside the workers: three busy
//! threads on a two-core machine, where the reference (Go, `GOMAXPROCS=2`) runs its writer and
//! its controllers on two. [`run_on_workers`] spawns the workload instead, so both sides use
//! the same number of threads for the same work.

use std::future::Future;

use crate::check::WorkloadError;

/// A multi-threaded runtime with the default worker count (one per core).
pub fn workers() -> Result<tokio::runtime::Runtime, WorkloadError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| WorkloadError::new(format!("cannot start the tokio runtime: {e}")))
}

/// Runs `workload` as a task on `runtime`'s workers and waits for it on this thread.
///
/// ```
/// let runtime = benches::runtime::workers().unwrap();
/// let on_worker = benches::runtime::run_on_workers(&runtime, async {
///     Ok(std::thread::current().name().map(str::to_string))
/// });
/// assert_eq!(on_worker.unwrap().as_deref(), Some("tokio-runtime-worker"));
/// ```
pub fn run_on_workers<T, F>(
    runtime: &tokio::runtime::Runtime,
    workload: F,
) -> Result<T, WorkloadError>
where
    F: Future<Output = Result<T, WorkloadError>> + Send + 'static,
    T: Send + 'static,
{
    runtime.block_on(async {
        tokio::spawn(workload)
            .await
            .map_err(|e| WorkloadError::new(format!("the workload task failed: {e}")))?
    })
}
