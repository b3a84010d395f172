//! The model-based property test: random operation sequences applied both to the backend and to
//! a plain reference model of the `State` rules (a `BTreeMap`), which must agree on every result
//! (the stored value, the readiness of a teardown, or the error) and on every event a kind
//! watcher opened before the sequence receives.
//!
//! A second watcher, filtered by a label that follows the value (`tier=1`), reads only when the
//! sequence says so and falls behind the history window when bursts of writes pass it: every
//! event it receives — exact or part of a catch-up — must be relative to what it holds, and the
//! view its events build must end equal to the model's matching resources.
//!
//! Where the rules leave the order of checks open (an update that is both stale and from the
//! wrong owner), the model accepts any one of the violated rules, reported exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use cosi_core::{
    downcast_ref, CreateOptions, DestroyOptions, Error, Event, LabelOp, LabelQueries, LabelQuery,
    LabelTerm, ListOptions, Phase, Resource, SharedResource, State, StateExt, UpdateOptions,
    Version, Watch, WatchKindOptions,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::consumer_view::{ready_events, ConsumerView};
use super::fixture::{widget, widget_pointer, widgets, Widget, TIMEOUT};
use super::{Subject, HISTORY_WINDOW};

/// Cases run when `PROPTEST_CASES` is not set.
pub const DEFAULT_MODEL_CASES: u32 = 64;

/// The longest operation sequence.
const MAX_OPS: usize = 24;

/// Writes of one burst: fewer than the history window, so the exact watcher, which reads after
/// every operation, never falls behind; two bursts, or one and a few writes, put the filtered
/// watcher behind if it does not read in between.
const BURST: usize = 3 * HISTORY_WINDOW / 4;
const _: () = assert!(BURST < HISTORY_WINDOW && 2 * BURST > HISTORY_WINDOW);

// Two ids keep most operations on existing resources while still mixing creates and conflicts;
// the third is written only by bursts, the fourth only to mark how far the exact watcher reads.
const IDS: [&str; 4] = ["a", "b", "pad", "sync"];
const RANDOM_IDS: usize = 2;
const PAD: usize = 2;
const SYNC: usize = 3;

/// Events the exact watcher may leave unread before a step: with a burst and a sync write
/// after them, still fewer than the history window.
const MAX_UNREAD: usize = HISTORY_WINDOW - BURST - 2;
const OWNERS: [Option<&str>; 3] = [None, Some("ctrl"), Some("other")];
const FINALIZERS: [&str; 2] = ["f1", "f2"];

/// Who a write claims to be: the stored owner (the usual, successful case) or a fixed one.
#[derive(Clone, Copy, Debug)]
enum Writer {
    Stored,
    Fixed(usize),
}

/// The version an update carries, relative to the stored one.
#[derive(Clone, Copy, Debug)]
enum Carried {
    Current,
    Stale,
    Future,
}

#[derive(Clone, Copy, Debug)]
enum Expect {
    Running,
    TearingDown,
    AnyPhase,
}

#[derive(Clone, Debug)]
enum Op {
    Create {
        id: usize,
        owner: usize,
        value: u64,
        finalizer: Option<usize>,
    },
    Update {
        id: usize,
        carried: Carried,
        writer: Writer,
        expect: Expect,
        value: u64,
    },
    Destroy {
        id: usize,
        writer: Writer,
    },
    Teardown {
        id: usize,
        writer: Writer,
    },
    AddFinalizer {
        id: usize,
        finalizer: usize,
    },
    RemoveFinalizer {
        id: usize,
        finalizer: usize,
    },
    Modify {
        id: usize,
        writer: Writer,
        value: u64,
    },
}

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Step {
    /// One write.
    Write(Op),
    /// [`BURST`] modifies of `pad`: the first six make the filtered watcher select it and drop
    /// it three times, the others it does not select.
    Burst,
    /// The filtered watcher takes the events it has ready, without waiting.
    Observe,
}

