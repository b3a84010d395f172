//! Test support for controllers — the `tower-test` of this project.
//!
//! A [`Harness`] runs controllers on an in-memory state behind a [`FaultyState`] (so faults can
//! be injected into store calls), on tokio's paused clock. Tests drive it with three moves:
//!
//! - change the state through [`Harness::state`] (no access rules: you are the user);
//! - [`Harness::settle`]: returns once every controller is idle — no pending wake-up, no running
//!   reconcile, every watch event delivered, statuses published — and nothing is due *now*;
//! - [`Harness::advance`]: moves the paused clock, fires whatever became due, and settles.
//!
//! Where a reconcile is meant to stay blocked (it sleeps across virtual time, or waits for the
//! test), [`Harness::quiesce`] and [`Harness::advance_quiesce`] wait for "no more progress is
//! possible" instead of "idle".
//!
//! then assert on resources ([`Harness::expect`], [`Harness::expect_absent`], [`Harness::get`])
//! and on counters ([`Harness::status`]). No sleeps; the result does not depend on timing.
//!
//! # Failures fail the test
//!
//! A controller failure the test did not expect — a reconcile, hook or mapping that returns an
//! error or panics, or an access violation, even one the controller goes on from — makes the
//! next [`Harness::settle`] (or [`Harness::quiesce`], and so `start` and `advance`) panic with
//! the failure's message: a test cannot pass while a controller quietly fails and retries. A
//! test that provokes failures says which controllers may fail with
//! [`Harness::expect_errors`], or that any may with [`Harness::allow_errors`], and checks what
//! happened with [`Harness::failures`] or the controllers' [`Harness::status`].
//!
//! # Settling
//!
//! Controller tasks, shared kind watches and the status publisher all run on the test's
//! current-thread runtime. `settle` repeatedly yields to the scheduler (letting every runnable
//! task run) and returns once the engine has reported itself idle *and* made no progress over
//! several consecutive scheduler passes — the second condition catches watch events that are
//! buffered in a watch but not yet fanned out. Timers never fire by themselves during
//! `settle`: a requeue or backoff that is due later stays pending until [`Harness::advance`]
//! reaches it. A controller that never converges (every reconcile writes again) makes `settle`
//! panic with the names of the busy controllers instead of hanging.
//!
//! Use `#[tokio::test(start_paused = true)]` (a current-thread runtime with a paused clock);
//! [`Harness::advance`] on a clock that is not paused panics saying so.
//!
//! # Example: a complete controller test
//!
//! ```
//! use async_trait::async_trait;
//! use cosi_controllers::testing::Harness;
//! use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
//! use cosi_core::{CreateOptions, Resource, ResourceSpec, Result, State, StateExt, UpdateOptions};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
//! struct Hostname { name: String }
//! impl ResourceSpec for Hostname {
//!     const TYPE: &'static str = "Hostnames.net.cosi.dev";
//!     const DEFAULT_NAMESPACE: &'static str = "network";
//! }
//!
//! #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
//! struct Fqdn { fqdn: String }
//! impl ResourceSpec for Fqdn {
//!     const TYPE: &'static str = "Fqdns.net.cosi.dev";
//!     const DEFAULT_NAMESPACE: &'static str = "network";
//! }
//!
//! /// Derives the FQDN from the hostname.
//! struct FqdnController;
//!
//! #[async_trait]
//! impl Controller for FqdnController {
//!     fn name(&self) -> &str { "FqdnController" }
//!     fn inputs(&self) -> Vec<Input> { vec![Input::weak_of::<Hostname>()] }
//!     fn outputs(&self) -> Vec<Output> { vec![Output::exclusive_of::<Fqdn>()] }
//!     async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
//!         state.start_tracking();
//!         if let Ok(h) = state.get_typed::<Hostname>(&Hostname::kind().pointer("hostname")).await {
//!             let fqdn = format!("{}.example.dev", h.spec.name);
//!             state
//!                 .modify_output(Resource::new("fqdn", Fqdn::default()), |r| {
//!                     r.spec.fqdn = fqdn.clone();
//!                     Ok(())
//!                 })
//!                 .await?;
//!         }
//!         // No hostname: the FQDN is not touched, so it is torn down and destroyed.
//!         state.cleanup_outputs(&[Fqdn::kind()]).await?;
//!         Ok(Reconciled::Done)
//!     }
//! }
//!
//! // In a test file: #[tokio::test(start_paused = true)]
//! async fn fqdn_follows_hostname() {
//!     // Given a running controller
//!     let harness = Harness::new();
//!     harness.register(FqdnController).unwrap();
//!     harness.start().await;
//!
//!     // When the hostname is set
//!     let state = harness.state();
//!     let host = Resource::new("hostname", Hostname { name: "node-1".into() });
//!     state.create(host.into_shared(), CreateOptions::default()).await.unwrap();
//!     harness.settle().await;
//!
//!     // Then the FQDN follows, written once by the controller
//!     let fqdn = harness.expect::<Fqdn>("fqdn").await;
//!     assert_eq!(fqdn.spec.fqdn, "node-1.example.dev");
//!     assert_eq!(fqdn.metadata.owner(), Some("FqdnController"));
//!
//!     // And when the hostname goes away, so does the FQDN
//!     state.destroy(&Hostname::kind().pointer("hostname"), Default::default()).await.unwrap();
//!     harness.settle().await;
//!     harness.expect_absent::<Fqdn>("fqdn").await;
//!     assert_eq!(harness.status("FqdnController").await.errors, 0);
//!     harness.shutdown().await;
//! }
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap()
//! #     .block_on(fqdn_follows_hostname());
//! ```

