//! A controller's outputs: the resource types it writes, exclusively or shared with other
//! controllers. Declarations only: the dependency graph checks them at registration,
//! [`crate::ControllerState`] checks writes against them.

use std::fmt;
use std::sync::Arc;

use cosi_core::ResourceSpec;

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
