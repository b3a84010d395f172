//! Rules of single writes and reads: create, get, list, update and destroy; versions, owners,
//! phases, timestamps and typed access.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cosi_core::{
    downcast_ref, make_mut, CreateOptions, DestroyOptions, Error, ListOptions, Phase, Resource,
    ResourceSpec, SharedResource, State, StateExt, UpdateOptions, Version,
};

use super::fixture::{
    create_ok, expect_err, expect_events, expect_ok, ids, widget, widget_pointer, widgets, Gadget,
    Seen, Widget,
};
use super::Subject;

/// A copy of a stored widget with a new value, carrying the version it was read at.
pub(crate) fn with_value(stored: &SharedResource, value: u64) -> SharedResource {
    let mut next: Resource<Widget> = downcast_ref::<Widget>(&**stored)
        .expect("the suite only stores widgets under the widget kind")
        .clone();
    next.spec.value = value;
    next.into_shared()
}

/// A copy of a stored widget claiming version `version`.
fn at_version(stored: &SharedResource, version: u64, value: u64) -> SharedResource {
    let mut next = with_value(stored, value);
    make_mut(&mut next)
        .metadata_mut()
        .set_version(Version::new(version));
    next
}

fn value_of(rule: &str, resource: &SharedResource) -> u64 {
    downcast_ref::<Widget>(&**resource)
        .unwrap_or_else(|e| panic!("{rule}: stored widget is not typed as Widget: {e}"))
        .spec
        .value
}

async fn stored_version_and_value(rule: &str, state: &dyn State, id: &str) -> (u64, u64) {
    let stored = expect_ok(rule, "get", state.get(&widget_pointer(id)).await);
    (stored.metadata().version().get(), value_of(rule, &stored))
}

/// Create stores version 1 with the given owner and spec; get and list return it; destroy
/// removes it (without a teardown first); afterwards get and destroy report not found. Kinds are
/// separate.
pub async fn create_get_list_destroy(subject: &Subject) {
    const RULE: &str = "create_get_list_destroy";
    let state = subject.state();
    let pointer = widget_pointer("w1");

    let created = expect_ok(
        RULE,
        "create",
        state
            .create(
                widget("w1", 7).into_shared(),
                CreateOptions {
                    owner: Some("ctrl".into()),
                },
            )
            .await,
    );
    assert_eq!(
        created.metadata().version(),
        Version::FIRST,
        "{RULE}: created version"
    );
    assert_eq!(
        created.metadata().owner(),
        Some("ctrl"),
        "{RULE}: created owner"
    );
    assert_eq!(
        created.metadata().phase(),
        Phase::Running,
        "{RULE}: created phase"
    );
    assert_eq!(
        created.metadata().pointer(),
        &pointer,
        "{RULE}: created pointer"
    );
    assert_eq!(value_of(RULE, &created), 7, "{RULE}: created spec");

    let got = expect_ok(RULE, "get", state.get(&pointer).await);
    assert_eq!(got.metadata(), created.metadata(), "{RULE}: get metadata");
    assert_eq!(value_of(RULE, &got), 7, "{RULE}: get spec");

    let listed = expect_ok(
        RULE,
        "list",
        state.list(&widgets(), &ListOptions::default()).await,
    );
    assert_eq!(ids(&listed), ["w1"], "{RULE}: list after create");
    assert_eq!(
        listed[0].metadata(),
        created.metadata(),
        "{RULE}: listed metadata"
    );
    let gadget = Resource::new(
        "g1",
        Gadget {
            name: "g".into(),
            ratio: 0.5,
        },
    );
    expect_ok(
        RULE,
        "create of another kind",
        state
            .create(gadget.into_shared(), CreateOptions::default())
            .await,
    );
    let listed = expect_ok(
        RULE,
        "list with another kind present",
        state.list(&widgets(), &ListOptions::default()).await,
    );
    assert_eq!(
        ids(&listed),
        ["w1"],
        "{RULE}: a kind lists only its own resources"
    );
    let gadgets = expect_ok(
        RULE,
        "list of another kind",
        state.list(&Gadget::kind(), &ListOptions::default()).await,
    );
    assert_eq!(
        ids(&gadgets),
        ["g1"],
        "{RULE}: the other kind lists only its own resources"
    );

    let owned = DestroyOptions {
        owner: Some("ctrl".into()),
    };
    expect_ok(
        RULE,
        "destroy",
        state.destroy(&pointer, owned.clone()).await,
    );

    let err = expect_err(RULE, "get after destroy", state.get(&pointer).await);
    assert!(
        matches!(&err, Error::NotFound { pointer: p } if *p == pointer),
        "{RULE}: get after destroy: expected NotFound for {pointer}, got {err:?}"
    );
    let listed = expect_ok(
        RULE,
        "list after destroy",
        state.list(&widgets(), &ListOptions::default()).await,
    );
    assert!(
        listed.is_empty(),
        "{RULE}: list after destroy: {:?}",
        ids(&listed)
    );
    let err = expect_err(RULE, "second destroy", state.destroy(&pointer, owned).await);
    assert!(
        matches!(&err, Error::NotFound { pointer: p } if *p == pointer),
        "{RULE}: second destroy: expected NotFound for {pointer}, got {err:?}"
    );
}

