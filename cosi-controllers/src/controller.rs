//! What a controller is: its name, the inputs it reads and the outputs it writes, and the
//! reconcile the engine calls whenever one of its inputs changes.
//!
//! This module owns the declarations only; scheduling lives in [`crate::Engine`], run-time
//! access checks in [`crate::ControllerState`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cosi_core::{Kind, ResourceSpec, Result};

use crate::ControllerState;

/// How a controller depends on an input.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum InputStrength {
    /// Any change wakes the controller; it holds no finalizers on the input.
    Weak,
    /// Any change wakes the controller, and it may put finalizers on the input (so the input
    /// cannot be destroyed before the controller has released it).
    Strong,
    /// The controller wakes only when a resource is tearing down and has no finalizers left —
    /// i.e. when it is ready to be destroyed. Used to clean up outputs.
    DestroyReady,
}

impl fmt::Display for InputStrength {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InputStrength::Weak => "weak",
            InputStrength::Strong => "strong",
            InputStrength::DestroyReady => "destroy-ready",
        })
    }
}

/// One input of a controller: a kind, optionally a single id, and a strength.
///
/// ```
/// use cosi_controllers::{Input, InputStrength};
/// use cosi_core::Kind;
/// let input = Input::weak(Kind::new("config", "MachineConfigs.config.cosi.dev")).with_id("v1");
/// assert_eq!(input.strength, InputStrength::Weak);
/// assert_eq!(input.to_string(), "config/MachineConfigs.config.cosi.dev/v1 (weak)");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Input {
    /// The watched kind.
    pub kind: Kind,
    /// Restrict the input to one resource.
    pub id: Option<Arc<str>>,
    /// How the controller depends on it.
    pub strength: InputStrength,
}

impl Input {
    /// An input of the given strength on every resource of `kind`.
    pub fn new(kind: Kind, strength: InputStrength) -> Self {
        Input {
            kind,
            id: None,
            strength,
        }
    }

    /// A weak input on `kind`.
    pub fn weak(kind: Kind) -> Self {
        Self::new(kind, InputStrength::Weak)
    }

    /// A strong input on `kind`.
    pub fn strong(kind: Kind) -> Self {
        Self::new(kind, InputStrength::Strong)
    }

    /// A destroy-ready input on `kind`.
    pub fn destroy_ready(kind: Kind) -> Self {
        Self::new(kind, InputStrength::DestroyReady)
    }

    /// A weak input on the default-namespace kind of `S`.
    pub fn weak_of<S: ResourceSpec>() -> Self {
        Self::weak(S::kind())
    }

    /// A strong input on the default-namespace kind of `S`.
    pub fn strong_of<S: ResourceSpec>() -> Self {
        Self::strong(S::kind())
    }

    /// A destroy-ready input on the default-namespace kind of `S`.
    pub fn destroy_ready_of<S: ResourceSpec>() -> Self {
        Self::destroy_ready(S::kind())
    }

    /// Restricts the input to the resource `id`.
    pub fn with_id(mut self, id: impl Into<Arc<str>>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Whether the input covers the resource `id` of its kind.
    pub fn covers_id(&self, id: &str) -> bool {
        self.id.as_deref().is_none_or(|own| own == id)
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            Some(id) => write!(f, "{}/{} ({})", self.kind, id, self.strength),
            None => write!(f, "{} ({})", self.kind, self.strength),
        }
    }
}

/// Whether a controller is the only writer of an output type.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum OutputKind {
    /// The controller is the only writer of the type.
    Exclusive,
    /// Several controllers write the type, each owning the resources it created.
    Shared,
}

impl fmt::Display for OutputKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OutputKind::Exclusive => "exclusive",
            OutputKind::Shared => "shared",
        })
    }
}

/// One output of a controller: a resource type (in any namespace) and whether it is exclusive.
///
/// ```
/// use cosi_controllers::{Output, OutputKind};
/// let out = Output::shared("Sums.test.cosi.dev");
/// assert_eq!(out.kind, OutputKind::Shared);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Output {
    /// The resource type written.
    pub resource_type: Arc<str>,
    /// Exclusive or shared.
    pub kind: OutputKind,
}

impl Output {
    /// An exclusive output of `resource_type`.
    pub fn exclusive(resource_type: impl Into<Arc<str>>) -> Self {
        Output {
            resource_type: resource_type.into(),
            kind: OutputKind::Exclusive,
        }
    }

    /// A shared output of `resource_type`.
    pub fn shared(resource_type: impl Into<Arc<str>>) -> Self {
        Output {
            resource_type: resource_type.into(),
            kind: OutputKind::Shared,
        }
    }

    /// An exclusive output of the type of `S`.
    pub fn exclusive_of<S: ResourceSpec>() -> Self {
        Self::exclusive(S::TYPE)
    }

    /// A shared output of the type of `S`.
    pub fn shared_of<S: ResourceSpec>() -> Self {
        Self::shared(S::TYPE)
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.resource_type, self.kind)
    }
}

/// What a reconcile asks of the engine when it succeeds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Reconciled {
    /// Run again only when an input changes.
    #[default]
    Done,
    /// Run again after this delay, or earlier if an input changes.
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
/// An error or a panic restarts the controller (its next reconcile runs after an exponential
/// backoff); other controllers are not affected.
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
