//! Rules of a filtered watcher's bookmarks (DESIGN §4, "Watch delivery"): changes its filter
//! skips still move its position, and it is handed a `Noop` bookmark for them, so a watcher
//! that missed nothing can resume from its last bookmark exactly — without a catch-up or a
//! resync — however many changes outside its filter went by.

use cosi_core::{
    Bookmark, Event, IdQuery, LabelOp, LabelQuery, LabelTerm, State, Watch, WatchKindOptions,
};

use super::crud::with_value;
use super::fixture::{create_ok, expect_events, expect_ok, labelled_widget, seen, within, Seen};
use super::{fixture::widget_pointer, fixture::widgets, Subject, HISTORY_WINDOW};

async fn update_value(rule: &str, state: &dyn State, id: &str, value: u64) {
    let stored = expect_ok(rule, "get", state.get(&widget_pointer(id)).await);
    expect_ok(
        rule,
        "update",
        state
            .update(with_value(&stored, value), Default::default())
            .await,
    );
}

/// The bookmark of the kind's latest change, from a watch tailing one event.
async fn latest_bookmark(rule: &str, state: &dyn State) -> Bookmark {
    let tail = WatchKindOptions {
        tail: Some(1),
        ..WatchKindOptions::default()
    };
    let mut watch = expect_ok(rule, "tail watch", state.watch_kind(&widgets(), tail).await);
    let event = super::fixture::next_event(rule, &mut watch).await;
    event
        .bookmark()
        .cloned()
        .unwrap_or_else(|| panic!("{rule}: tailed event without a bookmark: {event:?}"))
}

/// Reads `watch` until a `Noop` at `latest`; anything but a `Noop` before it fails the rule (the
/// watcher missed nothing, so it must get no catch-up, no resync and no change).
async fn noops_up_to(rule: &str, watch: &mut Watch, latest: &Bookmark) {
    loop {
        let event = within(
            rule,
            "waiting for a Noop at the latest change",
            watch.recv(),
        )
        .await;
        match event {
            Some(Event::Noop { bookmark }) if bookmark == *latest => return,
            Some(Event::Noop { .. }) => continue,
            Some(other) => panic!(
                "{rule}: only Noops may reach a watcher whose filter matched no change, got {:?} \
                 ({other:?})",
                seen(&other)
            ),
            None => panic!("{rule}: the watch ended"),
        }
    }
}

/// The scenario: `seen` (`app=web`) is bootstrapped by a watcher whose filter is `filter`
/// (which selects `seen` and `new`, not `pad`); `pad` (`app=db`) is then updated
/// `2 × HISTORY_WINDOW` times, past the window. The watcher's last bookmark must then be the
/// latest change's (a `Noop`); a watch resumed from it gets exactly the matching changes after
/// it.
async fn resume_after_skipped_changes(rule: &str, state: &dyn State, filter: WatchKindOptions) {
    create_ok(state, rule, labelled_widget("pad", &[("app", "db")]), None).await;
    create_ok(
        state,
        rule,
        labelled_widget("seen", &[("app", "web")]),
        None,
    )
    .await;
    let bootstrap = WatchKindOptions {
        bootstrap: true,
        ..filter.clone()
    };
    let mut watch = expect_ok(
        rule,
        "watch_kind",
        state.watch_kind(&widgets(), bootstrap).await,
    );
    expect_events(
        rule,
        &mut watch,
        &[Seen::created("seen", 1), Seen::bootstrapped()],
        "bootstrap",
    )
    .await;

    for value in 1..=(2 * HISTORY_WINDOW as u64) {
        update_value(rule, state, "pad", value).await;
    }
    let latest = latest_bookmark(rule, state).await;
    noops_up_to(rule, &mut watch, &latest).await;
    drop(watch);

    let resumed = WatchKindOptions {
        since: Some(latest),
        ..filter
    };
    let mut watch = expect_ok(
        rule,
        "resume from the last bookmark",
        state.watch_kind(&widgets(), resumed).await,
    );
    update_value(rule, state, "pad", 0).await;
    update_value(rule, state, "seen", 1).await;
    create_ok(state, rule, labelled_widget("new", &[("app", "web")]), None).await;
    expect_events(
        rule,
        &mut watch,
        &[Seen::updated("seen", 2), Seen::created("new", 1)],
        "a watch resumed from the last bookmark gets exactly the matching changes after it",
    )
    .await;
}

/// A label-filtered watcher that saw no matching change while more than a window of
/// non-matching changes went by is handed a `Noop` at the latest change, and a watch resumed
/// from it receives exactly the matching changes after it: no catch-up, no resync.
pub async fn label_filtered_watch_resumes_from_its_last_bookmark_after_skipped_changes(
    subject: &Subject,
) {
    const RULE: &str = "label_filtered_watch_resumes_from_its_last_bookmark_after_skipped_changes";
    let web = LabelQuery::new().with(LabelTerm::new("app", LabelOp::Equal("web".into())));
    let filter = WatchKindOptions {
        labels: web.into(),
        ..WatchKindOptions::default()
    };
    resume_after_skipped_changes(RULE, subject.state(), filter).await;
}

/// The same for an id-filtered watcher: changes of ids outside its filter move its bookmark.
pub async fn id_filtered_watch_resumes_from_its_last_bookmark_after_skipped_changes(
    subject: &Subject,
) {
    const RULE: &str = "id_filtered_watch_resumes_from_its_last_bookmark_after_skipped_changes";
    let ids = IdQuery::new("^(seen|new)$").expect("the rule's id regex is valid");
    let filter = WatchKindOptions {
        ids: Some(ids),
        ..WatchKindOptions::default()
    };
    resume_after_skipped_changes(RULE, subject.state(), filter).await;
}
