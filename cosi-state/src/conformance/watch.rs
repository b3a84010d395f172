//! Rules of watching: single-resource watches, kind watches (bootstrap, tail, resume, label
//! filters, aggregated batches), and what a watcher that falls behind the history window gets.

use std::collections::{BTreeMap, BTreeSet};

use cosi_core::{
    Bookmark, DestroyOptions, Error, Event, LabelOp, LabelQuery, LabelTerm, ListOptions, Phase,
    ResourceSpec, SharedResource, State, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};

use super::crud::with_value;
use super::fixture::{
    create_ok, events_through, expect_events, expect_ok, labelled_widget, next_event, seen,
    seen_all, widget, widget_pointer, widgets, within, Gadget, Seen, Widget, TIMEOUT,
};
use super::{Subject, HISTORY_WINDOW};

async fn update_value(rule: &str, state: &dyn State, id: &str, value: u64) -> SharedResource {
    let stored = expect_ok(
        rule,
        "get before update",
        state.get(&widget_pointer(id)).await,
    );
    expect_ok(
        rule,
        "update",
        state
            .update(with_value(&stored, value), UpdateOptions::default())
            .await,
    )
}

async fn destroy(rule: &str, state: &dyn State, id: &str) {
    expect_ok(
        rule,
        "destroy",
        state
            .destroy(&widget_pointer(id), DestroyOptions::default())
            .await,
    );
}

async fn watch_kind(rule: &str, state: &dyn State, options: WatchKindOptions) -> cosi_core::Watch {
    expect_ok(
        rule,
        "watch_kind",
        state.watch_kind(&widgets(), options).await,
    )
}

/// A single-resource watch of a missing resource starts with a `Destroyed` tombstone for it,
/// then reports its creation, updates (with the old state), destruction and re-creation, and
/// nothing about other resources.
pub async fn single_watch_starts_with_tombstone_for_missing_resource(subject: &Subject) {
    const RULE: &str = "single_watch_starts_with_tombstone_for_missing_resource";
    let state = subject.state();
    let pointer = widget_pointer("w");
    let mut watch = expect_ok(
        RULE,
        "watch",
        state.watch(&pointer, WatchOptions::default()).await,
    );

    let first = next_event(RULE, &mut watch).await;
    match &first {
        Event::Destroyed {
            resource,
            compacted: false,
            ..
        } => assert_eq!(
            resource.metadata().pointer(),
            &pointer,
            "{RULE}: tombstone pointer"
        ),
        other => panic!("{RULE}: first event must be a destroyed tombstone, got {other:?}"),
    }

    create_ok(state, RULE, widget("other", 0), None).await;
    create_ok(state, RULE, widget("w", 1), None).await;
    update_value(RULE, state, "w", 2).await;
    destroy(RULE, state, "w").await;
    create_ok(state, RULE, widget("w", 7), None).await;
    let events = expect_events(
        RULE,
        &mut watch,
        &[
            Seen::created("w", 1),
            Seen::updated("w", 2),
            Seen::destroyed("w", 2),
            Seen::created("w", 1),
        ],
        "events after the tombstone",
    )
    .await;
    super::fixture::assert_updated_has_old(RULE, &events[1]);
}

/// A single-resource watch of an existing resource starts with its current state as `Created`,
/// then reports every change.
pub async fn single_watch_starts_with_current_state(subject: &Subject) {
    const RULE: &str = "single_watch_starts_with_current_state";
    let state = subject.state();
    create_ok(state, RULE, widget("w", 1), None).await;
    update_value(RULE, state, "w", 2).await;

    let mut watch = expect_ok(
        RULE,
        "watch",
        state
            .watch(&widget_pointer("w"), WatchOptions::default())
            .await,
    );
    update_value(RULE, state, "w", 3).await;
    destroy(RULE, state, "w").await;
    let events = expect_events(
        RULE,
        &mut watch,
        &[
            Seen::created("w", 2),
            Seen::updated("w", 3),
            Seen::destroyed("w", 3),
        ],
        "current state, then every change",
    )
    .await;
    super::fixture::assert_updated_has_old(RULE, &events[1]);
}

