//! Rules of a resource's life: finalizers, teardown, destroy (alone and concurrently), and the
//! `modify` helper's create / update / no-op behaviour.

use std::collections::BTreeSet;
use std::sync::Arc;

use cosi_core::{
    DestroyOptions, Error, Phase, StateExt, UpdateOptions, WatchKindOptions, WatchOptions,
};
use tokio::sync::Barrier;

use super::fixture::{
    create_ok, expect_err, expect_ok, next_events, seen_all, widget, widget_pointer, widgets,
    within, Seen,
};
use super::Subject;

fn finalizer_set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Finalizers are added and removed by anyone (no owner needed) in any phase; adding a present
/// one or removing an absent one writes nothing; the owner and phase are left as they were.
pub async fn finalizers_are_changed_without_owner_in_any_phase(subject: &Subject) {
    const RULE: &str = "finalizers_are_changed_without_owner_in_any_phase";
    let state = subject.state();
    create_ok(state, RULE, widget("w", 1), Some("ctrl")).await;
    let pointer = widget_pointer("w");

    let added = expect_ok(
        RULE,
        "add while running",
        state.add_finalizer(&pointer, &["a"]).await,
    );
    assert_eq!(
        (
            added.metadata().finalizers().clone(),
            added.metadata().version().get(),
            added.metadata().owner()
        ),
        (finalizer_set(&["a"]), 2, Some("ctrl")),
        "{RULE}: add while running (finalizers, version, owner)"
    );

    let ready = expect_ok(
        RULE,
        "teardown",
        state.teardown(&pointer, Some("ctrl")).await,
    );
    assert!(!ready, "{RULE}: teardown with a finalizer is not ready");

    let added = expect_ok(
        RULE,
        "add while tearing down",
        state.add_finalizer(&pointer, &["b"]).await,
    );
    let removed = expect_ok(
        RULE,
        "remove while tearing down",
        state.remove_finalizer(&pointer, &["a"]).await,
    );
    assert_eq!(
        (
            added.metadata().finalizers().clone(),
            added.metadata().version().get()
        ),
        (finalizer_set(&["a", "b"]), 4),
        "{RULE}: add while tearing down (finalizers, version)"
    );
    assert_eq!(
        (
            removed.metadata().finalizers().clone(),
            removed.metadata().version().get(),
            removed.metadata().phase(),
            removed.metadata().owner()
        ),
        (finalizer_set(&["b"]), 5, Phase::TearingDown, Some("ctrl")),
        "{RULE}: remove while tearing down (finalizers, version, phase, owner)"
    );

    let again = expect_ok(
        RULE,
        "remove an absent one",
        state.remove_finalizer(&pointer, &["a"]).await,
    );
    assert_eq!(
        again.metadata().version().get(),
        5,
        "{RULE}: removing an absent finalizer writes nothing"
    );
    let again = expect_ok(
        RULE,
        "add a present one",
        state.add_finalizer(&pointer, &["b"]).await,
    );
    assert_eq!(
        again.metadata().version().get(),
        5,
        "{RULE}: adding a present finalizer writes nothing"
    );

    let err = expect_err(
        RULE,
        "add on a missing resource",
        state.add_finalizer(&widget_pointer("ghost"), &["a"]).await,
    );
    assert!(
        err.is_not_found(),
        "{RULE}: add on a missing resource: {err:?}"
    );
}

/// Destroy fails with `PendingFinalizers` (naming them) while any finalizer is left, in either
/// phase, and leaves the resource; once they are gone destroy succeeds.
pub async fn destroy_with_finalizers_conflicts(subject: &Subject) {
    const RULE: &str = "destroy_with_finalizers_conflicts";
    let state = subject.state();
    let mut fresh = widget("w", 1);
    fresh.metadata.finalizers_mut().insert("f1".into());
    fresh.metadata.finalizers_mut().insert("f2".into());
    create_ok(state, RULE, fresh, None).await;
    let pointer = widget_pointer("w");

    for step in ["destroy while running", "destroy while tearing down"] {
        let err = expect_err(
            RULE,
            step,
            state.destroy(&pointer, DestroyOptions::default()).await,
        );
        match &err {
            Error::PendingFinalizers {
                pointer: p,
                finalizers,
            } => assert_eq!(
                (p, finalizers),
                (&pointer, &finalizer_set(&["f1", "f2"])),
                "{RULE}: {step}: pending finalizers (pointer, finalizers)"
            ),
            other => panic!("{RULE}: {step}: expected PendingFinalizers, got {other:?}"),
        }
        expect_ok(RULE, "get after refused destroy", state.get(&pointer).await);
        expect_ok(RULE, "teardown", state.teardown(&pointer, None).await);
    }

    expect_ok(
        RULE,
        "remove finalizers",
        state.remove_finalizer(&pointer, &["f1", "f2"]).await,
    );
    expect_ok(
        RULE,
        "destroy",
        state.destroy(&pointer, DestroyOptions::default()).await,
    );
    let err = expect_err(RULE, "get after destroy", state.get(&pointer).await);
    assert!(err.is_not_found(), "{RULE}: get after destroy: {err:?}");
}

