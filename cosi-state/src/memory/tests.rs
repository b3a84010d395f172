//! Unit tests of the in-memory backend: the write rules, and the watch delivery rules that the
//! public conformance suite cannot provoke through the `State` API alone (window sizes,
//! catch-up, marker eviction).

use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    AnyResource, Bookmark, CreateOptions, DestroyOptions, Error, Event, IdQuery, Kind, LabelOp,
    LabelQuery, LabelTerm, ListOptions, Phase, Pointer, Resource, ResourceSpec, SharedResource,
    State, UpdateOptions, Version, Watch, WatchKindOptions, WatchOptions,
};
use serde::{Deserialize, Serialize};

use super::{MemoryOptions, MemoryState};

/// The spec of this module's tests and of `start_model`'s.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
pub(super) struct Counter {
    pub(super) value: i64,
}

impl ResourceSpec for Counter {
    const TYPE: &'static str = "Counters.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

pub(super) fn kind() -> Kind {
    Counter::kind()
}

fn pointer(id: &str) -> Pointer {
    kind().pointer(id)
}

fn counter(id: &str, value: i64) -> SharedResource {
    Resource::new(id, Counter { value }).into_shared()
}

fn labelled(id: &str, value: i64, label: Option<&str>) -> SharedResource {
    let mut r = Resource::new(id, Counter { value });
    if let Some(l) = label {
        r.metadata.labels_mut().insert("app".into(), l.into());
    }
    r.into_shared()
}

fn value_of(r: &dyn AnyResource) -> i64 {
    cosi_core::downcast_ref::<Counter>(r).unwrap().spec.value
}

/// The bookmark of sequence `seq` in `state`.
fn at(state: &MemoryState, seq: u64) -> Bookmark {
    Bookmark::at(
        crate::origin::kind_origin(state.collections.origin(), &kind()),
        seq,
    )
}

fn small(history: usize, max_destroy_markers: usize) -> MemoryState {
    // A window of exactly `history` events, as the rules here assume; the demand-sized window
    // has rules of its own below.
    MemoryState::new(MemoryOptions {
        history,
        history_min: history,
        max_destroy_markers,
    })
}

async fn create(state: &MemoryState, id: &str, value: i64) -> SharedResource {
    state
        .create(counter(id, value), CreateOptions::default())
        .await
        .unwrap()
}

/// Creates counter `id` holding `value`, owned by `owner`.
async fn create_owned(state: &MemoryState, id: &str, value: i64, owner: &str) -> SharedResource {
    let options = CreateOptions {
        owner: Some(owner.into()),
    };
    state.create(counter(id, value), options).await.unwrap()
}

/// Reads, changes the value and writes back.
async fn set(state: &MemoryState, id: &str, value: i64) -> SharedResource {
    let stored = state.get(&pointer(id)).await.unwrap();
    let mut copy = cosi_core::downcast_ref::<Counter>(&*stored)
        .unwrap()
        .clone();
    copy.spec.value = value;
    state
        .update(copy.into_shared(), UpdateOptions::default())
        .await
        .unwrap()
}

async fn destroy(state: &MemoryState, id: &str) {
    state
        .destroy(&pointer(id), DestroyOptions::default())
        .await
        .unwrap()
}

/// Creates `app=<label>`-labelled counter `id` (unlabelled for `None`).
async fn create_labelled(state: &MemoryState, id: &str, value: i64, label: Option<&str>) {
    state
        .create(labelled(id, value, label), CreateOptions::default())
        .await
        .unwrap();
}

/// Creates counters `r0..r{count}`, each holding its index.
async fn create_numbered(state: &MemoryState, count: i64) {
    for i in 0..count {
        create(state, &format!("r{i}"), i).await;
    }
}

/// A watch of every counter, from now on.
async fn watch_every(state: &MemoryState) -> Watch {
    watch_kind_with(state, WatchKindOptions::default()).await
}

/// A watch of every counter that starts with the current contents.
async fn watch_bootstrapped(state: &MemoryState) -> Watch {
    watch_kind_with(
        state,
        WatchKindOptions {
            bootstrap: true,
            ..Default::default()
        },
    )
    .await
}

async fn watch_kind_with(state: &MemoryState, options: WatchKindOptions) -> Watch {
    state.watch_kind(&kind(), options).await.unwrap()
}

async fn watch_pointer(state: &MemoryState, id: &str) -> Watch {
    state
        .watch(&pointer(id), WatchOptions::default())
        .await
        .unwrap()
}

/// Asserts that the watch ends (yields `None`) instead of waiting for more.
async fn assert_ends(watch: &mut Watch) {
    let end = tokio::time::timeout(Duration::from_secs(5), watch.recv())
        .await
        .expect("the watch ends instead of waiting");
    assert!(end.is_none());
}

async fn recv(watch: &mut Watch) -> Event {
    tokio::time::timeout(Duration::from_secs(5), watch.recv())
        .await
        .expect("an event within 5 s")
        .expect("the watch is still open")
}

async fn recv_batch(watch: &mut Watch, max: usize) -> Vec<Event> {
    tokio::time::timeout(Duration::from_secs(5), watch.recv_batch(max))
        .await
        .expect("a batch within 5 s")
        .expect("the watch is still open")
}

/// `type id value compacted bookmark` of an event, for exact comparisons.
fn describe(event: &Event) -> String {
    match event {
        Event::Created {
            resource,
            bookmark,
            compacted,
        } => format!(
            "created {} {} {} @{bookmark}",
            resource.metadata().id(),
            value_of(&**resource),
            if *compacted { "c" } else { "-" }
        ),
        Event::Updated {
            old,
            resource,
            bookmark,
            compacted,
        } => format!(
            "updated {} {}->{} {} @{bookmark}",
            resource.metadata().id(),
            old.as_ref()
                .map_or("?".to_string(), |o| value_of(&**o).to_string()),
            value_of(&**resource),
            if *compacted { "c" } else { "-" }
        ),
        Event::Destroyed {
            resource,
            bookmark,
            compacted,
        } => format!(
            "destroyed {} {} @{bookmark}",
            resource.metadata().id(),
            if *compacted { "c" } else { "-" }
        ),
        other => format!(
            "{} @{}",
            other.type_name(),
            other.bookmark().map_or("-".to_string(), |b| b.to_string())
        ),
    }
}

fn describe_all(events: &[Event]) -> Vec<String> {
    events.iter().map(describe).collect()
}

// ---- write rules ----

#[tokio::test]
async fn create_stores_version_one_with_owner_and_equal_timestamps() {
    let state = MemoryState::default();
    let stored = create_owned(&state, "a", 1, "ctrl").await;
    let md = stored.metadata();
    assert_eq!(md.version(), Version::FIRST);
    assert_eq!(md.owner(), Some("ctrl"));
    assert_eq!(md.created(), md.updated());
    assert!(md.created() > std::time::SystemTime::UNIX_EPOCH);
    let read = state.get(&pointer("a")).await.unwrap();
    assert!(Arc::ptr_eq(&read, &stored), "reads hand out the stored Arc");
}

#[tokio::test]
async fn create_of_an_existing_id_fails_and_changes_nothing() {
    let state = MemoryState::default();
    create(&state, "a", 1).await;
    let err = state
        .create(counter("a", 2), CreateOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert_eq!(value_of(&*state.get(&pointer("a")).await.unwrap()), 1);
}

#[tokio::test]
async fn create_stamps_a_unique_value_without_copying_it() {
    let state = MemoryState::default();
    let value = counter("a", 1);
    let address = Arc::as_ptr(&value) as *const u8;
    let stored = state.create(value, CreateOptions::default()).await.unwrap();
    assert_eq!(Arc::as_ptr(&stored) as *const u8, address);
}

#[tokio::test]
async fn create_with_an_empty_id_is_an_invalid_argument() {
    let state = MemoryState::default();
    let err = state
        .create(counter("", 1), CreateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { field, .. } if field == "metadata.id"),
        "{err}"
    );
}

#[tokio::test]
async fn update_bumps_version_and_keeps_created_and_owner() {
    let state = MemoryState::default();
    let first = create_owned(&state, "a", 1, "ctrl").await;
    let mut copy = cosi_core::downcast_ref::<Counter>(&*first).unwrap().clone();
    copy.spec.value = 2;
    copy.metadata.set_timestamps(
        std::time::SystemTime::UNIX_EPOCH,
        std::time::SystemTime::UNIX_EPOCH,
    );
    let stored = state
        .update(copy.into_shared(), UpdateOptions::owned_by(Some("ctrl")))
        .await
        .unwrap();
    assert_eq!(stored.metadata().version(), Version::new(2));
    assert_eq!(stored.metadata().owner(), Some("ctrl"));
    assert_eq!(stored.metadata().created(), first.metadata().created());
    assert!(stored.metadata().updated() >= first.metadata().updated());
    assert_eq!(value_of(&*stored), 2);
}

#[tokio::test]
async fn a_stored_owner_is_the_writers_own_string_through_create_and_update() {
    let state = MemoryState::default();
    let owner: Arc<str> = "ctrl".into();
    let created = state
        .create(
            counter("a", 1),
            CreateOptions {
                owner: Some(owner.clone()),
            },
        )
        .await
        .unwrap();
    assert!(Arc::ptr_eq(
        created.metadata().shared_owner().unwrap(),
        &owner
    ));
    let mut next = cosi_core::downcast_ref::<Counter>(&*created)
        .unwrap()
        .clone();
    next.spec.value = 2;
    // The writer names itself with another string of the same text: still the owner.
    let updated = state
        .update(next.into_shared(), UpdateOptions::owned_by(Some("ctrl")))
        .await
        .unwrap();
    assert!(Arc::ptr_eq(
        updated.metadata().shared_owner().unwrap(),
        &owner
    ));
}

#[tokio::test]
async fn update_with_stale_version_conflicts() {
    let state = MemoryState::default();
    let v1 = create(&state, "a", 1).await;
    set(&state, "a", 2).await;
    let err = state
        .update(v1, UpdateOptions::default())
        .await
        .unwrap_err();
    match err {
        Error::VersionConflict {
            expected, actual, ..
        } => {
            assert_eq!(expected, Version::new(1));
            assert_eq!(actual, Version::new(2));
        }
        other => panic!("expected a version conflict, got {other}"),
    }
}

#[tokio::test]
async fn update_by_another_owner_conflicts() {
    let state = MemoryState::default();
    let v1 = create(&state, "a", 1).await;
    let err = state
        .update(v1, UpdateOptions::owned_by(Some("intruder")))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::OwnerConflict { owner: None, writer: Some(w), .. } if w == "intruder"),
        "{err}"
    );
}

