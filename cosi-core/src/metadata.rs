//! Resource metadata: identity, version, owner, phase, finalizers, labels, annotations, timestamps.
//!
//! The store owns `version`, `owner`, `created` and `updated`: whatever a writer puts there is
//! checked or overwritten by the backend. Everything else is the writer's to set.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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
    /// The highest version: a store refuses to update a resource stored at it (only a record
    /// written outside the store can carry it).
    pub const LAST: Version = Version(u64::MAX);

    /// Wraps a raw version number.
    pub const fn new(v: u64) -> Self {
        Version(v)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The version after this one; [`Version::LAST`] stays itself (stores refuse to update a
    /// resource stored at it, so they never ask).
    ///
    /// ```
    /// use cosi_core::Version;
    /// assert_eq!(Version::LAST.next(), Version::LAST);
    /// ```
    pub const fn next(self) -> Self {
        Version(self.0.saturating_add(1))
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
///
/// Timestamps are kept to the nanosecond from 1677-09-21 to 2262-04-11 (an `i64` of
/// nanoseconds either side of the epoch, the range of Go's `UnixNano`); a time outside that
/// range reads back as the nearest end of it.
#[derive(Clone)]
pub struct Metadata {
    pointer: Pointer,
    version: Version,
    /// Owner, phase, finalizers, labels and annotations: absent (`None`) while all are empty
    /// (and the phase running), and shared between copies until one of them changes. Most
    /// resources carry none of them, so a stored value stays small, and copying a value to
    /// change its spec copies none of them.
    extras: Option<Arc<MetadataExtras>>,
    timestamps: Timestamps,
}

/// `created` and `updated` as nanoseconds since the epoch (negative before it): 16 bytes where
/// two `SystemTime`s take 32. With the phase among the extras, metadata is 56 bytes, which
/// keeps a small stored resource in a smaller allocation class.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Timestamps {
    created: i64,
    updated: i64,
}

impl Timestamps {
    const EPOCH: Timestamps = Timestamps {
        created: 0,
        updated: 0,
    };

    fn new(created: SystemTime, updated: SystemTime) -> Self {
        let created_nanos = nanos_since_epoch(created);
        Timestamps {
            created: created_nanos,
            // A create stamps one instant twice: convert it once.
            updated: if updated == created {
                created_nanos
            } else {
                nanos_since_epoch(updated)
            },
        }
    }

    fn created(&self) -> SystemTime {
        at(self.created)
    }

    fn updated(&self) -> SystemTime {
        at(self.updated)
    }
}

/// Nanoseconds since the epoch (negative before it), the nearest end of the `i64` range for a
/// time beyond it.
fn nanos_since_epoch(time: SystemTime) -> i64 {
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        // Every write stamps a time after the epoch: in `i64` arithmetic, not `u128`.
        Ok(after) => i64::try_from(after.as_secs())
            .ok()
            .and_then(|secs| secs.checked_mul(1_000_000_000))
            .and_then(|nanos| nanos.checked_add(i64::from(after.subsec_nanos())))
            .unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// The inverse of [`nanos_since_epoch`].
fn at(nanos: i64) -> SystemTime {
    // Every platform's `SystemTime` reaches at least the ±292 years an `i64` of nanoseconds
    // spans around the epoch, so neither step can overflow.
    let distance = Duration::from_nanos(nanos.unsigned_abs());
    if nanos >= 0 {
        SystemTime::UNIX_EPOCH + distance
    } else {
        SystemTime::UNIX_EPOCH - distance
    }
}

/// The rarely-set parts of [`Metadata`], kept behind one shared pointer.
#[derive(Clone, Default, PartialEq)]
struct MetadataExtras {
    /// Shared: every output of a controller can hold its name, and an ownership check compares
    /// addresses before bytes.
    owner: Option<Arc<str>>,
    phase: Phase,
    finalizers: Finalizers,
    labels: Labels,
    annotations: Annotations,
}

/// What an absent [`MetadataExtras`] reads as.
static NO_EXTRAS: MetadataExtras = MetadataExtras {
    owner: None,
    phase: Phase::Running,
    finalizers: Finalizers::new(),
    labels: Labels::new(),
    annotations: Annotations::new(),
};

impl Metadata {
    /// Fresh metadata for a resource that has not been stored yet.
    pub fn new(pointer: Pointer) -> Self {
        Metadata {
            pointer,
            version: Version::UNSET,
            extras: None,
            timestamps: Timestamps::EPOCH,
        }
    }

    fn extras(&self) -> &MetadataExtras {
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// The extras for changing, created empty or unshared first.
    fn extras_mut(&mut self) -> &mut MetadataExtras {
        Arc::make_mut(self.extras.get_or_insert_with(Default::default))
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
        self.extras().owner.as_deref()
    }
    /// The owner as it is kept: a shared string, which the values a controller writes share
    /// with its name.
    pub fn shared_owner(&self) -> Option<&Arc<str>> {
        self.extras().owner.as_ref()
    }
    /// Whether `owner` is the owner (both `None` for a user-owned resource). The same shared
    /// string answers without reading either.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use cosi_core::{Metadata, Pointer};
    /// let mut md = Metadata::new(Pointer::new("ns", "Things.test.cosi.dev", "a"));
    /// let name: Arc<str> = "ctrl".into();
    /// md.set_owner(Some(name.clone()));
    /// assert!(md.has_owner(Some(&name)));
    /// assert!(md.has_owner(Some(&"ctrl".into())));
    /// assert!(!md.has_owner(None) && !md.has_owner(Some(&"other".into())));
    /// ```
    pub fn has_owner(&self, owner: Option<&Arc<str>>) -> bool {
        match (self.shared_owner(), owner) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        }
    }
    /// Sets the owner (the store sets it from the writer's options).
    pub fn set_owner(&mut self, owner: Option<Arc<str>>) {
        if owner.is_none() && self.extras.is_none() {
            return;
        }
        self.extras_mut().owner = owner;
    }
    /// The lifecycle phase.
    pub fn phase(&self) -> Phase {
        self.extras().phase
    }
    /// Sets the phase.
    pub fn set_phase(&mut self, phase: Phase) {
        if phase == self.phase() {
            return;
        }
        self.extras_mut().phase = phase;
    }
    /// The finalizers.
    pub fn finalizers(&self) -> &Finalizers {
        &self.extras().finalizers
    }
    /// Mutable finalizers.
    pub fn finalizers_mut(&mut self) -> &mut Finalizers {
        &mut self.extras_mut().finalizers
    }
    /// The labels.
    pub fn labels(&self) -> &Labels {
        &self.extras().labels
    }
    /// Mutable labels.
    pub fn labels_mut(&mut self) -> &mut Labels {
        &mut self.extras_mut().labels
    }
    /// The annotations.
    pub fn annotations(&self) -> &Annotations {
        &self.extras().annotations
    }
    /// Mutable annotations.
    pub fn annotations_mut(&mut self) -> &mut Annotations {
        &mut self.extras_mut().annotations
    }
    /// When the resource was created (set by the store).
    pub fn created(&self) -> SystemTime {
        self.timestamps.created()
    }
    /// When the resource was last changed (set by the store).
    pub fn updated(&self) -> SystemTime {
        self.timestamps.updated()
    }
    /// Sets both timestamps (the store does this on every write).
    pub fn set_timestamps(&mut self, created: SystemTime, updated: SystemTime) {
        self.timestamps = Timestamps::new(created, updated);
    }

    /// Sets `created` to that of `previous` and `updated` to `updated`: what a store stamps on
    /// an update of the value `previous`. The same as `set_timestamps(previous.created(),
    /// updated)`, without taking `created` apart and putting it together again (every update
    /// of every store does this).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use cosi_core::{Metadata, Pointer};
    /// let pointer = Pointer::new("ns", "Things.test.cosi.dev", "a");
    /// let created = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_500_000_000_123);
    /// let mut stored = Metadata::new(pointer.clone());
    /// stored.set_timestamps(created, created);
    /// let mut next = Metadata::new(pointer);
    /// let now = SystemTime::now();
    /// next.set_updated_after(&stored, now);
    /// assert_eq!((next.created(), next.updated()), (created, now));
    /// ```
    pub fn set_updated_after(&mut self, previous: &Metadata, updated: SystemTime) {
        self.timestamps = Timestamps {
            created: previous.timestamps.created,
            updated: nanos_since_epoch(updated),
        };
    }

    /// Equality of everything but the timestamps: the test `modify` uses to skip no-op writes.
    pub fn eq_ignoring_timestamps(&self, other: &Metadata) -> bool {
        self.pointer == other.pointer
            && self.version == other.version
            && (same_extras(&self.extras, &other.extras) || self.extras() == other.extras())
    }
}

/// Whether both share one allocation (or both have none): equal without comparing contents.
fn same_extras(a: &Option<Arc<MetadataExtras>>, b: &Option<Arc<MetadataExtras>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    }
}

impl PartialEq for Metadata {
    fn eq(&self, other: &Self) -> bool {
        self.eq_ignoring_timestamps(other) && self.timestamps == other.timestamps
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The fields as they read, not how they are stored.
        f.debug_struct("Metadata")
            .field("pointer", &self.pointer)
            .field("version", &self.version)
            .field("owner", &self.owner())
            .field("phase", &self.phase())
            .field("finalizers", self.finalizers())
            .field("labels", self.labels())
            .field("annotations", self.annotations())
            .field("created", &self.created())
            .field("updated", &self.updated())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> Metadata {
        Metadata::new(Pointer::new("ns", "Things.test.cosi.dev", "a"))
    }

    #[test]
    fn emptied_extras_equal_absent_extras() {
        let mut touched = metadata();
        touched.labels_mut().insert("app".into(), "web".into());
        touched.labels_mut().clear();
        touched.set_owner(None);
        assert_eq!(touched, metadata());
        assert!(touched.eq_ignoring_timestamps(&metadata()));
    }

    #[test]
    fn changing_a_copy_leaves_the_original_unchanged() {
        let mut original = metadata();
        original.set_owner(Some("ctrl".into()));
        original.labels_mut().insert("app".into(), "web".into());
        let mut copy = original.clone();
        copy.labels_mut().insert("tier".into(), "db".into());
        copy.finalizers_mut().insert("f".into());
        copy.annotations_mut().insert("note".into(), "x".into());
        copy.set_owner(Some("other".into()));
        assert_eq!(original.labels().len(), 1);
        assert!(original.finalizers().is_empty());
        assert!(original.annotations().is_empty());
        assert_eq!(original.owner(), Some("ctrl"));
        assert_eq!(copy.owner(), Some("other"));
        assert_eq!(copy.labels().len(), 2);
    }

    #[test]
    fn metadata_differing_in_any_extra_is_unequal() {
        let base = metadata();
        let mut owned = base.clone();
        owned.set_owner(Some("ctrl".into()));
        let mut finalized = base.clone();
        finalized.finalizers_mut().insert("f".into());
        let mut labeled = base.clone();
        labeled.labels_mut().insert("k".into(), "v".into());
        let mut annotated = base.clone();
        annotated.annotations_mut().insert("k".into(), "v".into());
        for changed in [owned, finalized, labeled, annotated] {
            assert_ne!(changed, base);
            assert!(!changed.eq_ignoring_timestamps(&base));
        }
    }

    #[test]
    fn timestamps_matter_for_equality_only() {
        let mut later = metadata();
        later.set_timestamps(SystemTime::UNIX_EPOCH, SystemTime::now());
        assert_ne!(later, metadata());
        assert!(later.eq_ignoring_timestamps(&metadata()));
    }

    /// `secs` whole seconds from the epoch (negative: before it), plus `nanos`.
    fn time_at(secs: i64, nanos: u32) -> SystemTime {
        let whole = Duration::from_secs(secs.unsigned_abs());
        let t = if secs >= 0 {
            SystemTime::UNIX_EPOCH + whole
        } else {
            SystemTime::UNIX_EPOCH - whole
        };
        t + Duration::from_nanos(u64::from(nanos))
    }

    proptest::proptest! {
        #[test]
        fn timestamps_read_back_exactly(
            created_secs in -(1i64 << 33)..(1i64 << 33),
            created_nanos in 0u32..1_000_000_000,
            updated_secs in -(1i64 << 33)..(1i64 << 33),
            updated_nanos in 0u32..1_000_000_000,
        ) {
            let (created, updated) = (time_at(created_secs, created_nanos), time_at(updated_secs, updated_nanos));
            let mut md = metadata();
            md.set_timestamps(created, updated);
            proptest::prop_assert_eq!(md.created(), created);
            proptest::prop_assert_eq!(md.updated(), updated);
        }

        #[test]
        fn an_update_stamp_keeps_created_exactly_and_sets_updated(
            created_secs in -(1i64 << 33)..(1i64 << 33),
            created_nanos in 0u32..1_000_000_000,
            updated_secs in -(1i64 << 33)..(1i64 << 33),
            updated_nanos in 0u32..1_000_000_000,
        ) {
            let (created, updated) = (time_at(created_secs, created_nanos), time_at(updated_secs, updated_nanos));
            let mut stored = metadata();
            stored.set_timestamps(created, created);
            let (mut stamped, mut expected) = (metadata(), metadata());
            stamped.set_updated_after(&stored, updated);
            expected.set_timestamps(stored.created(), updated);
            proptest::prop_assert_eq!(stamped.updated(), updated);
            proptest::prop_assert_eq!(stamped, expected);
        }
    }

    #[test]
    fn times_beyond_the_nanosecond_range_read_back_as_its_ends() {
        let (first, last) = (
            time_at(-9_223_372_037, 145_224_192),
            time_at(9_223_372_036, 854_775_807),
        );
        let mut md = metadata();
        md.set_timestamps(first, last);
        assert_eq!(
            (md.created(), md.updated()),
            (first, last),
            "the ends themselves are exact"
        );
        let (before, after) = (time_at(-(1i64 << 40), 0), time_at(1i64 << 40, 0));
        md.set_timestamps(before, after);
        assert_eq!((md.created(), md.updated()), (first, last));
    }

    #[test]
    fn metadata_takes_56_bytes() {
        // A resource is its metadata and spec behind one `Arc`: 16 bytes more here put every
        // small resource in the next allocation class.
        assert_eq!(std::mem::size_of::<Metadata>(), 56);
    }

    #[test]
    fn a_running_phase_set_on_fresh_metadata_adds_no_extras() {
        let mut md = metadata();
        md.set_phase(Phase::Running);
        assert!(md.extras.is_none());
        md.set_phase(Phase::TearingDown);
        assert_eq!(md.phase(), Phase::TearingDown);
        assert_ne!(md, metadata());
    }

    #[test]
    fn timestamps_just_before_the_epoch_read_back_exactly() {
        let before = SystemTime::UNIX_EPOCH - Duration::from_nanos(1);
        let mut md = metadata();
        md.set_timestamps(before, SystemTime::UNIX_EPOCH);
        assert_eq!(md.created(), before);
        assert_eq!(md.updated(), SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn new_metadata_has_epoch_timestamps() {
        assert_eq!(metadata().created(), SystemTime::UNIX_EPOCH);
        assert_eq!(metadata().updated(), SystemTime::UNIX_EPOCH);
    }

    #[test]
    fn debug_shows_the_fields_as_they_read() {
        let mut md = metadata();
        md.set_owner(Some("ctrl".into()));
        let shown = format!("{md:?}");
        assert!(shown.contains("owner: Some(\"ctrl\")"), "{shown}");
        assert!(shown.contains("labels: {}"), "{shown}");
    }
}