/// A bootstrapping kind watch first delivers a `Created` per existing resource in id order
/// (current versions), then `Bootstrapped`, then live events; an empty kind bootstraps to just
/// the marker.
pub async fn kind_watch_bootstraps_contents_in_id_order(subject: &Subject) {
    const RULE: &str = "kind_watch_bootstraps_contents_in_id_order";
    let state = subject.state();
    for id in ["c", "a", "b"] {
        create_ok(state, RULE, widget(id, 0), None).await;
    }
    update_value(RULE, state, "a", 1).await;

    let bootstrap = WatchKindOptions {
        bootstrap: true,
        ..WatchKindOptions::default()
    };
    let mut watch = watch_kind(RULE, state, bootstrap.clone()).await;
    expect_events(
        RULE,
        &mut watch,
        &[
            Seen::created("a", 2),
            Seen::created("b", 1),
            Seen::created("c", 1),
            Seen::bootstrapped(),
        ],
        "bootstrap contents",
    )
    .await;

    update_value(RULE, state, "b", 1).await;
    destroy(RULE, state, "c").await;
    expect_events(
        RULE,
        &mut watch,
        &[Seen::updated("b", 2), Seen::destroyed("c", 1)],
        "live events after the bootstrap",
    )
    .await;

    let mut empty = expect_ok(
        RULE,
        "watch_kind of an empty kind",
        state.watch_kind(&Gadget::kind(), bootstrap).await,
    );
    let first = next_event(RULE, &mut empty).await;
    assert_eq!(
        seen(&first),
        Seen::bootstrapped(),
        "{RULE}: empty kind bootstrap"
    );
}

/// A bookmark the store did not issue (bytes from elsewhere) is refused at watch setup with an
/// invalid argument on `since`, never misread as a position.
pub async fn kind_watch_refuses_a_bookmark_it_did_not_issue(subject: &Subject) {
    const RULE: &str = "kind_watch_refuses_a_bookmark_it_did_not_issue";
    let state = subject.state();
    create_ok(state, RULE, widget("a", 0), None).await;
    let options = WatchKindOptions {
        since: Some(Bookmark::from_bytes(
            b"not issued by any store of this project",
        )),
        ..WatchKindOptions::default()
    };
    match state.watch_kind(&widgets(), options).await {
        Err(Error::InvalidArgument { field, .. }) => {
            assert_eq!(field, "since", "{RULE}: the refused field")
        }
        Err(other) => panic!("{RULE}: expected an invalid argument, got {other}"),
        Ok(_) => panic!("{RULE}: a foreign bookmark was accepted"),
    }
}

/// The `Bootstrapped` marker's bookmark is a resume position: a watch resumed after it yields
/// exactly the changes made after the bootstrap.
pub async fn kind_watch_resumes_after_bootstrap_bookmark(subject: &Subject) {
    const RULE: &str = "kind_watch_resumes_after_bootstrap_bookmark";
    let state = subject.state();
    create_ok(state, RULE, widget("a", 0), None).await;
    create_ok(state, RULE, widget("b", 0), None).await;
    let bootstrap = WatchKindOptions {
        bootstrap: true,
        ..WatchKindOptions::default()
    };
    let mut watch = watch_kind(RULE, state, bootstrap).await;
    let expected = [
        Seen::created("a", 1),
        Seen::created("b", 1),
        Seen::bootstrapped(),
    ];
    let events = expect_events(RULE, &mut watch, &expected, "bootstrap").await;
    let position = bookmark_of(RULE, &events[2]);

    update_value(RULE, state, "a", 1).await;
    destroy(RULE, state, "b").await;
    create_ok(state, RULE, widget("c", 0), None).await;
    let live = [
        Seen::updated("a", 2),
        Seen::destroyed("b", 1),
        Seen::created("c", 1),
    ];
    let from_bootstrap = expect_events(RULE, &mut watch, &live, "live after bootstrap").await;
    let resumed_options = WatchKindOptions {
        since: Some(position),
        ..WatchKindOptions::default()
    };
    let mut resumed = watch_kind(RULE, state, resumed_options).await;
    let from_resume = expect_events(RULE, &mut resumed, &live, "resumed after bootstrap").await;
    assert_eq!(
        bookmarks(&from_resume),
        bookmarks(&from_bootstrap),
        "{RULE}: resumed bookmarks"
    );
}