fn writer() -> impl Strategy<Value = Writer> {
    prop_oneof![3 => Just(Writer::Stored), 1 => (0..OWNERS.len()).prop_map(Writer::Fixed)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        17 => op().prop_map(Step::Write),
        1 => Just(Step::Burst),
        2 => Just(Step::Observe),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0..RANDOM_IDS;
    let value = 0..3u64;
    let finalizer = 0..FINALIZERS.len();
    let carried = prop_oneof![
        3 => Just(Carried::Current),
        1 => Just(Carried::Stale),
        1 => Just(Carried::Future)
    ];
    let expect = prop_oneof![
        3 => Just(Expect::Running),
        1 => Just(Expect::TearingDown),
        1 => Just(Expect::AnyPhase)
    ];
    prop_oneof![
        3 => (id.clone(), 0..OWNERS.len(), value.clone(), proptest::option::of(finalizer.clone()))
            .prop_map(|(id, owner, value, finalizer)| Op::Create { id, owner, value, finalizer }),
        3 => (id.clone(), carried, writer(), expect, value.clone())
            .prop_map(|(id, carried, writer, expect, value)| Op::Update { id, carried, writer, expect, value }),
        2 => (id.clone(), writer()).prop_map(|(id, writer)| Op::Destroy { id, writer }),
        2 => (id.clone(), writer()).prop_map(|(id, writer)| Op::Teardown { id, writer }),
        2 => (id.clone(), finalizer.clone()).prop_map(|(id, finalizer)| Op::AddFinalizer { id, finalizer }),
        2 => (id.clone(), finalizer).prop_map(|(id, finalizer)| Op::RemoveFinalizer { id, finalizer }),
        3 => (id, writer(), value).prop_map(|(id, writer, value)| Op::Modify { id, writer, value }),
    ]
}

/// What the model (and the test) knows about a stored resource.
#[derive(Clone, Debug, PartialEq)]
struct Stored {
    version: u64,
    owner: Option<String>,
    phase: Phase,
    finalizers: BTreeSet<String>,
    value: u64,
}

impl Stored {
    fn of(resource: &SharedResource) -> Result<Self, String> {
        let md = resource.metadata();
        let value = downcast_ref::<Widget>(&**resource)
            .map_err(|e| format!("{}: not a Widget: {e}", md.pointer()))?
            .spec
            .value;
        Ok(Stored {
            version: md.version().get(),
            owner: md.owner().map(str::to_string),
            phase: md.phase(),
            finalizers: md.finalizers().clone(),
            value,
        })
    }
}

/// The error the rules call for, without the pointer (always the operation's).
#[derive(Clone, Debug, PartialEq)]
enum Refusal {
    NotFound,
    AlreadyExists,
    Version {
        expected: u64,
        actual: u64,
    },
    Owner {
        owner: Option<String>,
        writer: Option<String>,
    },
    Phase {
        expected: Phase,
        actual: Phase,
    },
    PendingFinalizers(BTreeSet<String>),
    Unexpected(String),
}

impl Refusal {
    fn of(id: &str, error: &Error) -> Self {
        let pointer = widget_pointer(id);
        match error {
            Error::NotFound { pointer: p } if *p == pointer => Refusal::NotFound,
            Error::AlreadyExists { pointer: p } if *p == pointer => Refusal::AlreadyExists,
            Error::VersionConflict {
                pointer: p,
                expected,
                actual,
            } if *p == pointer => Refusal::Version {
                expected: expected.get(),
                actual: actual.get(),
            },
            Error::OwnerConflict {
                pointer: p,
                owner,
                writer,
            } if *p == pointer => Refusal::Owner {
                owner: owner.clone(),
                writer: writer.clone(),
            },
            Error::PhaseConflict {
                pointer: p,
                expected,
                actual,
            } if *p == pointer => Refusal::Phase {
                expected: *expected,
                actual: *actual,
            },
            Error::PendingFinalizers {
                pointer: p,
                finalizers,
            } if *p == pointer => Refusal::PendingFinalizers(finalizers.clone()),
            other => Refusal::Unexpected(format!("{other:?}")),
        }
    }
}

/// The result of one operation.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Value(Stored),
    Ready(bool),
    Destroyed,
    /// The model: any one of these; the backend: exactly one.
    Refused(Vec<Refusal>),
}

/// A change event as the model predicts it.
#[derive(Clone, Debug, PartialEq)]
enum Change {
    Created(String, Stored),
    Updated(String, Stored, Stored),
    Destroyed(String, Stored),
}

