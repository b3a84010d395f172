//! Conformance tests of the engine: scheduling, run-time inputs, registration after start,
//! failure handling, shared outputs, access rules, status counters, shutdown.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use cosi_controllers::testing::Harness;
use cosi_controllers::{
    Backoff, Controller, ControllerState, ControllerStatus, EngineOptions, Input, Output,
    Reconciled, RegistrationError, ShutdownReport,
};
use cosi_core::{
    Call, Error, LabelOp, LabelQueries, LabelQuery, LabelTerm, ListOptions, Resource, ResourceSpec,
    Result, State, StateExt,
};

/// Copies A/x into B/x (value + 1) and counts its reconciles.
struct Copier {
    name: &'static str,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Copier {
    fn name(&self) -> &str {
        self.name
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<B>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        for input in state
            .list_typed::<A>(&A::kind(), &ListOptions::default())
            .await?
        {
            let value = input.spec.value + 1;
            state
                .modify_output(
                    Resource::new(input.metadata.id().to_string(), B::default()),
                    |r| {
                        r.spec.value = value;
                        Ok(())
                    },
                )
                .await?;
        }
        Ok(Reconciled::Done)
    }
}

/// A harness started with one [`Copier`] named `name`, and that copier's run counter.
async fn started_with_copier(name: &'static str) -> (Harness, Arc<AtomicUsize>) {
    let h = Harness::new();
    let (c, runs) = copier(name);
    h.register(c).unwrap();
    h.start().await;
    (h, runs)
}

fn copier(name: &'static str) -> (Copier, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    (
        Copier {
            name,
            runs: runs.clone(),
        },
        runs,
    )
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_input_changes_costs_one_reconcile() {
    // Given a started copier (one reconcile at start)
    let (h, runs) = started_with_copier("Copier").await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // When 50 inputs are created before the controller gets to run
    let state = h.state();
    for i in 0..50 {
        create(&state, &format!("a{i:02}"), A { value: i }).await;
    }
    h.settle().await;

    // Then one more reconcile converged all of them
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(h.list::<B>().await.len(), 50);
    assert_eq!(h.expect::<B>("a49").await.spec.value, 50);
}

#[tokio::test(start_paused = true)]
async fn one_kind_watch_is_shared_by_every_controller_on_the_kind() {
    let h = Harness::new();
    let (c1, _) = copier("Copier");
    h.register(c1).unwrap();
    h.register(Summer::new("Summer", None)).unwrap();
    h.start().await;
    // A (both), B (Summer's output type is Sum, not watched), Sum: no.
    assert_eq!(h.engine().watched_kinds(), vec![A::kind()]);
}