/// List returns resources sorted by id (byte order), whatever the creation order.
pub async fn list_is_sorted_by_id(subject: &Subject) {
    const RULE: &str = "list_is_sorted_by_id";
    let state = subject.state();
    for id in ["b", "a10", "c", "a2", "a", "B"] {
        create_ok(state, RULE, widget(id, 0), None).await;
    }
    let listed = expect_ok(
        RULE,
        "list",
        state.list(&widgets(), &ListOptions::default()).await,
    );
    assert_eq!(ids(&listed), ["B", "a", "a10", "a2", "b", "c"], "{RULE}");
}

/// Creating an id that exists fails with `AlreadyExists` and leaves the stored resource as it
/// was.
pub async fn create_of_existing_resource_conflicts(subject: &Subject) {
    const RULE: &str = "create_of_existing_resource_conflicts";
    let state = subject.state();
    create_ok(state, RULE, widget("w", 1), None).await;

    let err = expect_err(
        RULE,
        "second create",
        state
            .create(widget("w", 2).into_shared(), CreateOptions::default())
            .await,
    );
    assert!(
        matches!(&err, Error::AlreadyExists { pointer } if *pointer == widget_pointer("w")),
        "{RULE}: expected AlreadyExists for w, got {err:?}"
    );
    assert_eq!(
        stored_version_and_value(RULE, state, "w").await,
        (1, 1),
        "{RULE}: stored (version, value) must be unchanged"
    );
}

/// Updating a resource that does not exist fails with `NotFound`.
pub async fn update_of_missing_resource_is_not_found(subject: &Subject) {
    const RULE: &str = "update_of_missing_resource_is_not_found";
    let state = subject.state();
    let mut absent = widget("ghost", 1);
    absent.metadata.set_version(Version::FIRST);
    let err = expect_err(
        RULE,
        "update",
        state
            .update(absent.into_shared(), UpdateOptions::default())
            .await,
    );
    assert!(
        matches!(&err, Error::NotFound { pointer } if *pointer == widget_pointer("ghost")),
        "{RULE}: expected NotFound for ghost, got {err:?}"
    );
}

fn assert_version_conflict(rule: &str, err: &Error, id: &str, expected: u64, actual: u64) {
    match err {
        Error::VersionConflict {
            pointer,
            expected: e,
            actual: a,
        } => assert_eq!(
            (pointer, e.get(), a.get()),
            (&widget_pointer(id), expected, actual),
            "{rule}: version conflict (pointer, expected = carried, actual = stored)"
        ),
        other => panic!("{rule}: expected VersionConflict, got {other:?}"),
    }
}

