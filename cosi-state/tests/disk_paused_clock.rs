//! A disk store in a test with a paused tokio clock: while a write waits for its durable
//! commit, the runtime must not auto-advance the clock, or every timeout guard around the write
//! would fire at once although nothing took long. The same holds for closing the store. Both
//! hold with `DiskOptions::paused_clock`, which such tests set.

mod disk_common;

use std::time::Duration;

use cosi_core::{CreateOptions, Resource, State};
use cosi_state::{DiskOptions, DiskState};
use disk_common::{temp_store, Widget};

/// A store whose writes wait for their commit in a blocking task (`DiskOptions::paused_clock`).
async fn open(path: &std::path::Path) -> DiskState {
    let options = DiskOptions {
        paused_clock: true,
        ..DiskOptions::default()
    };
    DiskState::open(
        path,
        options,
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_paused_clock_does_not_advance_while_a_write_is_committed() {
    let (_dir, path) = temp_store();
    let state = open(&path).await;
    let start = tokio::time::Instant::now();

    for i in 0..20 {
        let widget = Resource::new(format!("w{i}"), Widget { size: i }).into_shared();
        tokio::time::timeout(
            Duration::from_secs(1),
            state.create(widget, CreateOptions::default()),
        )
        .await
        .expect("a durable write completes within the guard")
        .unwrap();
    }

    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_paused_clock_does_not_advance_while_the_store_closes() {
    let (_dir, path) = temp_store();
    let state = open(&path).await;
    let widget = Resource::new("w", Widget { size: 1 }).into_shared();
    state
        .create(widget, CreateOptions::default())
        .await
        .unwrap();
    let start = tokio::time::Instant::now();

    tokio::time::timeout(Duration::from_secs(1), state.close())
        .await
        .expect("the close (a checkpoint commit) completes within the guard");

    assert_eq!(start.elapsed(), Duration::ZERO);
}
