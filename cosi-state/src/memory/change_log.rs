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
//! [`SCAN_RATIO`] live resources. It owns no resource values, only ids: copied inline when
//! short (as ids are), so that dropping an entry touches nothing outside the log — sharing the
//! id instead would cost a cache miss on its reference count per write, as the entry dropped
//! was written tens of thousands of writes earlier.
//!
//! A catch-up only happens from a position older than the history window, so a log that keeps
//! no more changes than the window holds would never be read: until the kind has more than
//! `SCAN_RATIO × window` live resources (131,072 with the default window), the log keeps
//! nothing and writes pay one comparison. Nothing here knows about watchers or events.

use std::collections::VecDeque;
use std::sync::Arc;

/// How many live entries a catch-up may scan for the cost of one change taken from the log (a
/// power of two: every write divides by it).
pub(crate) const SCAN_RATIO: usize = 32;

/// Ids up to this many bytes are copied into the entry.
const INLINE_ID: usize = 22;

/// An id as the log keeps it.
#[derive(Debug)]
enum LoggedId {
    /// A short id's bytes (a whole `str`: copied from one).
    Inline { len: u8, bytes: [u8; INLINE_ID] },
    /// A longer id, shared with the resource.
    Shared(Arc<str>),
}

impl LoggedId {
    fn new(id: &Arc<str>) -> Self {
        match u8::try_from(id.len()) {
            Ok(len) if id.len() <= INLINE_ID => {
                let mut bytes = [0; INLINE_ID];
                bytes[..id.len()].copy_from_slice(id.as_bytes());
                LoggedId::Inline { len, bytes }
            }
            _ => LoggedId::Shared(id.clone()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // The bytes were copied whole from a `str`, so they are UTF-8: the fallback is
            // unreachable and only avoids an `unwrap`.
            LoggedId::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            LoggedId::Shared(id) => id,
        }
    }
}

/// The ids of the latest changes, oldest first.
#[derive(Debug)]
pub(crate) struct ChangeLog {
    /// `(sequence number, id)` with non-decreasing sequence numbers (equal only for resources
    /// loaded at one head, see [`KindContents::load`](super::KindContents::load)). An entry is
    /// stale once its resource changed again or was destroyed; readers check.
    entries: VecDeque<(u64, LoggedId)>,
    /// Every change after this sequence number has an entry.
    complete_after: u64,
    /// Live resources per entry kept, as a power of two: [`SCAN_RATIO`] except in tests.
    scan_shift: u32,
    /// The log keeps entries only for more live resources than this.
    min_live: usize,
}

impl ChangeLog {
    /// An empty log, complete for changes after `head`, for a kind whose history window holds
    /// `window` changes, keeping one entry per `scan_ratio` live resources (rounded up to a
    /// power of two): [`SCAN_RATIO`], or less in tests so that small kinds exercise the log.
    pub(crate) fn new(head: u64, window: usize, scan_ratio: usize) -> Self {
        let scan_ratio = scan_ratio.max(1).next_power_of_two();
        ChangeLog {
            entries: VecDeque::new(),
            complete_after: head,
            scan_shift: scan_ratio.trailing_zeros(),
            min_live: scan_ratio.saturating_mul(window),
        }
    }

    /// How many entries the log holds, stale ones included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Records the change at `seq` of the resource whose id `id` gives, which must be at least
    /// every sequence number already recorded (changes are recorded in the kind's order), then
    /// drops the oldest entries beyond what a kind of `live` resources keeps.
    // Inlined, and the id fetched only when kept: every write calls this, and while the log
    // keeps nothing it must cost no more than a comparison.
    #[inline]
    pub(crate) fn record<'a>(&mut self, seq: u64, live: usize, id: impl FnOnce() -> &'a Arc<str>) {
        debug_assert!(seq >= self.complete_after);
        debug_assert!(self.entries.back().is_none_or(|(last, _)| *last <= seq));
        if live <= self.min_live {
            // The window covers every change the log would keep: keep nothing, not even this.
            if !self.entries.is_empty() {
                self.entries.clear();
            }
            self.complete_after = seq;
            return;
        }
        self.append(seq, LoggedId::new(id()), live);
    }

    fn append(&mut self, seq: u64, id: LoggedId, live: usize) {
        self.entries.push_back((seq, id));
        self.shrink(live);
    }