/// An update carrying an older version than the stored one fails with a version conflict
/// (expected = the carried version, actual = the stored one) and changes nothing; an update
/// carrying the stored version succeeds and stores version + 1.
pub async fn update_with_stale_version_conflicts(subject: &Subject) {
    const RULE: &str = "update_with_stale_version_conflicts";
    let state = subject.state();
    let v1 = create_ok(state, RULE, widget("w", 1), None).await;

    let v2 = expect_ok(
        RULE,
        "update at the stored version",
        state
            .update(with_value(&v1, 2), UpdateOptions::default())
            .await,
    );
    assert_eq!(
        v2.metadata().version().get(),
        2,
        "{RULE}: version after update"
    );
    assert_eq!(value_of(RULE, &v2), 2, "{RULE}: spec after update");

    let err = expect_err(
        RULE,
        "update carrying version 1",
        state
            .update(with_value(&v1, 3), UpdateOptions::default())
            .await,
    );
    assert_version_conflict(RULE, &err, "w", 1, 2);
    assert!(
        err.is_retryable(),
        "{RULE}: a version conflict is retryable"
    );
    assert_eq!(
        stored_version_and_value(RULE, state, "w").await,
        (2, 2),
        "{RULE}: stored (version, value) must be unchanged"
    );
}

/// An update carrying a version newer than the stored one fails with a version conflict
/// (expected = the carried version, actual = the stored one) and changes nothing.
pub async fn update_with_future_version_conflicts(subject: &Subject) {
    const RULE: &str = "update_with_future_version_conflicts";
    let state = subject.state();
    let v1 = create_ok(state, RULE, widget("w", 1), None).await;

    for carried in [2, 9] {
        let err = expect_err(
            RULE,
            "update carrying a future version",
            state
                .update(at_version(&v1, carried, 5), UpdateOptions::default())
                .await,
        );
        assert_version_conflict(RULE, &err, "w", carried, 1);
    }
    assert_eq!(
        stored_version_and_value(RULE, state, "w").await,
        (1, 1),
        "{RULE}: stored (version, value) must be unchanged"
    );
}

fn assert_phase_conflict(rule: &str, err: &Error, expected: Phase, actual: Phase) {
    match err {
        Error::PhaseConflict {
            pointer,
            expected: e,
            actual: a,
        } => assert_eq!(
            (pointer, *e, *a),
            (&widget_pointer("w"), expected, actual),
            "{rule}: phase conflict (pointer, expected, stored)"
        ),
        other => panic!("{rule}: expected PhaseConflict, got {other:?}"),
    }
}

/// With the default options an update expects the running phase: updating a tearing-down
/// resource is a phase conflict. Expecting tearing-down, or any phase, lets it through; expecting
/// tearing-down on a running resource is a phase conflict too.
pub async fn update_of_tearing_down_resource_is_phase_conflict_unless_expected(subject: &Subject) {
    const RULE: &str = "update_of_tearing_down_resource_is_phase_conflict_unless_expected";
    let state = subject.state();
    let running = create_ok(state, RULE, widget("w", 1), None).await;
    let expect_tearing_down = UpdateOptions {
        owner: None,
        expected_phase: Some(Phase::TearingDown),
    };

    let err = expect_err(
        RULE,
        "update of a running resource expecting tearing down",
        state
            .update(with_value(&running, 2), expect_tearing_down.clone())
            .await,
    );
    assert_phase_conflict(RULE, &err, Phase::TearingDown, Phase::Running);

    let ready = expect_ok(
        RULE,
        "teardown",
        state.teardown(&widget_pointer("w"), None).await,
    );
    assert!(ready, "{RULE}: teardown without finalizers reports ready");
    let tearing_down = expect_ok(RULE, "get", state.get(&widget_pointer("w")).await);
    assert_eq!(
        (
            tearing_down.metadata().phase(),
            tearing_down.metadata().version().get()
        ),
        (Phase::TearingDown, 2),
        "{RULE}: teardown stores the tearing-down phase as a new version"
    );

    let err = expect_err(
        RULE,
        "update with default options",
        state
            .update(with_value(&tearing_down, 3), UpdateOptions::default())
            .await,
    );
    assert_phase_conflict(RULE, &err, Phase::Running, Phase::TearingDown);
    assert_eq!(
        stored_version_and_value(RULE, state, "w").await,
        (2, 1),
        "{RULE}: a phase conflict changes nothing"
    );

    let updated = expect_ok(
        RULE,
        "update expecting tearing down",
        state
            .update(with_value(&tearing_down, 3), expect_tearing_down)
            .await,
    );
    assert_eq!(
        (
            updated.metadata().version().get(),
            value_of(RULE, &updated),
            updated.metadata().phase()
        ),
        (3, 3, Phase::TearingDown),
        "{RULE}: update expecting tearing down"
    );
    let any_phase = UpdateOptions {
        owner: None,
        expected_phase: None,
    };
    let updated = expect_ok(
        RULE,
        "update expecting any phase",
        state.update(with_value(&updated, 4), any_phase).await,
    );
    assert_eq!(
        (updated.metadata().version().get(), value_of(RULE, &updated)),
        (4, 4),
        "{RULE}: update expecting any phase"
    );
}