impl Change {
    fn of(event: &Event) -> Result<Self, String> {
        if event.is_compacted() {
            return Err(format!(
                "a watcher inside the window got a compacted event: {event:?}"
            ));
        }
        let id = |r: &SharedResource| r.metadata().id().to_string();
        match event {
            Event::Created { resource, .. } => {
                Ok(Change::Created(id(resource), Stored::of(resource)?))
            }
            Event::Updated {
                old: Some(old),
                resource,
                ..
            } => Ok(Change::Updated(
                id(resource),
                Stored::of(old)?,
                Stored::of(resource)?,
            )),
            Event::Destroyed { resource, .. } => {
                Ok(Change::Destroyed(id(resource), Stored::of(resource)?))
            }
            other => Err(format!("expected a change event, got {other:?}")),
        }
    }
}

/// The reference model: the rules of `cosi_core::state` and `StateExt`, written plainly.
#[derive(Default)]
struct Model {
    resources: BTreeMap<String, Stored>,
}

fn owner_of(writer: Writer, stored: Option<&Stored>) -> Option<String> {
    match writer {
        Writer::Stored => stored.and_then(|s| s.owner.clone()),
        Writer::Fixed(i) => OWNERS[i].map(str::to_string),
    }
}

fn carried_version(carried: Carried, stored: Option<&Stored>) -> u64 {
    let current = stored.map_or(1, |s| s.version);
    match carried {
        Carried::Current => current,
        Carried::Stale => current.saturating_sub(1),
        Carried::Future => current + 1,
    }
}

fn expected_phase(expect: Expect) -> Option<Phase> {
    match expect {
        Expect::Running => Some(Phase::Running),
        Expect::TearingDown => Some(Phase::TearingDown),
        Expect::AnyPhase => None,
    }
}

