//! Rules of the catch-up's change log: a catch-up that takes the changed resources from the log
//! says exactly what a scan of every live resource says, the log stays bounded, and positions it
//! no longer covers fall back to the scan.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use cosi_core::{DynamicResource, Event, IdQuery, LabelOp, LabelQuery, LabelTerm, Metadata};
use cosi_core::{LabelQueries, Pointer, SharedResource};
use proptest::prelude::*;

use super::*;

const KIND: &str = "Counters.test.cosi.dev";

/// Counter `id` holding `value`, labelled `app=web` when `web`.
fn counter(id: &str, value: i64, web: bool) -> SharedResource {
    let mut metadata = Metadata::new(Pointer::new("test", KIND, id));
    if web {
        metadata.labels_mut().insert("app".into(), "web".into());
    }
    Arc::new(DynamicResource {
        metadata,
        spec: serde_json::Value::from(value),
    })
}

fn pointer(id: &str) -> Pointer {
    Pointer::new("test", KIND, id)
}

/// A window of exactly `history` changes and 1024 destroy markers, all kept (the minimum for
/// markers is `history_min`; the window's is capped at its limit).
fn sizing(history: usize) -> MemoryOptions {
    MemoryOptions {
        history,
        history_min: 1024,
        max_destroy_markers: 1024,
    }
}

/// Contents with a window of one change, so every earlier position is behind it, and a log
/// that keeps one entry per `scan_ratio` live resources.
fn contents(scan_ratio: usize) -> KindContents {
    KindContents::with_scan_ratio(&sizing(1), 0, scan_ratio)
}

/// What a label-filtered consumer holding `ids` holds.
fn holding(ids: &[&str]) -> Delivered {
    Delivered::Ids(ids.iter().map(|id| Arc::from(*id)).collect())
}

fn every_id() -> WatchFilter {
    WatchFilter::new(None, &LabelQueries::default())
}

fn web_only() -> WatchFilter {
    let web = LabelQuery::new().with(LabelTerm::new("app", LabelOp::Equal("web".into())));
    WatchFilter::new(None, &LabelQueries(vec![web]))
}

fn describe(event: &Event) -> String {
    let (op, compacted) = match event {
        Event::Created { compacted, .. } => ("created", *compacted),
        Event::Updated { compacted, .. } => ("updated", *compacted),
        Event::Destroyed { compacted, .. } => ("destroyed", *compacted),
        Event::Resync { bookmark } => return format!("resync @{bookmark}"),
        Event::Bootstrapped { bookmark } => return format!("bootstrapped @{bookmark}"),
        other => return format!("{other:?}"),
    };
    let resource = event.resource().expect("a change carries its resource");
    let value = resource.spec_value().map_or("?".into(), |v| v.to_string());
    let bookmark = match event {
        Event::Created { bookmark, .. }
        | Event::Updated { bookmark, .. }
        | Event::Destroyed { bookmark, .. } => bookmark.clone(),
        _ => unreachable!("matched above"),
    };
    format!(
        "{op} {} {value} {} @{bookmark}",
        resource.metadata().id(),
        if compacted { "c" } else { "-" }
    )
}

fn catch_up(
    contents: &KindContents,
    position: u64,
    filter: &WatchFilter,
    delivered: &Delivered,
    search: ChangedSearch,
) -> Vec<String> {
    let mut out = VecDeque::new();
    let head = contents.catch_up_with(position, filter, delivered, &mut out, search);
    assert_eq!(head, contents.head());
    out.iter().map(describe).collect()
}

/// Whether a catch-up from `position` takes the changed resources from the log.
fn log_covers(contents: &KindContents, position: u64) -> bool {
    contents.changes.after(position).is_some()
}

/// Asserts that the log covers `position` and that a catch-up from it says what a scan says;
/// returns what it says.
fn log_catch_up_equals_scan(
    contents: &KindContents,
    position: u64,
    filter: &WatchFilter,
    delivered: &Delivered,
) -> Vec<String> {
    assert!(
        log_covers(contents, position),
        "the log must cover @{position}"
    );
    let from_log = catch_up(
        contents,
        position,
        filter,
        delivered,
        ChangedSearch::Cheapest,
    );
    assert_eq!(
        from_log,
        catch_up(contents, position, filter, delivered, ChangedSearch::Scan)
    );
    from_log
}

fn create(contents: &mut KindContents, id: &str, value: i64) -> u64 {
    contents.apply_create(counter(id, value, true)).unwrap()
}

fn update(contents: &mut KindContents, id: &str, value: i64) -> u64 {
    contents.apply_update(counter(id, value, true)).unwrap()
}

fn destroy(contents: &mut KindContents, id: &str) -> u64 {
    contents.apply_destroy(&pointer(id)).unwrap()
}