fn assert_owner_conflict(
    rule: &str,
    step: &str,
    err: &Error,
    owner: Option<&str>,
    writer: Option<&str>,
) {
    match err {
        Error::OwnerConflict {
            pointer,
            owner: o,
            writer: w,
        } => assert_eq!(
            (pointer, o.as_deref(), w.as_deref()),
            (&widget_pointer("w"), owner, writer),
            "{rule}: {step}: owner conflict (pointer, stored owner, writer)"
        ),
        other => panic!("{rule}: {step}: expected OwnerConflict, got {other:?}"),
    }
}

/// Only the stored owner may update: another owner, or none, is an owner conflict naming both,
/// and changes nothing. User-owned resources reject controller writers the same way.
pub async fn update_checks_owner(subject: &Subject) {
    const RULE: &str = "update_checks_owner";
    let state = subject.state();
    let stored = create_ok(state, RULE, widget("w", 1), Some("ctrl")).await;

    for writer in [None, Some("other")] {
        let err = expect_err(
            RULE,
            "update by a non-owner",
            state
                .update(with_value(&stored, 2), UpdateOptions::owned_by(writer))
                .await,
        );
        assert_owner_conflict(RULE, "update by a non-owner", &err, Some("ctrl"), writer);
    }
    assert_eq!(
        stored_version_and_value(RULE, state, "w").await,
        (1, 1),
        "{RULE}: an owner conflict changes nothing"
    );
    let updated = expect_ok(
        RULE,
        "update by the owner",
        state
            .update(
                with_value(&stored, 2),
                UpdateOptions::owned_by(Some("ctrl")),
            )
            .await,
    );
    assert_eq!(
        updated.metadata().version().get(),
        2,
        "{RULE}: owner's update"
    );

    let user_owned = create_ok(state, RULE, widget("u", 1), None).await;
    let err = expect_err(
        RULE,
        "controller update of a user-owned resource",
        state
            .update(
                with_value(&user_owned, 2),
                UpdateOptions::owned_by(Some("ctrl")),
            )
            .await,
    );
    assert!(
        matches!(&err, Error::OwnerConflict { pointer, owner: None, writer: Some(w) }
            if *pointer == widget_pointer("u") && w == "ctrl"),
        "{RULE}: controller update of a user-owned resource: got {err:?}"
    );
}

/// Only the stored owner may tear a resource down; a non-owner gets an owner conflict and the
/// phase stays running.
pub async fn teardown_checks_owner(subject: &Subject) {
    const RULE: &str = "teardown_checks_owner";
    let state = subject.state();
    let stored = create_ok(state, RULE, widget("w", 1), Some("ctrl")).await;
    let pointer = widget_pointer("w");

    for writer in [None, Some("other")] {
        let err = expect_err(
            RULE,
            "teardown by a non-owner",
            state.teardown(&pointer, writer).await,
        );
        assert_owner_conflict(
            RULE,
            "teardown helper by a non-owner",
            &err,
            Some("ctrl"),
            writer,
        );

        // The same change written directly must be refused by the backend itself.
        let mut next = with_value(&stored, 1);
        make_mut(&mut next)
            .metadata_mut()
            .set_phase(Phase::TearingDown);
        let err = expect_err(
            RULE,
            "phase change by a non-owner",
            state.update(next, UpdateOptions::owned_by(writer)).await,
        );
        assert_owner_conflict(
            RULE,
            "phase change by a non-owner",
            &err,
            Some("ctrl"),
            writer,
        );
    }
    let after = expect_ok(RULE, "get", state.get(&pointer).await);
    assert_eq!(
        (after.metadata().phase(), after.metadata().version().get()),
        (Phase::Running, 1),
        "{RULE}: refused teardowns change nothing"
    );
    let ready = expect_ok(
        RULE,
        "teardown by the owner",
        state.teardown(&pointer, Some("ctrl")).await,
    );
    assert!(
        ready,
        "{RULE}: owner's teardown reports ready (no finalizers)"
    );
}

