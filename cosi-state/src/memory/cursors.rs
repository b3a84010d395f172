//! [`Cursors`]: where the live watchers of one kind are in its order, so that the history window
//! and the destroy markers keep what a watcher has not read yet and let go of the rest.
//!
//! Each watcher publishes its position in a [`Cursor`] of its own (one relaxed store per batch it
//! takes); the kind holds weak references to them. Writers never scan the cursors on every
//! write: they keep `bound`, a position no live watcher is behind, and refresh it (one pass over
//! the cursors, dropping those of ended watches) only when a decision depends on it — the window
//! is full and its oldest change may still be needed, or a periodic check whether the window
//! can shrink. A stale bound is lower than the truth, so it only ever keeps more.
//!
//! A watcher registers under the kind's read lock and writers refresh under its write lock, so a
//! new watcher's position is never missed: it lowers `bound` before any later write can evict.
//! Nothing here knows about events or the window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The position one watcher has read up to: it still needs every change after it.
#[derive(Debug)]
pub(crate) struct Cursor(AtomicU64);

impl Cursor {
    /// Publishes that the watcher has taken everything up to `position`.
    pub(crate) fn advance(&self, position: u64) {
        // Relaxed: the watcher stores while it holds the kind's read lock, and writers read
        // under the write lock, so the lock orders the two; a value read early is only older.
        self.0.store(position, Ordering::Relaxed);
    }

    /// Publishes that the watcher will read nothing more (it ended with an error).
    pub(crate) fn release(&self) {
        self.advance(u64::MAX);
    }

    fn position(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The cursors of one kind's live watchers.
#[derive(Debug, Default)]
pub(crate) struct Cursors {
    /// Weak, so an ended watch needs no lock to leave: its entry is dropped at the next refresh
    /// or registration sweep.
    slots: Mutex<Vec<Weak<Cursor>>>,
    /// No live watcher is behind this position (`u64::MAX` when none is known to be).
    bound: AtomicU64,
    /// How many slots were live at the last sweep: registration sweeps again once the list has
    /// doubled, so watches opened and dropped on a kind nobody writes cannot grow it.
    swept_len: AtomicU64,
}

impl Cursors {
    /// No watchers yet.
    pub(crate) fn new() -> Self {
        Cursors {
            slots: Mutex::new(Vec::new()),
            bound: AtomicU64::new(u64::MAX),
            swept_len: AtomicU64::new(0),
        }
    }

    /// Registers a watcher at `position`. Call with the kind's lock held (read is enough).
    pub(crate) fn register(&self, position: u64) -> Arc<Cursor> {
        let cursor = Arc::new(Cursor(AtomicU64::new(position)));
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let swept = self.swept_len.load(Ordering::Relaxed) as usize;
        if slots.len() >= 2 * swept.max(8) {
            slots.retain(|slot| slot.strong_count() > 0);
            self.swept_len.store(slots.len() as u64, Ordering::Relaxed);
        }
        slots.push(Arc::downgrade(&cursor));
        self.bound.fetch_min(position, Ordering::Relaxed);
        cursor
    }

    /// A position no live watcher is behind (possibly lower than the slowest one).
    pub(crate) fn bound(&mut self) -> u64 {
        *self.bound.get_mut()
    }

    /// Recomputes the bound from every live cursor, forgetting ended watchers; with none, it
    /// is `u64::MAX`. Exclusive access: the caller holds the kind's write lock.
    pub(crate) fn refresh(&mut self) -> u64 {
        let slots = self.slots.get_mut().unwrap_or_else(PoisonError::into_inner);
        let mut bound = u64::MAX;
        slots.retain(|slot| match slot.upgrade() {
            Some(cursor) => {
                bound = bound.min(cursor.position());
                true
            }
            None => false,
        });
        *self.swept_len.get_mut() = slots.len() as u64;
        *self.bound.get_mut() = bound;
        bound
    }

    /// How many watchers are registered, ended ones not yet swept included.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_the_slowest_live_watchers_position() {
        let mut cursors = Cursors::new();
        assert_eq!(cursors.refresh(), u64::MAX);
        let a = cursors.register(5);
        let b = cursors.register(3);
        assert_eq!(cursors.bound(), 3);
        b.advance(9);
        assert_eq!(
            cursors.bound(),
            3,
            "a stale bound stays low until refreshed"
        );
        assert_eq!(cursors.refresh(), 5);
        a.release();
        assert_eq!(cursors.refresh(), 9);
    }

    #[test]
    fn a_new_watcher_lowers_the_bound_at_once() {
        let mut cursors = Cursors::new();
        let _a = cursors.register(10);
        assert_eq!(cursors.refresh(), 10);
        let _b = cursors.register(4);
        assert_eq!(cursors.bound(), 4);
    }

    #[test]
    fn ended_watchers_are_forgotten() {
        let mut cursors = Cursors::new();
        let a = cursors.register(1);
        drop(a);
        assert_eq!(cursors.refresh(), u64::MAX);
        assert_eq!(cursors.len(), 0);
    }

    #[test]
    fn watches_opened_and_dropped_without_writes_leave_a_bounded_list() {
        let cursors = Cursors::new();
        let kept = cursors.register(0);
        for position in 0..10_000 {
            drop(cursors.register(position));
        }
        assert!(cursors.len() <= 16, "{} slots", cursors.len());
        drop(kept);
    }
}