    /// Drops the oldest entries beyond what a kind of `live` resources keeps.
    #[inline]
    pub(crate) fn shrink(&mut self, live: usize) {
        if self.entries.is_empty() {
            return;
        }
        let keep = if live <= self.min_live {
            0
        } else {
            live >> self.scan_shift
        };
        while self.entries.len() > keep {
            if let Some((seq, _)) = self.entries.pop_front() {
                self.complete_after = seq;
            }
        }
    }

    /// The entries of changes after `position`, oldest first (stale ones included), or `None`
    /// when some of them were already dropped.
    pub(crate) fn after(&self, position: u64) -> Option<impl Iterator<Item = &str>> {
        if position < self.complete_after {
            return None;
        }
        let start = self.entries.partition_point(|(seq, _)| *seq <= position);
        Some(self.entries.range(start..).map(|(_, id)| id.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window of the kinds in these tests.
    const WINDOW: usize = 4;

    /// Enough live resources for the log to keep `entries` entries (more than the window).
    fn live_for(entries: usize) -> usize {
        assert!(entries > WINDOW);
        entries * SCAN_RATIO
    }

    fn log() -> ChangeLog {
        ChangeLog::new(0, WINDOW, SCAN_RATIO)
    }

    fn record(log: &mut ChangeLog, seq: u64, id: &str, live: usize) {
        let id = Arc::from(id);
        log.record(seq, live, || &id);
    }

    fn ids_after(log: &ChangeLog, position: u64) -> Option<Vec<&str>> {
        log.after(position).map(|ids| ids.collect())
    }

    #[test]
    fn after_lists_exactly_the_ids_changed_later_in_change_order() {
        let mut log = log();
        for (seq, id) in [(1, "b"), (2, "a"), (4, "b"), (7, "c")] {
            record(&mut log, seq, id, live_for(10));
        }
        assert_eq!(ids_after(&log, 0), Some(vec!["b", "a", "b", "c"]));
        assert_eq!(ids_after(&log, 2), Some(vec!["b", "c"]));
        assert_eq!(ids_after(&log, 3), Some(vec!["b", "c"]));
        assert_eq!(ids_after(&log, 7), Some(vec![]));
    }

    #[test]
    fn the_log_keeps_one_entry_per_scan_ratio_live_resources() {
        let mut log = log();
        for seq in 1..=100 {
            record(&mut log, seq, "a", live_for(5));
        }
        assert_eq!(log.len(), 5);
        assert_eq!(ids_after(&log, 97), Some(vec!["a", "a", "a"]));
    }

    #[test]
    fn positions_before_dropped_entries_are_not_covered() {
        let mut log = log();
        for seq in 1..=8 {
            record(&mut log, seq, "a", live_for(5));
        }
        assert!(log.after(2).is_none());
        assert_eq!(ids_after(&log, 3), Some(vec!["a"; 5]));
    }

    #[test]
    fn a_kind_whose_window_covers_what_the_log_would_keep_keeps_no_entries() {
        let mut log = log();
        record(&mut log, 1, "a", WINDOW * SCAN_RATIO);
        assert_eq!(log.len(), 0);
        assert!(log.after(0).is_none());
        assert_eq!(ids_after(&log, 1), Some(vec![]));
    }

    #[test]
    fn shrinking_the_live_count_drops_the_oldest_entries() {
        let mut log = log();
        for seq in 1..=7 {
            record(&mut log, seq, "a", live_for(7));
        }
        log.shrink(live_for(5));
        assert_eq!(log.len(), 5);
        assert!(log.after(1).is_none());
        assert_eq!(ids_after(&log, 2), Some(vec!["a"; 5]));
        log.shrink(WINDOW * SCAN_RATIO);
        assert_eq!(log.len(), 0);
        assert_eq!(ids_after(&log, 7), Some(vec![]));
    }

    #[test]
    fn ids_of_every_length_read_back_exactly() {
        let mut log = log();
        let long = "x".repeat(INLINE_ID + 1);
        let edge = "é".repeat(INLINE_ID / 2);
        for (seq, id) in [
            (1, ""),
            (2, "item-0000042"),
            (3, edge.as_str()),
            (4, long.as_str()),
        ] {
            record(&mut log, seq, id, live_for(10));
        }
        assert_eq!(
            ids_after(&log, 0),
            Some(vec!["", "item-0000042", edge.as_str(), long.as_str()])
        );
    }

    #[test]
    fn a_log_resumed_at_a_head_covers_nothing_before_it() {
        let log = ChangeLog::new(10, WINDOW, SCAN_RATIO);
        assert!(log.after(9).is_none());
        assert_eq!(ids_after(&log, 10), Some(vec![]));
    }
}
