//! Rules under concurrency: finalizer changes, `modify`, creates and destroys racing on one
//! resource; `teardown_and_destroy` finishing while other tasks act; many writers producing one
//! total order of events per kind.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cosi_core::{
    CreateOptions, DestroyOptions, Error, Event, Phase, Pointer, Result, State, StateExt,
    UpdateOptions, WatchKindOptions, WatchOptions,
};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use super::crud::with_value;
use super::fixture::{
    create_ok, events_through, expect_err, expect_events, expect_ok, widget, widget_pointer,
    widgets, within, Seen, Widget,
};
use super::Subject;

/// Starts `n` tasks that wait for each other and then run `action(i)` at the same moment.
fn race<T, F, Fut>(n: usize, action: F) -> Vec<JoinHandle<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(n));
    (0..n)
        .map(|i| {
            let barrier = barrier.clone();
            let work = action(i);
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect()
}

/// Awaits every task (within the timeout), panicking if one panicked.
async fn join_all<T>(rule: &str, step: &str, tasks: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        let joined = within(rule, step, task).await;
        results.push(joined.unwrap_or_else(|e| panic!("{rule}: {step}: a task panicked: {e}")));
    }
    results
}

/// Eight concurrent finalizer adds and then three concurrent removes converge to exactly the
/// expected set, each effective change stored once (version 1 + 8 + 3).
pub async fn concurrent_finalizer_changes_converge(subject: &Subject) {
    const RULE: &str = "concurrent_finalizer_changes_converge";
    let state = subject.state.clone();
    create_ok(&*state, RULE, widget("w", 1), Some("ctrl")).await;
    let pointer = widget_pointer("w");
    let names: Vec<String> = (0..8).map(|i| format!("f{i}")).collect();

    for (step, count, add) in [("add", 8, true), ("remove", 3, false)] {
        let tasks = race(count, |i| {
            let (state, pointer, name) = (state.clone(), pointer.clone(), names[i].clone());
            async move {
                if add {
                    state.add_finalizer(&pointer, &[&name]).await
                } else {
                    state.remove_finalizer(&pointer, &[&name]).await
                }
            }
        });
        for result in join_all(RULE, step, tasks).await {
            expect_ok(RULE, step, result);
        }
    }

    let stored = expect_ok(RULE, "get", state.get(&pointer).await);
    let expected: BTreeSet<String> = names[3..].iter().cloned().collect();
    assert_eq!(
        (
            stored.metadata().finalizers().clone(),
            stored.metadata().version().get(),
            stored.metadata().owner()
        ),
        (expected, 12, Some("ctrl")),
        "{RULE}: (finalizers, version, owner) after 8 adds and 3 removes"
    );
}

/// Eight concurrent `modify` calls that each add one to a value lose no update: `modify`
/// retries version conflicts, so the value ends at 8 and the version at 1 + 8.
pub async fn concurrent_modifies_lose_no_update(subject: &Subject) {
    const RULE: &str = "concurrent_modifies_lose_no_update";
    let state = subject.state.clone();
    create_ok(&*state, RULE, widget("counter", 0), None).await;

    let tasks = race(8, |_| {
        let state = state.clone();
        async move {
            state
                .modify(widget("counter", 0), UpdateOptions::default(), |r| {
                    r.spec.value += 1;
                    Ok(())
                })
                .await
        }
    });
    for result in join_all(RULE, "modify", tasks).await {
        expect_ok(RULE, "modify", result);
    }
    let stored = expect_ok(
        RULE,
        "get",
        state.get_typed::<Widget>(&widget_pointer("counter")).await,
    );
    assert_eq!(
        (stored.spec.value, stored.metadata.version().get()),
        (8, 9),
        "{RULE}: (value, version) after 8 concurrent increments"
    );
}

