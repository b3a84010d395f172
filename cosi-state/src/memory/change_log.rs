//! [`ChangeLog`]: the ids of one kind's latest changes in order, so that a watcher that fell a
//! little behind the history window finds what changed since its position without scanning
//! every live resource.
//!
//! A catch-up can find the live resources changed since its position two ways: scan every live
//! resource in id order, O(live), or take the ids changed since then from this log, sort them
//! and look each up, O(changes · log live). A looked-up change costs about as much as scanning
//! [`SCAN_RATIO`] live entries (measured with the `catch_up` bench: break-even at 30 on 100k–150k
//! resources), so the log only pays when it covers at most `live / SCAN_RATIO` changes — and
//! that is all it keeps. Older entries are dropped as new ones arrive, and the log remembers up
//! to which sequence number it is incomplete; a catch-up from before that scans. So writes only
//! append and drop (no search, no rebuild), and the log holds at most one entry per
//! [`SCAN_RATIO`] live resources. It owns no resource values, only shared ids. Nothing here
//! knows about watchers or events.

use std::collections::VecDeque;
use std::sync::Arc;

use super::id_map::IdKey;

/// How many live entries a catch-up may scan for the cost of one change taken from the log.
pub(crate) const SCAN_RATIO: usize = 32;

/// The ids of the latest changes, oldest first.
#[derive(Debug)]
pub(crate) struct ChangeLog {
    /// `(sequence number, id)` with non-decreasing sequence numbers (equal only for resources
    /// loaded at one head, see [`KindContents::load`](super::KindContents::load)). An entry is
    /// stale once its resource changed again or was destroyed; readers check.
    entries: VecDeque<(u64, IdKey)>,
    /// Every change after this sequence number has an entry.
    complete_after: u64,
    /// Live resources per entry kept: [`SCAN_RATIO`] except in tests.
    scan_ratio: usize,
}

impl ChangeLog {
    /// An empty log, complete for changes after `head`, keeping one entry per `scan_ratio`
    /// (at least 1) live resources: [`SCAN_RATIO`], or less in tests so that small kinds
    /// exercise the log.
    pub(crate) fn new(head: u64, scan_ratio: usize) -> Self {
        ChangeLog {
            entries: VecDeque::new(),
            complete_after: head,
            scan_ratio: scan_ratio.max(1),
        }
    }

    /// How many entries the log holds, stale ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records the change of `id` at `seq`, which must be at least every sequence number
    /// already recorded (changes are recorded in the kind's order), then drops the oldest
    /// entries beyond what a kind of `live` resources keeps.
    pub(crate) fn record(&mut self, seq: u64, id: Arc<str>, live: usize) {
        debug_assert!(seq >= self.complete_after);
        debug_assert!(self.entries.back().is_none_or(|(last, _)| *last <= seq));
        if live / self.scan_ratio == 0 {
            // Too few resources for the log to beat a scan: keep nothing, not even this entry.
            self.entries.clear();
            self.complete_after = seq;
            return;
        }
        self.entries.push_back((seq, IdKey::new(id)));
        self.shrink(live);
    }

    /// Drops the oldest entries beyond what a kind of `live` resources keeps.
    pub(crate) fn shrink(&mut self, live: usize) {
        let keep = live / self.scan_ratio;
        while self.entries.len() > keep {
            if let Some((seq, _)) = self.entries.pop_front() {
                self.complete_after = seq;
            }
        }
    }

    /// The entries of changes after `position`, oldest first (stale ones included), or `None`
    /// when some of them were already dropped.
    pub(crate) fn after(&self, position: u64) -> Option<impl Iterator<Item = &IdKey>> {
        if position < self.complete_after {
            return None;
        }
        let start = self.entries.partition_point(|(seq, _)| *seq <= position);
        Some(self.entries.range(start..).map(|(_, id)| id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Enough live resources for the log to keep `entries` entries.
    fn live_for(entries: usize) -> usize {
        entries * SCAN_RATIO
    }

    fn ids_after(log: &ChangeLog, position: u64) -> Option<Vec<&str>> {
        log.after(position)
            .map(|ids| ids.map(IdKey::as_str).collect())
    }

    #[test]
    fn after_lists_exactly_the_ids_changed_later_in_change_order() {
        let mut log = ChangeLog::new(0, SCAN_RATIO);
        for (seq, id) in [(1, "b"), (2, "a"), (4, "b"), (7, "c")] {
            log.record(seq, Arc::from(id), live_for(10));
        }
        assert_eq!(ids_after(&log, 0), Some(vec!["b", "a", "b", "c"]));
        assert_eq!(ids_after(&log, 2), Some(vec!["b", "c"]));
        assert_eq!(ids_after(&log, 3), Some(vec!["b", "c"]));
        assert_eq!(ids_after(&log, 7), Some(vec![]));
    }

    #[test]
    fn the_log_keeps_one_entry_per_scan_ratio_live_resources() {
        let mut log = ChangeLog::new(0, SCAN_RATIO);
        for seq in 1..=100 {
            log.record(seq, Arc::from("a"), live_for(3));
        }
        assert_eq!(log.len(), 3);
        assert_eq!(ids_after(&log, 97), Some(vec!["a", "a", "a"]));
    }

    #[test]
    fn positions_before_dropped_entries_are_not_covered() {
        let mut log = ChangeLog::new(0, SCAN_RATIO);
        for seq in 1..=5 {
            log.record(seq, Arc::from("a"), live_for(2));
        }
        assert!(log.after(2).is_none());
        assert_eq!(ids_after(&log, 3), Some(vec!["a", "a"]));
    }

    #[test]
    fn a_kind_too_small_to_beat_a_scan_keeps_no_entries() {
        let mut log = ChangeLog::new(0, SCAN_RATIO);
        log.record(1, Arc::from("a"), SCAN_RATIO - 1);
        assert_eq!(log.len(), 0);
        assert!(log.after(0).is_none());
        assert_eq!(ids_after(&log, 1), Some(vec![]));
    }

    #[test]
    fn shrinking_the_live_count_drops_the_oldest_entries() {
        let mut log = ChangeLog::new(0, SCAN_RATIO);
        for seq in 1..=4 {
            log.record(seq, Arc::from("a"), live_for(4));
        }
        log.shrink(live_for(1));
        assert_eq!(log.len(), 1);
        assert!(log.after(2).is_none());
        assert_eq!(ids_after(&log, 3), Some(vec!["a"]));
    }

    #[test]
    fn a_log_resumed_at_a_head_covers_nothing_before_it() {
        let log = ChangeLog::new(10, SCAN_RATIO);
        assert!(log.after(9).is_none());
        assert_eq!(ids_after(&log, 10), Some(vec![]));
    }
}
