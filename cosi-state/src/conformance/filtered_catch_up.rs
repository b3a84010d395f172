//! Rules of a label-filtered watcher that falls behind the history window: its catch-up is
//! relative to what it saw (DESIGN §4, "Watch delivery") — a resource that entered the filter
//! while it lagged arrives as `Created`, one that left it or was destroyed as `Destroyed`, an
//! update of one it holds as `Updated`, and one it never saw gets no event at all.
//!
//! Every rule runs the same scenario ([`lag_behind_a_filter`]) and checks the events about one
//! resource.

use cosi_core::{
    make_mut, Event, LabelOp, LabelQuery, LabelTerm, ListOptions, SharedResource, State,
    UpdateOptions, WatchKindOptions,
};

use super::consumer_view::ConsumerView;
use super::crud::with_value;
use super::fixture::{
    create_ok, expect_events, expect_ok, labelled_widget, next_event, seen, widget_pointer,
    widgets, Seen,
};
use super::{Subject, HISTORY_WINDOW};

/// The label the scenario's watcher selects.
fn web() -> cosi_core::LabelQueries {
    LabelQuery::new()
        .with(LabelTerm::new("app", LabelOp::Equal("web".into())))
        .into()
}

/// Sets widget `id`'s `app` label and value (one update).
async fn relabel(rule: &str, state: &dyn State, id: &str, app: &str, value: u64) {
    let stored = expect_ok(rule, "get", state.get(&widget_pointer(id)).await);
    let mut next = with_value(&stored, value);
    make_mut(&mut next)
        .metadata_mut()
        .labels_mut()
        .insert("app".into(), app.into());
    expect_ok(
        rule,
        "relabel",
        state.update(next, UpdateOptions::default()).await,
    );
}

async fn destroy(rule: &str, state: &dyn State, id: &str) {
    expect_ok(
        rule,
        "destroy",
        state.destroy(&widget_pointer(id), Default::default()).await,
    );
}

/// The last resource the scenario writes; its id sorts after every other one, so it is also
/// the last event of a catch-up (which comes in id order).
const SENTINEL: &str = "z-sentinel";

/// The scenario: a watcher selecting `app=web` bootstraps `busy`, `gone`, `leaves` and `stays`
/// (`enters`, `never`, `never-gone` and `pad` are `app=db`), then stops reading while
///
/// - `busy` is updated `HISTORY_WINDOW / 2` times (filling whatever buffers sit between the
///   store and the consumer, so the watcher is behind before the changes below);
/// - `enters` becomes `app=web`, `leaves` becomes `app=db`, `gone` is destroyed, `stays` is
///   updated;
/// - `never` is updated, `never-gone` destroyed and `never-new` created, all `app=db`;
/// - `pad` is updated `2 × HISTORY_WINDOW` times, past the window;
/// - the sentinel is created `app=web`.
///
/// Returns the bootstrap's events, and the events after it through the sentinel's, having
/// checked that the watcher fell behind (some event is compacted).
async fn lag_behind_a_filter(rule: &str, state: &dyn State) -> (Vec<Event>, Vec<Event>) {
    for (id, app) in [
        ("busy", "web"),
        ("enters", "db"),
        ("gone", "web"),
        ("leaves", "web"),
        ("never", "db"),
        ("never-gone", "db"),
        ("pad", "db"),
        ("stays", "web"),
    ] {
        create_ok(state, rule, labelled_widget(id, &[("app", app)]), None).await;
    }
    let options = WatchKindOptions {
        bootstrap: true,
        labels: web(),
        ..WatchKindOptions::default()
    };
    let mut watch = expect_ok(
        rule,
        "watch_kind",
        state.watch_kind(&widgets(), options).await,
    );
    let bootstrap = [
        Seen::created("busy", 1),
        Seen::created("gone", 1),
        Seen::created("leaves", 1),
        Seen::created("stays", 1),
        Seen::bootstrapped(),
    ];
    let bootstrap = expect_events(rule, &mut watch, &bootstrap, "bootstrap").await;

    for value in 1..=(HISTORY_WINDOW as u64 / 2) {
        relabel(rule, state, "busy", "web", value).await;
    }
    relabel(rule, state, "enters", "web", 1).await;
    relabel(rule, state, "leaves", "db", 1).await;
    destroy(rule, state, "gone").await;
    relabel(rule, state, "stays", "web", 1).await;
    relabel(rule, state, "never", "db", 1).await;
    destroy(rule, state, "never-gone").await;
    create_ok(
        state,
        rule,
        labelled_widget("never-new", &[("app", "db")]),
        None,
    )
    .await;
    for value in 1..=(2 * HISTORY_WINDOW as u64) {
        relabel(rule, state, "pad", "db", value).await;
    }
    create_ok(
        state,
        rule,
        labelled_widget(SENTINEL, &[("app", "web")]),
        None,
    )
    .await;

    let mut events = Vec::new();
    loop {
        let event = next_event(rule, &mut watch).await;
        let last = event
            .resource()
            .is_some_and(|r| r.metadata().id() == SENTINEL);
        events.push(event);
        if last {
            break;
        }
    }
    assert!(
        events.iter().any(Event::is_compacted),
        "{rule}: writing {} changes past a window of {HISTORY_WINDOW} must produce a catch-up",
        2 * HISTORY_WINDOW
    );
    (bootstrap, events)
}