/// Eight concurrent creates of one id: exactly one succeeds, the other seven get
/// `AlreadyExists`, and the stored value is the winner's.
pub async fn concurrent_creates_one_succeeds_rest_already_exist(subject: &Subject) {
    const RULE: &str = "concurrent_creates_one_succeeds_rest_already_exist";
    let state = subject.state.clone();
    let tasks = race(8, |i| {
        let state = state.clone();
        async move {
            let fresh = widget("w", i as u64).into_shared();
            state.create(fresh, CreateOptions::default()).await
        }
    });
    let mut winners = Vec::new();
    let mut already_exists = 0;
    for result in join_all(RULE, "create", tasks).await {
        match result {
            Ok(created) => winners.push(created),
            Err(Error::AlreadyExists { pointer }) if pointer == widget_pointer("w") => {
                already_exists += 1
            }
            Err(other) => panic!("{RULE}: a concurrent create failed with {other:?}"),
        }
    }
    assert_eq!(
        (winners.len(), already_exists),
        (1, 7),
        "{RULE}: (succeeded, already exists)"
    );
    let stored = expect_ok(
        RULE,
        "get",
        state.get_typed::<Widget>(&widget_pointer("w")).await,
    );
    let winner = cosi_core::downcast_ref::<Widget>(&*winners[0])
        .unwrap_or_else(|e| panic!("{RULE}: created value is not a Widget: {e}"));
    assert_eq!(
        (stored.spec.value, stored.metadata.version().get()),
        (winner.spec.value, 1),
        "{RULE}: the stored value is the winner's"
    );
}

/// Four writers updating their own resources concurrently produce one total order per kind: a
/// watcher sees every change exactly once, bookmarks strictly increasing, each resource's
/// versions consecutive.
pub async fn concurrent_writers_produce_one_total_order(subject: &Subject) {
    const RULE: &str = "concurrent_writers_produce_one_total_order";
    const WRITERS: usize = 4;
    const UPDATES: u64 = 6;
    let state = subject.state.clone();
    let mut watch = expect_ok(
        RULE,
        "watch_kind",
        state
            .watch_kind(&widgets(), WatchKindOptions::default())
            .await,
    );

    let tasks = race(WRITERS, |i| {
        let state = state.clone();
        async move {
            let id = format!("w{i}");
            let mut stored = state
                .create(widget(&id, 0).into_shared(), CreateOptions::default())
                .await?;
            for value in 1..UPDATES {
                stored = state
                    .update(with_value(&stored, value), UpdateOptions::default())
                    .await?;
            }
            Ok::<_, Error>(())
        }
    });
    for result in join_all(RULE, "write", tasks).await {
        expect_ok(RULE, "write", result);
    }
    create_ok(&*state, RULE, widget("sentinel", 0), None).await;

    let events = events_through(RULE, &mut watch, &Seen::created("sentinel", 1), 1).await;
    let changes = &events[..events.len() - 1];
    assert_eq!(
        changes.len(),
        WRITERS * UPDATES as usize,
        "{RULE}: one event per write"
    );
    let mut last_version: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_bookmark = None;
    for event in &events {
        let bookmark = event.bookmark();
        assert!(
            bookmark > last_bookmark,
            "{RULE}: bookmarks must strictly increase: {last_bookmark:?} then {bookmark:?}"
        );
        last_bookmark = bookmark;
        let resource = event
            .resource()
            .unwrap_or_else(|| panic!("{RULE}: unexpected event {event:?}"));
        let id = resource.metadata().id().to_string();
        let version = resource.metadata().version().get();
        let previous = last_version.insert(id.clone(), version).unwrap_or(0);
        assert_eq!(
            (matches!(event, Event::Created { .. }), version),
            (previous == 0, previous + 1),
            "{RULE}: {id}: events in version order, the first one a creation"
        );
    }
}

/// Starts `teardown_and_destroy` of `pointer` (owner `ctrl`) in another task and returns once
/// the resource is seen tearing down, so the caller can act while the destroyer waits.
async fn start_teardown_and_destroy(
    rule: &str,
    state: &Arc<dyn State>,
    pointer: &Pointer,
) -> JoinHandle<Result<()>> {
    let destroyer = {
        let (state, pointer) = (state.clone(), pointer.clone());
        tokio::spawn(async move { state.teardown_and_destroy(&pointer, Some("ctrl")).await })
    };
    let tearing_down = within(
        rule,
        "waiting for the teardown",
        state.watch_for(pointer, |r| {
            r.is_some_and(|r| r.metadata().phase() == Phase::TearingDown)
        }),
    )
    .await;
    expect_ok(rule, "watch_for tearing down", tearing_down);
    destroyer
}