mod failures;
mod faults;

use std::sync::Arc;
use std::time::Duration;

use cosi_core::{AnyResource, Pointer, Resource, ResourceSpec, SharedResource, State, StateExt};
use cosi_state::{MemoryOptions, MemoryState};

pub use failures::ControllerFailure;
pub use faults::FaultyState;

use crate::catch_panic::CatchPanic;
use failures::Failures;

/// Options for a [`cosi_state::DiskState`] used under the harness's paused clock: writes wait
/// for their commit in a blocking task ([`cosi_state::DiskOptions::paused_clock`]), so that the
/// clock does not jump while a commit is in flight.
///
/// ```
/// let options = cosi_controllers::testing::disk_options();
/// assert!(options.paused_clock);
/// ```
pub fn disk_options() -> cosi_state::DiskOptions {
    cosi_state::DiskOptions {
        paused_clock: true,
        ..cosi_state::DiskOptions::default()
    }
}

use crate::{
    Controller, ControllerStatus, Engine, EngineOptions, QueueController, RegistrationError,
    ShutdownReport,
};

/// Consecutive quiet scheduler passes `settle` requires.
const QUIET_PASSES: usize = 4;
/// Quiet scheduler passes after which `quiesce` accepts a system that is not idle.
const BLOCKED_PASSES: usize = 256;
/// Scheduler passes after which `settle` gives up on a system that never goes idle.
const MAX_PASSES: usize = 500_000;

/// Runs controllers for a test on an in-memory state and a paused clock; see the
/// [module docs](self) for how a test drives it and how controller failures fail the test.
///
/// ```
/// use cosi_controllers::testing::Harness;
/// use cosi_controllers::Transform;
/// use cosi_core::{CreateOptions, Resource, ResourceSpec, State};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct A { n: u32 }
/// # impl ResourceSpec for A { const TYPE: &'static str = "As.test.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "test"; }
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct B { n: u32 }
/// # impl ResourceSpec for B { const TYPE: &'static str = "Bs.test.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "test"; }
/// // In a test file: #[tokio::test(start_paused = true)]
/// async fn a_failing_controller_is_expected() {
///     let harness = Harness::new();
///     harness.register(Transform::<A, B>::same_id("AtoB", |a: &A| Some(B { n: a.n }))).unwrap();
///     harness.start().await;
///     // The test provokes failures of AtoB: its writes of B fail once.
///     harness.expect_errors("AtoB");
///     harness.faults().fail_nth_write(B::TYPE, 1);
///     let a = Resource::new("x", A { n: 1 });
///     harness.state().create(a.into_shared(), CreateOptions::default()).await.unwrap();
///     harness.settle().await;
///     assert_eq!(harness.failures()[0].kind, "backend");
///     harness.shutdown().await;
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap()
/// #     .block_on(a_failing_controller_is_expected());
/// ```
#[derive(Debug)]
pub struct Harness {
    state: Arc<FaultyState>,
    engine: Engine,
    failures: Arc<Failures>,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// An engine with default options over a fresh in-memory state.
    pub fn new() -> Self {
        Self::with_options(EngineOptions::default())
    }

