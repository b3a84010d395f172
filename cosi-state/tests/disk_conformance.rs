//! The backend conformance suite run against the disk backend, each case on a fresh store file:
//! once with the default options, and once folding the change log into the resources table in
//! every commit (`checkpoint_interval` 1), so that both commit shapes obey every rule.

use std::sync::Arc;

use cosi_state::conformance::{Gadget, Subject, Widget, HISTORY_WINDOW, MIN_DESTROY_MARKERS};
use cosi_state::{DiskOptions, DiskState, MemoryOptions};

async fn disk() -> Subject {
    disk_with(DiskOptions::default()).await
}

async fn disk_checkpointing_every_commit() -> Subject {
    disk_with(DiskOptions {
        checkpoint_interval: 1,
        ..DiskOptions::default()
    })
    .await
}

async fn disk_with(options: DiskOptions) -> Subject {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let options = DiskOptions {
        memory: MemoryOptions {
            history: HISTORY_WINDOW,
            max_destroy_markers: MIN_DESTROY_MARKERS,
            ..MemoryOptions::default()
        },
        ..options
    };
    let state = DiskState::open(
        dir.path().join("store.redb"),
        options,
        // Typed, as the suite requires of a backend that decodes from bytes: a watch resumed
        // from before the in-memory window reads its changes back from the durable log.
        std::sync::Arc::new(
            cosi_core::Registry::new()
                .with::<Widget>()
                .and_then(|r| r.with::<Gadget>())
                .expect("the fixture types register"),
        ),
    )
    .await
    .expect("open a fresh store");
    Subject::new(Arc::new(state)).with_guard(dir)
}

cosi_state::conformance_tests!(disk);

mod checkpointing_every_commit {
    cosi_state::conformance_tests!(super::disk_checkpointing_every_commit);
}
