//! A disk store's in-memory window keeps only what live watchers need (by default the last 8
//! changes of a kind nobody lags on); a watch that starts further back — resumed from a bookmark
//! of an ended watch, before or after a restart, or with a long `tail` — gets the exact changes
//! it missed from the durable change log, then continues live.

mod disk_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    make_mut, Bookmark, CreateOptions, Event, LabelOp, LabelQuery, LabelTerm, Registry, Resource,
    ResourceSpec, SharedResource, State, UpdateOptions, Watch, WatchKindOptions,
};
use cosi_state::{DiskOptions, DiskState};
use disk_common::{temp_store, Widget};

/// Changes written past the window's default minimum of 8.
const CHANGES: u32 = 40;

async fn open(path: &Path) -> DiskState {
    let registry = Arc::new(Registry::new().with::<Widget>().unwrap());
    DiskState::open(path, DiskOptions::default(), registry)
        .await
        .expect("open the store")
}

fn widget(id: &str, size: u32, app: &str) -> SharedResource {
    let mut widget = Resource::new(id, Widget { size });
    widget
        .metadata
        .labels_mut()
        .insert("app".into(), app.into());
    widget.into_shared()
}

async fn create(state: &DiskState, id: &str, app: &str) {
    state
        .create(widget(id, 0, app), CreateOptions::default())
        .await
        .unwrap();
}