/// Teardown stores the tearing-down phase once; repeating it writes nothing; it reports ready
/// (true) only when no finalizers are left.
pub async fn teardown_is_idempotent_and_ready_only_without_finalizers(subject: &Subject) {
    const RULE: &str = "teardown_is_idempotent_and_ready_only_without_finalizers";
    let state = subject.state();
    let mut fresh = widget("w", 1);
    fresh.metadata.finalizers_mut().insert("f".into());
    create_ok(state, RULE, fresh, Some("ctrl")).await;
    let pointer = widget_pointer("w");

    for attempt in ["first", "second"] {
        let ready = expect_ok(RULE, attempt, state.teardown(&pointer, Some("ctrl")).await);
        assert!(
            !ready,
            "{RULE}: {attempt} teardown with a finalizer reports not ready"
        );
        let stored = expect_ok(RULE, "get", state.get(&pointer).await);
        assert_eq!(
            (stored.metadata().phase(), stored.metadata().version().get()),
            (Phase::TearingDown, 2),
            "{RULE}: after the {attempt} teardown (phase, version)"
        );
    }

    expect_ok(
        RULE,
        "remove finalizer",
        state.remove_finalizer(&pointer, &["f"]).await,
    );
    let ready = expect_ok(
        RULE,
        "teardown after removal",
        state.teardown(&pointer, Some("ctrl")).await,
    );
    assert!(ready, "{RULE}: teardown without finalizers reports ready");
    let stored = expect_ok(RULE, "get", state.get(&pointer).await);
    assert_eq!(
        stored.metadata().version().get(),
        3,
        "{RULE}: teardown of a tearing-down resource writes nothing"
    );
}

/// `modify` creates an absent resource (version 1, owner from the options), updates a present
/// one (version + 1), and when the change leaves it equal writes nothing: same version, no event.
pub async fn modify_creates_updates_and_skips_unchanged(subject: &Subject) {
    const RULE: &str = "modify_creates_updates_and_skips_unchanged";
    let state = subject.state();
    let mut watch = expect_ok(
        RULE,
        "watch_kind",
        state
            .watch_kind(&widgets(), WatchKindOptions::default())
            .await,
    );
    let options = UpdateOptions::owned_by(Some("ctrl"));

    let created = expect_ok(
        RULE,
        "modify of an absent resource",
        state
            .modify(widget("m", 0), options.clone(), |r| {
                r.spec.value = 1;
                Ok(())
            })
            .await,
    );
    assert_eq!(
        (
            created.metadata.version().get(),
            created.spec.value,
            created.metadata.owner()
        ),
        (1, 1, Some("ctrl")),
        "{RULE}: create through modify (version, value, owner)"
    );

    let updated = expect_ok(
        RULE,
        "modify with a change",
        state
            .modify(widget("m", 0), options.clone(), |r| {
                r.spec.value = 2;
                r.metadata.labels_mut().insert("k".into(), "v".into());
                Ok(())
            })
            .await,
    );
    assert_eq!(
        (updated.metadata.version().get(), updated.spec.value),
        (2, 2),
        "{RULE}: update through modify (version, value)"
    );

    let unchanged = expect_ok(
        RULE,
        "modify without a change",
        state
            .modify(widget("m", 0), options, |r| {
                r.spec.value = 2;
                r.metadata.labels_mut().insert("k".into(), "v".into());
                Ok(())
            })
            .await,
    );
    assert_eq!(
        unchanged.metadata.version().get(),
        2,
        "{RULE}: a no-op modify returns the stored version"
    );
    let stored = expect_ok(RULE, "get", state.get(&widget_pointer("m")).await);
    assert_eq!(
        stored.metadata().version().get(),
        2,
        "{RULE}: a no-op modify writes nothing"
    );

    // The sentinel's event proves nothing was delivered for the no-op in between.
    create_ok(state, RULE, widget("sentinel", 0), None).await;
    let events = next_events(RULE, &mut watch, 3).await;
    assert_eq!(
        seen_all(&events),
        [
            Seen::created("m", 1),
            Seen::updated("m", 2),
            Seen::created("sentinel", 1)
        ],
        "{RULE}: events (a no-op modify sends none)"
    );
}