/// Writes a fixed history of five events: create a, create b, update a, destroy b, create c.
async fn write_short_history(rule: &str, state: &dyn State) -> Vec<Seen> {
    create_ok(state, rule, widget("a", 0), None).await;
    create_ok(state, rule, widget("b", 0), None).await;
    update_value(rule, state, "a", 1).await;
    destroy(rule, state, "b").await;
    create_ok(state, rule, widget("c", 0), None).await;
    vec![
        Seen::created("a", 1),
        Seen::created("b", 1),
        Seen::updated("a", 2),
        Seen::destroyed("b", 1),
        Seen::created("c", 1),
    ]
}

/// A kind watch with `tail: n` first delivers the last n events of the history (all of them if
/// there are fewer), then live events.
pub async fn kind_watch_tails_recent_events(subject: &Subject) {
    const RULE: &str = "kind_watch_tails_recent_events";
    let state = subject.state();
    let history = write_short_history(RULE, state).await;

    let tail = |n| WatchKindOptions {
        tail: Some(n),
        ..WatchKindOptions::default()
    };
    let mut last_three = watch_kind(RULE, state, tail(3)).await;
    let mut everything = watch_kind(RULE, state, tail(100)).await;
    create_ok(state, RULE, widget("d", 0), None).await;

    let mut expected = history[2..].to_vec();
    expected.push(Seen::created("d", 1));
    expect_events(RULE, &mut last_three, &expected, "tail 3, then live").await;

    let mut expected = history;
    expected.push(Seen::created("d", 1));
    let what = "tail beyond the history, then live";
    expect_events(RULE, &mut everything, &expected, what).await;
}

fn bookmark_of(rule: &str, event: &Event) -> Bookmark {
    event
        .bookmark()
        .cloned()
        .unwrap_or_else(|| panic!("{rule}: event without a bookmark: {event:?}"))
}

/// Every event carries a bookmark, bookmarks increase along the kind's order, and a watch
/// resumed after any recorded bookmark yields exactly the rest of the recorded sequence (same
/// events, same bookmarks), then live events.
pub async fn kind_watch_resumes_after_every_bookmark(subject: &Subject) {
    const RULE: &str = "kind_watch_resumes_after_every_bookmark";
    let state = subject.state();
    let mut recorder = watch_kind(RULE, state, WatchKindOptions::default()).await;
    let mut expected = write_short_history(RULE, state).await;
    update_value(RULE, state, "c", 1).await;
    create_ok(state, RULE, widget("b", 5), None).await;
    destroy(RULE, state, "a").await;
    expected.extend([
        Seen::updated("c", 2),
        Seen::created("b", 1),
        Seen::destroyed("a", 2),
    ]);

    let recorded = expect_events(RULE, &mut recorder, &expected, "recorded sequence").await;
    let bookmarks: Vec<Bookmark> = recorded.iter().map(|e| bookmark_of(RULE, e)).collect();
    assert!(
        bookmarks.windows(2).all(|w| w[0] < w[1]),
        "{RULE}: bookmarks must increase along the sequence: {bookmarks:?}"
    );

    let mut resumed = Vec::new();
    for bookmark in &bookmarks {
        let options = WatchKindOptions {
            since: Some(bookmark.clone()),
            ..WatchKindOptions::default()
        };
        resumed.push(watch_kind(RULE, state, options).await);
    }
    create_ok(state, RULE, widget("sentinel", 0), None).await;
    for (i, watch) in resumed.iter_mut().enumerate() {
        let rest = &recorded[i + 1..];
        let mut want = seen_all(rest);
        want.push(Seen::created("sentinel", 1));
        let what = format!("resumed after bookmark {} (event {i})", bookmarks[i]);
        let events = expect_events(RULE, watch, &want, &what).await;
        let got: Vec<Bookmark> = events[..rest.len()]
            .iter()
            .map(|e| bookmark_of(RULE, e))
            .collect();
        assert_eq!(
            got,
            bookmarks[i + 1..],
            "{RULE}: resumed bookmarks after event {i}"
        );
    }
}

