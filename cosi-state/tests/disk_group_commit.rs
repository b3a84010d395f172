//! Group commit keeps ordering and validation exact: concurrent writes sharing transactions are
//! checked one after another, against the writes before them in the same batch.

use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    CreateOptions, Error, Event, Resource, ResourceSpec, State, StateExt, UpdateOptions, Version,
    WatchKindOptions,
};
use cosi_state::{DiskOptions, DiskState};
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Counter {
    n: u64,
}
impl ResourceSpec for Counter {
    const TYPE: &'static str = "Counters.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

async fn store(dir: &tempfile::TempDir) -> Arc<DiskState> {
    let types = std::sync::Arc::new(cosi_core::Registry::new().with::<Counter>().unwrap());
    let state = DiskState::open(dir.path().join("store.redb"), DiskOptions::default(), types)
        .await
        .unwrap();
    Arc::new(state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_from_one_version_let_exactly_one_through() {
    let dir = tempfile::tempdir().unwrap();
    let state = store(&dir).await;
    let created = state
        .create(
            Resource::new("c", Counter::default()).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let read = cosi_core::downcast::<Counter>(created).unwrap();

    let writers: Vec<_> = (0..16)
        .map(|i| {
            let (state, mut next) = (state.clone(), Resource::clone(&read));
            next.spec.n = i;
            tokio::spawn(async move {
                state
                    .update(next.into_shared(), UpdateOptions::default())
                    .await
            })
        })
        .collect();
    let mut won = 0;
    for writer in writers {
        match writer.await.unwrap() {
            Ok(stored) => {
                won += 1;
                assert_eq!(stored.metadata().version(), Version::new(2));
            }
            Err(Error::VersionConflict {
                expected, actual, ..
            }) => {
                assert_eq!((expected, actual), (Version::new(1), Version::new(2)));
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }
    assert_eq!(won, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_increments_are_neither_lost_nor_reordered() {
    let dir = tempfile::tempdir().unwrap();
    let state = store(&dir).await;
    let mut watch = state
        .watch_kind(&Counter::kind(), WatchKindOptions::default())
        .await
        .unwrap();
    const WRITERS: u64 = 8;
    const EACH: u64 = 25;
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let state = state.clone();
            tokio::spawn(async move {
                for _ in 0..EACH {
                    state
                        .modify(
                            Resource::new("c", Counter::default()),
                            UpdateOptions::default(),
                            |r| {
                                r.spec.n += 1;
                                Ok(())
                            },
                        )
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let total = WRITERS * EACH;
    let stored = state
        .get_typed::<Counter>(&Counter::kind().pointer("c"))
        .await
        .unwrap();
    assert_eq!(stored.spec.n, total);
    assert_eq!(stored.metadata.version(), Version::new(total));

    // Watchers see every version once, in order, with contiguous bookmarks.
    for expected in 1..=total {
        let event = tokio::time::timeout(Duration::from_secs(10), watch.recv())
            .await
            .expect("an event within the guard")
            .expect("the watch is live");
        let (Event::Created {
            resource, bookmark, ..
        }
        | Event::Updated {
            resource, bookmark, ..
        }) = event
        else {
            panic!("unexpected event {event:?}");
        };
        // A disk bookmark displays as its sequence number.
        assert_eq!(bookmark.to_string(), expected.to_string());
        assert_eq!(resource.metadata().version(), Version::new(expected));
        let typed = cosi_core::downcast_ref::<Counter>(&*resource).unwrap();
        assert_eq!(typed.spec.n, expected);
    }
}