#[tokio::test]
async fn update_in_an_unexpected_phase_conflicts() {
    let state = MemoryState::default();
    let v1 = create(&state, "a", 1).await;
    let mut copy = cosi_core::downcast_ref::<Counter>(&*v1).unwrap().clone();
    copy.metadata.set_phase(Phase::TearingDown);
    let torn = state
        .update(copy.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
    let err = state
        .update(torn.clone(), UpdateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PhaseConflict {
                expected: Phase::Running,
                actual: Phase::TearingDown,
                ..
            }
        ),
        "{err}"
    );
    let any_phase = UpdateOptions {
        owner: None,
        expected_phase: None,
    };
    let stored = state.update(torn, any_phase).await.unwrap();
    assert_eq!(stored.metadata().version(), Version::new(3));
}

#[tokio::test]
async fn update_of_a_missing_resource_is_not_found() {
    let state = MemoryState::default();
    let err = state
        .update(counter("a", 1), UpdateOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

#[tokio::test]
async fn destroy_with_pending_finalizers_fails_and_keeps_the_resource() {
    let state = MemoryState::default();
    let v1 = create(&state, "a", 1).await;
    let mut copy = cosi_core::downcast_ref::<Counter>(&*v1).unwrap().clone();
    copy.metadata.finalizers_mut().insert("f".into());
    state
        .update(copy.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
    let err = state
        .destroy(&pointer("a"), DestroyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PendingFinalizers { .. }), "{err}");
    assert!(state.get(&pointer("a")).await.is_ok());
}

#[tokio::test]
async fn destroy_by_another_owner_conflicts() {
    let state = MemoryState::default();
    create(&state, "a", 1).await;
    let err = state
        .destroy(
            &pointer("a"),
            DestroyOptions {
                owner: Some("x".into()),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OwnerConflict { .. }), "{err}");
}

#[tokio::test]
async fn list_is_sorted_by_id_and_filtered() {
    let state = MemoryState::default();
    for (id, label) in [
        ("c", Some("web")),
        ("a", Some("web")),
        ("b", None),
        ("d", Some("db")),
    ] {
        create_labelled(&state, id, 0, label).await;
    }
    let ids = |v: Vec<SharedResource>| -> Vec<String> {
        v.iter().map(|r| r.metadata().id().to_string()).collect()
    };
    let all = state.list(&kind(), &ListOptions::default()).await.unwrap();
    assert_eq!(ids(all), ["a", "b", "c", "d"]);
    let web = ListOptions {
        labels: LabelQuery::new()
            .with(LabelTerm::new("app", LabelOp::Equal("web".into())))
            .into(),
        ids: None,
    };
    assert_eq!(ids(state.list(&kind(), &web).await.unwrap()), ["a", "c"]);
    let by_id = ListOptions {
        labels: Default::default(),
        ids: Some(IdQuery::new("^[bd]$").unwrap()),
    };
    assert_eq!(ids(state.list(&kind(), &by_id).await.unwrap()), ["b", "d"]);
}

// ---- watches ----

#[tokio::test]
async fn kind_watch_delivers_every_change_in_order_with_bookmarks() {
    let state = MemoryState::default();
    let mut watch = watch_every(&state).await;
    create(&state, "a", 1).await;
    set(&state, "a", 2).await;
    destroy(&state, "a").await;
    let events = recv_batch(&mut watch, 10).await;
    assert_eq!(
        describe_all(&events),
        [
            "created a 1 - @1",
            "updated a 1->2 - @2",
            "destroyed a - @3"
        ]
    );
}

#[tokio::test]
async fn bootstrap_delivers_contents_in_id_order_then_bootstrapped() {
    let state = MemoryState::default();
    create(&state, "b", 2).await;
    create(&state, "a", 1).await;
    let mut watch = watch_bootstrapped(&state).await;
    create(&state, "c", 3).await;
    let events = recv_batch(&mut watch, 10).await;
    assert_eq!(
        describe_all(&events),
        [
            "created a 1 - @2",
            "created b 2 - @2",
            "bootstrapped @2",
            "created c 3 - @3"
        ]
    );
}

#[tokio::test]
async fn recv_batch_returns_everything_available_up_to_max() {
    let state = MemoryState::default();
    let mut watch = watch_every(&state).await;
    create_numbered(&state, 10).await;
    assert_eq!(recv_batch(&mut watch, 4).await.len(), 4);
    assert_eq!(recv_batch(&mut watch, 100).await.len(), 6);
}

#[tokio::test]
async fn a_waiting_watcher_is_woken_by_a_write() {
    let state = Arc::new(MemoryState::default());
    let mut watch = watch_every(&state).await;
    let writer = {
        let state = state.clone();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            create(&state, "a", 1).await;
        })
    };
    assert_eq!(describe(&recv(&mut watch).await), "created a 1 - @1");
    writer.await.unwrap();
}