    /// An engine with `options` over a fresh in-memory state.
    pub fn with_options(options: EngineOptions) -> Self {
        Self::with_memory(options, MemoryOptions::default())
    }

    /// An engine with `options` over a fresh in-memory state with `memory` options (e.g. a tiny
    /// history window, to test how controllers cope with lagging watches).
    pub fn with_memory(options: EngineOptions, memory: MemoryOptions) -> Self {
        let memory: Arc<dyn State> = Arc::new(MemoryState::new(memory));
        let state = Arc::new(FaultyState::new(memory));
        let engine = Engine::with_options(state.clone(), options);
        let failures = Failures::new();
        engine.on_failure(failures.sink());
        Harness {
            state,
            engine,
            failures,
        }
    }

    /// Says that the test provokes failures of `controller`: they no longer fail
    /// [`Harness::settle`] (they are still recorded, see [`Harness::failures`]). Call it before
    /// the failures happen; a failure of another controller still fails the test.
    pub fn expect_errors(&self, controller: &str) {
        self.failures.expect_of(controller);
    }

    /// Says that any controller may fail: no failure fails [`Harness::settle`] from now on.
    pub fn allow_errors(&self) {
        self.failures.expect_all();
    }

    /// Every controller failure seen so far, in order (the first 1,024).
    pub fn failures(&self) -> Vec<ControllerFailure> {
        self.failures.seen()
    }

    /// The state as a user sees it (no access rules; faults apply).
    pub fn state(&self) -> Arc<dyn State> {
        self.state.clone()
    }

    /// The fault injector in front of the state.
    pub fn faults(&self) -> &FaultyState {
        &self.state
    }

    /// The engine under test.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The inputs the engine's shared watches deliver to `controller`: one entry per
    /// subscription (an input listed twice has each of its changes delivered twice), sorted by
    /// kind and id like [`crate::DependencyGraph::inputs`], so a test can check that they are
    /// exactly the inputs the controller declares. Empty for an unknown controller.
    pub fn subscribed_inputs(&self, controller: &str) -> Vec<crate::Input> {
        self.engine
            .subscribed_inputs(controller)
            .unwrap_or_default()
    }

    /// Registers a level-triggered controller.
    pub fn register<C: Controller>(&self, controller: C) -> Result<(), RegistrationError> {
        self.engine.register(controller)
    }

    /// Registers a queue controller.
    pub fn register_queue<Q: QueueController>(
        &self,
        controller: Q,
    ) -> Result<(), RegistrationError> {
        self.engine.register_queue(controller)
    }

    /// Starts the engine and settles (every controller has run its first reconcile).
    pub async fn start(&self) {
        self.engine.start();
        self.settle().await;
    }

    /// Returns once every controller is idle and nothing is due now (see the
    /// [module docs](self#settling)).
    ///
    /// # Panics
    ///
    /// With the failure's message, if a controller failed in a way the test did not expect
    /// ([`Harness::expect_errors`]); if the controllers do not go idle within a generous number
    /// of scheduler passes (a reconcile loop that never converges, or a reconcile waiting for
    /// something only the test can provide).
    pub async fn settle(&self) {
        let mut quiet = 0;
        let mut last = self.engine.activity();
        for _ in 0..MAX_PASSES {
            tokio::task::yield_now().await;
            let now = self.engine.activity();
            if self.engine.is_idle() && now == last {
                quiet += 1;
                if quiet >= QUIET_PASSES {
                    self.failures.check("settle");
                    return;
                }
            } else {
                quiet = 0;
                last = now;
            }
        }
        self.failures.check("settle");
        panic!(
            "settle: the engine did not go idle after {MAX_PASSES} scheduler passes; \
             statuses: {:?}",
            self.engine
                .controllers()
                .iter()
                .map(|c| (c.to_string(), self.engine.status(c)))
                .collect::<Vec<_>>()
        );
    }

    /// Returns once nothing more can happen without the clock moving or the test acting: the
    /// engine is idle, or it has made no progress over a long run of scheduler passes while
    /// some reconcile waits (on a timer that is not due, or on something the test controls).
    /// Use it where [`Harness::settle`] cannot apply because a reconcile is meant to stay
    /// blocked.
    pub async fn quiesce(&self) {
        let mut quiet = 0;
        let mut last = self.engine.activity();
        loop {
            tokio::task::yield_now().await;
            let now = self.engine.activity();
            if now != last {
                quiet = 0;
                last = now;
                continue;
            }
            quiet += 1;
            if (quiet >= QUIET_PASSES && self.engine.is_idle()) || quiet >= BLOCKED_PASSES {
                self.failures.check("quiesce");
                return;
            }
        }
    }