/// Only the stored owner may destroy; a non-owner gets an owner conflict and the resource stays.
pub async fn destroy_checks_owner(subject: &Subject) {
    const RULE: &str = "destroy_checks_owner";
    let state = subject.state();
    create_ok(state, RULE, widget("w", 1), Some("ctrl")).await;
    let pointer = widget_pointer("w");

    for writer in [None, Some("other")] {
        let options = DestroyOptions {
            owner: writer.map(Arc::from),
        };
        let err = expect_err(
            RULE,
            "destroy by a non-owner",
            state.destroy(&pointer, options).await,
        );
        assert_owner_conflict(RULE, "destroy by a non-owner", &err, Some("ctrl"), writer);
    }
    assert_eq!(
        stored_version_and_value(RULE, state, "w").await,
        (1, 1),
        "{RULE}: refused destroys change nothing"
    );
    let owner = DestroyOptions {
        owner: Some("ctrl".into()),
    };
    expect_ok(
        RULE,
        "destroy by the owner",
        state.destroy(&pointer, owner).await,
    );
    let err = expect_err(RULE, "get after destroy", state.get(&pointer).await);
    assert!(err.is_not_found(), "{RULE}: get after destroy: {err:?}");
}

/// The owner is set at creation and an update cannot change it: a written value naming another
/// owner is either refused (changing nothing) or stored with the original owner.
pub async fn update_cannot_change_owner(subject: &Subject) {
    const RULE: &str = "update_cannot_change_owner";
    let state = subject.state();
    let stored = create_ok(state, RULE, widget("w", 1), Some("ctrl")).await;

    let mut next = with_value(&stored, 2);
    make_mut(&mut next)
        .metadata_mut()
        .set_owner(Some("usurper".into()));
    match state
        .update(next, UpdateOptions::owned_by(Some("ctrl")))
        .await
    {
        Ok(updated) => assert_eq!(
            updated.metadata().owner(),
            Some("ctrl"),
            "{RULE}: the returned value keeps the original owner"
        ),
        Err(Error::OwnerConflict { .. } | Error::InvalidArgument { .. }) => {
            assert_eq!(
                stored_version_and_value(RULE, state, "w").await,
                (1, 1),
                "{RULE}: a refused owner change changes nothing"
            );
        }
        Err(other) => panic!("{RULE}: unexpected error {other:?}"),
    }
    let after = expect_ok(RULE, "get", state.get(&widget_pointer("w")).await);
    assert_eq!(
        after.metadata().owner(),
        Some("ctrl"),
        "{RULE}: stored owner"
    );
}

/// Slack allowed around the time of a call, for backends that store timestamps at a coarser
/// precision (down to whole seconds). The writer's forged value is decades away.
const CLOCK_SLACK: Duration = Duration::from_secs(1);

fn assert_during(rule: &str, what: &str, at: SystemTime, before: SystemTime, after: SystemTime) {
    assert!(
        before - CLOCK_SLACK <= at && at <= after + CLOCK_SLACK,
        "{rule}: {what} {at:?} must be the time of the call, within [{before:?}, {after:?}] \
         (± {CLOCK_SLACK:?})"
    );
}