#[tokio::test]
async fn tail_replays_the_last_events_of_the_window() {
    let state = MemoryState::default();
    create_numbered(&state, 5).await;
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            tail: Some(2),
            ..Default::default()
        },
    )
    .await;
    let events = recv_batch(&mut watch, 10).await;
    assert_eq!(
        describe_all(&events),
        ["created r3 3 - @4", "created r4 4 - @5"]
    );
}

#[tokio::test]
async fn since_resumes_after_the_bookmark() {
    let state = MemoryState::default();
    create_numbered(&state, 5).await;
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            since: Some(at(&state, 3)),
            ..Default::default()
        },
    )
    .await;
    let events = recv_batch(&mut watch, 10).await;
    assert_eq!(
        describe_all(&events),
        ["created r3 3 - @4", "created r4 4 - @5"]
    );
}

#[tokio::test]
async fn since_a_future_bookmark_is_an_invalid_argument() {
    let state = MemoryState::default();
    create(&state, "a", 1).await;
    let err = state
        .watch_kind(
            &kind(),
            WatchKindOptions {
                since: Some(at(&state, 2)),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { field, .. } if field == "since"),
        "{err}"
    );
}

#[tokio::test]
async fn pointer_watch_starts_with_the_current_state() {
    let state = MemoryState::default();
    create(&state, "a", 1).await;
    create(&state, "b", 1).await;
    let mut watch = watch_pointer(&state, "a").await;
    set(&state, "b", 2).await;
    set(&state, "a", 2).await;
    assert_eq!(describe(&recv(&mut watch).await), "created a 1 - @2");
    assert_eq!(describe(&recv(&mut watch).await), "updated a 1->2 - @4");
}

#[tokio::test]
async fn pointer_watch_of_an_absent_resource_starts_with_a_tombstone() {
    let state = MemoryState::default();
    let mut watch = watch_pointer(&state, "a").await;
    match recv(&mut watch).await {
        Event::Destroyed {
            resource,
            bookmark,
            compacted: false,
        } => {
            assert_eq!(resource.metadata().pointer(), &pointer("a"));
            assert_eq!(resource.spec_value().unwrap(), serde_json::Value::Null);
            assert_eq!(bookmark, at(&state, 0));
        }
        other => panic!("expected a tombstone, got {other:?}"),
    }
    create(&state, "a", 7).await;
    assert_eq!(describe(&recv(&mut watch).await), "created a 7 - @1");
}

#[tokio::test]
async fn pointer_watch_ids_are_exact_not_patterns() {
    let state = MemoryState::default();
    let mut watch = watch_pointer(&state, "a.b").await;
    recv(&mut watch).await;
    create(&state, "axb", 1).await;
    create(&state, "a.b", 2).await;
    assert_eq!(describe(&recv(&mut watch).await), "created a.b 2 - @2");
}

// ---- falling behind ----

fn web_only() -> cosi_core::LabelQueries {
    LabelQuery::new()
        .with(LabelTerm::new("app", LabelOp::Equal("web".into())))
        .into()
}

async fn relabel(state: &MemoryState, id: &str, value: i64, label: Option<&str>) {
    let stored = state.get(&pointer(id)).await.unwrap();
    let mut copy = cosi_core::downcast_ref::<Counter>(&*stored)
        .unwrap()
        .clone();
    copy.spec.value = value;
    copy.metadata.labels_mut().clear();
    if let Some(l) = label {
        copy.metadata.labels_mut().insert("app".into(), l.into());
    }
    state
        .update(copy.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_watcher_within_the_window_gets_every_event_exactly() {
    let state = small(4, 16);
    let mut watch = watch_every(&state).await;
    create(&state, "a", 1).await;
    set(&state, "a", 2).await;
    set(&state, "a", 3).await;
    destroy(&state, "a").await;
    let events = recv_batch(&mut watch, 10).await;
    assert_eq!(
        describe_all(&events),
        [
            "created a 1 - @1",
            "updated a 1->2 - @2",
            "updated a 2->3 - @3",
            "destroyed a - @4"
        ]
    );
}

#[tokio::test]
async fn a_watcher_behind_the_window_gets_a_compacted_catch_up_then_live_events() {
    let state = small(2, 16);
    for id in ["a", "b", "c", "d"] {
        create(&state, id, 0).await;
    }
    let mut watch = watch_every(&state).await;
    set(&state, "a", 1).await; // 5
    destroy(&state, "b").await; // 6
    create(&state, "e", 1).await; // 7: created and destroyed within the gap
    destroy(&state, "e").await; // 8
    destroy(&state, "c").await; // 9: existed, destroyed and recreated
    create(&state, "c", 5).await; // 10
    create(&state, "f", 1).await; // 11: new
    set(&state, "d", 1).await; // 12
    set(&state, "d", 2).await; // 13
    let events = recv_batch(&mut watch, 100).await;
    assert_eq!(
        describe_all(&events),
        [
            "updated a ?->1 c @13",
            "destroyed b c @13",
            "updated c ?->5 c @13",
            "updated d ?->2 c @13",
            "created f 1 c @13",
        ]
    );
    set(&state, "a", 2).await;
    assert_eq!(describe(&recv(&mut watch).await), "updated a 1->2 - @14");
}

#[tokio::test]
async fn since_an_old_bookmark_gets_a_catch_up() {
    let state = small(1, 16);
    create(&state, "a", 1).await; // 1
    create(&state, "b", 1).await; // 2
    set(&state, "a", 2).await; // 3
    destroy(&state, "b").await; // 4
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            since: Some(at(&state, 1)),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["updated a ?->2 c @4"]
    );
}

#[tokio::test]
async fn a_watcher_behind_evicted_destroy_markers_gets_a_resync() {
    let state = small(1, 1);
    create(&state, "a", 1).await; // 1
    create(&state, "b", 1).await; // 2
    create(&state, "c", 1).await; // 3
    let mut watch = watch_every(&state).await;
    destroy(&state, "a").await; // 4: its marker is evicted by the next destroy
    destroy(&state, "b").await; // 5
    set(&state, "c", 2).await; // 6
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["resync @6", "created c 2 - @6", "bootstrapped @6"]
    );
    create(&state, "d", 1).await;
    assert_eq!(describe(&recv(&mut watch).await), "created d 1 - @7");
}

