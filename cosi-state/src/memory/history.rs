//! The exact history window of one kind: the last changes in order, each with its sequence
//! number, sized by demand.
//!
//! The window holds at least `min` changes and at most `limit`. In between, it keeps what live
//! watchers still need: when it is full and its oldest change is one some watcher has not read
//! yet, it doubles (up to `limit`) instead of evicting; and every [`SHRINK_CHECK`] evictions it
//! halves while fewer than a quarter of its changes are still unread by someone (down to
//! `min`), returning the memory and the old values it held. So a kind whose watchers keep up
//! holds a few changes however busy it is, and one with a lagging watcher holds up to `limit`
//! for as long as the lag lasts. A watcher within `limit` changes of the head therefore still
//! gets every event exactly; only positions no live watcher holds (`tail`, a resume after a
//! bookmark) see the smaller window.
//!
//! Nothing here knows about watchers beyond the positions [`Cursors`] reports.

use std::collections::VecDeque;

use cosi_core::{Bookmark, Event, SharedResource};

use super::cursors::Cursors;

/// Evictions between two checks whether the window can shrink (each check reads every cursor).
const SHRINK_CHECK: usize = 64;

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

impl Change {
    /// The event of this change for a watcher without filters, in the store named `origin`.
    pub(crate) fn event(&self, origin: u64) -> Event {
        let bookmark = Bookmark::at(origin, self.seq);
        let resource = self.resource.clone();
        match self.op {
            ChangeOp::Created => Event::Created {
                resource,
                bookmark,
                compacted: false,
            },
            ChangeOp::Updated => Event::Updated {
                old: self.old.clone(),
                resource,
                bookmark,
                compacted: false,
            },
            ChangeOp::Destroyed => Event::Destroyed {
                resource,
                bookmark,
                compacted: false,
            },
        }
    }
}

/// The last changes of a kind and the sequence number of the latest one.
#[derive(Debug)]
pub(crate) struct HistoryWindow {
    changes: VecDeque<Change>,
    /// How many changes it holds before it evicts or grows: between `min` and `limit`.
    capacity: usize,
    min: usize,
    limit: usize,
    head: u64,
    /// Evictions since the last shrink check.
    evictions: usize,
}

