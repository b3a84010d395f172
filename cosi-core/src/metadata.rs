//! Resource metadata: identity, version, owner, phase, finalizers, labels, annotations, timestamps.
//!
//! The store owns `version`, `owner`, `created` and `updated`: whatever a writer puts there is
//! checked or overwritten by the backend. Everything else is the writer's to set.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::{Kind, Pointer};

/// Label map: ordered so that rendering and comparison are deterministic.
pub type Labels = BTreeMap<String, String>;
/// Annotation map: free-form string metadata.
pub type Annotations = BTreeMap<String, String>;
/// The set of finalizers; order-insensitive by construction.
pub type Finalizers = BTreeSet<String>;

/// A resource version. A created resource has version 1; each stored change adds one.
///
/// ```
/// use cosi_core::Version;
/// assert_eq!(Version::new(1).next(), Version::new(2));
/// ```
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Debug, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Version(u64);

impl Version {
    /// The version of a resource that was never stored.
    pub const UNSET: Version = Version(0);
    /// The version a create stores.
    pub const FIRST: Version = Version(1);

    /// Wraps a raw version number.
    pub const fn new(v: u64) -> Self {
        Version(v)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The version after this one.
    pub const fn next(self) -> Self {
        Version(self.0 + 1)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The lifecycle phase of a resource.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// The normal phase.
    #[default]
    Running,
    /// Being torn down: consumers should release it (remove their finalizers).
    TearingDown,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Running => "running",
            Phase::TearingDown => "tearingDown",
        })
    }
}

/// Metadata of one resource.
///
/// ```
/// use cosi_core::{Metadata, Phase, Pointer, Version};
/// let mut md = Metadata::new(Pointer::new("ns", "Things.test.cosi.dev", "a"));
/// md.labels_mut().insert("app".into(), "web".into());
/// md.finalizers_mut().insert("cleanup".into());
/// assert_eq!(md.version(), Version::UNSET);
/// assert_eq!(md.phase(), Phase::Running);
/// assert_eq!(md.labels()["app"], "web");
/// ```
#[derive(Clone, PartialEq, Debug)]
pub struct Metadata {
    pointer: Pointer,
    version: Version,
    owner: Option<String>,
    phase: Phase,
    finalizers: Finalizers,
    labels: Labels,
    annotations: Annotations,
    created: SystemTime,
    updated: SystemTime,
}

impl Metadata {
    /// Fresh metadata for a resource that has not been stored yet.
    pub fn new(pointer: Pointer) -> Self {
        Metadata {
            pointer,
            version: Version::UNSET,
            owner: None,
            phase: Phase::Running,
            finalizers: Finalizers::new(),
            labels: Labels::new(),
            annotations: Annotations::new(),
            created: SystemTime::UNIX_EPOCH,
            updated: SystemTime::UNIX_EPOCH,
        }
    }

    /// The resource's identity.
    pub fn pointer(&self) -> &Pointer {
        &self.pointer
    }
    /// The resource's kind.
    pub fn kind(&self) -> &Kind {
        self.pointer.kind()
    }
    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.pointer.namespace()
    }
    /// The type name.
    pub fn resource_type(&self) -> &str {
        self.pointer.resource_type()
    }
    /// The id.
    pub fn id(&self) -> &str {
        self.pointer.id()
    }
    /// The version: the one stored, or for a value about to be written, the one it was read at.
    pub fn version(&self) -> Version {
        self.version
    }
    /// Sets the version (the store does this on every write).
    pub fn set_version(&mut self, version: Version) {
        self.version = version;
    }
    /// The owning controller, or `None` for user-owned resources.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
    /// Sets the owner (the store sets it from the writer's options).
    pub fn set_owner(&mut self, owner: Option<String>) {
        self.owner = owner;
    }
    /// The lifecycle phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// Sets the phase.
    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
    }
    /// The finalizers.
    pub fn finalizers(&self) -> &Finalizers {
        &self.finalizers
    }
    /// Mutable finalizers.
    pub fn finalizers_mut(&mut self) -> &mut Finalizers {
        &mut self.finalizers
    }
    /// The labels.
    pub fn labels(&self) -> &Labels {
        &self.labels
    }
    /// Mutable labels.
    pub fn labels_mut(&mut self) -> &mut Labels {
        &mut self.labels
    }
    /// The annotations.
    pub fn annotations(&self) -> &Annotations {
        &self.annotations
    }
    /// Mutable annotations.
    pub fn annotations_mut(&mut self) -> &mut Annotations {
        &mut self.annotations
    }
    /// When the resource was created (set by the store).
    pub fn created(&self) -> SystemTime {
        self.created
    }
    /// When the resource was last changed (set by the store).
    pub fn updated(&self) -> SystemTime {
        self.updated
    }
    /// Sets both timestamps (the store does this on every write).
    pub fn set_timestamps(&mut self, created: SystemTime, updated: SystemTime) {
        self.created = created;
        self.updated = updated;
    }

    /// Equality of everything but the timestamps: the test `modify` uses to skip no-op writes.
    pub fn eq_ignoring_timestamps(&self, other: &Metadata) -> bool {
        self.pointer == other.pointer
            && self.version == other.version
            && self.owner == other.owner
            && self.phase == other.phase
            && self.finalizers == other.finalizers
            && self.labels == other.labels
            && self.annotations == other.annotations
    }
}