#[tokio::test]
async fn a_strict_watcher_that_falls_behind_ends_with_an_overrun() {
    let state = small(1, 16);
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            strict: true,
            ..Default::default()
        },
    )
    .await;
    create(&state, "a", 1).await;
    create(&state, "b", 1).await;
    match recv(&mut watch).await {
        Event::Errored {
            error: Error::WatchOverrun { kind: k, position },
        } => {
            assert_eq!(k, kind());
            assert_eq!(position.to_string(), "0");
        }
        other => panic!("expected an overrun, got {other:?}"),
    }
    assert_ends(&mut watch).await;
}

#[tokio::test]
async fn label_filter_turns_entering_and_leaving_into_created_and_destroyed() {
    let state = MemoryState::default();
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            labels: web_only(),
            ..Default::default()
        },
    )
    .await;
    create_labelled(&state, "a", 0, None).await; // 1: not matching
    relabel(&state, "a", 1, Some("web")).await; // 2: enters
    relabel(&state, "a", 2, Some("web")).await; // 3: stays
    relabel(&state, "a", 3, Some("db")).await; // 4: leaves
    relabel(&state, "a", 4, None).await; // 5: still out
    destroy(&state, "a").await; // 6: out
    create_labelled(&state, "b", 9, Some("web")).await; // 7
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        [
            "created a 1 - @2",
            "updated a 1->2 - @3",
            "destroyed a - @4",
            "created b 9 - @7"
        ]
    );
}

#[tokio::test]
async fn filters_apply_to_the_catch_up_relative_to_what_the_watcher_holds() {
    let state = small(1, 16);
    for (id, label) in [
        ("a", Some("web")),
        ("b", Some("web")),
        ("c", None),
        ("d", None),
        ("x", Some("web")),
    ] {
        create_labelled(&state, id, 0, label).await;
    }
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            labels: web_only(),
            ids: Some(IdQuery::new("^[a-e]$").unwrap()),
            ..Default::default()
        },
    )
    .await;
    relabel(&state, "a", 1, None).await; // leaves the filter
    relabel(&state, "b", 1, Some("web")).await; // stays
    relabel(&state, "c", 1, None).await; // never matched, still does not
    relabel(&state, "d", 1, Some("web")).await; // enters
    create_labelled(&state, "e", 1, Some("web")).await;
    relabel(&state, "x", 1, Some("web")).await; // id filtered out
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        [
            "destroyed a c @11",
            "updated b ?->1 c @11",
            "created d 1 c @11",
            "created e 1 c @11",
        ]
    );
}

#[tokio::test]
async fn a_filtered_watch_without_bootstrap_holds_what_matched_at_its_start() {
    let state = small(1, 16);
    for (id, label) in [("a", Some("web")), ("b", None)] {
        create_labelled(&state, id, 0, label).await;
    }
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            labels: web_only(),
            ..Default::default()
        },
    )
    .await;
    destroy(&state, "a").await; // held from the start: reported gone
    destroy(&state, "b").await; // never matched: nothing
    create_labelled(&state, "c", 1, None).await;
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["destroyed a c @5"]
    );
}

#[tokio::test]
async fn a_filtered_watch_resumed_within_the_window_holds_what_matched_at_its_bookmark() {
    let state = small(8, 16);
    create_labelled(&state, "a", 0, Some("web")).await; // 1
    create_labelled(&state, "b", 0, None).await; // 2
    create_labelled(&state, "c", 0, Some("web")).await; // 3
                                                        // At 3, a and c match. Then a leaves and b enters before the watch opens.
    relabel(&state, "a", 1, None).await; // 4
    relabel(&state, "b", 1, Some("web")).await; // 5
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            labels: web_only(),
            since: Some(at(&state, 3)),
            ..Default::default()
        },
    )
    .await;
    // Enough changes that the watcher, still at 3, falls behind the 8-event window.
    for value in 2..12 {
        relabel(&state, "c", value, Some("web")).await;
    }
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        [
            "destroyed a c @15",
            "created b 1 c @15",
            "updated c ?->11 c @15",
        ]
    );
}

#[tokio::test]
async fn a_filtered_watch_resumed_behind_the_window_resyncs() {
    let state = small(2, 16);
    create_labelled(&state, "a", 0, Some("web")).await; // 1
    create_labelled(&state, "b", 0, None).await; // 2
    relabel(&state, "a", 1, Some("web")).await; // 3
    relabel(&state, "b", 1, Some("web")).await; // 4
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            labels: web_only(),
            since: Some(at(&state, 1)),
            ..Default::default()
        },
    )
    .await;
    // What matched at 1 is no longer known (the window starts at 3): a resync, not a guess.
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        [
            "resync @4",
            "created a 1 - @4",
            "created b 1 - @4",
            "bootstrapped @4"
        ]
    );
}

#[tokio::test]
async fn after_a_filtered_resync_the_watcher_holds_what_the_resync_delivered() {
    let state = small(1, 1);
    for (id, label) in [("a", Some("web")), ("b", Some("web")), ("c", None)] {
        create_labelled(&state, id, 0, label).await;
    }
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            labels: web_only(),
            bootstrap: true,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(recv_batch(&mut watch, 10).await.len(), 3);
    // Two destroys while it lags, one marker kept: it cannot catch up, it resyncs.
    destroy(&state, "a").await; // 4
    destroy(&state, "c").await; // 5
    relabel(&state, "b", 1, None).await; // 6: b leaves
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["resync @6", "bootstrapped @6"]
    );
    // The resync delivered nothing: b entering again is news, a and c were never held since.
    relabel(&state, "b", 2, Some("web")).await; // 7
    create_labelled(&state, "d", 0, None).await; // 8
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["created b 2 c @8"]
    );
}

// ---- model test: a lagging watcher's view always converges to the store ----

