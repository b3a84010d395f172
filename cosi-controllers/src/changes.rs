//! What changed between two reconciles of a level-triggered controller that asked to know
//! ([`crate::Controller::track_input_changes`]): the [`ChangeLog`] the runner fills from the
//! controller's input events, and the [`InputChanges`] a reconcile reads through
//! [`crate::ControllerState::input_changes`].
//!
//! The log is a hint with a guarantee: when it says what changed, nothing else changed since the
//! previous reconcile started; when it cannot say (the first reconcile, a resync, a failed
//! reconcile, more changes than it keeps), it says so and the controller reads everything. It
//! keeps at most [`ChangeLog::CAPACITY`] events, so its memory is bounded whatever the rate of
//! changes. Recording an event is an append (the feed that delivers events to every controller
//! must stay cheap); the events are reduced to one per resource when a reconcile takes them.

use std::sync::Mutex;

use cosi_core::{Pointer, SharedResource};

/// The latest state of one changed input resource.
#[derive(Clone, Debug)]
pub struct InputChange {
    resource: SharedResource,
    destroyed: bool,
}

impl InputChange {
    /// The resource as the latest event carried it (its last state, if it was destroyed).
    pub fn resource(&self) -> &SharedResource {
        &self.resource
    }

    /// Whether the latest event was its destruction.
    pub fn is_destroyed(&self) -> bool {
        self.destroyed
    }
}

/// The input resources that changed since the previous reconcile started, each with its latest
/// state. Built by the runtime; read through [`crate::ControllerState::input_changes`].
#[derive(Clone, Debug, Default)]
pub struct InputChanges {
    /// Sorted by pointer, one entry per resource.
    changes: Vec<(Pointer, InputChange)>,
}

impl InputChanges {
    /// The latest change of each resource among `events` (in the order they happened).
    fn reduce(events: Vec<(Pointer, InputChange)>) -> Self {
        let mut changes = events;
        // Stable: among the events of one resource, the latest stays last.
        changes.sort_by(|(a, _), (b, _)| a.cmp(b));
        let mut latest: Vec<(Pointer, InputChange)> = Vec::with_capacity(changes.len());
        for (pointer, change) in changes {
            match latest.last_mut() {
                Some((last, entry)) if *last == pointer => *entry = change,
                _ => latest.push((pointer, change)),
            }
        }
        InputChanges { changes: latest }
    }

    /// How many resources changed.
    pub fn len(&self) -> usize {
        self.changes.len()
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The changed resources, ordered by pointer (kind, then id).
    pub fn iter(&self) -> impl Iterator<Item = (&Pointer, &InputChange)> {
        self.changes
            .iter()
            .map(|(pointer, change)| (pointer, change))
    }

    /// The change of one resource, if it changed.
    pub fn get(&self, pointer: &Pointer) -> Option<&InputChange> {
        self.changes
            .binary_search_by(|(p, _)| p.cmp(pointer))
            .ok()
            .map(|at| &self.changes[at].1)
    }
}

/// The recording side, owned by a level-triggered controller's scheduling state.
#[derive(Debug)]
pub(crate) struct ChangeLog {
    enabled: bool,
    /// The events since the last take, in order; `None`: not known.
    recorded: Mutex<Option<Vec<(Pointer, InputChange)>>>,
}

impl ChangeLog {
    /// Most events the log keeps before it gives up and reports "unknown": as many as a kind's
    /// default history window holds. Past it, reading every input costs little more per
    /// changed resource than reading the changed ones.
    pub(crate) const CAPACITY: usize = 4096;

    /// A log that records only when `enabled`. It starts unknown: the first reconcile reads
    /// everything.
    pub(crate) fn new(enabled: bool) -> Self {
        ChangeLog {
            enabled,
            recorded: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<(Pointer, InputChange)>>> {
        self.recorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the state of a changed input resource.
    pub(crate) fn record(&self, resource: &SharedResource, destroyed: bool) {
        if !self.enabled {
            return;
        }
        let mut recorded = self.lock();
        let Some(events) = recorded.as_mut() else {
            return;
        };
        if events.len() >= Self::CAPACITY {
            // Full: from here on nothing is known, and the entries are freed.
            *recorded = None;
            return;
        }
        let change = InputChange {
            resource: resource.clone(),
            destroyed,
        };
        events.push((resource.metadata().pointer().clone(), change));
    }

    /// Changes may have been missed: the next reconcile reads everything.
    pub(crate) fn forget(&self) {
        if self.enabled {
            *self.lock() = None;
        }
    }

    /// What was recorded since the previous take (`None` if unknown or not enabled), starting
    /// a fresh record.
    pub(crate) fn take(&self) -> Option<InputChanges> {
        if !self.enabled {
            return None;
        }
        let events = self.lock().replace(Vec::new())?;
        Some(InputChanges::reduce(events))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cosi_core::{Resource, ResourceSpec, Version};
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
    struct Thing;

    impl ResourceSpec for Thing {
        const TYPE: &'static str = "Things.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }

    fn resource(id: &str, version: u64) -> SharedResource {
        let mut thing = Resource::new(id, Thing);
        thing.metadata.set_version(Version::new(version));
        Arc::new(thing)
    }

    fn versions(changes: &InputChanges) -> Vec<(String, u64, bool)> {
        changes
            .iter()
            .map(|(p, c)| {
                (
                    p.id().to_string(),
                    c.resource().metadata().version().get(),
                    c.is_destroyed(),
                )
            })
            .collect()
    }

    #[test]
    fn the_first_take_is_unknown_and_later_takes_hold_the_latest_state_per_resource() {
        let log = ChangeLog::new(true);
        log.record(&resource("a", 1), false);
        assert!(
            log.take().is_none(),
            "nothing is known before the first take"
        );
        log.record(&resource("a", 2), false);
        log.record(&resource("b", 1), false);
        log.record(&resource("a", 3), true);
        let changes = log.take().unwrap();
        assert_eq!(
            versions(&changes),
            [("a".into(), 3, true), ("b".into(), 1, false)]
        );
        assert!(log.take().unwrap().is_empty());
    }

    #[test]
    fn forgetting_makes_the_next_take_unknown() {
        let log = ChangeLog::new(true);
        log.take();
        log.record(&resource("a", 1), false);
        log.forget();
        log.record(&resource("b", 1), false);
        assert!(log.take().is_none());
        assert!(log.take().is_some());
    }

    #[test]
    fn more_events_than_the_capacity_make_the_take_unknown() {
        let log = ChangeLog::new(true);
        log.take();
        for i in 0..ChangeLog::CAPACITY {
            log.record(&resource(&format!("r{}", i % 10), i as u64), false);
        }
        let changes = log.take().unwrap();
        assert_eq!(changes.len(), 10);
        // r3's latest event: the last i below 4,096 with i % 10 == 3.
        let r3 = resource("r3", 0).metadata().pointer().clone();
        let latest = changes
            .get(&r3)
            .map(|c| c.resource().metadata().version().get());
        assert_eq!(latest, Some(4093));
        for i in 0..=ChangeLog::CAPACITY {
            log.record(&resource("r0", i as u64), false);
        }
        assert!(log.take().is_none());
    }

    #[test]
    fn a_disabled_log_records_nothing_and_is_always_unknown() {
        let log = ChangeLog::new(false);
        log.take();
        log.record(&resource("a", 1), false);
        assert!(log.take().is_none());
    }
}
