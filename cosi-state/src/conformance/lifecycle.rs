//! Rules of a resource's life: finalizers, teardown, destroy (alone and concurrently), and the
//! `modify` helper's create / update / no-op behaviour.

use std::collections::BTreeSet;

use cosi_core::{DestroyOptions, Error, Phase, StateExt, UpdateOptions, WatchKindOptions};

use super::fixture::{
    create_ok, expect_err, expect_events, expect_ok, widget, widget_pointer, widgets, Seen,
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
    expect_events(
        RULE,
        &mut watch,
        &[
            Seen::created("m", 1),
            Seen::updated("m", 2),
            Seen::created("sentinel", 1),
        ],
        "events (a no-op modify sends none)",
    )
    .await;
}