mod convergence {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        Create(u8, bool),
        Update(u8, bool),
        Destroy(u8),
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..6, any::<bool>()).prop_map(|(id, web)| Op::Create(id, web)),
            4 => (0u8..6, any::<bool>()).prop_map(|(id, web)| Op::Update(id, web)),
            2 => (0u8..6).prop_map(Op::Destroy),
            1 => Just(Op::Drain),
        ]
    }

    /// What the watcher believes the (filtered) contents are, built only from its events.
    #[derive(Default)]
    struct View {
        resources: BTreeMap<String, SharedResource>,
        in_bootstrap: bool,
        caught_up: bool,
    }

    impl View {
        /// Applies one event, checking that it is relative to what the view holds (for exact and
        /// compacted events alike, filtered or not) and that an exact update's old state is the
        /// view's.
        fn apply(&mut self, event: Event) {
            if event.is_compacted() {
                self.caught_up = true;
            }
            match event {
                Event::Resync { .. } => {
                    self.resources.clear();
                    self.in_bootstrap = true;
                }
                Event::Bootstrapped { .. } => {
                    assert!(self.in_bootstrap, "bootstrapped without a resync");
                    self.in_bootstrap = false;
                }
                Event::Created { resource, .. } => {
                    let id = resource.metadata().id().to_string();
                    let previous = self.resources.insert(id.clone(), resource);
                    assert!(previous.is_none(), "created {id}, which the view holds");
                }
                Event::Updated {
                    old,
                    resource,
                    compacted,
                    ..
                } => {
                    let id = resource.metadata().id().to_string();
                    let previous = self.resources.insert(id.clone(), resource);
                    match (compacted, previous) {
                        (false, Some(previous)) => {
                            let old = old.expect("an exact update carries the old state");
                            assert!(
                                Arc::ptr_eq(&old, &previous),
                                "old of {id} is not the view's"
                            );
                        }
                        (false, None) => panic!("exact update of {id}, unknown to the view"),
                        (true, previous) => assert!(
                            previous.is_some(),
                            "compacted update of {id}, unknown to the view"
                        ),
                    }
                }
                Event::Destroyed { resource, .. } => {
                    let id = resource.metadata().id();
                    let removed = self.resources.remove(id);
                    assert!(removed.is_some(), "destroyed {id}, unknown to the view");
                }
                Event::Noop { .. } => {}
                other => panic!("unexpected event {other:?}"),
            }
        }
    }

    /// How a watcher takes its events.
    #[derive(Clone, Copy, Debug)]
    enum Read {
        /// `recv_batch(max)`.
        Batch(usize),
        /// `recv_shared(max)`.
        Shared(usize),
    }

    fn read() -> impl Strategy<Value = Read> {
        prop_oneof![
            (1usize..5).prop_map(Read::Batch),
            (1usize..5).prop_map(Read::Shared)
        ]
    }

    /// Takes every event available now.
    async fn take_all(watch: &mut Watch, read: Read) -> Vec<Event> {
        let mut events = Vec::new();
        // On the paused clock the timeout fires only once nothing else can run: the watcher
        // has taken everything available.
        let wait = Duration::from_secs(1);
        loop {
            let batch = match read {
                Read::Batch(max) => tokio::time::timeout(wait, watch.recv_batch(max)).await,
                Read::Shared(max) => tokio::time::timeout(wait, watch.recv_shared(max))
                    .await
                    .map(|batch| batch.map(|batch| batch.to_vec())),
            };
            match batch {
                Ok(batch) => events.extend(batch.expect("the watch stays open")),
                Err(_) => return events,
            }
        }
    }

    async fn drain(watch: &mut Watch, view: &mut View, read: Read) {
        for event in take_all(watch, read).await {
            view.apply(event);
        }
    }

    /// Applies `op` (number `n` of the run) to `state`; a write that breaks a rule changes
    /// nothing and is skipped.
    async fn write(state: &MemoryState, n: usize, op: &Op) {
        let label = |web: bool| if web { Some("web") } else { None };
        match *op {
            Op::Create(id, web) => {
                let _ = state
                    .create(
                        labelled(&format!("r{id}"), n as i64, label(web)),
                        CreateOptions::default(),
                    )
                    .await;
            }
            Op::Update(id, web) => {
                if state.get(&pointer(&format!("r{id}"))).await.is_ok() {
                    relabel(state, &format!("r{id}"), n as i64, label(web)).await;
                }
            }
            Op::Destroy(id) => {
                let _ = state
                    .destroy(&pointer(&format!("r{id}")), DestroyOptions::default())
                    .await;
            }
            Op::Drain => {}
        }
    }

    async fn run(options: MemoryOptions, filtered: bool, read: Read, ops: Vec<Op>) -> bool {
        let state = MemoryState::new(options);
        let labels = if filtered {
            web_only()
        } else {
            Default::default()
        };
        let mut watch = watch_kind_with(
            &state,
            WatchKindOptions {
                bootstrap: true,
                labels: labels.clone(),
                ..Default::default()
            },
        )
        .await;
        let mut view = View {
            in_bootstrap: true,
            ..View::default()
        };
        for (n, op) in ops.iter().enumerate() {
            match op {
                Op::Drain => drain(&mut watch, &mut view, read).await,
                _ => write(&state, n, op).await,
            }
        }
        drain(&mut watch, &mut view, read).await;
        let listed = state
            .list(&kind(), &ListOptions { labels, ids: None })
            .await
            .unwrap();
        let expected: Vec<&str> = listed.iter().map(|r| r.metadata().id()).collect();
        let seen: Vec<&str> = view.resources.keys().map(String::as_str).collect();
        assert_eq!(seen, expected);
        for (stored, held) in listed.iter().zip(view.resources.values()) {
            assert!(
                Arc::ptr_eq(stored, held),
                "{} is stale",
                stored.metadata().id()
            );
        }
        view.caught_up
    }

    /// Runs `ops` with one unfiltered watcher per entry of `reads`, all draining at the same
    /// points; returns what each saw.
    async fn watch_together(
        options: MemoryOptions,
        reads: &[Read],
        ops: Vec<Op>,
    ) -> Vec<Vec<String>> {
        let state = MemoryState::new(options);
        let mut watches = Vec::new();
        for _ in reads {
            watches.push(watch_every(&state).await);
        }
        let mut seen = vec![Vec::new(); reads.len()];
        for (n, op) in ops.iter().chain([&Op::Drain]).enumerate() {
            match op {
                Op::Drain => {
                    for ((watch, read), seen) in watches.iter_mut().zip(reads).zip(&mut seen) {
                        seen.extend(describe_all(&take_all(watch, *read).await));
                    }
                }
                _ => write(&state, n, op).await,
            }
        }
        seen
    }

    proptest! {
        #[test]
        fn watchers_reading_at_the_same_points_see_the_same_events_shared_or_not(
            history in 1usize..6,
            markers in 0usize..6,
            reads in proptest::collection::vec(read(), 2..5),
            ops in proptest::collection::vec(op(), 0..60),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let options = MemoryOptions { history, history_min: history, max_destroy_markers: markers };
            let seen = runtime.block_on(watch_together(options, &reads, ops));
            for (read, events) in reads.iter().zip(&seen).skip(1) {
                prop_assert_eq!(events, &seen[0], "{:?} against {:?}", read, reads[0]);
            }
        }

        #[test]
        fn a_lagging_watchers_view_converges_to_the_store(
            history in 1usize..6,
            history_min in 1usize..6,
            markers in 0usize..6,
            filtered in any::<bool>(),
            read in read(),
            ops in proptest::collection::vec(op(), 0..60),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let options = MemoryOptions { history, history_min, max_destroy_markers: markers };
            runtime.block_on(run(options, filtered, read, ops));
        }
    }

    #[test]
    fn a_large_window_delivers_everything_exactly() {
        // The same model with a window limit larger than the run, starting at one event: it
        // grows for the lagging watcher, so no event may be compacted.
        let ops: Vec<Op> = (0..50u8)
            .map(|i| match i % 4 {
                0 => Op::Create(i % 6, true),
                1 => Op::Update(i % 6, i % 3 == 0),
                2 => Op::Destroy((i + 3) % 6),
                _ => Op::Drain,
            })
            .collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let options = MemoryOptions {
            history: 1000,
            history_min: 1,
            max_destroy_markers: 1000,
        };
        for read in [Read::Batch(3), Read::Shared(4)] {
            let caught_up = runtime.block_on(run(options.clone(), false, read, ops.clone()));
            assert!(!caught_up, "{read:?}");
        }
    }
}