impl Model {
    /// Applies `op`; returns the outcome the rules call for and the events they produce.
    fn apply(&mut self, op: &Op) -> (Outcome, Vec<Change>) {
        let not_found = || (Outcome::Refused(vec![Refusal::NotFound]), vec![]);
        match *op {
            Op::Create {
                id,
                owner,
                value,
                finalizer,
            } => {
                let id = IDS[id].to_string();
                if self.resources.contains_key(&id) {
                    return (Outcome::Refused(vec![Refusal::AlreadyExists]), vec![]);
                }
                let created = Stored {
                    version: 1,
                    owner: OWNERS[owner].map(str::to_string),
                    phase: Phase::Running,
                    finalizers: finalizer
                        .map(|f| FINALIZERS[f].to_string())
                        .into_iter()
                        .collect(),
                    value,
                };
                self.resources.insert(id.clone(), created.clone());
                (
                    Outcome::Value(created.clone()),
                    vec![Change::Created(id, created)],
                )
            }
            Op::Update {
                id,
                carried,
                writer,
                expect,
                value,
            } => {
                let id = IDS[id].to_string();
                let Some(stored) = self.resources.get(&id).cloned() else {
                    return not_found();
                };
                let mut refusals = Vec::new();
                let version = carried_version(carried, Some(&stored));
                if version != stored.version {
                    refusals.push(Refusal::Version {
                        expected: version,
                        actual: stored.version,
                    });
                }
                let writer = owner_of(writer, Some(&stored));
                if writer != stored.owner {
                    refusals.push(Refusal::Owner {
                        owner: stored.owner.clone(),
                        writer,
                    });
                }
                if let Some(expected) = expected_phase(expect) {
                    if expected != stored.phase {
                        refusals.push(Refusal::Phase {
                            expected,
                            actual: stored.phase,
                        });
                    }
                }
                if !refusals.is_empty() {
                    return (Outcome::Refused(refusals), vec![]);
                }
                self.write(id, stored, |s| s.value = value)
            }
            Op::Destroy { id, writer } => {
                let id = IDS[id].to_string();
                let Some(stored) = self.resources.get(&id).cloned() else {
                    return not_found();
                };
                let mut refusals = Vec::new();
                let writer = owner_of(writer, Some(&stored));
                if writer != stored.owner {
                    refusals.push(Refusal::Owner {
                        owner: stored.owner.clone(),
                        writer,
                    });
                }
                if !stored.finalizers.is_empty() {
                    refusals.push(Refusal::PendingFinalizers(stored.finalizers.clone()));
                }
                if !refusals.is_empty() {
                    return (Outcome::Refused(refusals), vec![]);
                }
                self.resources.remove(&id);
                (Outcome::Destroyed, vec![Change::Destroyed(id, stored)])
            }
            Op::Teardown { id, writer } => {
                let id = IDS[id].to_string();
                let Some(stored) = self.resources.get(&id).cloned() else {
                    return not_found();
                };
                let writer = owner_of(writer, Some(&stored));
                if writer != stored.owner {
                    let refusal = Refusal::Owner {
                        owner: stored.owner.clone(),
                        writer,
                    };
                    return (Outcome::Refused(vec![refusal]), vec![]);
                }
                let ready = stored.finalizers.is_empty();
                if stored.phase == Phase::TearingDown {
                    return (Outcome::Ready(ready), vec![]);
                }
                let (_, events) = self.write(id, stored, |s| s.phase = Phase::TearingDown);
                (Outcome::Ready(ready), events)
            }
            Op::AddFinalizer { id, finalizer } | Op::RemoveFinalizer { id, finalizer } => {
                let add = matches!(op, Op::AddFinalizer { .. });
                let id = IDS[id].to_string();
                let Some(stored) = self.resources.get(&id).cloned() else {
                    return not_found();
                };
                let name = FINALIZERS[finalizer].to_string();
                if stored.finalizers.contains(&name) == add {
                    return (Outcome::Value(stored), vec![]);
                }
                self.write(id, stored, |s| {
                    if add {
                        s.finalizers.insert(name.clone());
                    } else {
                        s.finalizers.remove(&name);
                    }
                })
            }
            Op::Modify { id, writer, value } => {
                let id = IDS[id].to_string();
                let stored = self.resources.get(&id).cloned();
                let writer = owner_of(writer, stored.as_ref());
                let Some(stored) = stored else {
                    let created = Stored {
                        version: 1,
                        owner: writer,
                        phase: Phase::Running,
                        finalizers: BTreeSet::new(),
                        value,
                    };
                    self.resources.insert(id.clone(), created.clone());
                    return (
                        Outcome::Value(created.clone()),
                        vec![Change::Created(id, created)],
                    );
                };
                // The no-op check comes before any write rule: an unchanged modify always succeeds.
                if stored.value == value {
                    return (Outcome::Value(stored), vec![]);
                }
                let mut refusals = Vec::new();
                if writer != stored.owner {
                    refusals.push(Refusal::Owner {
                        owner: stored.owner.clone(),
                        writer,
                    });
                }
                if stored.phase != Phase::Running {
                    refusals.push(Refusal::Phase {
                        expected: Phase::Running,
                        actual: stored.phase,
                    });
                }
                if !refusals.is_empty() {
                    return (Outcome::Refused(refusals), vec![]);
                }
                self.write(id, stored, |s| s.value = value)
            }
        }
    }

    /// Stores a changed copy of `stored` as the next version.
    fn write(
        &mut self,
        id: String,
        stored: Stored,
        change: impl FnOnce(&mut Stored),
    ) -> (Outcome, Vec<Change>) {
        let mut next = stored.clone();
        change(&mut next);
        next.version += 1;
        self.resources.insert(id.clone(), next.clone());
        (
            Outcome::Value(next.clone()),
            vec![Change::Updated(id, stored, next)],
        )
    }
}

fn refused(id: &str, error: Error) -> Outcome {
    Outcome::Refused(vec![Refusal::of(id, &error)])
}

fn outcome(id: &str, result: Result<SharedResource, Error>) -> Result<Outcome, String> {
    match result {
        Ok(resource) => Ok(Outcome::Value(Stored::of(&resource)?)),
        Err(e) => Ok(refused(id, e)),
    }
}

/// The label the filtered watcher selects on: every write sets it to the value, so the model
/// knows what matches from the values alone.
const TIER: &str = "tier";

fn set_tier(widget: &mut Resource<Widget>) {
    let tier = widget.spec.value.to_string();
    widget.metadata.labels_mut().insert(TIER.into(), tier);
}

