//! Destroy markers: a bounded record of recent destructions of one kind, so that a watcher that
//! fell behind the history window can still learn which resources it knew are gone.
//!
//! Markers are kept in destruction order; when the set is full the oldest is evicted and the
//! set remembers up to which sequence number its record is incomplete.

use std::collections::VecDeque;

use cosi_core::SharedResource;

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
    /// Every destruction after this sequence number has a marker.
    complete_after: u64,
}

impl DestroyMarkers {
    /// An empty set, complete for destructions after `head`.
    pub(crate) fn new(capacity: usize, head: u64) -> Self {
        DestroyMarkers {
            markers: VecDeque::new(),
            capacity,
            complete_after: head,
        }
    }

    /// Records a destruction (in sequence order), evicting the oldest marker when full.
    pub(crate) fn record(&mut self, marker: DestroyMarker) {
        if self.capacity == 0 {
            self.complete_after = marker.destroyed;
            return;
        }
        if self.markers.len() == self.capacity {
            if let Some(evicted) = self.markers.pop_front() {
                self.complete_after = evicted.destroyed;
            }
        }
        self.markers.push_back(marker);
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
        let mut markers = DestroyMarkers::new(2, 0);
        for seq in [2, 4, 6] {
            markers.record(marker(seq));
        }
        assert_eq!(markers.len(), 2);
        assert!(!markers.complete_since(1));
        assert!(markers.complete_since(2));
        let after: Vec<u64> = markers.after(3).map(|m| m.destroyed).collect();
        assert_eq!(after, vec![4, 6]);
    }
}