// ---- lifecycle and reuse ----

#[tokio::test]
async fn dropping_the_state_ends_its_watches_after_what_they_have() {
    let state = MemoryState::default();
    let mut watch = watch_every(&state).await;
    create(&state, "a", 1).await;
    drop(state);
    assert_eq!(describe(&recv(&mut watch).await), "created a 1 - @1");
    assert_ends(&mut watch).await;
}

#[tokio::test]
async fn a_collection_resumed_at_a_head_continues_its_sequence() {
    // Given a collection resumed by a durable backend at bookmark 41, with one resource
    let collection = Arc::new(super::Collection::resumed_at(
        kind(),
        &MemoryOptions::default(),
        7,
        41,
    ));
    collection
        .create(counter("a", 1), CreateOptions::default())
        .unwrap();
    // When a watcher resumes at 42 and one before 41
    let watcher_at = |since| {
        Watch::new(
            super::KindWatcher::of_kind(
                &collection,
                WatchKindOptions {
                    since: Some(Bookmark::at(crate::origin::kind_origin(7, &kind()), since)),
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    };
    let mut current = watcher_at(42);
    let mut older = watcher_at(40);
    collection
        .create(counter("b", 2), CreateOptions::default())
        .unwrap();
    // Then the current one continues exactly; the older one, which nothing is known about,
    // gets a resync
    assert_eq!(describe(&recv(&mut current).await), "created b 2 - @43");
    assert_eq!(
        describe_all(&recv_batch(&mut older, 10).await),
        [
            "resync @43",
            "created a 1 - @43",
            "created b 2 - @43",
            "bootstrapped @43"
        ]
    );
}

// ---- more watch options ----

#[tokio::test]
async fn events_carry_the_stored_values_not_copies() {
    let state = MemoryState::default();
    let mut first = watch_every(&state).await;
    let mut second = watch_every(&state).await;
    let stored = create(&state, "a", 1).await;
    for watch in [&mut first, &mut second] {
        let event = recv(watch).await;
        assert!(Arc::ptr_eq(event.resource().unwrap(), &stored));
    }
}

#[tokio::test]
async fn tail_beyond_the_window_delivers_the_whole_window() {
    let state = small(2, 16);
    create_numbered(&state, 5).await;
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            tail: Some(100),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["created r3 3 - @4", "created r4 4 - @5"]
    );
}

#[tokio::test]
async fn bootstrap_with_tail_or_since_is_an_invalid_argument() {
    let state = MemoryState::default();
    for (tail, since, field) in [
        (Some(1), None, "tail"),
        (None, Some(at(&state, 0)), "since"),
    ] {
        let err = state
            .watch_kind(
                &kind(),
                WatchKindOptions {
                    bootstrap: true,
                    tail,
                    since,
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { field: f, .. } if f == field),
            "{err}"
        );
    }
}

#[tokio::test]
async fn bootstrap_with_a_label_filter_delivers_only_matching_resources() {
    let state = MemoryState::default();
    for (id, label) in [("a", Some("web")), ("b", None), ("c", Some("web"))] {
        create_labelled(&state, id, 0, label).await;
    }
    let mut watch = watch_kind_with(
        &state,
        WatchKindOptions {
            bootstrap: true,
            labels: web_only(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["created a 0 - @3", "created c 0 - @3", "bootstrapped @3"]
    );
}

#[tokio::test]
async fn a_pointer_watch_behind_the_window_catches_up_on_its_resource_only() {
    let state = small(1, 16);
    create(&state, "a", 1).await;
    let mut watch = watch_pointer(&state, "a").await;
    assert_eq!(describe(&recv(&mut watch).await), "created a 1 - @1");
    create(&state, "b", 1).await;
    set(&state, "a", 2).await;
    set(&state, "a", 3).await;
    set(&state, "b", 2).await;
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["updated a ?->3 c @5"]
    );
}

#[tokio::test]
async fn a_strict_pointer_watch_that_falls_behind_ends_with_an_overrun() {
    let state = small(1, 16);
    let mut watch = state
        .watch(&pointer("a"), WatchOptions { strict: true })
        .await
        .unwrap();
    recv(&mut watch).await; // the tombstone
    create(&state, "a", 1).await;
    set(&state, "a", 2).await;
    let event = recv(&mut watch).await;
    assert!(
        matches!(
            &event,
            Event::Errored {
                error: Error::WatchOverrun { position, .. }
            } if position.to_string() == "0"
        ),
        "{event:?}"
    );
    assert_ends(&mut watch).await;
}

#[tokio::test(start_paused = true)]
async fn watch_for_absence_holds_when_its_watch_resyncs_after_the_resource_was_destroyed() {
    use cosi_core::StateExt;
    // Given a watch_for(absent) on a resource, whose watch has read the current state, and a
    // store that keeps one change and no destroy marker
    let state = small(1, 0);
    create(&state, "a", 1).await;
    let pointer_a = pointer("a");
    let gone = state.watch_for(&pointer_a, |r| r.is_none());
    tokio::pin!(gone);
    let first_poll = tokio::time::timeout(Duration::ZERO, gone.as_mut()).await;
    assert!(first_poll.is_err(), "a still exists: {first_poll:?}");
    // When the resource is destroyed and another change pushes the destroy out of the window
    destroy(&state, "a").await;
    create(&state, "b", 1).await;
    // Then its watch resyncs to contents without the resource, which is the absence it waits
    // for (before: it ignored the resync and the empty bootstrap and waited for ever)
    let result = tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("watch_for returns once its watch resynced to an absent resource");
    assert!(matches!(result, Ok(None)), "{result:?}");
}

#[tokio::test]
async fn a_pointer_watch_behind_evicted_destroy_markers_resyncs_to_a_tombstone_of_its_resource() {
    // Given a store that keeps one change and no destroy marker, and a pointer watch of a
    let state = small(1, 0);
    create(&state, "a", 1).await;
    let mut watch = watch_pointer(&state, "a").await;
    assert_eq!(describe(&recv(&mut watch).await), "created a 1 - @1");
    // When a is destroyed and another change pushes the destroy out of the window
    destroy(&state, "a").await;
    create(&state, "b", 1).await;
    // Then the watch resyncs, and says a is absent as its first event would have: a tombstone
    // (before: the resync and its bootstrapped alone, which said nothing about a)
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        ["resync @3", "destroyed a - @3", "bootstrapped @3"]
    );
}

#[tokio::test]
async fn modify_creates_the_resource_when_it_is_destroyed_between_its_read_and_its_update() {
    use cosi_core::StateExt;
    use futures::FutureExt;
    // Given a stored resource, destroyed by someone else while modify changes what it read
    let state = MemoryState::default();
    create(&state, "a", 1).await;
    let mut destroyed = false;
    let modified = state
        .modify(
            Resource::new("a", Counter::default()),
            UpdateOptions::default(),
            |r| {
                if !destroyed {
                    destroyed = true;
                    state
                        .destroy(&pointer("a"), DestroyOptions::default())
                        .now_or_never()
                        .expect("the in-memory store answers at once")
                        .unwrap();
                }
                r.spec.value = 7;
                Ok(())
            },
        )
        .await;
    // Then modify, which creates or updates, creates it again (before: it returned the
    // update's NotFound, which is not retryable)
    let stored = modified.expect("modify creates the resource again");
    assert_eq!((stored.spec.value, stored.metadata.version().get()), (7, 1));
}

#[tokio::test]
async fn published_writes_reach_watchers_like_direct_ones() {
    // Given a collection fed the way a durable backend feeds it: check, (persist), apply, wake
    let collection = Arc::new(super::Collection::new(kind(), &MemoryOptions::default(), 1));
    let mut watch =
        Watch::new(super::KindWatcher::of_kind(&collection, WatchKindOptions::default()).unwrap());
    let now = std::time::SystemTime::now();
    let mut v1 = counter("a", 1);
    super::write_rules::prepare_create(&mut v1, None, now).unwrap();
    collection.write().apply_create(v1.clone()).unwrap();
    collection.wake();
    let mut v2 = {
        let mut copy = cosi_core::downcast_ref::<Counter>(&*v1).unwrap().clone();
        copy.spec.value = 2;
        copy.into_shared()
    };
    {
        let contents = collection.read();
        let stored = contents.get("a").unwrap();
        super::write_rules::check_update(&**stored, &*v2, &UpdateOptions::default()).unwrap();
        super::write_rules::stamp_update(&**stored, &mut v2, now);
    }
    collection.write().apply_update(v2).unwrap();
    collection.wake();
    collection.write().apply_destroy(&pointer("a")).unwrap();
    collection.wake();
    // Then the watcher sees the three changes in order
    assert_eq!(
        describe_all(&recv_batch(&mut watch, 10).await),
        [
            "created a 1 - @1",
            "updated a 1->2 - @2",
            "destroyed a - @3"
        ]
    );
    // And publishing a create of an existing id or an update of a missing one is refused
    let mut again = counter("b", 1);
    super::write_rules::prepare_create(&mut again, None, now).unwrap();
    collection.write().apply_create(again.clone()).unwrap();
    assert!(collection
        .write()
        .apply_create(again)
        .unwrap_err()
        .is_already_exists());
    assert!(collection
        .write()
        .apply_update(counter("zz", 1))
        .unwrap_err()
        .is_not_found());
}

// ---- shared batches (`Watch::recv_shared`) ----

async fn recv_shared(watch: &mut Watch, max: usize) -> cosi_core::EventBatch {
    tokio::time::timeout(Duration::from_secs(5), watch.recv_shared(max))
        .await
        .expect("a batch within 5 s")
        .expect("the watch is still open")
}

#[tokio::test]
async fn unfiltered_watchers_of_the_same_changes_share_one_buffer() {
    let state = small(16, 16);
    let mut first = watch_every(&state).await;
    let mut second = watch_every(&state).await;
    create(&state, "a", 1).await;
    set(&state, "a", 2).await;
    let one = recv_shared(&mut first, 10).await;
    let other = recv_shared(&mut second, 10).await;
    assert_eq!(
        describe_all(&one),
        ["created a 1 - @1", "updated a 1->2 - @2"]
    );
    assert_eq!(describe_all(&other), describe_all(&one));
    assert!(
        std::ptr::eq(one.as_ptr(), other.as_ptr()),
        "both batches view the same events"
    );
}

#[tokio::test]
async fn a_shared_batch_holds_at_most_max_events_and_the_rest_follows() {
    let state = small(16, 16);
    let mut watch = watch_every(&state).await;
    create_numbered(&state, 5).await;
    let first = recv_shared(&mut watch, 3).await;
    let rest = recv_shared(&mut watch, 3).await;
    assert_eq!(
        describe_all(&first),
        [
            "created r0 0 - @1",
            "created r1 1 - @2",
            "created r2 2 - @3"
        ]
    );
    assert_eq!(
        describe_all(&rest),
        ["created r3 3 - @4", "created r4 4 - @5"]
    );
}

#[tokio::test]
async fn a_watcher_starting_inside_a_shared_chunk_gets_only_what_follows_its_start() {
    let state = small(16, 16);
    let mut early = watch_every(&state).await;
    create(&state, "a", 1).await;
    let mut late = watch_every(&state).await;
    create(&state, "b", 1).await;
    // The early watcher builds the chunk of both changes; the late one starts after the first.
    assert_eq!(recv_shared(&mut early, 10).await.len(), 2);
    assert_eq!(
        describe_all(&recv_shared(&mut late, 10).await),
        ["created b 1 - @2"]
    );
}

#[tokio::test]
async fn a_shared_watch_delivers_its_bootstrap_before_live_events() {
    let state = small(16, 16);
    create(&state, "a", 1).await;
    let mut watch = watch_bootstrapped(&state).await;
    create(&state, "b", 1).await;
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.extend(describe_all(&recv_shared(&mut watch, 10).await));
    }
    assert_eq!(
        seen,
        ["created a 1 - @1", "bootstrapped @1", "created b 1 - @2"]
    );
}

#[tokio::test]
async fn a_shared_watcher_behind_the_window_gets_the_same_catch_up_as_an_unshared_one() {
    let state = small(2, 16);
    create_numbered(&state, 2).await;
    let mut shared = watch_every(&state).await;
    let mut unshared = watch_every(&state).await;
    set(&state, "r0", 5).await;
    destroy(&state, "r1").await;
    create(&state, "c", 1).await;
    set(&state, "c", 2).await;
    // A catch-up is in id order.
    let expected = [
        "created c 2 c @6",
        "updated r0 ?->5 c @6",
        "destroyed r1 c @6",
    ];
    assert_eq!(describe_all(&recv_batch(&mut unshared, 10).await), expected);
    assert_eq!(describe_all(&recv_shared(&mut shared, 10).await), expected);
    set(&state, "c", 3).await;
    assert_eq!(
        describe_all(&recv_shared(&mut shared, 10).await),
        ["updated c 2->3 - @7"]
    );
}

#[tokio::test]
async fn a_filtered_watcher_gets_only_its_own_events_from_recv_shared() {
    let state = small(16, 16);
    let mut filtered = watch_kind_with(
        &state,
        WatchKindOptions {
            labels: web_only(),
            ..Default::default()
        },
    )
    .await;
    let mut every = watch_every(&state).await;
    create_labelled(&state, "a", 1, Some("web")).await;
    create_labelled(&state, "b", 1, None).await;
    assert_eq!(recv_shared(&mut every, 10).await.len(), 2);
    // b's creation, filtered out, moves the watcher's bookmark on.
    assert_eq!(
        describe_all(&recv_shared(&mut filtered, 10).await),
        ["created a 1 - @1", "noop @2"]
    );
}

#[tokio::test]
async fn shared_chunks_let_go_of_the_versions_the_window_let_go_of() {
    let state = small(2, 16);
    let mut watch = watch_every(&state).await;
    let first = Arc::downgrade(&create(&state, "a", 1).await);
    // The chunk of the create holds version 1; the batch is dropped at once.
    assert_eq!(recv_shared(&mut watch, 10).await.len(), 1);
    for value in 2..=4 {
        set(&state, "a", value).await;
        assert_eq!(recv_shared(&mut watch, 10).await.len(), 1);
    }
    assert!(
        first.upgrade().is_none(),
        "version 1 is still held after the window moved past it"
    );
}

/// Every call completes at once, yet a task calling the store in a loop yields to the other
/// tasks of its worker (tokio's budget): on a one-thread runtime, a task spawned before the
/// loop runs before the loop ends.
#[test]
fn a_task_calling_the_store_in_a_loop_lets_the_other_tasks_of_its_worker_run() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const CALLS: usize = 100_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let first_seen = runtime.block_on(async {
        let state = Arc::new(MemoryState::default());
        let looping = tokio::spawn(async move {
            create(&state, "a", 0).await;
            // Queued behind this task: it can run only when this task yields.
            let other_ran = Arc::new(AtomicBool::new(false));
            tokio::spawn({
                let other_ran = other_ran.clone();
                async move { other_ran.store(true, Ordering::SeqCst) }
            });
            for call in 0..CALLS {
                if other_ran.load(Ordering::SeqCst) {
                    return Some(call);
                }
                let _ = state.get(&pointer("a")).await;
            }
            None
        });
        looping.await.unwrap()
    });
    assert!(
        first_seen.is_some(),
        "the other task never ran during {CALLS} store calls"
    );
}

