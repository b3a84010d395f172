//! The exact history window of one kind: the last changes in order, each with its sequence
//! number. Watchers read it through their cursor; nothing here knows about watchers.

use std::collections::VecDeque;

use cosi_core::SharedResource;

/// What a change did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ChangeOp {
    /// The resource was created.
    Created,
    /// The resource was updated; [`Change::old`] holds the previous state.
    Updated,
    /// The resource was destroyed; [`Change::resource`] holds its last state.
    Destroyed,
}

/// One change in a kind's total order.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    /// Position in the kind's order (the event's bookmark).
    pub(crate) seq: u64,
    /// What happened.
    pub(crate) op: ChangeOp,
    /// The new state, or the last state for a destroy.
    pub(crate) resource: SharedResource,
    /// The previous state of an update.
    pub(crate) old: Option<SharedResource>,
}

/// A ring of the last `capacity` changes and the sequence number of the latest one.
#[derive(Debug)]
pub(crate) struct HistoryWindow {
    changes: VecDeque<Change>,
    capacity: usize,
    head: u64,
}

impl HistoryWindow {
    /// An empty window whose next change gets sequence `head + 1`.
    pub(crate) fn new(capacity: usize, head: u64) -> Self {
        HistoryWindow {
            changes: VecDeque::new(),
            capacity: capacity.max(1),
            head,
        }
    }

    /// The sequence number of the latest change (0 before the first one).
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// How many changes the window holds.
    pub(crate) fn len(&self) -> usize {
        self.changes.len()
    }

    /// Appends a change, evicting the oldest one when full; returns its sequence number.
    pub(crate) fn push(
        &mut self,
        op: ChangeOp,
        resource: SharedResource,
        old: Option<SharedResource>,
    ) -> u64 {
        self.head += 1;
        if self.changes.len() == self.capacity {
            self.changes.pop_front();
        }
        self.changes.push_back(Change {
            seq: self.head,
            op,
            resource,
            old,
        });
        self.head
    }

    /// The changes after `position`, in order, or `None` when some of them were already evicted
    /// (the reader fell behind the window).
    pub(crate) fn after(&self, position: u64) -> Option<impl Iterator<Item = &Change>> {
        let oldest = self.head - self.changes.len() as u64;
        if position < oldest {
            return None;
        }
        // `position <= head` for every cursor (watches start at or before head), so the
        // subtraction cannot underflow and the index is within the window.
        let skip = (position - oldest) as usize;
        Some(self.changes.range(skip.min(self.changes.len())..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{DynamicResource, Metadata, Pointer};
    use std::sync::Arc;

    fn value(id: &str) -> SharedResource {
        Arc::new(DynamicResource {
            metadata: Metadata::new(Pointer::new("ns", "T.test.cosi.dev", id)),
            spec: serde_json::Value::Null,
        })
    }

    fn seqs(window: &HistoryWindow, position: u64) -> Option<Vec<u64>> {
        window.after(position).map(|it| it.map(|c| c.seq).collect())
    }

    #[test]
    fn readers_within_the_window_see_every_later_change() {
        let mut window = HistoryWindow::new(3, 0);
        for id in ["a", "b", "c", "d", "e"] {
            window.push(ChangeOp::Created, value(id), None);
        }
        assert_eq!(window.head(), 5);
        assert_eq!(seqs(&window, 2), Some(vec![3, 4, 5]));
        assert_eq!(seqs(&window, 4), Some(vec![5]));
        assert_eq!(seqs(&window, 5), Some(vec![]));
    }

    #[test]
    fn readers_behind_the_window_are_told_so() {
        let mut window = HistoryWindow::new(3, 0);
        for id in ["a", "b", "c", "d", "e"] {
            window.push(ChangeOp::Created, value(id), None);
        }
        assert_eq!(seqs(&window, 1), None);
    }

    #[test]
    fn a_window_resumed_at_a_head_knows_nothing_before_it() {
        let window = HistoryWindow::new(3, 10);
        assert_eq!(seqs(&window, 10), Some(vec![]));
        assert_eq!(seqs(&window, 9), None);
    }
}
