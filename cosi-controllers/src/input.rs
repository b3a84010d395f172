//! A controller's inputs: the kinds (or single resources) it reads, and how strongly it depends
//! on them. Declarations only: the engine subscribes to them, [`crate::ControllerState`] checks
//! reads against them.

use std::fmt;
use std::sync::Arc;

use cosi_core::{Kind, ResourceSpec};

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
