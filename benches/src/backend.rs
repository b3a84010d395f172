//! The state backends the workloads run against, each built with its default options.

use std::sync::Arc;

use cosi_core::State;
use cosi_state::{MemoryOptions, MemoryState};

/// The in-memory backend with default options (`MemoryState::new(MemoryOptions::default())`).
pub fn memory_state() -> Arc<dyn State> {
    Arc::new(MemoryState::new(MemoryOptions::default()))
}

/// The in-memory backend with an exact history window of `history` events per kind (the
/// reference's W2 figures were taken with its history raised to 16,384; this builds the same
/// setting for a side-by-side run).
pub fn memory_state_with_history(history: usize) -> Arc<dyn State> {
    Arc::new(MemoryState::new(MemoryOptions {
        history,
        ..MemoryOptions::default()
    }))
}

/// The disk backend with default options (full durability), on a new store file at `path`.
pub async fn disk_state(
    path: &std::path::Path,
) -> Result<cosi_state::DiskState, crate::check::WorkloadError> {
    let types = std::sync::Arc::new(
        cosi_core::Registry::new()
            .with::<crate::item::BenchItem>()
            .unwrap(),
    );
    Ok(cosi_state::DiskState::open(path, cosi_state::DiskOptions::default(), types).await?)
}