/// With a label filter, an update that makes a resource start matching arrives as `Created`, one
/// that makes it stop matching as `Destroyed`; changes outside the filter are not delivered.
pub async fn label_filtered_kind_watch_turns_transitions_into_created_and_destroyed(
    subject: &Subject,
) {
    const RULE: &str = "label_filtered_kind_watch_turns_transitions_into_created_and_destroyed";
    let state = subject.state();
    let web = LabelQuery::new().with(LabelTerm::new("app", LabelOp::Equal("web".into())));
    let options = WatchKindOptions {
        labels: web.into(),
        ..WatchKindOptions::default()
    };
    let mut watch = watch_kind(RULE, state, options).await;

    let relabel = |stored: &SharedResource, app: &str, value: u64| {
        let mut next = with_value(stored, value);
        cosi_core::make_mut(&mut next)
            .metadata_mut()
            .labels_mut()
            .insert("app".into(), app.into());
        next
    };
    let write = |next| async move {
        expect_ok(
            RULE,
            "update",
            state.update(next, UpdateOptions::default()).await,
        )
    };
    let x1 = create_ok(state, RULE, labelled_widget("x", &[("app", "db")]), None).await;
    let x2 = write(relabel(&x1, "web", 0)).await; // starts matching
    let x3 = write(relabel(&x2, "web", 1)).await; // changes while matching
    let x4 = write(relabel(&x3, "db", 1)).await; // stops matching
    let _x5 = write(relabel(&x4, "db", 2)).await; // changes outside the filter
    destroy(RULE, state, "x").await; // destroyed outside the filter
    create_ok(state, RULE, labelled_widget("y", &[("app", "web")]), None).await;
    destroy(RULE, state, "y").await;
    create_ok(state, RULE, labelled_widget("z", &[("app", "web")]), None).await;

    let events = events_through(RULE, &mut watch, &Seen::created("z", 1), 1).await;
    let mut got = seen_all(&events);
    // Leaving the filter may report either the last matching state (3) or the new one (4).
    if got.len() > 2
        && got[2].kind == "destroyed"
        && got[2].id == "x"
        && (got[2].version == 3 || got[2].version == 4)
    {
        got[2].version = 3;
    }
    assert_eq!(
        got,
        [
            Seen::created("x", 2),
            Seen::updated("x", 3),
            Seen::destroyed("x", 3),
            Seen::created("y", 1),
            Seen::destroyed("y", 1),
            Seen::created("z", 1),
        ],
        "{RULE}: filtered events"
    );
}

/// An aggregated watch (`recv_batch`) delivers the same events, in the same order with the same
/// bookmarks, as a plain one, in non-empty batches no larger than asked.
pub async fn aggregated_watch_delivers_same_events_in_batches(subject: &Subject) {
    const RULE: &str = "aggregated_watch_delivers_same_events_in_batches";
    const MAX: usize = 3;
    let state = subject.state();
    let mut plain = watch_kind(RULE, state, WatchKindOptions::default()).await;
    let mut batched = watch_kind(RULE, state, WatchKindOptions::default()).await;
    let mut expected = write_short_history(RULE, state).await;
    update_value(RULE, state, "a", 2).await;
    update_value(RULE, state, "c", 1).await;
    create_ok(state, RULE, widget("d", 0), None).await;
    expected.extend([
        Seen::updated("a", 3),
        Seen::updated("c", 2),
        Seen::created("d", 1),
    ]);

    let from_plain = expect_events(RULE, &mut plain, &expected, "plain watch").await;

    let from_batches =
        take_in_batches(RULE, &mut batched, Batches::Owned(MAX), expected.len()).await;
    assert_eq!(seen_all(&from_batches), expected, "{RULE}: batched events");
    assert_eq!(
        bookmarks(&from_batches),
        bookmarks(&from_plain),
        "{RULE}: batched bookmarks"
    );
}

/// How [`take_in_batches`] reads a watch: `recv_batch` or `recv_shared`, at most this many.
#[derive(Clone, Copy)]
enum Batches {
    Owned(usize),
    Shared(usize),
}

