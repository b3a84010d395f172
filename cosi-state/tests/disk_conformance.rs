//! The backend conformance suite run against the disk backend, each case on a fresh store file.

use std::sync::Arc;

use cosi_state::conformance::{Subject, HISTORY_WINDOW, MIN_DESTROY_MARKERS};
use cosi_state::{DiskOptions, DiskState, KnownTypes, MemoryOptions};

async fn disk() -> Subject {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = DiskOptions {
        memory: MemoryOptions {
            history: HISTORY_WINDOW,
            max_destroy_markers: MIN_DESTROY_MARKERS,
        },
        ..DiskOptions::default()
    };
    let state = DiskState::open(dir.path().join("store.redb"), options, KnownTypes::new())
        .await
        .expect("open a fresh store");
    Subject::new(Arc::new(state)).with_guard(dir)
}

cosi_state::conformance_tests!(disk);
