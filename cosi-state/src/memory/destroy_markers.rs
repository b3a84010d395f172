//! Destroy markers: a bounded record of recent destructions of one kind, so that a watcher that
//! fell behind the history window can still learn which resources it knew are gone.
//!
//! Markers are kept in destruction order, at most `capacity` of them. Beyond the newest `min`,
//! a marker is kept only while a live watcher may still need it: one whose position is before
//! the destruction (it could fall behind the window and need a catch-up across it). Markers no
//! live watcher needs are only of use to a watch resumed from an old bookmark, which then gets a
//! resync instead of a catch-up; dropping them frees the last states they hold. When a marker is
//! evicted the set remembers up to which sequence number its record is incomplete.

use std::collections::VecDeque;

use cosi_core::SharedResource;

use super::cursors::Cursors;

/// One destruction: when it happened, when that incarnation was created, and its last state.
#[derive(Clone, Debug)]
pub(crate) struct DestroyMarker {
    /// Sequence number of the destroy.
    pub(crate) destroyed: u64,
    /// Sequence number of the create of the incarnation destroyed.
    pub(crate) created: u64,
    /// The last state.
    pub(crate) resource: SharedResource,
}

/// The bounded set of markers.
#[derive(Debug)]
pub(crate) struct DestroyMarkers {
    markers: VecDeque<DestroyMarker>,
    capacity: usize,
    /// Markers kept whether or not a live watcher needs them.
    min: usize,
    /// Every destruction after this sequence number has a marker.
    complete_after: u64,
}

impl DestroyMarkers {
    /// An empty set of at most `capacity` markers, keeping the newest `min` (at most
    /// `capacity`) even when no watcher needs them, complete for destructions after `head`.
    pub(crate) fn new(capacity: usize, min: usize, head: u64) -> Self {
        DestroyMarkers {
            markers: VecDeque::new(),
            capacity,
            min: min.min(capacity),
            complete_after: head,
        }
    }

    /// Records a destruction (in sequence order), then evicts the oldest markers beyond the
    /// capacity, and beyond `min` those no live watcher needs (`cursors`' bound: no watcher is
    /// before it).
    pub(crate) fn record(&mut self, marker: DestroyMarker, cursors: &mut Cursors) {
        if self.capacity == 0 {
            self.complete_after = marker.destroyed;
            return;
        }
        self.markers.push_back(marker);
        let bound = cursors.bound();
        while let Some(oldest) = self.markers.front() {
            let unneeded = self.markers.len() > self.min && oldest.destroyed <= bound;
            if self.markers.len() <= self.capacity && !unneeded {
                break;
            }
            self.complete_after = oldest.destroyed;
            self.markers.pop_front();
        }
        if self.markers.capacity() > 4 * self.markers.len().max(self.min) {
            self.markers.shrink_to(2 * self.markers.len().max(self.min));
        }
    }

    /// Whether every destruction after `position` is still recorded.
    pub(crate) fn complete_since(&self, position: u64) -> bool {
        position >= self.complete_after
    }

    /// The markers of destructions after `position`, oldest first.
    pub(crate) fn after(&self, position: u64) -> impl Iterator<Item = &DestroyMarker> {
        let start = self.markers.partition_point(|m| m.destroyed <= position);
        self.markers.range(start..)
    }

    /// How many markers are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.markers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{DynamicResource, Metadata, Pointer};
    use std::sync::Arc;

    fn marker(destroyed: u64) -> DestroyMarker {
        DestroyMarker {
            destroyed,
            created: destroyed - 1,
            resource: Arc::new(DynamicResource {
                metadata: Metadata::new(Pointer::new("ns", "T.test.cosi.dev", "x")),
                spec: serde_json::Value::Null,
            }),
        }
    }

    #[test]
    fn eviction_makes_older_positions_incomplete() {
        let mut markers = DestroyMarkers::new(2, 2, 0);
        let mut cursors = Cursors::new();
        let _watcher = cursors.register(0);
        for seq in [2, 4, 6] {
            markers.record(marker(seq), &mut cursors);
        }
        assert_eq!(markers.len(), 2);
        assert!(!markers.complete_since(1));
        assert!(markers.complete_since(2));
        let after: Vec<u64> = markers.after(3).map(|m| m.destroyed).collect();
        assert_eq!(after, vec![4, 6]);
    }

    #[test]
    fn markers_a_live_watcher_may_need_are_kept_up_to_the_capacity() {
        let mut markers = DestroyMarkers::new(100, 2, 0);
        let mut cursors = Cursors::new();
        let _watcher = cursors.register(3);
        for seq in 1..=10 {
            markers.record(marker(seq), &mut cursors);
        }
        assert_eq!(
            markers.len(),
            7,
            "the destructions after the watcher's position"
        );
        assert!(markers.complete_since(3));
        assert!(!markers.complete_since(2));
    }

    #[test]
    fn without_watchers_only_the_newest_markers_are_kept() {
        let mut markers = DestroyMarkers::new(100, 2, 0);
        let mut cursors = Cursors::new();
        for seq in 1..=10 {
            markers.record(marker(seq), &mut cursors);
        }
        assert_eq!(markers.len(), 2);
        assert!(markers.complete_since(8));
        assert!(!markers.complete_since(7));
    }
}