/// Sets widget `id`'s size and `app` label (one update).
async fn set(state: &DiskState, id: &str, size: u32, app: &str) {
    let stored = state.get(&Widget::kind().pointer(id)).await.unwrap();
    let mut next: Resource<Widget> = cosi_core::downcast_ref::<Widget>(&*stored).unwrap().clone();
    next.spec.size = size;
    next.metadata.labels_mut().insert("app".into(), app.into());
    state
        .update(next.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
}

async fn watch(state: &DiskState, options: WatchKindOptions) -> Watch {
    state.watch_kind(&Widget::kind(), options).await.unwrap()
}

fn since(bookmark: &Bookmark) -> WatchKindOptions {
    WatchKindOptions {
        since: Some(bookmark.clone()),
        ..WatchKindOptions::default()
    }
}

async fn next(watch: &mut Watch) -> Event {
    tokio::time::timeout(Duration::from_secs(10), watch.recv())
        .await
        .expect("an event within the guard")
        .expect("the watch is live")
}

/// `type id@version #bookmark`, plus ` (compacted)` for a catch-up event.
fn describe(event: &Event) -> String {
    let resource = event.resource().expect("a change event");
    format!(
        "{} {}@{} #{}{}",
        event.type_name(),
        resource.metadata().id(),
        resource.metadata().version().get(),
        event.bookmark().expect("a bookmark"),
        if event.is_compacted() {
            " (compacted)"
        } else {
            ""
        }
    )
}

/// The bookmark of the current head: a bootstrap's `Bootstrapped` marker, the watch then
/// dropped, so nothing holds the window open.
async fn head(state: &DiskState) -> Bookmark {
    let bootstrap = WatchKindOptions {
        bootstrap: true,
        ..WatchKindOptions::default()
    };
    let mut watch = watch(state, bootstrap).await;
    loop {
        if let Event::Bootstrapped { bookmark } = next(&mut watch).await {
            return bookmark;
        }
    }
}

/// Widget `a` at sequence 1, then the bookmark there, then `a` updated [`CHANGES`] times.
async fn write_past_the_window(state: &DiskState) -> Bookmark {
    create(state, "a", "web").await;
    let bookmark = head(state).await;
    for size in 1..=CHANGES {
        set(state, "a", size, "web").await;
    }
    bookmark
}

/// The exact updates of `a` after sequence 1, as [`describe`] prints them.
fn updates_of_a() -> Vec<String> {
    (2..=u64::from(CHANGES) + 1)
        .map(|seq| format!("updated a@{seq} #{seq}"))
        .collect()
}

async fn take(watch: &mut Watch, count: usize) -> Vec<Event> {
    let mut events = Vec::new();
    for _ in 0..count {
        events.push(next(watch).await);
    }
    events
}

#[tokio::test]
async fn a_watch_resumed_from_before_the_window_gets_every_change_exactly_from_the_log() {
    let (_dir, path) = temp_store();
    let state = open(&path).await;
    let bookmark = write_past_the_window(&state).await;

    let mut resumed = watch(&state, since(&bookmark)).await;
    let events = take(&mut resumed, CHANGES as usize).await;
    assert_eq!(
        events.iter().map(describe).collect::<Vec<_>>(),
        updates_of_a()
    );
    for event in &events {
        let Event::Updated {
            old: Some(old),
            resource,
            ..
        } = event
        else {
            panic!("an exact update with its old state: {event:?}");
        };
        assert_eq!(
            old.metadata().version().get() + 1,
            resource.metadata().version().get()
        );
    }
    set(&state, "a", 0, "web").await;
    assert_eq!(describe(&next(&mut resumed).await), "updated a@42 #42");
}

#[tokio::test]
async fn a_bookmark_from_before_a_restart_resumes_exactly_beyond_the_rebuilt_window() {
    let (_dir, path) = temp_store();
    let state = open(&path).await;
    let bookmark = write_past_the_window(&state).await;
    state.close().await;

    let state = open(&path).await;
    let mut resumed = watch(&state, since(&bookmark)).await;
    let events = take(&mut resumed, CHANGES as usize).await;
    assert_eq!(
        events.iter().map(describe).collect::<Vec<_>>(),
        updates_of_a()
    );
    let typed = events[0].resource().unwrap();
    assert!(
        cosi_core::downcast_ref::<Widget>(&**typed).is_ok(),
        "a registered type comes back typed"
    );
}

#[tokio::test]
async fn a_tail_longer_than_the_window_is_read_from_the_log() {
    let (_dir, path) = temp_store();
    let state = open(&path).await;
    write_past_the_window(&state).await;

    let tail = WatchKindOptions {
        tail: Some(20),
        ..WatchKindOptions::default()
    };
    let mut watch = watch(&state, tail).await;
    let events = take(&mut watch, 20).await;
    assert_eq!(
        events.iter().map(describe).collect::<Vec<_>>(),
        updates_of_a()[usize::try_from(CHANGES).unwrap() - 20..]
    );
}

#[tokio::test]
async fn a_tail_longer_than_the_retained_log_gets_every_retained_change_after_a_restart() {
    // A store that keeps 16 changes per kind, closed (a checkpoint trims the log to them) after
    // widget `a`'s creation and 40 updates, and opened again: its window holds 8.
    let (_dir, path) = temp_store();
    let registry = Arc::new(Registry::new().with::<Widget>().unwrap());
    let options = DiskOptions {
        retained_changes: 16,
        ..DiskOptions::default()
    };
    let state = DiskState::open(&path, options.clone(), registry.clone())
        .await
        .unwrap();
    write_past_the_window(&state).await;
    state.close().await;
    let state = DiskState::open(&path, options, registry).await.unwrap();

    // A tail of 30 asks for more than the log holds: it gets the 16 the log holds, exactly,
    // then the next live change.
    let tail = WatchKindOptions {
        tail: Some(30),
        ..WatchKindOptions::default()
    };
    let mut watch = watch(&state, tail).await;
    set(&state, "a", 1000, "web").await;
    let events = take(&mut watch, 17).await;
    let mut expected = updates_of_a()[usize::try_from(CHANGES).unwrap() - 16..].to_vec();
    let live = u64::from(CHANGES) + 2;
    expected.push(format!("updated a@{live} #{live}"));
    assert_eq!(events.iter().map(describe).collect::<Vec<_>>(), expected);
}

#[tokio::test]
async fn a_filtered_watch_resumed_from_the_log_sees_resources_enter_and_leave_exactly() {
    let (_dir, path) = temp_store();
    let state = open(&path).await;
    create(&state, "leaves", "web").await; // 1
    create(&state, "enters", "db").await; // 2
    create(&state, "never", "db").await; // 3
    let bookmark = head(&state).await;
    for size in 1..=CHANGES {
        set(&state, "never", size, "db").await; // 4..=43
    }
    set(&state, "enters", 1, "web").await; // 44
    set(&state, "leaves", 1, "db").await; // 45

    let web = LabelQuery::new().with(LabelTerm::new("app", LabelOp::Equal("web".into())));
    let options = WatchKindOptions {
        labels: web.into(),
        ..since(&bookmark)
    };
    let mut resumed = watch(&state, options).await;
    assert_eq!(
        take(&mut resumed, 2)
            .await
            .iter()
            .map(describe)
            .collect::<Vec<_>>(),
        ["created enters@2 #44", "destroyed leaves@2 #45"]
    );
    // What it then holds is what matches now: `enters` (updated), and not `leaves`.
    set(&state, "leaves", 2, "db").await; // 46: no event
    let mut update = widget("enters", 2, "web");
    make_mut(&mut update)
        .metadata_mut()
        .set_version(cosi_core::Version::new(2));
    state
        .update(update, UpdateOptions::default())
        .await
        .unwrap(); // 47
    assert_eq!(describe(&next(&mut resumed).await), "updated enters@3 #47");
}
