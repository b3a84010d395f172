//! [`InputChanges`]: the inputs of a level-triggered controller that changed since its last
//! reconcile, for a controller that asks ([`crate::Transform`]): with them it converges only
//! what changed, instead of listing every input and output on every reconcile.
//!
//! The feed records each change it delivers (the resource's pointer) once the controller has
//! asked for them the first time; a resync, a controller failure or more pending pointers than
//! the controller's limit (at most [`MAX_POINTERS`]) turn the record into "everything", which
//! the controller answers with a full pass. The controller sets the limit when it takes the
//! record: beyond the number of changes it would converge one by one, recording more is wasted.
//! The record is taken at the start of a reconcile, before the reconcile reads the state: a
//! change stored after that is recorded for the next reconcile (and wakes it), so no change is
//! missed; one already visible to this reconcile is seen twice, which a controller that
//! converges (compares before it writes) takes in its stride.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cosi_core::Pointer;

/// Pending pointers beyond which the record becomes "everything" (a full pass costs about as
/// much then, and the record stays bounded).
pub(crate) const MAX_POINTERS: usize = 16_384;

/// What changed since the record was last taken.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Changed {
    /// Unknown or too much: look at everything.
    Everything,
    /// These resources (of any input kind), in no particular order.
    These(Vec<Pointer>),
}

/// The change record of one level-triggered controller.
#[derive(Debug, Default)]
pub(crate) struct InputChanges {
    /// Set by the first [`InputChanges::take`]: controllers that never ask cost nothing.
    recording: AtomicBool,
    pending: Mutex<Pending>,
}

#[derive(Debug)]
struct Pending {
    everything: bool,
    pointers: foldhash::HashSet<Pointer>,
    /// Distinct pointers beyond which the record is "everything" (at most [`MAX_POINTERS`]).
    limit: usize,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            everything: false,
            pointers: foldhash::HashSet::default(),
            limit: MAX_POINTERS,
        }
    }
}

impl InputChanges {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        // Every critical section leaves a consistent record.
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A delivered change of the resource at `pointer`.
    pub(crate) fn record(&self, pointer: &Pointer) {
        if !self.recording.load(Ordering::Acquire) {
            return;
        }
        let mut pending = self.pending();
        if pending.everything {
            return;
        }
        if pending.pointers.len() >= pending.limit && !pending.pointers.contains(pointer) {
            pending.everything = true;
            pending.pointers = foldhash::HashSet::default();
            return;
        }
        pending.pointers.insert(pointer.clone());
    }

    /// Changes may have been missed (a resync, a failed reconcile): the next take is
    /// "everything".
    pub(crate) fn everything(&self) {
        let mut pending = self.pending();
        pending.everything = true;
        pending.pointers = foldhash::HashSet::default();
    }

    /// What changed since the last take; the first take is "everything" (nothing was recorded
    /// before it) and starts the recording.
    #[cfg(test)]
    pub(crate) fn take(&self) -> Changed {
        self.take_up_to(MAX_POINTERS)
    }

    /// [`InputChanges::take`], recording from now on at most `limit` distinct pointers (and at
    /// most [`MAX_POINTERS`]) before the record becomes "everything": a controller that answers
    /// more changes than that with a full pass has no use for them.
    pub(crate) fn take_up_to(&self, limit: usize) -> Changed {
        let was_recording = self.recording.swap(true, Ordering::AcqRel);
        let mut pending = self.pending();
        pending.limit = limit.min(MAX_POINTERS);
        let everything = std::mem::take(&mut pending.everything) || !was_recording;
        let pointers = std::mem::take(&mut pending.pointers);
        if everything {
            Changed::Everything
        } else {
            Changed::These(pointers.into_iter().collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(id: &str) -> Pointer {
        Pointer::new("ns", "Things.test.cosi.dev", id)
    }

    fn sorted(changed: Changed) -> Vec<String> {
        let Changed::These(pointers) = changed else {
            panic!("expected pointers, got {changed:?}")
        };
        let mut ids: Vec<String> = pointers.iter().map(|p| p.id().to_string()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn nothing_is_recorded_before_the_first_take_which_is_everything() {
        let changes = InputChanges::default();
        changes.record(&pointer("a"));
        assert_eq!(changes.take(), Changed::Everything);
        assert_eq!(changes.take(), Changed::These(Vec::new()));
    }

    #[test]
    fn changes_after_a_take_are_the_next_takes_once_each() {
        let changes = InputChanges::default();
        changes.take();
        changes.record(&pointer("b"));
        changes.record(&pointer("a"));
        changes.record(&pointer("b"));
        assert_eq!(sorted(changes.take()), ["a", "b"]);
        assert_eq!(changes.take(), Changed::These(Vec::new()));
    }

    #[test]
    fn a_resync_or_failure_makes_the_next_take_everything_then_recording_goes_on() {
        let changes = InputChanges::default();
        changes.take();
        changes.record(&pointer("a"));
        changes.everything();
        changes.record(&pointer("b"));
        assert_eq!(changes.take(), Changed::Everything);
        changes.record(&pointer("c"));
        assert_eq!(sorted(changes.take()), ["c"]);
    }

    #[test]
    fn more_distinct_pointers_than_the_takers_limit_are_everything() {
        let changes = InputChanges::default();
        changes.take_up_to(2);
        changes.record(&pointer("a"));
        changes.record(&pointer("b"));
        // A pointer already recorded does not count again.
        changes.record(&pointer("a"));
        assert_eq!(sorted(changes.take_up_to(2)), ["a", "b"]);
        for id in ["a", "b", "c"] {
            changes.record(&pointer(id));
        }
        assert_eq!(changes.take_up_to(2), Changed::Everything);
        // The limit is the last taker's, and never above the bound.
        changes.record(&pointer("d"));
        assert_eq!(sorted(changes.take_up_to(usize::MAX)), ["d"]);
    }

    #[test]
    fn more_pending_pointers_than_the_bound_are_everything() {
        let changes = InputChanges::default();
        changes.take();
        for i in 0..=MAX_POINTERS {
            changes.record(&pointer(&format!("{i}")));
        }
        assert_eq!(changes.take(), Changed::Everything);
        assert_eq!(changes.take(), Changed::These(Vec::new()));
    }
}