/// Takes batches until `count` events other than `Noop` arrived, checking that each batch is
/// non-empty and no larger than asked.
async fn take_in_batches(rule: &str, watch: &mut Watch, how: Batches, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    while events.len() < count {
        let (batch, max) = match how {
            Batches::Owned(max) => (within(rule, "recv_batch", watch.recv_batch(max)).await, max),
            Batches::Shared(max) => (
                within(rule, "recv_shared", watch.recv_shared(max))
                    .await
                    .map(|batch| batch.to_vec()),
                max,
            ),
        };
        let batch = batch.unwrap_or_else(|| panic!("{rule}: the watch ended"));
        assert!(
            !batch.is_empty() && batch.len() <= max,
            "{rule}: batch of {} events, expected 1..={max}",
            batch.len()
        );
        events.extend(
            batch
                .into_iter()
                .filter(|e| !matches!(e, Event::Noop { .. })),
        );
    }
    events
}

/// The bookmark of each event.
fn bookmarks(events: &[Event]) -> Vec<Option<Bookmark>> {
    events.iter().map(|e| e.bookmark().cloned()).collect()
}

/// A watch read in shared batches (`recv_shared`) delivers the same events, in the same order
/// with the same bookmarks, as a plain one and as another shared one, in non-empty batches no
/// larger than asked.
pub async fn shared_batch_watch_delivers_same_events(subject: &Subject) {
    const RULE: &str = "shared_batch_watch_delivers_same_events";
    const MAX: usize = 2;
    let state = subject.state();
    let mut plain = watch_kind(RULE, state, WatchKindOptions::default()).await;
    let mut shared = [
        watch_kind(RULE, state, WatchKindOptions::default()).await,
        watch_kind(RULE, state, WatchKindOptions::default()).await,
    ];
    let mut expected = write_short_history(RULE, state).await;
    update_value(RULE, state, "a", 2).await;
    create_ok(state, RULE, widget("d", 0), None).await;
    expected.extend([Seen::updated("a", 3), Seen::created("d", 1)]);

    let from_plain = expect_events(RULE, &mut plain, &expected, "plain watch").await;
    for watch in &mut shared {
        let from_batches = take_in_batches(RULE, watch, Batches::Shared(MAX), expected.len()).await;
        assert_eq!(seen_all(&from_batches), expected, "{RULE}: shared events");
        assert_eq!(
            bookmarks(&from_batches),
            bookmarks(&from_plain),
            "{RULE}: shared bookmarks"
        );
    }
}

/// What a watcher believes a resource is: (version, value, phase, finalizers).
type View = BTreeMap<String, (u64, u64, Phase, BTreeSet<String>)>;

fn view_entry(resource: &SharedResource) -> (u64, u64, Phase, BTreeSet<String>) {
    let md = resource.metadata();
    let value = cosi_core::downcast_ref::<Widget>(&**resource)
        .map(|w| w.spec.value)
        .unwrap_or(u64::MAX);
    (
        md.version().get(),
        value,
        md.phase(),
        md.finalizers().clone(),
    )
}

/// Writes more than twice the history window while a watcher is not reading: many updates of
/// `pre-a`, a destroy of `pre-b`, a new `new-d`; then a sentinel.
async fn write_past_the_window(rule: &str, state: &dyn State) {
    for value in 1..=(2 * HISTORY_WINDOW as u64) {
        update_value(rule, state, "pre-a", value).await;
    }
    destroy(rule, state, "pre-b").await;
    create_ok(state, rule, widget("new-d", 0), None).await;
    update_value(rule, state, "new-d", 1).await;
    create_ok(state, rule, widget("sentinel", 0), None).await;
}

async fn create_pre_existing(rule: &str, state: &dyn State) -> View {
    let mut view = View::new();
    for id in ["pre-a", "pre-b", "pre-c"] {
        let created = create_ok(state, rule, widget(id, 0), None).await;
        view.insert(id.to_string(), view_entry(&created));
    }
    view
}

/// Whether a rule insists on a compacted catch-up, or also accepts the exact events.
#[derive(Clone, Copy, PartialEq)]
enum CatchUp {
    Required,
    ExactAllowed,
}

