//! # cosi-controllers
//!
//! The controller runtime of a COSI-style resource runtime: controllers declare the resources
//! they read (inputs) and write (outputs); the [`Engine`] wires them into a
//! [`DependencyGraph`], watches every input kind once, and runs **level-triggered** reconciles
//! that converge outputs towards inputs.
//!
//! ## A tour
//!
//! - [`Controller`]: name, [`Input`]s (kind, optional id, [`InputStrength`]: weak, strong,
//!   destroy-ready), [`Output`]s (type, [`OutputKind`]: exclusive or shared), and `reconcile`.
//!   A reconcile may ask to run again later ([`Reconciled::RequeueAfter`]).
//! - [`Engine`]: registers controllers (also after it started), rejects bad wiring with a
//!   [`RegistrationError`] naming both controllers and the type (and a controller that would
//!   collide with its own status publisher: named [`STATUS_OWNER`], or writing
//!   [`ControllerStatus`]), runs each controller in its own task, and coalesces wake-ups: at most one is pending per controller, so a burst of
//!   changes costs one reconcile. One kind watch per watched kind is shared by every
//!   controller that needs it; a watch that lags behind the store's history window catches up
//!   (or resyncs) and simply wakes its controllers — it never stops the runtime.
//! - Failures: an error or a panic restarts that controller (a queue controller: retries that
//!   item) after a [`Backoff`] (reset after a successful reconcile); the others keep running.
//!   A retryable error ([`cosi_core::Error::is_retryable`]: a version conflict, an unreachable
//!   store) waits out the growing backoff; a non-retryable one (invalid input, an access
//!   violation) or a panic waits for the next input change, or the backoff's maximum if nothing
//!   changes. The error keeps its structure to the edge: the span records it and its kind, and
//!   [`ControllerStatus`] publishes its message and `lastErrorKind`.
//!   [`Engine::shutdown`] lets running reconciles finish, bounded by a timeout.
//! - [`ControllerState`]: the state handle a controller works through. It implements
//!   [`cosi_core::State`], so every [`cosi_core::StateExt`] helper works, and enforces the
//!   access rules: reads of declared inputs and outputs only, writes of declared outputs only
//!   (owner = controller name), finalizer changes only on strong inputs. A violation is an
//!   [`cosi_core::Error::AccessDenied`] returned to the controller; nothing reaches the store.
//!   It also tracks outputs ([`ControllerState::start_tracking`],
//!   [`ControllerState::cleanup_outputs`]) so a reconcile can tear down what it no longer
//!   produces. A controller that mirrors an outside source (the kernel, a remote registry) is
//!   woken by that source through a [`Waker`] ([`ControllerState::waker`]).
//! - [`Transform`]: a controller from a map function (input type → output type), with optional
//!   finalizers on inputs and teardown of outputs whose input went away; it writes nothing when
//!   an output is already right. [`Transform::into_queue`] gives the per-item variant.
//! - [`QueueController`]: per-item reconciles of a primary input with dedup, bounded
//!   concurrency, never the same item twice at once, requeue-after, per-item backoff, secondary
//!   inputs mapped to items, and run/shutdown hooks.
//! - Observability: a `tracing` span per reconcile (`controller`, `trigger`, `duration_us`,
//!   `outcome`), and per-controller counters published as [`ControllerStatus`] resources in
//!   the `runtime` namespace, readable with the same `get`/`watch` as everything else.
//! - `testing` (feature `testing`): the test harness — in-memory state, paused clock,
//!   `settle()`, explicit time, resource assertions and fault injection. Enable it in
//!   `[dev-dependencies]`: `cosi-controllers = { version = "…", features = ["testing"] }`.
//!
//! ## Example: write, register and test a controller
//!
//! ```
//! use async_trait::async_trait;
//! use cosi_controllers::testing::Harness;
//! use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled, Transform};
//! use cosi_core::{CreateOptions, ListOptions, Resource, ResourceSpec, Result, State, StateExt};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
//! struct Disk { size_gib: u64 }
//! impl ResourceSpec for Disk {
//!     const TYPE: &'static str = "Disks.block.cosi.dev";
//!     const DEFAULT_NAMESPACE: &'static str = "block";
//! }
//!
//! #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
//! struct Capacity { total_gib: u64 }
//! impl ResourceSpec for Capacity {
//!     const TYPE: &'static str = "Capacities.block.cosi.dev";
//!     const DEFAULT_NAMESPACE: &'static str = "block";
//! }
//!
//! /// Sums the size of every disk into one Capacity resource.
//! struct CapacityController;
//!
//! #[async_trait]
//! impl Controller for CapacityController {
//!     fn name(&self) -> &str { "CapacityController" }
//!     fn inputs(&self) -> Vec<Input> { vec![Input::weak_of::<Disk>()] }
//!     fn outputs(&self) -> Vec<Output> { vec![Output::exclusive_of::<Capacity>()] }
//!
//!     async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
//!         let disks = state.list_typed::<Disk>(&Disk::kind(), &ListOptions::default()).await?;
//!         let total = disks.iter().map(|d| d.spec.size_gib).sum();
//!         // Writes nothing when the total did not change.
//!         state
//!             .modify_output(Resource::new("node", Capacity::default()), |c| {
//!                 c.spec.total_gib = total;
//!                 Ok(())
//!             })
//!             .await?;
//!         Ok(Reconciled::Done)
//!     }
//! }
//!
//! // In a test file: #[tokio::test(start_paused = true)]
//! async fn capacity_is_the_sum_of_disk_sizes() {
//!     let harness = Harness::new();
//!     harness.register(CapacityController).unwrap();
//!     // A generic transform, registered alongside: one label per disk.
//!     #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
//!     struct DiskLabel { text: String }
//!     impl ResourceSpec for DiskLabel {
//!         const TYPE: &'static str = "DiskLabels.block.cosi.dev";
//!         const DEFAULT_NAMESPACE: &'static str = "block";
//!     }
//!     harness
//!         .register(Transform::<Disk, DiskLabel>::same_id("DiskLabels", |d: &Disk| {
//!             Some(DiskLabel { text: format!("{} GiB", d.size_gib) })
//!         }))
//!         .unwrap();
//!     harness.start().await;
//!
//!     let state = harness.state();
//!     for (id, size) in [("sda", 100), ("sdb", 400)] {
//!         let disk = Resource::new(id, Disk { size_gib: size });
//!         state.create(disk.into_shared(), CreateOptions::default()).await.unwrap();
//!     }
//!     harness.settle().await;
//!
//!     assert_eq!(harness.expect::<Capacity>("node").await.spec.total_gib, 500);
//!     assert_eq!(harness.expect::<DiskLabel>("sdb").await.spec.text, "400 GiB");
//!     // Two disks created back to back: one reconcile at start, one for both.
//!     assert_eq!(harness.status("CapacityController").await.reconciles, 2);
//!     harness.shutdown().await;
//! }
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap()
//! #     .block_on(capacity_is_the_sum_of_disk_sizes());
//! ```
//!
//! In production, build the [`Engine`] over any backend and run it until a shutdown signal:
//!
//! ```
//! use std::future::Future;
//! use std::sync::Arc;
//! use cosi_controllers::Engine;
//! use cosi_state::{MemoryOptions, MemoryState};
//!
//! async fn run_node(controllers: Vec<Box<dyn FnOnce(&Engine)>>, shutdown: impl Future<Output = ()>) {
//!     let engine = Engine::new(Arc::new(MemoryState::new(MemoryOptions::default())));
//!     for register in controllers {
//!         register(&engine);
//!     }
//!     println!("{}", engine.graph().to_text());
//!     // Running reconciles finish on shutdown, bounded by `EngineOptions::shutdown_timeout`.
//!     let report = engine.run_until(shutdown).await;
//!     assert_eq!(report.aborted, 0);
//! }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
//! #     .block_on(run_node(Vec::new(), async {}));
//! ```
//!
//! ## Semantics worth knowing
//!
//! - Reconciles are level-triggered: a controller is told *that* an input may have changed,
//!   never *what* changed; it reads the current state and converges. The first reconcile runs
//!   at start; inputs changed at run time ([`ControllerState::set_inputs`]) trigger one more.
//!   If changing them fails and watching the old ones again fails too, the engine watches
//!   them again (after the restart backoff, retrying) before the controller reconciles again
//!   (a queue controller finishes the items it had queued meanwhile, then relists): no
//!   controller is left deaf to its inputs.
//! - A restart after a failure re-runs `reconcile` on the same controller value after the
//!   backoff; input changes during the backoff of a retryable error do not cut it short (they
//!   do end the wait after a non-retryable error or a panic).
//! - Output tracking belongs to one reconcile: every reconcile, and every item of a queue
//!   controller, gets a [`ControllerState`] whose tracking no other reconcile sees.
//! - A destroy-ready input wakes the controller when a resource of the kind is tearing down
//!   with no finalizers left, or is destroyed.
//! - A watch that resyncs (it fell behind even the store's destroy markers) tells of what
//!   exists, not of what was destroyed meanwhile: a queue controller that cleans up after
//!   destroyed primaries must hold finalizers on them or watch its outputs, as
//!   [`QueueTransform`] does (see [`QueueController`]).
//! - Writes go through the no-op rule of [`cosi_core::StateExt::modify`]: an output that is
//!   already right costs no write and no event, which is what stops feedback loops.

mod access;
mod backoff;
mod catch_panic;
mod controller;
mod engine;
mod feed;
mod graph;
mod input;
mod input_changes;
mod level;
mod output;
mod queue;
mod runner;
mod status;
mod transform;
mod wake;
mod work_queue;

pub use access::{Cleanup, ControllerState, Waker};
pub use backoff::Backoff;
pub use controller::{Controller, Reconciled};
pub use engine::{Engine, EngineOptions, ShutdownReport};
pub use graph::{DependencyGraph, RegistrationError};
pub use input::{Input, InputStrength};
pub use output::{Output, OutputKind};
pub use queue::QueueController;
pub use status::{ControllerStatus, STATUS_OWNER};
pub use transform::{QueueTransform, Transform};
#[cfg(feature = "testing")]
pub mod testing;