/// The events about `id`, summarised.
fn about(events: &[Event], id: &str) -> Vec<Seen> {
    events
        .iter()
        .filter(|e| e.resource().is_some_and(|r| r.metadata().id() == id))
        .map(seen)
        .collect()
}

/// A lagging label-filtered watcher receives a resource that entered the filter while it lagged
/// as one compacted `Created` with its latest state.
pub async fn lagging_filtered_watch_gets_a_resource_that_entered_as_created(subject: &Subject) {
    const RULE: &str = "lagging_filtered_watch_gets_a_resource_that_entered_as_created";
    let (_, events) = lag_behind_a_filter(RULE, subject.state()).await;
    assert_eq!(
        about(&events, "enters"),
        [Seen::compacted("created", "enters", 2)],
        "{RULE}"
    );
}

/// A lagging label-filtered watcher receives a resource it held that left the filter while it
/// lagged as one compacted `Destroyed` carrying the state that no longer matches.
pub async fn lagging_filtered_watch_gets_a_resource_that_left_as_destroyed(subject: &Subject) {
    const RULE: &str = "lagging_filtered_watch_gets_a_resource_that_left_as_destroyed";
    let (_, events) = lag_behind_a_filter(RULE, subject.state()).await;
    assert_eq!(
        about(&events, "leaves"),
        [Seen::compacted("destroyed", "leaves", 2)],
        "{RULE}"
    );
}

/// A lagging label-filtered watcher receives a resource it held that was destroyed while it
/// lagged as one compacted `Destroyed` carrying its last state.
pub async fn lagging_filtered_watch_gets_a_held_resource_destroyed_meanwhile_as_destroyed(
    subject: &Subject,
) {
    const RULE: &str =
        "lagging_filtered_watch_gets_a_held_resource_destroyed_meanwhile_as_destroyed";
    let (_, events) = lag_behind_a_filter(RULE, subject.state()).await;
    assert_eq!(
        about(&events, "gone"),
        [Seen::compacted("destroyed", "gone", 1)],
        "{RULE}"
    );
}

/// A lagging label-filtered watcher receives an update of a resource it held that still
/// matches as one compacted `Updated` with the latest state.
pub async fn lagging_filtered_watch_gets_an_update_of_a_held_resource_as_updated(
    subject: &Subject,
) {
    const RULE: &str = "lagging_filtered_watch_gets_an_update_of_a_held_resource_as_updated";
    let (_, events) = lag_behind_a_filter(RULE, subject.state()).await;
    assert_eq!(
        about(&events, "stays"),
        [Seen::compacted("updated", "stays", 2)],
        "{RULE}"
    );
}

/// A lagging label-filtered watcher hears nothing of resources that never matched its filter:
/// not of one updated, one destroyed or one created while it lagged, nor of the one whose
/// changes pushed it behind the window.
pub async fn lagging_filtered_watch_hears_nothing_of_resources_it_never_saw(subject: &Subject) {
    const RULE: &str = "lagging_filtered_watch_hears_nothing_of_resources_it_never_saw";
    let (_, events) = lag_behind_a_filter(RULE, subject.state()).await;
    for id in ["never", "never-gone", "never-new", "pad"] {
        assert_eq!(about(&events, id), [], "{RULE}: events about {id}");
    }
}

/// The view a consumer builds from a lagging label-filtered watcher's events, trusting the
/// contract — never a `Created` of a resource it holds, nor an `Updated` or `Destroyed` of one
/// it does not — equals the store's matching contents after the catch-up.
pub async fn lagging_filtered_watch_builds_a_view_equal_to_the_matching_contents(
    subject: &Subject,
) {
    const RULE: &str = "lagging_filtered_watch_builds_a_view_equal_to_the_matching_contents";
    let state = subject.state();
    let (bootstrap, events) = lag_behind_a_filter(RULE, state).await;
    let mut view = ConsumerView::default();
    for event in bootstrap.iter().chain(&events) {
        if let Err(broken) = view.apply(event) {
            panic!("{RULE}: {broken}");
        }
    }
    let matching = ListOptions {
        labels: web(),
        ids: None,
    };
    let listed = expect_ok(RULE, "list", state.list(&widgets(), &matching).await);
    let versions = |resources: &mut dyn Iterator<Item = &SharedResource>| -> Vec<(String, u64)> {
        resources
            .map(|r| (r.metadata().id().to_string(), r.metadata().version().get()))
            .collect()
    };
    assert_eq!(
        versions(&mut view.resources()),
        versions(&mut listed.iter()),
        "{RULE}: the watcher's view after the catch-up"
    );
}