/// Reads a watch that fell behind until the sentinel, applying every event to `view`; then
/// checks the catch-up (if `catch_up` requires one, there was one) carried at most one event per
/// resource, and that `view` equals the store. A watcher that falls behind again while the
/// writes go on gets a second catch-up, which may name the same resources again: the events of
/// one catch-up are told apart by their bookmark (every event of a catch-up carries the head
/// it was computed at).
async fn catch_up_matches_store(
    rule: &str,
    state: &dyn State,
    watch: &mut Watch,
    mut view: View,
    catch_up: CatchUp,
) {
    // Per catch-up (consecutive compacted events with one bookmark), the ids it named.
    let mut catch_ups: Vec<(Option<Bookmark>, Vec<Option<String>>)> = Vec::new();
    loop {
        let event = next_event(rule, watch).await;
        if event.is_compacted() {
            let id = event.resource().map(|r| r.metadata().id().to_string());
            match catch_ups.last_mut() {
                Some((bookmark, ids)) if bookmark.as_ref() == event.bookmark() => ids.push(id),
                _ => catch_ups.push((event.bookmark().cloned(), vec![id])),
            }
        } else if let Some(last) = catch_ups.last_mut() {
            // A live event ends a catch-up: one that follows is another, even at one bookmark.
            last.0 = None;
        }
        match &event {
            Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                view.insert(resource.metadata().id().to_string(), view_entry(resource));
            }
            Event::Destroyed { resource, .. } => {
                view.remove(resource.metadata().id());
            }
            Event::Resync { .. } => panic!(
                "{rule}: a catch-up was computable (one destroy, markers kept) but got a resync"
            ),
            Event::Errored { error } => panic!("{rule}: a non-strict watch ended with {error:?}"),
            _ => {}
        }
        if event
            .resource()
            .is_some_and(|r| r.metadata().id() == "sentinel")
        {
            break;
        }
    }
    assert!(
        catch_up == CatchUp::ExactAllowed || !catch_ups.is_empty(),
        "{rule}: writing {} events past a window of {HISTORY_WINDOW} must produce a compacted catch-up",
        2 * HISTORY_WINDOW + 4
    );
    for (_, ids) in &catch_ups {
        let unique: BTreeSet<_> = ids.iter().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "{rule}: a catch-up carries at most one event per resource: {ids:?} (catch-ups: \
             {catch_ups:?})"
        );
    }
    let listed = expect_ok(
        rule,
        "list",
        state.list(&widgets(), &ListOptions::default()).await,
    );
    let store: View = listed
        .iter()
        .map(|r| (r.metadata().id().to_string(), view_entry(r)))
        .collect();
    assert_eq!(
        view, store,
        "{rule}: the watcher's view after the catch-up must equal the store"
    );
}

/// After a catch-up the watch continues with exact live events.
async fn continues_live(rule: &str, state: &dyn State, watch: &mut Watch) {
    update_value(rule, state, "pre-c", 1).await;
    let live = next_event(rule, watch).await;
    assert_eq!(
        seen(&live),
        Seen::updated("pre-c", 2),
        "{rule}: live event after the catch-up"
    );
    super::fixture::assert_updated_has_old(rule, &live);
}

/// A watcher paused past the history window is not ended: it receives a catch-up (events
/// marked compacted, at most one per resource) after which its view equals the store's, and
/// then continues with exact live events.
pub async fn watcher_behind_window_receives_compacted_catch_up(subject: &Subject) {
    const RULE: &str = "watcher_behind_window_receives_compacted_catch_up";
    let state = subject.state();
    let view = create_pre_existing(RULE, state).await;
    let mut watch = watch_kind(RULE, state, WatchKindOptions::default()).await;
    write_past_the_window(RULE, state).await;

    catch_up_matches_store(RULE, state, &mut watch, view, CatchUp::Required).await;
    continues_live(RULE, state, &mut watch).await;
}