/// The store sets `created` and `updated`, ignoring what the writer put there: create sets both
/// to the time of the call; update keeps `created` and moves `updated` to the time of the call;
/// reads return exactly what the writes returned.
pub async fn timestamps_are_set_by_the_store(subject: &Subject) {
    const RULE: &str = "timestamps_are_set_by_the_store";
    let state = subject.state();
    let forged = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
    let mut fresh = widget("w", 1);
    fresh.metadata.set_timestamps(forged, forged);

    let before = SystemTime::now();
    let created = create_ok(state, RULE, fresh, None).await;
    let after = SystemTime::now();
    let md = created.metadata();
    assert_during(RULE, "created", md.created(), before, after);
    assert_eq!(
        md.updated(),
        md.created(),
        "{RULE}: a new resource's updated equals created"
    );

    let mut next = with_value(&created, 2);
    make_mut(&mut next)
        .metadata_mut()
        .set_timestamps(forged, forged);
    let before = SystemTime::now();
    let updated = expect_ok(
        RULE,
        "update",
        state.update(next, UpdateOptions::default()).await,
    );
    let after = SystemTime::now();
    let umd = updated.metadata();
    assert_eq!(umd.created(), md.created(), "{RULE}: update keeps created");
    assert_during(RULE, "updated", umd.updated(), before, after);
    assert!(
        umd.updated() >= umd.created(),
        "{RULE}: updated {:?} precedes created {:?}",
        umd.updated(),
        umd.created()
    );
    let got = expect_ok(RULE, "get", state.get(&widget_pointer("w")).await);
    assert_eq!(
        (got.metadata().created(), got.metadata().updated()),
        (umd.created(), umd.updated()),
        "{RULE}: get returns the stored timestamps"
    );
}

/// Reading a stored resource as the wrong type is an invalid-argument error naming the
/// resource, not a panic; reading it as its own type works.
pub async fn typed_downcast_mismatch_is_an_error(subject: &Subject) {
    const RULE: &str = "typed_downcast_mismatch_is_an_error";
    let state = subject.state();
    create_ok(state, RULE, widget("w", 5), None).await;
    let pointer = widget_pointer("w");

    let typed = expect_ok(RULE, "typed get", state.get_typed::<Widget>(&pointer).await);
    assert_eq!(typed.spec, Widget { value: 5 }, "{RULE}: typed get");

    let err = expect_err(
        RULE,
        "get as Gadget",
        state.get_typed::<Gadget>(&pointer).await,
    );
    assert!(
        matches!(&err, Error::InvalidArgument { subject, .. } if subject.contains("w")),
        "{RULE}: get as the wrong type: expected InvalidArgument naming the resource, got {err:?}"
    );
    let err = expect_err(
        RULE,
        "list as Gadget",
        state
            .list_typed::<Gadget>(&widgets(), &ListOptions::default())
            .await,
    );
    assert!(
        matches!(err, Error::InvalidArgument { .. }),
        "{RULE}: list as the wrong type: expected InvalidArgument, got {err:?}"
    );
}

/// Every call of a run longer than a budget period answers right: a backend whose calls
/// complete at once returns one of every [`crate::CALLS_PER_UNIT`] calls on a thread pending
/// (it waits for the task's budget first), and that call too writes exactly once and reads
/// what is stored.
pub async fn a_long_run_of_calls_answers_every_call(subject: &Subject) {
    const RULE: &str = "a_long_run_of_calls_answers_every_call";
    let state = subject.state();
    let n = u64::from(crate::CALLS_PER_UNIT) + 8;
    let id = |i: u64| format!("r{i:04}");
    for i in 0..n {
        let created = create_ok(state, RULE, widget(&id(i), i), None).await;
        assert_eq!(
            created.metadata().version(),
            Version::FIRST,
            "{RULE}: create {i}"
        );
    }
    for i in 0..n {
        let read = expect_ok(RULE, "get", state.get(&widget_pointer(&id(i))).await);
        assert_eq!(value_of(RULE, &read), i, "{RULE}: get {i}");
        let written = expect_ok(
            RULE,
            "update",
            state
                .update(with_value(&read, i + 1000), UpdateOptions::default())
                .await,
        );
        assert_eq!(
            written.metadata().version(),
            Version::new(2),
            "{RULE}: update {i}"
        );
    }
    let listed = expect_ok(
        RULE,
        "list",
        state.list(&widgets(), &ListOptions::default()).await,
    );
    let values: Vec<u64> = listed.iter().map(|r| value_of(RULE, r)).collect();
    assert_eq!(
        values,
        (1000..1000 + n).collect::<Vec<_>>(),
        "{RULE}: listed values"
    );
}