#[tokio::test]
async fn shared_chunks_let_go_of_the_versions_the_window_let_go_of_after_their_watchers_ended() {
    // Given a shared watcher that read version 1 of a, and then ended
    let state = small(2, 16);
    let mut watch = watch_every(&state).await;
    let first = Arc::downgrade(&create(&state, "a", 1).await);
    assert_eq!(recv_shared(&mut watch, 10).await.len(), 1);
    drop(watch);
    // When the kind changes well past the window
    for value in 2..=10 {
        set(&state, "a", value).await;
    }
    // Then nothing holds version 1 any more (before: the ended watcher's chunk did, for as
    // long as no other shared watcher of the kind read)
    assert!(first.upgrade().is_none(), "version 1 is still held");
}

#[tokio::test]
async fn a_shared_watcher_started_after_the_others_ended_still_gets_every_event() {
    // Given chunks built by a watcher that ended, and one that starts from its bookmark
    let state = small(8, 16);
    let mut first = watch_every(&state).await;
    create(&state, "a", 1).await;
    set(&state, "a", 2).await;
    assert_eq!(recv_shared(&mut first, 10).await.len(), 2);
    drop(first);
    let mut second = watch_kind_with(
        &state,
        WatchKindOptions {
            since: Some(at(&state, 0)),
            ..Default::default()
        },
    )
    .await;
    set(&state, "a", 3).await;
    // Then it gets every change exactly, from the window
    let events: Vec<Event> = recv_shared(&mut second, 10).await.to_vec();
    assert_eq!(
        describe_all(&events),
        [
            "created a 1 - @1",
            "updated a 1->2 - @2",
            "updated a 2->3 - @3"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn teardown_and_destroy_leaves_a_resource_created_again_by_someone_else_alone() {
    use cosi_core::StateExt;
    // Given a resource with a finalizer being torn down and destroyed, in a store that keeps
    // one change (so the wait's watch falls behind)
    let state = small(1, 16);
    create(&state, "a", 1).await;
    state.add_finalizer(&pointer("a"), &["f"]).await.unwrap();
    let pointer_a = pointer("a");
    let done = state.teardown_and_destroy(&pointer_a, None);
    tokio::pin!(done);
    let first_poll = tokio::time::timeout(Duration::ZERO, done.as_mut()).await;
    assert!(
        first_poll.is_err(),
        "it waits for the finalizer: {first_poll:?}"
    );
    // When someone else removes the finalizer, destroys it and creates it again
    state.remove_finalizer(&pointer("a"), &["f"]).await.unwrap();
    destroy(&state, "a").await;
    create(&state, "a", 2).await;
    create(&state, "b", 1).await;
    tokio::time::timeout(Duration::from_secs(60), done)
        .await
        .expect("teardown_and_destroy returns")
        .unwrap();
    // Then the new resource, never torn down, is left alone (before: destroyed)
    let stored = state.get(&pointer("a")).await.map(|r| value_of(&*r));
    assert!(matches!(stored, Ok(2)), "{stored:?}");
}

#[tokio::test]
async fn a_bookmark_of_one_kind_is_refused_by_a_watch_of_another() {
    #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
    struct Other {
        value: i64,
    }
    impl ResourceSpec for Other {
        const TYPE: &'static str = "Others.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }
    // Positions count per kind: the other kind's position 1 exists in this kind too.
    let state = MemoryState::default();
    create_numbered(&state, 3).await;
    state
        .create(
            Resource::new("o", Other { value: 1 }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let mut other_watch = state
        .watch_kind(
            &Other::kind(),
            WatchKindOptions {
                bootstrap: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let bookmark = recv_batch(&mut other_watch, 10)
        .await
        .last()
        .unwrap()
        .bookmark()
        .unwrap()
        .clone();
    let since = WatchKindOptions {
        since: Some(bookmark.clone()),
        ..Default::default()
    };
    let refused = state.watch_kind(&kind(), since).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        Error::bookmark_not_issued_here(kind().to_string(), &bookmark).to_string()
    );
}