/// A watch resumed after a bookmark that has left the history window is not refused: it
/// receives a compacted catch-up from that position (or, from a backend that still holds the
/// exact history there, such as etcd before compaction, the exact events), after which its view
/// equals the store's, then live events.
pub async fn watch_resumed_from_bookmark_behind_window_converges(subject: &Subject) {
    const RULE: &str = "watch_resumed_from_bookmark_behind_window_converges";
    let state = subject.state();
    let view = create_pre_existing(RULE, state).await;
    let bootstrap = WatchKindOptions {
        bootstrap: true,
        ..WatchKindOptions::default()
    };
    let mut first = watch_kind(RULE, state, bootstrap).await;
    let expected = [
        Seen::created("pre-a", 1),
        Seen::created("pre-b", 1),
        Seen::created("pre-c", 1),
        Seen::bootstrapped(),
    ];
    let events = expect_events(RULE, &mut first, &expected, "bootstrap").await;
    let position = bookmark_of(RULE, &events[3]);
    drop(first);
    write_past_the_window(RULE, state).await;

    let resumed = WatchKindOptions {
        since: Some(position),
        ..WatchKindOptions::default()
    };
    let mut watch = watch_kind(RULE, state, resumed).await;
    catch_up_matches_store(RULE, state, &mut watch, view, CatchUp::ExactAllowed).await;
    continues_live(RULE, state, &mut watch).await;
}

/// A strict watcher that falls behind the window receives the exact events it can, then an
/// explicit `WatchOverrun` error for its kind (naming the last bookmark it received), and the
/// watch ends.
pub async fn strict_watcher_behind_window_gets_overrun_error(subject: &Subject) {
    const RULE: &str = "strict_watcher_behind_window_gets_overrun_error";
    let state = subject.state();
    create_pre_existing(RULE, state).await;
    let strict = WatchKindOptions {
        strict: true,
        ..WatchKindOptions::default()
    };
    let mut watch = watch_kind(RULE, state, strict).await;
    write_past_the_window(RULE, state).await;

    let mut last_bookmark = None;
    let error = loop {
        match next_event(RULE, &mut watch).await {
            Event::Errored { error } => break error,
            event if event.is_compacted() || matches!(event, Event::Resync { .. }) => {
                panic!("{RULE}: a strict watcher must not be caught up, got {event:?}")
            }
            event => last_bookmark = event.bookmark().cloned().or(last_bookmark),
        }
    };
    match &error {
        Error::WatchOverrun { kind, position } => {
            assert_eq!(kind, &widgets(), "{RULE}: overrun kind");
            if let Some(last) = last_bookmark {
                assert_eq!(
                    *position, last,
                    "{RULE}: overrun position must be the last bookmark received"
                );
            }
        }
        other => panic!("{RULE}: expected WatchOverrun, got {other:?}"),
    }
    let end = tokio::time::timeout(TIMEOUT, watch.recv()).await;
    assert!(
        matches!(end, Ok(None)),
        "{RULE}: the watch must end after the overrun error, got {end:?}"
    );
}

/// A single-resource watch paused past the history window is not ended: it catches up
/// (compacted) to the resource's latest state, then continues with exact live events.
pub async fn single_watch_behind_window_catches_up_to_latest_state(subject: &Subject) {
    const RULE: &str = "single_watch_behind_window_catches_up_to_latest_state";
    let state = subject.state();
    create_ok(state, RULE, widget("w", 0), None).await;
    let pointer = widget_pointer("w");
    let mut watch = expect_ok(
        RULE,
        "watch",
        state.watch(&pointer, WatchOptions::default()).await,
    );
    let writes = 2 * HISTORY_WINDOW as u64;
    for value in 1..=writes {
        update_value(RULE, state, "w", value).await;
    }

    let latest = writes + 1;
    let mut compacted = 0;
    loop {
        let event = next_event(RULE, &mut watch).await;
        compacted += usize::from(event.is_compacted());
        match &event {
            Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                let md = resource.metadata();
                assert_eq!(md.pointer(), &pointer, "{RULE}: event of another resource");
                if md.version().get() == latest {
                    assert_eq!(view_entry(resource).1, writes, "{RULE}: latest value");
                    break;
                }
            }
            other => panic!("{RULE}: unexpected event {other:?}"),
        }
    }
    assert!(
        compacted > 0,
        "{RULE}: {writes} writes past a window of {HISTORY_WINDOW} must produce a compacted catch-up"
    );
    update_value(RULE, state, "w", 0).await;
    let live = next_event(RULE, &mut watch).await;
    assert_eq!(
        seen(&live),
        Seen::updated("w", latest + 1),
        "{RULE}: live event after the catch-up"
    );
}