fn tiered(mut widget: Resource<Widget>) -> Resource<Widget> {
    set_tier(&mut widget);
    widget
}

/// The filtered watcher's selector: value 1.
fn tier_one() -> LabelQueries {
    LabelQuery::new()
        .with(LabelTerm::new(TIER, LabelOp::Equal("1".into())))
        .into()
}

/// Applies `op` to the backend, building writes from the model's view before the operation.
async fn apply_to_backend(state: &dyn State, model: &Model, op: &Op) -> Result<Outcome, String> {
    match *op {
        Op::Create {
            id,
            owner,
            value,
            finalizer,
        } => {
            let mut fresh = tiered(widget(IDS[id], value));
            if let Some(f) = finalizer {
                fresh
                    .metadata
                    .finalizers_mut()
                    .insert(FINALIZERS[f].to_string());
            }
            let options = CreateOptions {
                owner: OWNERS[owner].map(Arc::from),
            };
            outcome(IDS[id], state.create(fresh.into_shared(), options).await)
        }
        Op::Update {
            id,
            carried,
            writer,
            expect,
            value,
        } => {
            let stored = model.resources.get(IDS[id]);
            let mut next: Resource<Widget> = tiered(widget(IDS[id], value));
            next.metadata
                .set_version(Version::new(carried_version(carried, stored)));
            if let Some(stored) = stored {
                next.metadata
                    .set_owner(stored.owner.as_deref().map(Arc::from));
                next.metadata.set_phase(stored.phase);
                *next.metadata.finalizers_mut() = stored.finalizers.clone();
            }
            let options = UpdateOptions {
                owner: owner_of(writer, stored).map(Arc::from),
                expected_phase: expected_phase(expect),
            };
            outcome(IDS[id], state.update(next.into_shared(), options).await)
        }
        Op::Destroy { id, writer } => {
            let options = DestroyOptions {
                owner: owner_of(writer, model.resources.get(IDS[id])).map(Arc::from),
            };
            Ok(
                match state.destroy(&widget_pointer(IDS[id]), options).await {
                    Ok(()) => Outcome::Destroyed,
                    Err(e) => refused(IDS[id], e),
                },
            )
        }
        Op::Teardown { id, writer } => {
            let owner = owner_of(writer, model.resources.get(IDS[id]));
            Ok(
                match state
                    .teardown(&widget_pointer(IDS[id]), owner.as_deref())
                    .await
                {
                    Ok(ready) => Outcome::Ready(ready),
                    Err(e) => refused(IDS[id], e),
                },
            )
        }
        Op::AddFinalizer { id, finalizer } => outcome(
            IDS[id],
            state
                .add_finalizer(&widget_pointer(IDS[id]), &[FINALIZERS[finalizer]])
                .await,
        ),
        Op::RemoveFinalizer { id, finalizer } => outcome(
            IDS[id],
            state
                .remove_finalizer(&widget_pointer(IDS[id]), &[FINALIZERS[finalizer]])
                .await,
        ),
        Op::Modify { id, writer, value } => {
            let owner = owner_of(writer, model.resources.get(IDS[id]));
            let result = state
                .modify(
                    widget(IDS[id], 0),
                    UpdateOptions::owned_by(owner.as_deref()),
                    |r| {
                        r.spec.value = value;
                        set_tier(r);
                        Ok(())
                    },
                )
                .await;
            outcome(IDS[id], result.map(|r| r as SharedResource))
        }
    }
}

fn agree(expected: &Outcome, actual: &Outcome) -> bool {
    match (expected, actual) {
        (Outcome::Refused(any_of), Outcome::Refused(got)) => {
            got.len() == 1 && any_of.contains(&got[0])
        }
        _ => expected == actual,
    }
}

/// The next change event (skipping `Noop`s), within the timeout.
async fn next_change(watch: &mut Watch) -> Result<Change, String> {
    loop {
        match tokio::time::timeout(TIMEOUT, watch.recv()).await {
            Err(_) => return Err(format!("no event within {TIMEOUT:?}")),
            Ok(None) => return Err("the watch ended".into()),
            Ok(Some(Event::Noop { .. })) => continue,
            Ok(Some(event)) => return Change::of(&event),
        }
    }
}