/// Checks that `result` is the refusal of a spec no store can keep exactly: an invalid argument
/// naming `pointer` and the field `spec.ratio`, whose message starts with `value`.
fn assert_refused_spec<T: std::fmt::Debug>(
    rule: &str,
    step: &str,
    result: Result<T, Error>,
    pointer: &cosi_core::Pointer,
    value: &str,
) {
    match expect_err(rule, step, result) {
        Error::InvalidArgument {
            subject,
            field,
            message,
        } => {
            assert_eq!(
                (subject.as_str(), field.as_str()),
                (pointer.to_string().as_str(), "spec.ratio"),
                "{rule}: {step}: the refusal names the resource and the field"
            );
            let expected = format!("{value} cannot be stored; a spec's floats must be finite");
            assert!(
                message.starts_with(&expected),
                "{rule}: {step}: message {message:?} does not start with {expected:?}"
            );
        }
        other => panic!("{rule}: {step}: expected an invalid argument, got {other:?}"),
    }
}

/// A write of a spec holding a float no store can keep exactly (NaN, an infinity: JSON has
/// neither) is refused — create, update and modify alike, on every backend — with an invalid
/// argument naming the resource and the field; nothing is stored and no event is sent.
pub async fn a_spec_no_store_can_keep_exactly_is_refused(subject: &Subject) {
    const RULE: &str = "a_spec_no_store_can_keep_exactly_is_refused";
    let state = subject.state();
    let gadget = |ratio: f64| {
        Resource::new(
            "g",
            Gadget {
                name: "g".into(),
                ratio,
            },
        )
    };
    let pointer = Gadget::kind().pointer("g");
    let bootstrap = cosi_core::WatchKindOptions {
        bootstrap: true,
        ..Default::default()
    };
    let mut watch = expect_ok(
        RULE,
        "watch_kind",
        state.watch_kind(&Gadget::kind(), bootstrap).await,
    );

    assert_refused_spec(
        RULE,
        "create with NaN",
        state
            .create(gadget(f64::NAN).into_shared(), CreateOptions::default())
            .await,
        &pointer,
        "NaN",
    );
    let err = expect_err(
        RULE,
        "get after the refused create",
        state.get(&pointer).await,
    );
    assert!(
        matches!(err, Error::NotFound { .. }),
        "{RULE}: a refused create stores nothing: got {err:?}"
    );

    let stored = expect_ok(
        RULE,
        "create with a finite ratio",
        state
            .create(gadget(0.5).into_shared(), CreateOptions::default())
            .await,
    );
    let mut next = gadget(f64::INFINITY);
    next.metadata = stored.metadata().clone();
    assert_refused_spec(
        RULE,
        "update with +inf",
        state
            .update(next.into_shared(), UpdateOptions::default())
            .await,
        &pointer,
        "inf",
    );
    assert_refused_spec(
        RULE,
        "modify to -inf",
        state
            .modify(gadget(0.0), UpdateOptions::default(), |r| {
                r.spec.ratio = f64::NEG_INFINITY;
                Ok(())
            })
            .await,
        &pointer,
        "-inf",
    );
    let kept = expect_ok(
        RULE,
        "typed get after the refusals",
        state.get_typed::<Gadget>(&pointer).await,
    );
    assert_eq!(
        (kept.metadata.version(), kept.spec.ratio),
        (Version::FIRST, 0.5),
        "{RULE}: refused updates leave the stored resource as it was"
    );

    expect_ok(
        RULE,
        "destroy",
        state.destroy(&pointer, DestroyOptions::default()).await,
    );
    expect_events(
        RULE,
        &mut watch,
        &[
            Seen::bootstrapped(),
            Seen::created("g", 1),
            Seen::destroyed("g", 1),
        ],
        "refused writes send no event",
    )
    .await;
}