#[test]
fn a_catch_up_from_the_log_lists_changes_in_id_order_like_a_scan() {
    let mut contents = contents(1);
    for id in ["d", "c", "b", "a"] {
        create(&mut contents, id, 0);
    }
    let position = contents.head();
    update(&mut contents, "d", 1);
    create(&mut contents, "e", 1);
    update(&mut contents, "a", 1);
    destroy(&mut contents, "b");
    assert_eq!(
        log_catch_up_equals_scan(&contents, position, &every_id(), &Delivered::Untracked),
        [
            "updated a 1 c @8",
            "destroyed b 0 c @8",
            "updated d 1 c @8",
            "created e 1 c @8"
        ]
    );
}

#[test]
fn a_resource_changed_again_appears_once_with_its_latest_state() {
    let mut contents = contents(1);
    for id in ["a", "b", "c", "d"] {
        create(&mut contents, id, 0);
    }
    let position = contents.head();
    for value in 1..=3 {
        update(&mut contents, "a", value);
    }
    assert_eq!(
        log_catch_up_equals_scan(&contents, position, &every_id(), &Delivered::Untracked),
        ["updated a 3 c @7"]
    );
}

#[test]
fn a_logged_change_of_a_resource_destroyed_since_is_not_reported_live() {
    let mut contents = contents(1);
    for id in ["a", "b", "c"] {
        create(&mut contents, id, 0);
    }
    let position = contents.head();
    update(&mut contents, "a", 1);
    destroy(&mut contents, "a");
    assert_eq!(
        log_catch_up_equals_scan(&contents, position, &every_id(), &Delivered::Untracked),
        ["destroyed a 1 c @5"]
    );
}

#[test]
fn a_resource_created_and_destroyed_since_the_position_is_not_reported() {
    let mut contents = contents(1);
    for id in ["a", "b"] {
        create(&mut contents, id, 0);
    }
    let position = contents.head();
    create(&mut contents, "c", 1);
    update(&mut contents, "c", 2);
    destroy(&mut contents, "c");
    create(&mut contents, "d", 1);
    assert_eq!(
        log_catch_up_equals_scan(&contents, position, &every_id(), &Delivered::Untracked),
        ["created d 1 c @6"]
    );
}

#[test]
fn a_resource_destroyed_and_recreated_is_reported_updated_with_its_new_state() {
    let mut contents = contents(1);
    for id in ["a", "b", "c", "d"] {
        create(&mut contents, id, 0);
    }
    let position = contents.head();
    update(&mut contents, "a", 1);
    destroy(&mut contents, "a");
    create(&mut contents, "a", 7);
    assert_eq!(
        log_catch_up_equals_scan(&contents, position, &every_id(), &Delivered::Untracked),
        ["updated a 7 c @7"]
    );
}

#[test]
fn filters_apply_to_changes_taken_from_the_log() {
    let mut contents = contents(1);
    for id in ["a", "b", "c", "x"] {
        create(&mut contents, id, 0);
    }
    let position = contents.head();
    contents.apply_update(counter("a", 1, false)).unwrap(); // leaves the label filter
    update(&mut contents, "b", 1);
    update(&mut contents, "x", 1); // outside the id filter
    let filter = WatchFilter {
        ids: IdFilter::Query(IdQuery::new("^[abc]$").unwrap()),
        ..web_only()
    };
    assert_eq!(
        log_catch_up_equals_scan(&contents, position, &filter, &holding(&["a", "b", "c"])),
        ["destroyed a 1 c @7", "updated b 1 c @7"]
    );
}

#[test]
fn the_log_stays_bounded_after_many_updates_to_one_resource() {
    let mut contents = contents(SCAN_RATIO);
    for i in 0..2 * SCAN_RATIO {
        create(&mut contents, &format!("item-{i:04}"), 0);
    }
    for value in 1..=10_000 {
        update(&mut contents, "item-0000", value);
    }
    assert_eq!(contents.changes.len(), 2);
}

#[test]
fn a_kind_no_larger_than_the_scan_ratio_times_the_window_keeps_no_log() {
    let window = 4;
    let mut contents = KindContents::new(&sizing(window), 0);
    for i in 0..window * SCAN_RATIO {
        create(&mut contents, &format!("item-{i:04}"), 0);
    }
    assert_eq!(contents.changes.len(), 0);
    assert!(!log_covers(&contents, contents.head() - 1));
    create(&mut contents, "item-9999", 0);
    assert_eq!(contents.changes.len(), 1);
    assert!(log_covers(&contents, contents.head() - 1));
}

#[test]
fn a_position_older_than_the_log_falls_back_to_a_scan_with_the_same_output() {
    let mut contents = contents(2);
    for id in ["a", "b", "c", "d"] {
        create(&mut contents, id, 0);
    }
    let position = 3;
    update(&mut contents, "b", 1);
    update(&mut contents, "d", 1);
    update(&mut contents, "a", 1);
    assert!(!log_covers(&contents, position));
    let expected = ["updated a 1 c @7", "updated b 1 c @7", "created d 1 c @7"];
    for search in [ChangedSearch::Cheapest, ChangedSearch::Scan] {
        assert_eq!(
            catch_up(
                &contents,
                position,
                &every_id(),
                &Delivered::Untracked,
                search
            ),
            expected
        );
    }
}

