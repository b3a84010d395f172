//! The state backends the workloads run against, built with their default options.

use std::sync::Arc;

use cosi_core::State;

use crate::check::WorkloadError;

/// The in-memory backend with default options (`MemoryState::new(MemoryOptions::default())`).
pub fn memory_state() -> Result<Arc<dyn State>, WorkloadError> {
    // The in-memory backend is being written on the `memory` branch; this turns into
    // `Ok(Arc::new(MemoryState::new(MemoryOptions::default())))` when it is merged.
    Err(WorkloadError::new(
        "the in-memory backend (cosi_state::MemoryState) is not in this build yet",
    ))
}

/// The disk backend with default options (full durability), on a new store file at `path`.
pub async fn disk_state(path: &std::path::Path) -> Result<cosi_state::DiskState, WorkloadError> {
    let types = cosi_state::KnownTypes::new().with::<crate::item::BenchItem>();
    Ok(cosi_state::DiskState::open(path, cosi_state::DiskOptions::default(), types).await?)
}