/// `teardown_and_destroy` waits while a finalizer is held and completes (destroying the
/// resource) once another task removes the last one. A watcher sees exactly: created, torn
/// down, finalizer removed, destroyed.
pub async fn teardown_and_destroy_completes_when_last_finalizer_is_removed(subject: &Subject) {
    const RULE: &str = "teardown_and_destroy_completes_when_last_finalizer_is_removed";
    let state = subject.state.clone();
    let mut fresh = widget("w", 1);
    fresh.metadata.finalizers_mut().insert("holder".into());
    create_ok(&*state, RULE, fresh, Some("ctrl")).await;
    let pointer = widget_pointer("w");
    let mut watch = expect_ok(
        RULE,
        "watch",
        state.watch(&pointer, WatchOptions::default()).await,
    );

    let destroyer = start_teardown_and_destroy(RULE, &state, &pointer).await;
    expect_ok(
        RULE,
        "get while a finalizer is held",
        state.get(&pointer).await,
    );

    expect_ok(
        RULE,
        "remove the last finalizer",
        state.remove_finalizer(&pointer, &["holder"]).await,
    );
    let joined = within(RULE, "teardown_and_destroy", destroyer).await;
    let result =
        joined.unwrap_or_else(|e| panic!("{RULE}: teardown_and_destroy task panicked: {e}"));
    expect_ok(RULE, "teardown_and_destroy", result);

    let err = expect_err(
        RULE,
        "get after teardown_and_destroy",
        state.get(&pointer).await,
    );
    assert!(
        err.is_not_found(),
        "{RULE}: get after teardown_and_destroy: {err:?}"
    );
    expect_events(
        RULE,
        &mut watch,
        &[
            Seen::created("w", 1),
            Seen::updated("w", 2),
            Seen::updated("w", 3),
            Seen::destroyed("w", 3),
        ],
        "events of the resource",
    )
    .await;
}

/// `teardown_and_destroy` succeeds when another task destroys the resource while it waits:
/// whichever destroy lands first, the helper returns Ok and the resource is gone. (The rule runs
/// on a current-thread runtime, so with a backend whose calls do not yield, the other task's
/// destroy is the one that lands and the helper sees the resource vanish.)
pub async fn teardown_and_destroy_completes_when_another_task_destroys(subject: &Subject) {
    const RULE: &str = "teardown_and_destroy_completes_when_another_task_destroys";
    let state = subject.state.clone();
    let mut fresh = widget("w", 1);
    fresh.metadata.finalizers_mut().insert("holder".into());
    create_ok(&*state, RULE, fresh, Some("ctrl")).await;
    let pointer = widget_pointer("w");

    let destroyer = start_teardown_and_destroy(RULE, &state, &pointer).await;

    // The other task releases its finalizer and destroys the resource itself.
    expect_ok(
        RULE,
        "remove the last finalizer",
        state.remove_finalizer(&pointer, &["holder"]).await,
    );
    let owner = DestroyOptions {
        owner: Some("ctrl".into()),
    };
    match state.destroy(&pointer, owner).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => panic!("{RULE}: the other task's destroy: unexpected error {e:?}"),
    }
    let joined = within(RULE, "teardown_and_destroy", destroyer).await;
    let result =
        joined.unwrap_or_else(|e| panic!("{RULE}: teardown_and_destroy task panicked: {e}"));
    expect_ok(RULE, "teardown_and_destroy", result);
    let err = expect_err(RULE, "get afterwards", state.get(&pointer).await);
    assert!(err.is_not_found(), "{RULE}: get afterwards: {err:?}");
}

/// Ten concurrent destroys of one resource: exactly one succeeds, the other nine get
/// `NotFound`, nothing else; a watcher sees exactly one `Destroyed`.
pub async fn concurrent_destroys_one_succeeds_rest_not_found(subject: &Subject) {
    const RULE: &str = "concurrent_destroys_one_succeeds_rest_not_found";
    let state = subject.state.clone();
    create_ok(&*state, RULE, widget("w", 1), None).await;
    let pointer = widget_pointer("w");
    let mut watch = expect_ok(
        RULE,
        "watch_kind",
        state
            .watch_kind(&widgets(), WatchKindOptions::default())
            .await,
    );

    let tasks = race(10, |_| {
        let (state, pointer) = (state.clone(), pointer.clone());
        async move { state.destroy(&pointer, DestroyOptions::default()).await }
    });
    let (mut succeeded, mut not_found) = (0, 0);
    for result in join_all(RULE, "destroy", tasks).await {
        match result {
            Ok(()) => succeeded += 1,
            Err(Error::NotFound { pointer: p }) if p == pointer => not_found += 1,
            Err(other) => panic!("{RULE}: a concurrent destroy failed with {other:?}"),
        }
    }
    assert_eq!(
        (succeeded, not_found),
        (1, 9),
        "{RULE}: (succeeded, not found)"
    );

    create_ok(&*state, RULE, widget("sentinel", 0), None).await;
    let expected = [Seen::destroyed("w", 1), Seen::created("sentinel", 1)];
    expect_events(RULE, &mut watch, &expected, "exactly one destroyed event").await;
}