#[test]
fn a_large_kind_takes_recent_catch_ups_from_the_log() {
    let mut contents = contents(SCAN_RATIO);
    let live = 100 * SCAN_RATIO;
    for i in 0..live {
        create(&mut contents, &format!("item-{i:05}"), 0);
    }
    let position = contents.head();
    for i in (0..live).step_by(37).take(60) {
        update(&mut contents, &format!("item-{i:05}"), 1);
    }
    let events = log_catch_up_equals_scan(&contents, position, &every_id(), &Delivered::Untracked);
    assert_eq!(events.len(), 60);
    assert_eq!(
        events[0],
        format!("updated item-00000 1 c @{}", contents.head())
    );
}

#[test]
fn resources_loaded_at_open_count_as_changed_at_the_head_they_were_loaded_at() {
    let mut contents = KindContents::with_scan_ratio(&sizing(1), 10, 1);
    for id in ["a", "b", "c"] {
        contents.load(counter(id, 0, true));
    }
    contents.load(counter("b", 5, true)); // replaces a value loaded at the same head
    update(&mut contents, "c", 1);
    update(&mut contents, "a", 1);
    assert_eq!(
        log_catch_up_equals_scan(&contents, 10, &every_id(), &Delivered::Untracked),
        ["updated a 1 c @12", "updated c 1 c @12"]
    );
    assert_eq!(
        catch_up(
            &contents,
            9,
            &every_id(),
            &Delivered::Untracked,
            ChangedSearch::Cheapest
        ),
        [
            "resync @12",
            "created a 1 - @12",
            "created b 5 - @12",
            "created c 1 - @12",
            "bootstrapped @12"
        ]
    );
}

// ---- model test: the log path agrees with the scan on every history and position ----

#[derive(Clone, Debug)]
enum Op {
    Create(u8, bool),
    Update(u8, bool),
    Destroy(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..12, any::<bool>()).prop_map(|(id, web)| Op::Create(id, web)),
        (0u8..12, any::<bool>()).prop_map(|(id, web)| Op::Update(id, web)),
        (0u8..12).prop_map(Op::Destroy),
    ]
}

fn filter() -> impl Strategy<Value = WatchFilter> {
    prop_oneof![
        Just(every_id()),
        Just(web_only()),
        Just(WatchFilter {
            ids: IdFilter::Query(IdQuery::new("^id-0[0-5]$").unwrap()),
            labels: LabelQueries::default(),
        }),
        (0u8..12).prop_map(|id| WatchFilter {
            ids: IdFilter::Exact(Arc::from(format!("id-{id:02}"))),
            labels: LabelQueries::default(),
        }),
    ]
}

proptest! {
    #[test]
    fn catch_up_output_equals_a_full_scan(
        scan_ratio in 1usize..4,
        ops in proptest::collection::vec(op(), 0..80),
        positions in proptest::collection::vec(any::<prop::sample::Index>(), 1..6),
        filter in filter(),
    ) {
        let mut contents = KindContents::with_scan_ratio(&sizing(1), 0, scan_ratio);
        // What a label-filtered consumer at each position holds: what matched there.
        let mut matching: BTreeMap<u64, HashSet<Arc<str>>> = BTreeMap::new();
        matching.insert(0, HashSet::new());
        let mut value = 0;
        for op in ops {
            value += 1;
            // Writes that break a rule (create of an existing id, update or destroy of a
            // missing one) fail and change nothing, as in the store.
            let _ = match op {
                Op::Create(id, web) => contents.apply_create(counter(&format!("id-{id:02}"), value, web)),
                Op::Update(id, web) => contents.apply_update(counter(&format!("id-{id:02}"), value, web)),
                Op::Destroy(id) => contents.apply_destroy(&pointer(&format!("id-{id:02}"))),
            };
            matching.insert(contents.head(), contents.matching_ids(&filter));
        }
        for position in positions {
            let position = position.index(contents.head() as usize + 1) as u64;
            let delivered = if filter.has_labels() {
                Delivered::Ids(matching[&position].clone())
            } else {
                Delivered::Untracked
            };
            prop_assert_eq!(
                catch_up(&contents, position, &filter, &delivered, ChangedSearch::Cheapest),
                catch_up(&contents, position, &filter, &delivered, ChangedSearch::Scan)
            );
        }
    }
}

// ---- what the destroy markers keep ----

#[test]
fn destroy_markers_no_live_watcher_needs_are_dropped_when_the_window_cannot_resize() {
    // Given a window whose minimum is its limit (it never grows or shrinks, so nothing it does
    // refreshes the watchers' bound), and a watch at the start that has ended
    let options = MemoryOptions {
        history: 4,
        history_min: 4,
        max_destroy_markers: 1024,
    };
    let mut contents = KindContents::new(&options, 0);
    drop(contents.register_watcher(0));
    // When 100 resources are created and destroyed
    for i in 0..100 {
        let id = format!("r{i}");
        create(&mut contents, &id, i);
        destroy(&mut contents, &id);
    }
    // Then only the newest `history_min` markers are kept: no live watcher is behind the
    // others (before: all 100, kept for the ended watch until the 1024 cap)
    assert_eq!(contents.markers.len(), 4);
}