/// Eight concurrent finalizer adds and then three concurrent removes converge to exactly the
/// expected set, each effective change stored once (version 1 + 8 + 3).
pub async fn concurrent_finalizer_changes_converge(subject: &Subject) {
    const RULE: &str = "concurrent_finalizer_changes_converge";
    let state = subject.state.clone();
    create_ok(&*state, RULE, widget("w", 1), Some("ctrl")).await;
    let pointer = widget_pointer("w");
    let names: Vec<String> = (0..8).map(|i| format!("f{i}")).collect();

    for (step, chosen, add) in [("add", &names[..], true), ("remove", &names[..3], false)] {
        let barrier = Arc::new(Barrier::new(chosen.len()));
        let tasks: Vec<_> = chosen
            .iter()
            .map(|name| {
                let (state, pointer, barrier, name) = (
                    state.clone(),
                    pointer.clone(),
                    barrier.clone(),
                    name.clone(),
                );
                tokio::spawn(async move {
                    barrier.wait().await;
                    if add {
                        state.add_finalizer(&pointer, &[&name]).await
                    } else {
                        state.remove_finalizer(&pointer, &[&name]).await
                    }
                })
            })
            .collect();
        for task in tasks {
            let joined = within(RULE, step, task).await;
            let result = joined.unwrap_or_else(|e| panic!("{RULE}: {step} task panicked: {e}"));
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

    let destroyer = {
        let (state, pointer) = (state.clone(), pointer.clone());
        tokio::spawn(async move { state.teardown_and_destroy(&pointer, Some("ctrl")).await })
    };
    let tearing_down = within(
        RULE,
        "waiting for the teardown",
        state.watch_for(&pointer, |r| {
            r.is_some_and(|r| r.metadata().phase() == Phase::TearingDown)
        }),
    )
    .await;
    expect_ok(RULE, "watch_for tearing down", tearing_down);
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
    let events = next_events(RULE, &mut watch, 4).await;
    assert_eq!(
        seen_all(&events),
        [
            Seen::created("w", 1),
            Seen::updated("w", 2),
            Seen::updated("w", 3),
            Seen::destroyed("w", 3)
        ],
        "{RULE}: events of the resource"
    );
}

/// `teardown_and_destroy` succeeds when another task destroys the resource while it waits:
/// whichever destroy lands first, the helper returns Ok and the resource is gone.
pub async fn teardown_and_destroy_completes_when_another_task_destroys(subject: &Subject) {
    const RULE: &str = "teardown_and_destroy_completes_when_another_task_destroys";
    let state = subject.state.clone();
    let mut fresh = widget("w", 1);
    fresh.metadata.finalizers_mut().insert("holder".into());
    create_ok(&*state, RULE, fresh, Some("ctrl")).await;
    let pointer = widget_pointer("w");

    let destroyer = {
        let (state, pointer) = (state.clone(), pointer.clone());
        tokio::spawn(async move { state.teardown_and_destroy(&pointer, Some("ctrl")).await })
    };
    let tearing_down = within(
        RULE,
        "waiting for the teardown",
        state.watch_for(&pointer, |r| {
            r.is_some_and(|r| r.metadata().phase() == Phase::TearingDown)
        }),
    )
    .await;
    expect_ok(RULE, "watch_for tearing down", tearing_down);

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

    let barrier = Arc::new(Barrier::new(10));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (state, pointer, barrier) = (state.clone(), pointer.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                state.destroy(&pointer, DestroyOptions::default()).await
            })
        })
        .collect();
    let (mut succeeded, mut not_found) = (0, 0);
    for task in tasks {
        let joined = within(RULE, "destroy", task).await;
        match joined.unwrap_or_else(|e| panic!("{RULE}: destroy task panicked: {e}")) {
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
    let events = next_events(RULE, &mut watch, 2).await;
    assert_eq!(
        seen_all(&events),
        [Seen::destroyed("w", 1), Seen::created("sentinel", 1)],
        "{RULE}: exactly one destroyed event"
    );
}