/// The writes a step makes.
fn writes(step: &Step) -> Vec<Op> {
    match step {
        Step::Write(op) => vec![op.clone()],
        // `pad` enters the filter and leaves it again three times first: six events for the
        // filtered watcher, which fill whatever buffers sit before it, then the rest pass it.
        Step::Burst => (0..BURST as u64)
            .map(|i| Op::Modify {
                id: PAD,
                writer: Writer::Stored,
                value: if i < 6 && i % 2 == 0 { 1 } else { 10 + i },
            })
            .collect(),
        Step::Observe => vec![],
    }
}

/// Applies events to the filtered watcher's view, naming the step on a broken rule.
fn observe(view: &mut ConsumerView, events: &[Event], when: &str) -> Result<(), String> {
    for event in events {
        view.apply(event)
            .map_err(|broken| format!("filtered watcher, {when}: {broken}"))?;
    }
    Ok(())
}

/// Applies `op` to the backend and the model; checks they agree and queues the events the model
/// predicts.
async fn write(
    state: &dyn State,
    model: &mut Model,
    op: &Op,
    cause: String,
    predicted: &mut Vec<(String, Change)>,
) -> Result<(), String> {
    let actual = apply_to_backend(state, model, op).await?;
    let (expected, changes) = model.apply(op);
    if !agree(&expected, &actual) {
        return Err(format!(
            "{cause}: the model expects {expected:?}, the backend returned {actual:?}"
        ));
    }
    predicted.extend(changes.into_iter().map(|c| (cause.clone(), c)));
    Ok(())
}

/// Reads the exact watcher's events and compares them with the predicted ones, which end with a
/// change the watcher must see (a sync or the sentinel): a lost or extra event then shows as a
/// mismatch at once.
async fn expect_predicted(
    watch: &mut Watch,
    predicted: &mut Vec<(String, Change)>,
) -> Result<(), String> {
    for (cause, change) in predicted.drain(..) {
        let got = next_change(watch)
            .await
            .map_err(|e| format!("{cause}: waiting for {change:?}: {e}"))?;
        if got != change {
            return Err(format!(
                "{cause}: the model expects {change:?}, the watcher got {got:?}"
            ));
        }
    }
    Ok(())
}