/// A single-resource watch that falls behind the window while its resource is destroyed (and
/// past more destructions than the store keeps markers for) learns that the resource is
/// absent: from a catch-up, a `Destroyed` of it; from a resync, which replaces the consumer's
/// view, a `Destroyed` tombstone between `Resync` and `Bootstrapped`, as the first event of a
/// watch of a missing resource says it. Then it continues with exact live events.
pub async fn single_watch_behind_window_learns_its_resource_was_destroyed(subject: &Subject) {
    const RULE: &str = "single_watch_behind_window_learns_its_resource_was_destroyed";
    let state = subject.state();
    let others = 2 * HISTORY_WINDOW;
    create_ok(state, RULE, widget("w", 0), None).await;
    for n in 0..others {
        create_ok(state, RULE, widget(&format!("o-{n:03}"), 0), None).await;
    }
    let pointer = widget_pointer("w");
    let mut watch = expect_ok(
        RULE,
        "watch",
        state.watch(&pointer, WatchOptions::default()).await,
    );
    expect_events(RULE, &mut watch, &[Seen::created("w", 1)], "first event").await;
    destroy(RULE, state, "w").await;
    for n in 0..others {
        destroy(RULE, state, &format!("o-{n:03}")).await;
    }

    let first = next_event(RULE, &mut watch).await;
    let absent = |event: &Event| matches!(event, Event::Destroyed { resource, .. } if resource.metadata().pointer() == &pointer);
    if matches!(first, Event::Resync { .. }) {
        let said = next_event(RULE, &mut watch).await;
        assert!(
            absent(&said) && !said.is_compacted(),
            "{RULE}: a resync of a watch whose resource is gone must say so with a destroyed \
             tombstone, got {:?} ({said:?})",
            seen(&said)
        );
        let end = next_event(RULE, &mut watch).await;
        assert_eq!(
            seen(&end),
            Seen::bootstrapped(),
            "{RULE}: end of the resync"
        );
    } else {
        assert!(
            absent(&first),
            "{RULE}: a watch that lagged past its resource's destruction must receive it, got \
             {:?} ({first:?})",
            seen(&first)
        );
    }
    create_ok(state, RULE, widget("w", 7), None).await;
    let live = next_event(RULE, &mut watch).await;
    assert_eq!(
        seen(&live),
        Seen::created("w", 1),
        "{RULE}: live event after the resource was said absent"
    );
}

/// A strict single-resource watch that falls behind the window ends with an explicit
/// `WatchOverrun` error for the resource's kind.
pub async fn strict_single_watch_behind_window_gets_overrun_error(subject: &Subject) {
    const RULE: &str = "strict_single_watch_behind_window_gets_overrun_error";
    let state = subject.state();
    create_ok(state, RULE, widget("w", 0), None).await;
    let strict = WatchOptions { strict: true };
    let mut watch = expect_ok(
        RULE,
        "watch",
        state.watch(&widget_pointer("w"), strict).await,
    );
    for value in 1..=(2 * HISTORY_WINDOW as u64) {
        update_value(RULE, state, "w", value).await;
    }
    let error = loop {
        match next_event(RULE, &mut watch).await {
            Event::Errored { error } => break error,
            event if event.is_compacted() || matches!(event, Event::Resync { .. }) => {
                panic!("{RULE}: a strict watcher must not be caught up, got {event:?}")
            }
            _ => {}
        }
    };
    assert!(
        matches!(&error, Error::WatchOverrun { kind, .. } if *kind == widgets()),
        "{RULE}: expected WatchOverrun for the widget kind, got {error:?}"
    );
    let end = tokio::time::timeout(TIMEOUT, watch.recv()).await;
    assert!(
        matches!(end, Ok(None)),
        "{RULE}: the watch must end after the overrun error, got {end:?}"
    );
}
