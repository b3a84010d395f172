//! What a controller is: its name, the inputs it reads and the outputs it writes (declared with
//! [`crate::Input`] and [`crate::Output`]), and the reconcile the engine calls whenever one of
//! its inputs changes.
//!
//! This module owns the declarations only; scheduling lives in [`crate::Engine`], run-time
//! access checks in [`crate::ControllerState`].

use std::time::Duration;

use async_trait::async_trait;
use cosi_core::Result;

use crate::{ControllerState, Input, Output};

/// What a reconcile asks of the engine when it succeeds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Reconciled {
    /// Run again only when an input changes.
    #[default]
    Done,
    /// Run again after this delay, or earlier if an input changes.
    /// Any delay is valid: one too long for the clock (`Duration::MAX`) waits for a change.
    RequeueAfter(Duration),
}

/// A level-triggered controller.
///
/// The engine calls [`Controller::reconcile`] once at start and then whenever any of its inputs
/// changed since the previous reconcile started; any number of changes before the reconcile
/// runs coalesce into one call. A reconcile reads the current state through the
/// [`ControllerState`] it is given and converges its outputs towards it. It must not assume it
/// is told *what* changed — only that something may have.
///
/// An error or a panic restarts the controller: its next reconcile runs after an exponential
/// backoff for a retryable error, and at the next input change (or the backoff's maximum) for a
/// non-retryable one or a panic; other controllers are not affected.
///
/// ```
/// use async_trait::async_trait;
/// use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
/// use cosi_core::{Resource, ResourceSpec, Result, StateExt};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct Hostname { name: String }
/// # impl ResourceSpec for Hostname {
/// #     const TYPE: &'static str = "Hostnames.net.cosi.dev";
/// #     const DEFAULT_NAMESPACE: &'static str = "network";
/// # }
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct Greeting { text: String }
/// # impl ResourceSpec for Greeting {
/// #     const TYPE: &'static str = "Greetings.net.cosi.dev";
/// #     const DEFAULT_NAMESPACE: &'static str = "network";
/// # }
///
/// /// Writes a greeting for the hostname.
/// struct GreetingController;
///
/// #[async_trait]
/// impl Controller for GreetingController {
///     fn name(&self) -> &str {
///         "GreetingController"
///     }
///     fn inputs(&self) -> Vec<Input> {
///         vec![Input::weak_of::<Hostname>().with_id("hostname")]
///     }
///     fn outputs(&self) -> Vec<Output> {
///         vec![Output::exclusive_of::<Greeting>()]
///     }
///     async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
///         let pointer = Hostname::kind().pointer("hostname");
///         let hostname = match state.get_typed::<Hostname>(&pointer).await {
///             Ok(h) => h,
///             Err(e) if e.is_not_found() => return Ok(Reconciled::Done),
///             Err(e) => return Err(e),
///         };
///         let text = format!("hello from {}", hostname.spec.name);
///         state
///             .modify_output(Resource::new("greeting", Greeting::default()), |g| {
///                 g.spec.text = text.clone();
///                 Ok(())
///             })
///             .await?;
///         Ok(Reconciled::Done)
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `Controller` (a level-triggered controller)",
    label = "not a `Controller`",
    note = "if `{Self}` is a `QueueController`, register it with `register_queue`, not `register`"
)]
#[async_trait]
pub trait Controller: Send + 'static {
    /// The unique name; also the owner of everything the controller writes.
    fn name(&self) -> &str;

    /// The inputs at registration. Change them at run time with
    /// [`ControllerState::set_inputs`].
    fn inputs(&self) -> Vec<Input>;

    /// The outputs (fixed for the controller's lifetime).
    fn outputs(&self) -> Vec<Output>;

    /// Converges the outputs towards the current inputs.
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled>;
}