#[tokio::test(start_paused = true)]
async fn a_controller_registered_after_start_runs_at_once() {
    let h = Harness::new();
    h.start().await;
    create(&h.state(), "x", A { value: 1 }).await;
    let (c, runs) = copier("Late");
    h.register(c).unwrap();
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
    set(&h.state(), "x", A { value: 5 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 6);
}

#[tokio::test(start_paused = true)]
async fn registration_errors_name_both_controllers_and_the_type() {
    let h = Harness::new();
    let (c1, _) = copier("First");
    let (c2, _) = copier("Second");
    h.register(c1).unwrap();
    let err = h.register(c2).unwrap_err();
    assert_eq!(
        err,
        RegistrationError::ExclusiveOutputTaken {
            resource_type: B::TYPE.into(),
            existing: "First".into(),
            controller: "Second".into(),
        }
    );
    let (again, _) = copier("First");
    assert!(matches!(
        h.register(again).unwrap_err(),
        RegistrationError::DuplicateName { .. }
    ));
    assert_eq!(h.engine().controllers().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_controller_named_after_the_engines_status_publisher_is_refused_and_nothing_registered() {
    let h = Harness::new();
    let (c, runs) = copier(cosi_controllers::STATUS_OWNER);
    let err = h.register(c).unwrap_err();
    assert_eq!(
        err,
        RegistrationError::ReservedName {
            name: "cosi.engine".into()
        }
    );
    assert_eq!(
        err.to_string(),
        "controller \"cosi.engine\" cannot be registered: the engine publishes controller \
         statuses as owner \"cosi.engine\", so the name is reserved; register the controller \
         under another name"
    );
    assert!(h.engine().controllers().is_empty());
    assert_eq!(h.engine().graph().to_dot(), "digraph controllers {\n}\n");
    h.start().await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(h.engine().status("cosi.engine").is_none());
    assert!(h.engine().watched_kinds().is_empty());
}

/// Declares the given outputs; reads and writes nothing.
struct Declares {
    name: &'static str,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
}

#[async_trait]
impl Controller for Declares {
    fn name(&self) -> &str {
        self.name
    }
    fn inputs(&self) -> Vec<Input> {
        self.inputs.clone()
    }
    fn outputs(&self) -> Vec<Output> {
        self.outputs.clone()
    }
    async fn reconcile(&mut self, _state: &ControllerState) -> Result<Reconciled> {
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_controller_declaring_controller_statuses_as_an_output_is_refused_and_nothing_registered()
{
    let h = Harness::new();
    for output in [
        Output::exclusive_of::<ControllerStatus>(),
        Output::shared_of::<ControllerStatus>(),
    ] {
        let err = h
            .register(Declares {
                name: "StatusWriter",
                inputs: vec![Input::weak_of::<A>()],
                outputs: vec![Output::exclusive_of::<B>(), output],
            })
            .unwrap_err();
        assert_eq!(
            err,
            RegistrationError::ReservedOutput {
                controller: "StatusWriter".into(),
                resource_type: ControllerStatus::TYPE.into(),
                owner: "cosi.engine".into(),
            }
        );
        assert_eq!(
            err.to_string(),
            "controller \"StatusWriter\" cannot output ControllerStatuses.runtime.cosi.dev: the \
             engine publishes that type (as owner \"cosi.engine\"); publish what the controller \
             reports under a type of its own"
        );
    }
    assert!(h.engine().controllers().is_empty());
    assert_eq!(h.engine().graph().to_dot(), "digraph controllers {\n}\n");
    // B was not claimed: another controller may write it exclusively.
    let (c, _) = copier("Copier");
    h.register(c).unwrap();
    assert_eq!(h.engine().controllers(), [Arc::from("Copier")]);
}

#[tokio::test(start_paused = true)]
async fn a_controller_may_read_controller_statuses_as_an_input() {
    // Given a controller reading another one's status (its own would wake it after each of
    // its reconciles, for ever)
    let h = Harness::new();
    let (c, _) = copier("Copier");
    h.register(c).unwrap();
    let input = Input::weak_of::<ControllerStatus>().with_id("Copier");
    h.register(Declares {
        name: "Health",
        inputs: vec![input.clone()],
        outputs: vec![],
    })
    .unwrap();
    h.start().await;

    // Then it is registered, and woken when that status changes
    assert_eq!(h.engine().graph().inputs("Health").unwrap(), vec![input]);
    let before = h.status("Health").await.reconciles;
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    assert_eq!(h.status("Copier").await.reconciles, 2);
    assert_eq!(h.status("Health").await.reconciles, before + 1);
}

/// Sums `value` of the A resources matching an optional label into Sum/<name>, a shared output.
struct Summer {
    name: &'static str,
    label: Option<&'static str>,
}

impl Summer {
    fn new(name: &'static str, label: Option<&'static str>) -> Self {
        Summer { name, label }
    }
}

#[async_trait]
impl Controller for Summer {
    fn name(&self) -> &str {
        self.name
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<Sum>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let mut options = ListOptions::default();
        if let Some(label) = self.label {
            options.labels =
                LabelQueries(vec![LabelQuery::new()
                    .with(LabelTerm::new("group", LabelOp::Equal(label.to_string())))]);
        }
        let total: i64 = state
            .list_typed::<A>(&A::kind(), &options)
            .await?
            .iter()
            .map(|a| a.spec.value)
            .sum();
        state
            .modify_output(Resource::new(self.name.to_string(), Sum::default()), |r| {
                r.spec.value = total;
                Ok(())
            })
            .await?;
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn sum_controllers_share_an_output_type_and_filter_inputs_by_label() {
    // Given two summers writing the shared Sum type, one filtered on group=odd
    let h = Harness::new();
    h.register(Summer::new("All", None)).unwrap();
    h.register(Summer::new("Odd", Some("odd"))).unwrap();
    h.start().await;

    // When labelled inputs arrive
    let state = h.state();
    for i in 1..=5 {
        let group = if i % 2 == 1 { "odd" } else { "even" };
        create_labelled(
            &state,
            &format!("n{i}"),
            A { value: i },
            &[("group", group)],
        )
        .await;
    }
    h.settle().await;

    // Then each owns its own Sum
    let all = h.expect::<Sum>("All").await;
    let odd = h.expect::<Sum>("Odd").await;
    assert_eq!((all.spec.value, all.metadata.owner()), (15, Some("All")));
    assert_eq!((odd.spec.value, odd.metadata.owner()), (9, Some("Odd")));

    // And a relabel moves the value between sums
    state
        .update_with_conflicts::<A, _>(&a("n2"), Default::default(), |r| {
            r.metadata.labels_mut().insert("group".into(), "odd".into());
            Ok(())
        })
        .await
        .unwrap();
    h.settle().await;
    assert_eq!(h.expect::<Sum>("Odd").await.spec.value, 11);
    assert_eq!(h.expect::<Sum>("All").await.spec.value, 15);
}

/// Follows the id named by Config/selector: reads A/<selected> only, declared at run time.
struct Follower {
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Follower {
    fn name(&self) -> &str {
        "Follower"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<Config>().with_id("selector")]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<C>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let selector = match state
            .get_typed::<Config>(&Config::kind().pointer("selector"))
            .await
        {
            Ok(s) => s,
            Err(e) if e.is_not_found() => return Ok(Reconciled::Done),
            Err(e) => return Err(e),
        };
        let id = format!("a{}", selector.spec.value);
        let wanted = vec![
            Input::weak_of::<Config>().with_id("selector"),
            Input::weak_of::<A>().with_id(id.clone()),
        ];
        if state.inputs() != wanted {
            state.set_inputs(wanted).await?;
        }
        let value = match state.get_typed::<A>(&a(&id)).await {
            Ok(r) => r.spec.value,
            Err(e) if e.is_not_found() => return Ok(Reconciled::Done),
            Err(e) => return Err(e),
        };
        state
            .modify_output(Resource::new("followed", C::default()), |r| {
                r.spec.value = value;
                Ok(())
            })
            .await?;
        Ok(Reconciled::Done)
    }
}

/// Registers a [`Follower`] and returns its run counter.
fn register_follower(h: &Harness) -> Arc<AtomicUsize> {
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Follower { runs: runs.clone() }).unwrap();
    runs
}

#[tokio::test(start_paused = true)]
async fn a_controller_declares_inputs_at_run_time_and_is_woken_by_them() {
    let h = Harness::new();
    let runs = register_follower(&h);
    h.start().await;
    let state = h.state();
    create(&state, "a1", A { value: 10 }).await;
    create(&state, "a2", A { value: 20 }).await;
    h.settle().await;
    // Not an input yet: no reconcile beyond the first.
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    create(&state, "selector", Config { value: 1 }).await;
    h.settle().await;
    assert_eq!(h.expect::<C>("followed").await.spec.value, 10);
    assert_eq!(
        h.engine().graph().inputs("Follower").unwrap(),
        vec![
            Input::weak_of::<A>().with_id("a1"),
            Input::weak_of::<Config>().with_id("selector")
        ]
    );

    // The new input wakes it; the other A does not.
    let before = runs.load(Ordering::SeqCst);
    set(&state, "a2", A { value: 21 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), before);
    set(&state, "a1", A { value: 11 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), before + 1);
    assert_eq!(h.expect::<C>("followed").await.spec.value, 11);

    // Switching the selector re-declares the input.
    set(&state, "selector", Config { value: 2 }).await;
    h.settle().await;
    assert_eq!(h.expect::<C>("followed").await.spec.value, 21);
}

/// Reads A or B, as the `mode` config says (0: neither, 1: A, 2: B).
struct Switcher;

#[async_trait]
impl Controller for Switcher {
    fn name(&self) -> &str {
        "Switcher"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<Config>().with_id("mode")]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let mode = match state
            .get_typed::<Config>(&Config::kind().pointer("mode"))
            .await
        {
            Ok(mode) => mode.spec.value,
            Err(e) if e.is_not_found() => 0,
            Err(e) => return Err(e),
        };
        let mut wanted = vec![Input::weak_of::<Config>().with_id("mode")];
        match mode {
            1 => wanted.push(Input::weak_of::<A>()),
            2 => wanted.push(Input::weak_of::<B>()),
            _ => {}
        }
        if state.inputs() != wanted {
            state.set_inputs(wanted).await?;
        }
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_kinds_shared_watch_ends_when_its_last_subscriber_leaves() {
    let h = Harness::new();
    h.register(Switcher).unwrap();
    h.start().await;
    let watched = || h.engine().watched_kinds();
    // The status publisher writes but watches nothing; only the mode config is watched.
    assert_eq!(watched(), [Config::kind()]);

    create(&h.state(), "mode", Config { value: 1 }).await;
    h.settle().await;
    assert_eq!(watched(), [A::kind(), Config::kind()]);

    set(&h.state(), "mode", Config { value: 2 }).await;
    h.settle().await;
    assert_eq!(
        watched(),
        [B::kind(), Config::kind()],
        "A is read by no one"
    );

    set(&h.state(), "mode", Config { value: 0 }).await;
    h.settle().await;
    assert_eq!(watched(), [Config::kind()]);
}

/// How a [`Flaky`] controller fails.
#[derive(Clone, Copy)]
enum Failing {
    /// A retryable error (an unreachable backend).
    Retryable,
    /// A non-retryable error (an invalid argument).
    Invalid,
    /// A panic.
    Panic,
}

/// Fails (or panics) while `fail` is set, and counts its runs.
struct Flaky {
    name: &'static str,
    failing: Failing,
    fail: Arc<Mutex<bool>>,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Flaky {
    fn name(&self) -> &str {
        self.name
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<Config>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, _state: &ControllerState) -> Result<Reconciled> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if *self.fail.lock().unwrap() {
            return Err(match self.failing {
                Failing::Retryable => Error::Backend {
                    subject: self.name.into(),
                    message: "store unreachable".into(),
                    retryable: true,
                    source: None,
                },
                Failing::Invalid => Error::invalid(self.name, "spec", "refusing to work"),
                Failing::Panic => panic!("{} exploded", self.name),
            });
        }
        Ok(Reconciled::Done)
    }
}

/// Registers a [`Flaky`] that fails while `fail` is set; returns its run counter.
fn register_flaky(
    h: &Harness,
    name: &'static str,
    failing: Failing,
    fail: &Arc<Mutex<bool>>,
) -> Arc<AtomicUsize> {
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Flaky {
        name,
        failing,
        fail: fail.clone(),
        runs: runs.clone(),
    })
    .unwrap();
    runs
}

fn test_options() -> EngineOptions {
    EngineOptions {
        restart_backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(8)),
        ..EngineOptions::default()
    }
}

#[tokio::test(start_paused = true)]
async fn retryable_failures_restart_with_growing_backoff_while_others_run() {
    // Given a controller failing with a retryable error, and a healthy one
    let h = Harness::with_options(test_options());
    // The test provokes these failures.
    h.expect_errors("Failing");
    let fail = Arc::new(Mutex::new(true));
    let failing_runs = register_flaky(&h, "Failing", Failing::Retryable, &fail);
    let (healthy, healthy_runs) = copier("Healthy");
    h.register(healthy).unwrap();
    h.start().await;
    let runs = || failing_runs.load(Ordering::SeqCst);
    assert_eq!(runs(), 1);

    // When time passes, restarts come after 1 s, then 2 s more, then 4 s more
    h.advance(Duration::from_millis(999)).await;
    assert_eq!(runs(), 1);
    // An input change during the backoff does not cut it short.
    create(&h.state(), "c", Config { value: 1 }).await;
    h.settle().await;
    assert_eq!(runs(), 1);
    h.advance(Duration::from_millis(1)).await;
    assert_eq!(runs(), 2);
    h.advance(Duration::from_millis(1999)).await;
    assert_eq!(runs(), 2);
    h.advance(Duration::from_millis(1)).await;
    assert_eq!(runs(), 3);
    h.advance(Duration::from_secs(4)).await;
    assert_eq!(runs(), 4);

    // Meanwhile the healthy controller keeps working
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
    assert_eq!(healthy_runs.load(Ordering::SeqCst), 2);

    // And after recovery a success resets the backoff
    *fail.lock().unwrap() = false;
    h.advance(Duration::from_secs(8)).await;
    assert_eq!(runs(), 5);
    let status = h.status("Failing").await;
    assert_eq!(
        (status.reconciles, status.errors, status.restarts),
        (5, 4, 4)
    );
    assert_eq!(
        status.last_error.as_deref(),
        Some("Failing: backend failure: store unreachable")
    );
    assert_eq!(status.last_error_kind.as_deref(), Some("backend"));
    *fail.lock().unwrap() = true;
    set(&h.state(), "c", Config { value: 2 }).await;
    h.settle().await;
    assert_eq!(runs(), 6);
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(runs(), 7, "backoff restarted at 1 s after the success");
}

#[tokio::test(start_paused = true)]
async fn non_retryable_failures_and_panics_retry_at_the_next_input_change() {
    // Given a controller failing with an invalid argument and one that panics
    let h = Harness::with_options(test_options());
    // The test provokes these failures.
    h.expect_errors("Invalid");
    h.expect_errors("Panicking");
    let fail = Arc::new(Mutex::new(true));
    let invalid_runs = register_flaky(&h, "Invalid", Failing::Invalid, &fail);
    let panicking_runs = register_flaky(&h, "Panicking", Failing::Panic, &fail);
    h.start().await;
    let runs = || {
        (
            invalid_runs.load(Ordering::SeqCst),
            panicking_runs.load(Ordering::SeqCst),
        )
    };
    assert_eq!(runs(), (1, 1));

    // When nothing changes, nothing is retried for a while
    h.advance(Duration::from_secs(5)).await;
    assert_eq!(runs(), (1, 1));

    // Then an input change retries both at once
    create(&h.state(), "c", Config { value: 1 }).await;
    h.settle().await;
    assert_eq!(runs(), (2, 2));
    let invalid = h.status("Invalid").await;
    assert_eq!(invalid.last_error_kind.as_deref(), Some("invalidArgument"));
    assert_eq!(
        invalid.last_error.as_deref(),
        Some("Invalid: invalid spec: refusing to work")
    );
    let panicking = h.status("Panicking").await;
    assert_eq!(panicking.last_error_kind.as_deref(), Some("panic"));
    assert_eq!(
        panicking.last_error.as_deref(),
        Some("reconcile panicked: Panicking exploded")
    );
    assert_eq!((panicking.errors, panicking.restarts), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn non_retryable_failures_retry_after_the_longest_backoff_when_nothing_changes() {
    let h = Harness::with_options(test_options());
    // The test provokes these failures.
    h.expect_errors("Invalid");
    let fail = Arc::new(Mutex::new(true));
    let runs = register_flaky(&h, "Invalid", Failing::Invalid, &fail);
    h.start().await;

    h.advance(Duration::from_millis(7999)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.advance(Duration::from_millis(1)).await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "retried after the 8 s maximum"
    );
}

#[tokio::test(start_paused = true)]
async fn a_restart_backoff_without_bound_keeps_a_failing_controller_waiting_for_its_next_change() {
    let h = Harness::with_options(EngineOptions {
        restart_backoff: Backoff::new(Duration::from_secs(1), Duration::MAX),
        ..EngineOptions::default()
    });
    // The test provokes these failures.
    h.expect_errors("Invalid");
    let fail = Arc::new(Mutex::new(true));
    let runs = register_flaky(&h, "Invalid", Failing::Invalid, &fail);
    h.start().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    *fail.lock().unwrap() = false;
    create(&h.state(), "c", Config { value: 1 }).await;
    h.settle().await;

    assert_eq!(runs.load(Ordering::SeqCst), 2, "retried at the change");
    let status = h.status("Invalid").await;
    assert_eq!((status.reconciles, status.errors), (2, 1));
}

/// Requeues itself every 10 s, counting runs.
struct Ticker {
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Ticker {
    fn name(&self) -> &str {
        "Ticker"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<Config>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, _state: &ControllerState) -> Result<Reconciled> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Reconciled::RequeueAfter(Duration::from_secs(10)))
    }
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_runs_again_after_the_requested_delay() {
    let h = Harness::new();
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Ticker { runs: runs.clone() }).unwrap();
    h.start().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.advance(Duration::from_secs(9)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // An input change runs it early and restarts the delay.
    h.advance(Duration::from_secs(5)).await;
    create(&h.state(), "c", Config::default()).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    h.advance(Duration::from_secs(9)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

/// Asks to run again after `Duration::MAX` (no `Instant` reaches it), counting runs.
struct Patient {
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Patient {
    fn name(&self) -> &str {
        "Patient"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<Config>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, _state: &ControllerState) -> Result<Reconciled> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(Reconciled::RequeueAfter(Duration::MAX))
    }
}

#[tokio::test(start_paused = true)]
async fn a_requeue_delay_beyond_the_clock_keeps_the_controller_running() {
    let h = Harness::new();
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Patient { runs: runs.clone() }).unwrap();
    h.start().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    create(&h.state(), "c", Config::default()).await;
    h.settle().await;

    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "an input change still runs it"
    );
    let status = h.status("Patient").await;
    assert_eq!((status.reconciles, status.errors), (2, 0));
}

#[tokio::test(start_paused = true)]
async fn status_counters_are_exact_and_published_as_resources() {
    let (h, _) = started_with_copier("Copier").await;
    for i in 0..3 {
        create(&h.state(), &format!("x{i}"), A { value: i }).await;
        h.settle().await;
    }
    let status = h.status("Copier").await;
    assert_eq!(status.reconciles, 4);
    assert_eq!(status.errors, 0);
    assert_eq!(status.restarts, 0);
    assert_eq!(status.last_error, None);
    assert_eq!(
        status.last_duration_micros, 0,
        "the paused clock did not move"
    );
    assert_eq!(h.engine().status("Copier"), Some(status));
}

#[tokio::test(start_paused = true)]
async fn a_status_whose_publication_failed_is_published_again_after_the_restart_backoff() {
    // Given a store that fails the first status write
    let h = Harness::with_options(test_options());
    h.faults().fail_nth_write(ControllerStatus::TYPE, 1);
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Copier {
        name: "Copier",
        runs: runs.clone(),
    })
    .unwrap();
    h.start().await;
    assert_eq!(h.faults().injected(), 1);
    assert!(h.get::<ControllerStatus>("Copier").await.is_none());

    // When the first restart backoff (1 s) has passed, with nothing else happening
    h.advance(Duration::from_millis(999)).await;
    assert!(h.get::<ControllerStatus>("Copier").await.is_none());
    h.advance(Duration::from_millis(1)).await;

    // Then the status is there
    let status = h.status("Copier").await;
    assert_eq!((status.reconciles, status.errors), (1, 0));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// Tries every forbidden access and records the errors.
struct Trespasser {
    errors: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Controller for Trespasser {
    fn name(&self) -> &str {
        "Trespasser"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<B>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let mut errors = Vec::new();
        let mut record = |r: Result<()>| match r {
            Err(Error::AccessDenied { subject, message }) => {
                errors.push(format!("{subject}: {message}"))
            }
            other => errors.push(format!("unexpected: {other:?}")),
        };
        record(state.get(&C::kind().pointer("x")).await.map(drop));
        record(
            state
                .list(&C::kind(), &ListOptions::default())
                .await
                .map(drop),
        );
        record(
            state
                .create(
                    Resource::new("x", C::default()).into_shared(),
                    Default::default(),
                )
                .await
                .map(drop),
        );
        record(
            state
                .create(
                    Resource::new("x", B::default()).into_shared(),
                    Default::default(),
                )
                .await
                .map(drop),
        );
        record(state.add_finalizer(&a("a1"), &["mine"]).await.map(drop));
        record(
            state
                .modify(Resource::new("a1", A::default()), state.owned(), |r| {
                    r.spec.value = 99;
                    Ok(())
                })
                .await
                .map(drop),
        );
        *self.errors.lock().unwrap() = errors;
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn access_violations_are_errors_returned_to_the_controller_and_change_nothing() {
    let h = Harness::new();
    // The test provokes these failures.
    h.expect_errors("Trespasser");
    create(&h.state(), "a1", A { value: 1 }).await;
    let errors = Arc::new(Mutex::new(Vec::new()));
    h.register(Trespasser {
        errors: errors.clone(),
    })
    .unwrap();
    h.start().await;
    assert_eq!(
        *errors.lock().unwrap(),
        vec![
            "test/Cs.test.cosi.dev/x: controller \"Trespasser\" may not read it: not a declared input or output",
            "test/Cs.test.cosi.dev: controller \"Trespasser\" may not read it: not a declared input or output",
            "test/Cs.test.cosi.dev/x: controller \"Trespasser\" may not write it: not a declared output",
            "test/Bs.test.cosi.dev/x: controller \"Trespasser\" must write its outputs as owner \"Trespasser\", not no owner",
            "test/As.test.cosi.dev/a1: controller \"Trespasser\" may not write it: not a declared output, and finalizers may only be changed on strong inputs",
            "test/As.test.cosi.dev/a1: controller \"Trespasser\" may not write it: not a declared output, and finalizers may only be changed on strong inputs",
        ]
    );
    let stored = h.expect::<A>("a1").await;
    assert_eq!((stored.spec.value, stored.metadata.version().get()), (1, 1));
    assert!(stored.metadata.finalizers().is_empty());
    h.expect_absent::<B>("x").await;
    assert_eq!(h.status("Trespasser").await.errors, 0);
}

/// Holds the reconcile until released through a oneshot, to observe shutdown.
struct Slow {
    release: Option<tokio::sync::oneshot::Receiver<()>>,
    finished: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Slow {
    fn name(&self) -> &str {
        "Slow"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, _state: &ControllerState) -> Result<Reconciled> {
        if let Some(release) = self.release.take() {
            let _ = release.await;
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(Reconciled::Done)
    }
}

/// Starts the engine with a [`Slow`] held by `release`, once its reconcile is running;
/// returns its count of finished reconciles.
async fn start_with_slow(
    h: &Harness,
    release: tokio::sync::oneshot::Receiver<()>,
) -> Arc<AtomicUsize> {
    let finished = Arc::new(AtomicUsize::new(0));
    h.register(Slow {
        release: Some(release),
        finished: finished.clone(),
    })
    .unwrap();
    h.engine().start();
    tokio::task::yield_now().await;
    finished
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_a_running_reconcile_finish() {
    let h = Harness::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let finished = start_with_slow(&h, rx).await;
    let engine = h.engine().clone();
    let shutdown = tokio::spawn(async move { engine.shutdown().await });
    tokio::task::yield_now().await;
    assert_eq!(finished.load(Ordering::SeqCst), 0);
    tx.send(()).unwrap();
    let report = shutdown.await.unwrap();
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(report.aborted, 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_aborts_a_reconcile_that_outlives_the_timeout() {
    let h = Harness::with_options(EngineOptions {
        shutdown_timeout: Duration::from_secs(5),
        ..EngineOptions::default()
    });
    let (_tx, rx) = tokio::sync::oneshot::channel::<()>();
    let finished = start_with_slow(&h, rx).await;
    let report = h.shutdown().await;
    assert_eq!(report.aborted, 1);
    assert_eq!(finished.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_timeout_without_bound_waits_for_the_running_reconcile() {
    let h = Harness::with_options(EngineOptions {
        shutdown_timeout: Duration::MAX,
        ..EngineOptions::default()
    });
    let (tx, rx) = tokio::sync::oneshot::channel();
    let finished = start_with_slow(&h, rx).await;
    let engine = h.engine().clone();
    let shutdown = tokio::spawn(async move { engine.shutdown().await });
    tokio::task::yield_now().await;
    tx.send(()).unwrap();
    let report = shutdown.await.unwrap();
    assert_eq!(finished.load(Ordering::SeqCst), 1);
    assert_eq!(report.aborted, 0);
}

/// A memory state whose kind watches end at once, and whose second `watch_kind` call never
/// returns: a feed is then stuck re-establishing its watch, holding the state.
struct StuckWatches {
    inner: cosi_state::MemoryState,
    calls: AtomicUsize,
}

struct Ended;

#[async_trait]
impl cosi_core::EventSource for Ended {
    async fn next(&mut self) -> Option<cosi_core::Event> {
        None
    }
}

impl State for StuckWatches {
    fn get<'a>(&'a self, pointer: &'a cosi_core::Pointer) -> Call<'a, cosi_core::SharedResource> {
        self.inner.get(pointer)
    }
    fn list<'a>(
        &'a self,
        kind: &'a cosi_core::Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<cosi_core::SharedResource>> {
        self.inner.list(kind, options)
    }
    fn create<'a>(
        &'a self,
        resource: cosi_core::SharedResource,
        options: cosi_core::CreateOptions,
    ) -> Call<'a, cosi_core::SharedResource> {
        self.inner.create(resource, options)
    }
    fn update<'a>(
        &'a self,
        resource: cosi_core::SharedResource,
        options: cosi_core::UpdateOptions,
    ) -> Call<'a, cosi_core::SharedResource> {
        self.inner.update(resource, options)
    }
    fn destroy<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::DestroyOptions,
    ) -> Call<'a, ()> {
        self.inner.destroy(pointer, options)
    }
    fn watch<'a>(
        &'a self,
        pointer: &'a cosi_core::Pointer,
        options: cosi_core::WatchOptions,
    ) -> Call<'a, cosi_core::Watch> {
        self.inner.watch(pointer, options)
    }
    fn watch_kind<'a>(
        &'a self,
        _kind: &'a cosi_core::Kind,
        _options: cosi_core::WatchKindOptions,
    ) -> Call<'a, cosi_core::Watch> {
        Call::pending(async move {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                return Ok(cosi_core::Watch::new(Ended));
            }
            std::future::pending().await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn after_shutdown_no_task_of_the_engine_holds_the_state() {
    // Given an engine whose only kind watch is stuck being re-established
    let stuck = Arc::new(StuckWatches {
        inner: cosi_state::MemoryState::default(),
        calls: AtomicUsize::new(0),
    });
    let state: Arc<dyn State> = stuck.clone();
    let engine = cosi_controllers::Engine::with_options(
        state,
        EngineOptions {
            status_namespace: None,
            ..EngineOptions::default()
        },
    );
    let (c, _) = copier("Copier");
    engine.register(c).unwrap();
    engine.start();
    // (the feed retries after a backoff: move the paused clock until it has)
    while stuck.calls.load(Ordering::SeqCst) < 2 {
        tokio::time::advance(Duration::from_millis(10)).await;
    }

    // When it shuts down (the stuck feed is aborted at the timeout) and its handle goes
    engine.shutdown().await;
    drop(engine);

    // Then nothing of it holds the state any more: its owner may close the store
    assert_eq!(Arc::strong_count(&stuck), 1);
}

#[tokio::test(start_paused = true)]
async fn the_graph_exports_as_dot_and_text() {
    let h = Harness::new();
    let (c, _) = copier("Copier");
    h.register(c).unwrap();
    assert_eq!(
        h.engine().graph().to_text(),
        "Copier\n  input  test/As.test.cosi.dev (weak)\n  output Bs.test.cosi.dev (exclusive)\n"
    );
    assert!(h
        .engine()
        .graph()
        .to_dot()
        .contains("\"As.test.cosi.dev\" -> \"Copier\" [style=dashed, label=\"test weak\"];"));
}

/// Adds a finalizer to A/a1 from a copy read before the test changes A/a1 (gated).
struct StaleFinalizer {
    gate: Option<tokio::sync::oneshot::Receiver<()>>,
    result: Arc<Mutex<Option<String>>>,
}

#[async_trait]
impl Controller for StaleFinalizer {
    fn name(&self) -> &str {
        "StaleFinalizer"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::strong_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let Some(gate) = self.gate.take() else {
            return Ok(Reconciled::Done);
        };
        let read = state.get(&a("a1")).await?;
        let _ = gate.await;
        let mut next = (*cosi_core::downcast::<A>(read)?).clone();
        next.metadata.finalizers_mut().insert("mine".into());
        let outcome = state
            .update(
                next.into_shared(),
                cosi_core::UpdateOptions {
                    owner: None,
                    expected_phase: None,
                },
            )
            .await;
        *self.result.lock().unwrap() = Some(match outcome {
            Ok(_) => "written".to_string(),
            Err(e) => e.to_string(),
        });
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_finalizer_change_from_a_stale_read_is_a_version_conflict_not_a_denial() {
    let h = Harness::new();
    create(&h.state(), "a1", A { value: 1 }).await;
    let (release, gate) = tokio::sync::oneshot::channel();
    let result = Arc::new(Mutex::new(None));
    h.register(StaleFinalizer {
        gate: Some(gate),
        result: result.clone(),
    })
    .unwrap();
    h.engine().start();
    h.quiesce().await;
    set(&h.state(), "a1", A { value: 2 }).await;
    release.send(()).unwrap();
    h.settle().await;
    assert_eq!(
        result.lock().unwrap().as_deref(),
        Some("test/As.test.cosi.dev/a1: version conflict: expected 1, stored 2")
    );
    assert!(h.expect::<A>("a1").await.metadata.finalizers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn statuses_can_be_watched_like_any_resource() {
    let h = Harness::new();
    let mut watch = h
        .state()
        .watch_kind(
            &cosi_controllers::ControllerStatus::kind(),
            cosi_core::WatchKindOptions::default(),
        )
        .await
        .unwrap();
    h.register(cosi_controllers::Transform::<A, B>::same_id(
        "PlusOne",
        |a: &A| Some(B { value: a.value }),
    ))
    .unwrap();
    h.start().await;
    let event = tokio::time::timeout(Duration::from_secs(5), watch.recv())
        .await
        .expect("a status event")
        .expect("the watch is open");
    let cosi_core::Event::Created { resource, .. } = event else {
        panic!("expected a created status, got {event:?}");
    };
    assert_eq!(resource.metadata().id(), "PlusOne");
    assert_eq!(resource.metadata().namespace(), "runtime");
    assert_eq!(
        cosi_controllers::testing::spec_of::<cosi_controllers::ControllerStatus>(&*resource)
            .reconciles,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn inputs_that_cannot_be_watched_are_rejected_and_the_old_ones_kept() {
    let h = Harness::with_options(test_options());
    // The test provokes these failures.
    h.expect_errors("Follower");
    register_follower(&h);
    h.start().await;
    create(&h.state(), "a1", A { value: 10 }).await;
    h.faults().fail_reads(A::kind());

    // When the new input kind cannot be watched
    create(&h.state(), "selector", Config { value: 1 }).await;
    h.settle().await;

    // Then set_inputs fails, the controller restarts, and its inputs are unchanged
    let status = h.status("Follower").await;
    assert_eq!((status.errors, status.restarts), (1, 1));
    assert!(status
        .last_error
        .unwrap()
        .contains("injected fault: read failed"));
    assert_eq!(
        h.engine().graph().inputs("Follower").unwrap(),
        vec![Input::weak_of::<Config>().with_id("selector")]
    );

    // And once the kind can be watched, the retry succeeds
    h.faults().clear();
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(h.expect::<C>("followed").await.spec.value, 10);
    set(&h.state(), "a1", A { value: 11 }).await;
    h.settle().await;
    assert_eq!(h.expect::<C>("followed").await.spec.value, 11);
}

/// Reads B; switches to the inputs the test requests, once (a switch that fails is not asked
/// for again), and counts its runs. A failed switch is returned as it is, or as a
/// non-retryable error if `non_retryable`.
struct Retargeter {
    request: Arc<Mutex<Option<Vec<Input>>>>,
    runs: Arc<AtomicUsize>,
    non_retryable: bool,
}

#[async_trait]
impl Controller for Retargeter {
    fn name(&self) -> &str {
        "Retargeter"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<B>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let request = self.request.lock().unwrap().take();
        if let Some(inputs) = request {
            match state.set_inputs(inputs).await {
                Err(e) if self.non_retryable => {
                    return Err(Error::invalid("Retargeter", "inputs", e.to_string()))
                }
                other => other?,
            }
        }
        Ok(Reconciled::Done)
    }
}

/// A started `Retargeter` on B (its reconcile failing retryably, or not), a store that can watch
/// neither A nor B, its switch to A requested and a change of B written to wake it: settling
/// then leaves it with no watch. Returns the harness and its reconcile count.
async fn deaf_retargeter(non_retryable: bool) -> (Harness, Arc<AtomicUsize>) {
    let h = Harness::with_options(test_options());
    // The test provokes these failures.
    h.expect_errors("Retargeter");
    let request = Arc::new(Mutex::new(None));
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Retargeter {
        request: request.clone(),
        runs: runs.clone(),
        non_retryable,
    })
    .unwrap();
    h.start().await;
    h.faults().fail_watches(A::kind());
    h.faults().fail_watches(B::kind());
    *request.lock().unwrap() = Some(vec![Input::weak_of::<A>()]);
    create(&h.state(), "b1", B { value: 1 }).await;
    (h, runs)
}

#[tokio::test(start_paused = true)]
async fn a_controller_whose_inputs_could_be_neither_changed_nor_restored_hears_them_again_once_the_store_recovers(
) {
    // Given a controller reading B, and a store that can watch neither A nor B, when it
    // switches to A: watching A fails, and so does watching B again
    let (h, runs) = deaf_retargeter(false).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let status = h.status("Retargeter").await;
    assert_eq!((status.errors, status.restarts), (1, 1));
    assert!(status
        .last_error
        .unwrap()
        .contains("injected fault: watch failed"));
    assert_eq!(
        h.engine().graph().inputs("Retargeter").unwrap(),
        vec![Input::weak_of::<B>()]
    );
    assert_eq!(h.engine().watched_kinds(), []);

    // And the store recovers before the restart backoff (1 s) ends
    h.faults().clear();
    h.advance(Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3, "restarted once");

    // Then a change of its input reaches it, through a watch of B made again
    set(&h.state(), "b1", B { value: 2 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!(h.engine().watched_kinds(), [B::kind()]);
}

#[tokio::test(start_paused = true)]
async fn a_controller_deaf_to_its_inputs_does_not_reconcile_and_retries_watching_them_with_growing_backoff(
) {
    // Given a controller on B whose switch to A lost it every watch (1 s restart backoff)
    let (h, runs) = deaf_retargeter(false).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // When the store still cannot watch B at the end of the backoff, and 2 s later
    h.advance(Duration::from_secs(1)).await;
    let status = h.status("Retargeter").await;
    assert_eq!((status.errors, status.restarts), (2, 2));
    h.advance(Duration::from_millis(1999)).await;
    assert_eq!(h.status("Retargeter").await.restarts, 2, "waits 2 s");
    h.advance(Duration::from_millis(1)).await;
    let status = h.status("Retargeter").await;
    assert_eq!((status.errors, status.restarts), (3, 3));

    // Then it has not reconciled while deaf, and does once it is subscribed again (after 4 s)
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    h.faults().clear();
    h.advance(Duration::from_secs(4)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(h.engine().watched_kinds(), [B::kind()]);
}

#[tokio::test(start_paused = true)]
async fn a_controller_waiting_for_a_change_it_cannot_hear_watches_its_inputs_again_at_once() {
    // Given a controller on B whose switch to A lost it every watch, and which then failed in a
    // way that waits for the next change (or the longest backoff, 8 s)
    let (h, runs) = deaf_retargeter(true).await;

    // When it settles
    h.settle().await;

    // Then watching B again was tried at once, not after 8 s: a restart with the store's error
    let status = h.status("Retargeter").await;
    assert_eq!((status.errors, status.restarts), (2, 2));
    assert_eq!(status.last_error_kind.as_deref(), Some("backend"));
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // And once the store recovers, the next attempt (2 s on) restores it, and it hears B
    h.faults().clear();
    h.advance(Duration::from_secs(2)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    set(&h.state(), "b1", B { value: 2 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

/// A controller on A and C that also changes its inputs from a task of its own: its first
/// reconcile hands a clone of its state handle to a task that, once `gate` is rung, switches to
/// A and B and keeps the result. A switch in `request` is made by the next reconcile, its
/// failure returned.
struct BackgroundSwitcher {
    request: Arc<Mutex<Option<Vec<Input>>>>,
    gate: Arc<tokio::sync::Notify>,
    background: Arc<Mutex<Option<Result<()>>>>,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for BackgroundSwitcher {
    fn name(&self) -> &str {
        "BackgroundSwitcher"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>(), Input::weak_of::<C>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 {
            let (state, gate, background) =
                (state.clone(), self.gate.clone(), self.background.clone());
            tokio::spawn(async move {
                gate.notified().await;
                let result = state
                    .set_inputs(vec![Input::weak_of::<A>(), Input::weak_of::<B>()])
                    .await;
                *background.lock().unwrap() = Some(result);
            });
        }
        let request = self.request.lock().unwrap().take();
        if let Some(inputs) = request {
            state.set_inputs(inputs).await?;
        }
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_controller_changing_its_inputs_while_its_runner_watches_the_lost_ones_again_watches_exactly_the_new_ones(
) {
    // Given a controller on A and C that switched to A and B while the store could not watch
    // A: watching A and B failed, and so did watching A and C again (1 s restart backoff)
    let h = Harness::with_options(test_options());
    h.expect_errors("BackgroundSwitcher");
    let request = Arc::new(Mutex::new(None));
    let gate = Arc::new(tokio::sync::Notify::new());
    let background = Arc::new(Mutex::new(None));
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(BackgroundSwitcher {
        request: request.clone(),
        gate: gate.clone(),
        background: background.clone(),
        runs: runs.clone(),
    })
    .unwrap();
    h.start().await;
    let a_and_b = vec![Input::weak_of::<A>(), Input::weak_of::<B>()];
    h.faults().fail_watches(A::kind());
    *request.lock().unwrap() = Some(a_and_b.clone());
    create(&h.state(), "a1", A { value: 1 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(h.engine().watched_kinds(), []);

    // When the store recovers, the runner's next attempt is held in the middle (A watched, C
    // not yet), and meanwhile the controller's own task switches to A and B
    h.faults().clear();
    h.faults().hold_watches(C::kind());
    h.advance_quiesce(Duration::from_secs(1)).await;
    assert_eq!(h.faults().held_watches(), 1);
    gate.notify_one();
    h.quiesce().await;
    h.faults().release_watches();
    h.settle().await;

    // Then the controller watches exactly A and B, as it asked last: not C any more
    assert!(matches!(*background.lock().unwrap(), Some(Ok(()))));
    assert_eq!(
        h.engine().graph().inputs("BackgroundSwitcher").unwrap(),
        a_and_b
    );
    assert_eq!(h.engine().watched_kinds(), [A::kind(), B::kind()]);
    assert_eq!(h.subscribed_inputs("BackgroundSwitcher"), a_and_b);
    let before = runs.load(Ordering::SeqCst);
    create(&h.state(), "c1", C { value: 1 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), before, "C is no input");
    create(&h.state(), "b1", B { value: 1 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), before + 1, "B is one");
}

/// A controller on A that changes its inputs to those in `request`, but gives up waiting for
/// the change after 1 ms; counts its reconciles.
struct Impatient {
    request: Arc<Mutex<Option<Vec<Input>>>>,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Controller for Impatient {
    fn name(&self) -> &str {
        "Impatient"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let request = self.request.lock().unwrap().take();
        if let Some(inputs) = request {
            let change = state.set_inputs(inputs);
            let _ = tokio::time::timeout(Duration::from_millis(1), change).await;
        }
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_change_of_inputs_given_up_half_way_leaves_the_old_inputs_declared_and_watched() {
    // Given a controller on A, and a store slow to watch C
    let h = Harness::with_options(test_options());
    let request = Arc::new(Mutex::new(None));
    let runs = Arc::new(AtomicUsize::new(0));
    h.register(Impatient {
        request: request.clone(),
        runs: runs.clone(),
    })
    .unwrap();
    h.start().await;
    h.faults().hold_watches(C::kind());

    // When it changes its inputs to C and A, and gives up waiting while C is being watched
    *request.lock().unwrap() = Some(vec![Input::weak_of::<C>(), Input::weak_of::<A>()]);
    create(&h.state(), "a1", A { value: 1 }).await;
    h.quiesce().await;
    assert_eq!(h.faults().held_watches(), 1);
    h.advance(Duration::from_millis(1)).await;
    assert_eq!(h.faults().held_watches(), 0, "the change was dropped");

    // Then it still declares and watches A, and hears it
    assert_eq!(
        h.engine().graph().inputs("Impatient").unwrap(),
        vec![Input::weak_of::<A>()]
    );
    assert_eq!(h.subscribed_inputs("Impatient"), [Input::weak_of::<A>()]);
    let before = runs.load(Ordering::SeqCst);
    create(&h.state(), "a2", A { value: 2 }).await;
    h.settle().await;
    assert_eq!(runs.load(Ordering::SeqCst), before + 1);
}

/// A `deaf_retargeter` whose store recovered, its runner held in the middle of watching B
/// again. Returns the harness and its reconcile count (2).
async fn retargeter_held_watching_again() -> (Harness, Arc<AtomicUsize>) {
    let (h, runs) = deaf_retargeter(false).await;
    h.settle().await;
    h.faults().clear();
    h.faults().hold_watches(B::kind());
    h.advance_quiesce(Duration::from_secs(1)).await;
    assert_eq!(h.faults().held_watches(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    (h, runs)
}

#[tokio::test(start_paused = true)]
async fn shutdown_does_not_wait_for_a_controller_watching_its_inputs_again() {
    // Given a controller whose runner is held watching its inputs again
    let (h, _runs) = retargeter_held_watching_again().await;

    // When the engine shuts down
    let started = tokio::time::Instant::now();
    let report = h.shutdown().await;

    // Then the runner stopped at once: not aborted after the shutdown timeout
    assert_eq!(
        report,
        ShutdownReport {
            stopped: 2,
            aborted: 0
        }
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_controller_watching_its_inputs_again_when_the_engine_shuts_down_does_not_reconcile_again(
) {
    // Given a controller whose runner is held watching its inputs again
    let (h, runs) = retargeter_held_watching_again().await;

    // When the engine shuts down, and the watch is made while it does
    let engine = h.engine().clone();
    let shutdown = tokio::spawn(async move { engine.shutdown().await });
    // The shutdown task sends its signal on its first poll.
    tokio::task::yield_now().await;
    h.faults().release_watches();
    let report = shutdown.await.unwrap();

    // Then no reconcile started after the signal
    assert_eq!(report.aborted, 0);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn run_until_serves_until_the_signal_then_shuts_down() {
    let h = Harness::new();
    let (c, runs) = copier("Copier");
    h.register(c).unwrap();
    let (stop, signal) = tokio::sync::oneshot::channel::<()>();
    let engine = h.engine().clone();
    let served = tokio::spawn(async move {
        engine
            .run_until(async {
                let _ = signal.await;
            })
            .await
    });
    h.settle().await;
    create(&h.state(), "x", A { value: 1 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
    stop.send(()).unwrap();
    let report = served.await.unwrap();
    assert_eq!(report.aborted, 0);
    // The controller's task and the status publisher.
    assert_eq!(report.stopped, 2);
    // Stopped: later changes are not reconciled.
    set(&h.state(), "x", A { value: 5 }).await;
    h.settle().await;
    assert_eq!(h.expect::<B>("x").await.spec.value, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// Reads one input and writes its output 15,000 times each, then reports at
/// which step a task it spawned first ran.
struct Busy {
    report: tokio::sync::mpsc::UnboundedSender<Option<usize>>,
}

#[async_trait::async_trait]
impl cosi_controllers::Controller for Busy {
    fn name(&self) -> &str {
        "Busy"
    }
    fn inputs(&self) -> Vec<cosi_controllers::Input> {
        vec![cosi_controllers::Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<cosi_controllers::Output> {
        vec![cosi_controllers::Output::exclusive_of::<C>()]
    }
    async fn reconcile(
        &mut self,
        state: &cosi_controllers::ControllerState,
    ) -> cosi_core::Result<cosi_controllers::Reconciled> {
        const STEPS: usize = 15_000;
        let Ok(input) = state.get(&a("x")).await else {
            return Ok(cosi_controllers::Reconciled::Done);
        };
        // Queued behind this reconcile: it runs only when the reconcile yields.
        let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        tokio::spawn({
            let other_ran = other_ran.clone();
            async move { other_ran.store(true, std::sync::atomic::Ordering::SeqCst) }
        });
        let mut seen = None;
        for step in 0..STEPS {
            if seen.is_none() && other_ran.load(std::sync::atomic::Ordering::SeqCst) {
                seen = Some(step);
            }
            let _ = state.get(input.metadata().pointer()).await?;
            state
                .modify_output(cosi_core::Resource::new("x", C::default()), |c| {
                    c.spec.value = step as i64;
                    Ok(())
                })
                .await?;
        }
        let _ = self.report.send(seen);
        Ok(cosi_controllers::Reconciled::Done)
    }
}

/// Over the in-memory store itself, whose reads and writes complete at once (the harness's
/// fault-injecting wrapper takes the async path).
#[tokio::test]
async fn a_reconcile_reading_and_writing_in_a_loop_lets_the_other_tasks_of_its_worker_run() {
    let memory: Arc<dyn State> = Arc::new(cosi_state::MemoryState::default());
    let engine = cosi_controllers::Engine::new(memory.clone());
    let (report, mut reports) = tokio::sync::mpsc::unbounded_channel();
    engine.register(Busy { report }).unwrap();
    create(&memory, "x", A { value: 1 }).await;
    engine.start();
    let seen = reports.recv().await.expect("the controller reports");
    assert!(seen.is_some(), "the spawned task never ran during the loop");
    engine.shutdown().await;
}

/// Records the value of A/a1 at each reconcile; its first reconcile waits for the test.
struct GatedReader {
    gate: Option<tokio::sync::oneshot::Receiver<()>>,
    seen: Arc<Mutex<Vec<i64>>>,
}

#[async_trait]
impl Controller for GatedReader {
    fn name(&self) -> &str {
        "GatedReader"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        if let Some(gate) = self.gate.take() {
            let _ = gate.await;
        }
        let read = cosi_core::downcast::<A>(state.get(&a("a1")).await?)?;
        self.seen.lock().unwrap().push(read.spec.value);
        Ok(Reconciled::Done)
    }
}

#[tokio::test(start_paused = true)]
async fn a_feed_reads_no_further_while_its_level_controllers_are_due_to_reconcile_anyway() {
    // Given a level controller whose first reconcile is held, and a change that made it due
    // to reconcile again,
    let h = Harness::new();
    create(&h.state(), "a1", A { value: 0 }).await;
    let (release, gate) = tokio::sync::oneshot::channel();
    let seen = Arc::new(Mutex::new(Vec::new()));
    h.register(GatedReader {
        gate: Some(gate),
        seen: seen.clone(),
    })
    .unwrap();
    h.engine().start();
    h.quiesce().await;
    set(&h.state(), "a1", A { value: 1 }).await;
    h.quiesce().await;
    let paused_at = h.engine().activity();

    // when more changes are stored while it is still due,
    for value in 2..=4 {
        set(&h.state(), "a1", A { value }).await;
        h.quiesce().await;
    }

    // then its feed delivers none of them (nothing it would do differently),
    assert_eq!(h.engine().activity(), paused_at);
    // and once it takes its wake-up the feed reads on, and the controller sees the last value.
    release.send(()).unwrap();
    h.settle().await;
    assert_eq!(seen.lock().unwrap().last(), Some(&4));
    assert!(h.engine().activity() > paused_at);
}

#[tokio::test(start_paused = true)]
async fn a_feed_that_also_serves_a_queue_controller_delivers_every_change_at_once() {
    // Given a level controller held in its first reconcile and due again, and a queue
    // controller on the same kind,
    let h = Harness::new();
    create(&h.state(), "a1", A { value: 0 }).await;
    let (release, gate) = tokio::sync::oneshot::channel();
    h.register(GatedReader {
        gate: Some(gate),
        seen: Arc::default(),
    })
    .unwrap();
    h.register_queue(
        cosi_controllers::Transform::<A, B>::same_id("Copy", |a: &A| Some(B { value: a.value }))
            .into_queue(1),
    )
    .unwrap();
    h.engine().start();
    h.quiesce().await;
    set(&h.state(), "a1", A { value: 1 }).await;
    h.quiesce().await;

    // when the kind changes again,
    set(&h.state(), "a1", A { value: 2 }).await;
    h.quiesce().await;

    // then the queue controller has acted on it while the level controller is still held.
    assert_eq!(h.expect::<B>("a1").await.spec.value, 2);
    release.send(()).unwrap();
    h.settle().await;
}

/// Asks to run again at once, awaiting nothing, until it has run [`Spinner::RUNS`] times;
/// then reports at which run a task spawned at its first run had run (`None`: not at all).
struct Spinner {
    report: tokio::sync::mpsc::UnboundedSender<Option<usize>>,
    runs: usize,
    other_ran: Option<Arc<std::sync::atomic::AtomicBool>>,
    seen: Option<usize>,
}

impl Spinner {
    const RUNS: usize = 10_000;
}

#[async_trait]
impl Controller for Spinner {
    fn name(&self) -> &str {
        "Spinner"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![]
    }
    async fn reconcile(&mut self, _state: &ControllerState) -> Result<Reconciled> {
        self.runs += 1;
        let other_ran = self.other_ran.get_or_insert_with(|| {
            // Queued behind the controller's task: it runs only when that task yields.
            let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = other_ran.clone();
            tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
            other_ran
        });
        if self.seen.is_none() && other_ran.load(Ordering::SeqCst) {
            self.seen = Some(self.runs);
        }
        if self.runs == Self::RUNS {
            let _ = self.report.send(self.seen);
            return Ok(Reconciled::Done);
        }
        Ok(Reconciled::RequeueAfter(Duration::ZERO))
    }
}

#[tokio::test]
async fn a_controller_that_requeues_at_once_lets_the_other_tasks_of_its_worker_run() {
    let memory: Arc<dyn State> = Arc::new(cosi_state::MemoryState::default());
    let engine = cosi_controllers::Engine::new(memory);
    let (report, mut reports) = tokio::sync::mpsc::unbounded_channel();
    engine
        .register(Spinner {
            report,
            runs: 0,
            other_ran: None,
            seen: None,
        })
        .unwrap();
    engine.start();
    let seen = reports.recv().await.expect("the controller reports");
    assert!(
        seen.is_some(),
        "the spawned task never ran during {} reconciles",
        Spinner::RUNS
    );
    engine.shutdown().await;
}