impl HistoryWindow {
    /// An empty window of at most `limit` changes (at least 1) whose next change gets sequence
    /// `head + 1`; it starts at, and shrinks back to, `min` changes (at most `limit`).
    pub(crate) fn new(min: usize, limit: usize, head: u64) -> Self {
        let limit = limit.max(1);
        let min = min.clamp(1, limit);
        HistoryWindow {
            changes: VecDeque::new(),
            capacity: min,
            min,
            limit,
            head,
            evictions: 0,
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

    /// How many changes it holds before it evicts or grows.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The sequence number of the oldest change held (`head + 1` when empty).
    pub(crate) fn oldest(&self) -> u64 {
        self.head + 1 - self.changes.len() as u64
    }

    /// Appends a change, first evicting the oldest one or growing when full (see the module
    /// docs); returns its sequence number.
    pub(crate) fn push(
        &mut self,
        op: ChangeOp,
        resource: SharedResource,
        old: Option<SharedResource>,
        cursors: &mut Cursors,
    ) -> u64 {
        if self.changes.len() >= self.capacity {
            self.make_room(cursors);
        }
        self.head += 1;
        self.changes.push_back(Change {
            seq: self.head,
            op,
            resource,
            old,
        });
        self.head
    }

    /// Makes room for one more change in a full window.
    fn make_room(&mut self, cursors: &mut Cursors) {
        // A watcher at position p has not read the changes after p: the oldest is still needed
        // if some watcher is before it. The cached bound settles most writes; only a bound
        // saying "needed" is worth a refresh.
        let oldest = self.oldest();
        if self.capacity < self.limit && cursors.bound() < oldest && cursors.refresh() < oldest {
            self.capacity = self.capacity.saturating_mul(2).min(self.limit);
            return;
        }
        self.changes.pop_front();
        self.evictions += 1;
        if self.evictions >= SHRINK_CHECK {
            self.evictions = 0;
            // Refreshed even when the window cannot shrink: the destroy markers evict by this
            // bound too, and in a window that never resizes nothing else would forget an
            // ended watch's position.
            let bound = cursors.refresh();
            if self.capacity > self.min {
                self.shrink(bound);
            }
        }
    }

    /// Halves the window while a quarter of it would still cover what the slowest watcher (at
    /// `bound`) has not read, then lets go of the changes beyond the new size.
    fn shrink(&mut self, bound: u64) {
        let unread = self.head.saturating_sub(bound);
        let before = self.capacity;
        while self.capacity > self.min && unread.saturating_mul(4) <= self.capacity as u64 {
            self.capacity = (self.capacity / 2).max(self.min);
        }
        if self.capacity == before {
            return;
        }
        // Room for the change about to be pushed: len < capacity.
        let keep = self.capacity - 1;
        let evict = self.changes.len().saturating_sub(keep);
        self.changes.drain(..evict);
        self.changes.shrink_to(self.capacity);
    }

    /// The changes after `position`, in order, or `None` when some of them were already evicted
    /// (the reader fell behind the window).
    pub(crate) fn after(&self, position: u64) -> Option<impl ExactSizeIterator<Item = &Change>> {
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

    fn push(window: &mut HistoryWindow, cursors: &mut Cursors, count: usize) {
        for _ in 0..count {
            window.push(ChangeOp::Created, value("x"), None, cursors);
        }
    }

    #[test]
    fn readers_within_the_window_see_every_later_change() {
        let mut window = HistoryWindow::new(3, 3, 0);
        let mut cursors = Cursors::new();
        push(&mut window, &mut cursors, 5);
        assert_eq!(window.head(), 5);
        assert_eq!(seqs(&window, 2), Some(vec![3, 4, 5]));
        assert_eq!(seqs(&window, 4), Some(vec![5]));
        assert_eq!(seqs(&window, 5), Some(vec![]));
    }

    #[test]
    fn readers_behind_the_window_are_told_so() {
        let mut window = HistoryWindow::new(3, 3, 0);
        push(&mut window, &mut Cursors::new(), 5);
        assert_eq!(seqs(&window, 1), None);
    }

    #[test]
    fn a_window_resumed_at_a_head_knows_nothing_before_it() {
        let window = HistoryWindow::new(3, 3, 10);
        assert_eq!(seqs(&window, 10), Some(vec![]));
        assert_eq!(seqs(&window, 9), None);
    }

    #[test]
    fn without_watchers_the_window_keeps_its_minimum() {
        let mut window = HistoryWindow::new(4, 1024, 0);
        push(&mut window, &mut Cursors::new(), 1000);
        assert_eq!((window.len(), window.capacity()), (4, 4));
        assert_eq!(seqs(&window, 996), Some(vec![997, 998, 999, 1000]));
    }

    #[test]
    fn the_window_grows_to_keep_what_a_watcher_has_not_read() {
        let mut window = HistoryWindow::new(4, 1024, 0);
        let mut cursors = Cursors::new();
        let watcher = cursors.register(0);
        push(&mut window, &mut cursors, 100);
        assert_eq!(window.capacity(), 128);
        assert_eq!(seqs(&window, 0).map(|s| s.len()), Some(100));
        drop(watcher);
    }

    #[test]
    fn the_window_never_grows_past_its_limit() {
        let mut window = HistoryWindow::new(4, 16, 0);
        let mut cursors = Cursors::new();
        let _watcher = cursors.register(0);
        push(&mut window, &mut cursors, 100);
        assert_eq!((window.len(), window.capacity()), (16, 16));
        assert_eq!(seqs(&window, 0), None);
        assert_eq!(seqs(&window, 84).map(|s| s.len()), Some(16));
    }

    #[test]
    fn the_window_shrinks_once_its_watchers_have_caught_up() {
        let mut window = HistoryWindow::new(4, 1024, 0);
        let mut cursors = Cursors::new();
        let watcher = cursors.register(0);
        push(&mut window, &mut cursors, 500);
        assert_eq!(window.capacity(), 512);
        watcher.advance(window.head());
        // Shrinking is checked every SHRINK_CHECK evictions, which start once it is full.
        push(&mut window, &mut cursors, 12 + SHRINK_CHECK - 1);
        assert_eq!(window.capacity(), 512);
        watcher.advance(window.head());
        push(&mut window, &mut cursors, 1);
        assert_eq!((window.len(), window.capacity()), (4, 4));
        assert!(window.changes.capacity() < 64, "the memory is returned");
    }

    #[test]
    fn a_shrinking_window_keeps_every_change_a_slow_watcher_has_not_read() {
        let mut window = HistoryWindow::new(4, 1024, 0);
        let mut cursors = Cursors::new();
        let slow = cursors.register(0);
        push(&mut window, &mut cursors, 1000);
        slow.advance(980);
        // 24 pushes fill the window to its limit, then the 64th eviction checks: 107 unread
        // changes fit in a quarter of 512, not of 256.
        push(&mut window, &mut cursors, 24 + SHRINK_CHECK);
        assert_eq!(window.capacity(), 256);
        assert_eq!(
            seqs(&window, 980),
            Some((981..=window.head()).collect::<Vec<_>>())
        );
    }
}