    /// Advances the paused clock by `duration`, firing every timer that becomes due, then
    /// settles (strictly: every controller must end up idle).
    ///
    /// # Panics
    ///
    /// If the clock is not paused (the test needs `#[tokio::test(start_paused = true)]`), and
    /// as [`Harness::settle`] does.
    pub async fn advance(&self, duration: Duration) {
        advance_paused_clock(duration).await;
        self.settle().await;
    }

    /// Advances the paused clock by `duration`, then [`Harness::quiesce`]s: for tests whose
    /// reconciles span virtual time.
    ///
    /// # Panics
    ///
    /// As [`Harness::advance`].
    pub async fn advance_quiesce(&self, duration: Duration) {
        advance_paused_clock(duration).await;
        self.quiesce().await;
    }

    /// Shuts the engine down gracefully.
    pub async fn shutdown(&self) -> ShutdownReport {
        self.engine.shutdown().await
    }

    /// Reads a resource of type `S` with `id` in the default namespace of `S`; `None` if absent.
    ///
    /// # Panics
    ///
    /// On any error other than not-found (use [`Harness::state`] to test errors).
    pub async fn get<S: ResourceSpec>(&self, id: &str) -> Option<Arc<Resource<S>>> {
        self.get_at(&S::kind().pointer(id.to_string())).await
    }

    /// Reads the resource at `pointer` as type `S`; `None` if absent.
    ///
    /// # Panics
    ///
    /// On any error other than not-found.
    pub async fn get_at<S: ResourceSpec>(&self, pointer: &Pointer) -> Option<Arc<Resource<S>>> {
        match self.state.inner().get_typed::<S>(pointer).await {
            Ok(r) => Some(r),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("reading {pointer}: {e}"),
        }
    }

    /// Reads a resource that must exist.
    ///
    /// # Panics
    ///
    /// If it is absent, naming it.
    pub async fn expect<S: ResourceSpec>(&self, id: &str) -> Arc<Resource<S>> {
        match self.get::<S>(id).await {
            Some(r) => r,
            None => panic!("expected {} to exist", S::kind().pointer(id.to_string())),
        }
    }

    /// Asserts that a resource is absent.
    ///
    /// # Panics
    ///
    /// If it exists, showing it.
    pub async fn expect_absent<S: ResourceSpec>(&self, id: &str) {
        if let Some(r) = self.get::<S>(id).await {
            panic!(
                "expected {} to be absent, found {r:?}",
                r.metadata.pointer()
            );
        }
    }

    /// Every resource of type `S` in its default namespace, sorted by id.
    pub async fn list<S: ResourceSpec>(&self) -> Vec<Arc<Resource<S>>> {
        self.state
            .inner()
            .list_typed::<S>(&S::kind(), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("listing {}: {e}", S::kind()))
    }

    /// The published status of a controller.
    ///
    /// # Panics
    ///
    /// If the engine publishes no statuses or this controller's is missing.
    pub async fn status(&self, controller: &str) -> ControllerStatus {
        let shared: SharedResource = self
            .state
            .inner()
            .get(&ControllerStatus::kind().pointer(controller.to_string()))
            .await
            .unwrap_or_else(|e| panic!("status of {controller}: {e}"));
        cosi_core::downcast_ref::<ControllerStatus>(&*shared)
            .unwrap_or_else(|e| panic!("status of {controller}: {e}"))
            .spec
            .clone()
    }
}

/// Moves tokio's paused clock, or panics with what the test must change: tokio's own message
/// ("time is not frozen") does not say.
async fn advance_paused_clock(duration: Duration) {
    if let Err(message) = CatchPanic::new(tokio::time::advance(duration)).await {
        panic!(
            "advance: the tokio clock is not paused ({message}). Run the test on a paused \
             clock: `#[tokio::test(start_paused = true)]`, or a current-thread runtime built \
             with `.start_paused(true)`."
        );
    }
}

/// Reads the spec of a shared resource in tests, panicking on a type mismatch.
///
/// # Panics
///
/// If `resource` does not hold an `S`.
pub fn spec_of<S: ResourceSpec>(resource: &dyn AnyResource) -> S {
    cosi_core::downcast_ref::<S>(resource)
        .unwrap_or_else(|e| panic!("{e}"))
        .spec
        .clone()
}