/// Runs one sequence against a fresh backend; `Err` describes the first disagreement. Returns
/// whether the filtered watcher had to catch up.
///
/// The exact watcher reads whenever more than [`MAX_UNREAD`] events are due, after a sync write
/// (and at the end after the sentinel's creation), so it never falls behind the window and a
/// lost event shows as a mismatch instead of a wait. The filtered watcher reads at `Observe`
/// steps and, after the sentinel's creation (which it selects), through the sentinel's event.
async fn run_case(subject: &Subject, steps: &[Step]) -> Result<bool, String> {
    let state = subject.state();
    let mut watch = state
        .watch_kind(&widgets(), WatchKindOptions::default())
        .await
        .map_err(|e| format!("watch_kind: {e}"))?;
    let filtered = WatchKindOptions {
        labels: tier_one(),
        ..WatchKindOptions::default()
    };
    let mut lagging = state
        .watch_kind(&widgets(), filtered)
        .await
        .map_err(|e| format!("filtered watch_kind: {e}"))?;
    let mut view = ConsumerView::default();
    let mut model = Model::default();
    let mut predicted = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        if predicted.len() > MAX_UNREAD {
            let value = model.resources.get(IDS[SYNC]).map_or(10, |s| s.value + 1);
            let sync = Op::Modify {
                id: SYNC,
                writer: Writer::Stored,
                value,
            };
            let cause = format!("sync before step {index}");
            write(state, &mut model, &sync, cause, &mut predicted).await?;
            expect_predicted(&mut watch, &mut predicted).await?;
        }
        if let Step::Observe = step {
            observe(
                &mut view,
                &ready_events(&mut lagging),
                &format!("step {index}"),
            )?;
        }
        for op in writes(step) {
            let cause = format!("step {index} {op:?}");
            write(state, &mut model, &op, cause, &mut predicted).await?;
        }
    }

    let sentinel = tiered(widget("sentinel", 1)).into_shared();
    let created = state
        .create(sentinel, CreateOptions::default())
        .await
        .map_err(|e| format!("sentinel create: {e}"))?;
    let end = Change::Created("sentinel".into(), Stored::of(&created)?);
    predicted.push(("the sentinel".into(), end));
    expect_predicted(&mut watch, &mut predicted).await?;
    loop {
        let event = match tokio::time::timeout(TIMEOUT, lagging.recv()).await {
            Err(_) => return Err(format!("filtered watcher: no sentinel within {TIMEOUT:?}")),
            Ok(None) => return Err("filtered watcher: the watch ended".into()),
            Ok(Some(event)) => event,
        };
        observe(
            &mut view,
            std::slice::from_ref(&event),
            "after the sentinel",
        )?;
        if event
            .resource()
            .is_some_and(|r| r.metadata().id() == "sentinel")
        {
            break;
        }
    }

    let listed = state
        .list(&widgets(), &ListOptions::default())
        .await
        .map_err(|e| format!("final list: {e}"))?;
    let mut contents = BTreeMap::new();
    for resource in &listed {
        contents.insert(resource.metadata().id().to_string(), Stored::of(resource)?);
    }
    let matching: BTreeMap<&String, &Stored> =
        contents.iter().filter(|(_, s)| s.value == 1).collect();
    let mut seen = BTreeMap::new();
    for resource in view.resources() {
        seen.insert(resource.metadata().id().to_string(), Stored::of(resource)?);
    }
    if seen.iter().collect::<BTreeMap<_, _>>() != matching {
        return Err(format!(
            "the filtered watcher's view {seen:?} is not the matching contents {matching:?}"
        ));
    }
    contents.remove("sentinel");
    if contents != model.resources {
        return Err(format!(
            "final contents differ: model {:?}, backend {contents:?}",
            model.resources
        ));
    }
    Ok(view.caught_up())
}

/// Random sequences of create, update (current, stale or future version; right or wrong owner;
/// any expected phase), destroy, teardown, finalizer changes and modify, with bursts of writes
/// that a label-filtered watcher reading only now and then falls behind, applied to the backend
/// and to a reference model, agree on every result, every event of a kind watcher opened
/// before the sequence, and the final contents; the filtered watcher's events are each relative
/// to what it holds and build the model's matching contents. Runs `PROPTEST_CASES` cases
/// (default [`DEFAULT_MODEL_CASES`]) of up to 24 steps, after one fixed sequence that must make
/// the filtered watcher catch up; a failure reports the shrunk sequence.
///
/// `factory` yields a fresh, empty [`Subject`] per case. The function builds its own tokio
/// runtime, so it is called from a plain `#[test]`.
pub fn model_agrees_with_backend<F, Fut>(factory: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Subject>,
{
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MODEL_CASES);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("model_agrees_with_backend: cannot build a tokio runtime: {e}"));
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 1024,
        ..Config::default()
    };
    // First a sequence that must leave the filtered watcher behind, so that every run checks
    // a catch-up whatever the random cases happen to do.
    let create = Op::Create {
        id: 0,
        owner: 0,
        value: 1,
        finalizer: None,
    };
    let behind = [
        Step::Write(create),
        Step::Observe,
        Step::Burst,
        Step::Burst,
        Step::Burst,
    ];
    let caught_up = runtime.block_on(async {
        let subject = factory().await;
        run_case(&subject, &behind).await
    });
    match caught_up {
        Ok(true) => {}
        Ok(false) => panic!(
            "model_agrees_with_backend: three bursts of {BURST} writes past a filtered watcher \
             that does not read did not make it catch up"
        ),
        Err(failure) => panic!("model_agrees_with_backend: {behind:?}: {failure}"),
    }
    let mut runner = TestRunner::new(config);
    let result = runner.run(&vec(step(), 1..=MAX_OPS), |steps| {
        runtime
            .block_on(async {
                let subject = factory().await;
                run_case(&subject, &steps).await
            })
            .map(|_| ())
            .map_err(TestCaseError::fail)
    });
    if let Err(failure) = result {
        panic!("model_agrees_with_backend: {failure}");
    }
}
