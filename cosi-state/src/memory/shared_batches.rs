//! [`SharedBatches`]: the events of a kind's recent changes built once and handed to every
//! unfiltered watcher that reads them, as views of one buffer.
//!
//! A kind with many watchers would otherwise build the same events once per watcher, each a
//! clone of the resource (and of its old state for an update), and each dropped again by its
//! consumer: with the watchers spread over several cores, those reference counts are the
//! fan-out's main cost, because every core writes to every resource's count. Here the first
//! watcher to read a run of changes builds their events into a chunk; the next ones at the same
//! place take views of it ([`EventBatch::shared`]), one reference-count increment per batch.
//!
//! Only watchers without filters and without tracking take chunks (a filtered watcher's events
//! differ per watcher), and only through [`cosi_core::Watch::recv_shared`]. Chunks tile the
//! kind's sequence numbers without overlapping: a chunk is built from the first change no chunk
//! holds up to the head (at most [`CHUNK_LIMIT`] changes, and never into the next chunk), so
//! watchers that start at different places still meet in the same chunks, and each change is
//! built into an event once however many watchers read it. A chunk's events are exact events of
//! the history window, so a watcher that finds its position in one gets exactly what the window
//! would have given it. Chunks are dropped once the window has let go of all their changes
//! (the window keeps what live watchers have not read), and beyond [`MAX_CHUNKS`] the oldest
//! go first: the resources they hold are not kept much longer than the window keeps them. That
//! pruning happens when a chunk is built, which only a live watcher does, so when the last
//! unfiltered watcher of the kind ends every chunk goes with it: nothing is left to hold old
//! values for as long as the kind has no such watcher.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cosi_core::{Event, EventBatch};

use super::contents::KindContents;

/// The most chunks kept per kind.
const MAX_CHUNKS: usize = 64;

/// The most events one chunk holds (a watcher asking for more gets the rest from the next).
pub(crate) const CHUNK_LIMIT: usize = 1024;

/// One run of events: `events[i]` is the change with sequence number `first + i`.
struct Chunk {
    first: u64,
    events: Arc<[Event]>,
}

impl Chunk {
    /// The sequence number after the chunk's last change.
    fn end(&self) -> u64 {
        self.first + self.events.len() as u64
    }

    /// The part of the chunk after `position`, at most `max` events (the chunk holds the
    /// change right after `position`).
    fn after(&self, position: u64, max: usize) -> EventBatch {
        let offset = usize::try_from(position + 1 - self.first).unwrap_or(usize::MAX);
        let end = offset.saturating_add(max);
        EventBatch::shared(self.events.clone(), offset..end)
    }
}

/// The shared chunks of one kind, by the sequence number of their first change.
#[derive(Default)]
pub(crate) struct SharedBatches {
    chunks: Mutex<BTreeMap<u64, Chunk>>,
    /// Live watchers that may take chunks (the unfiltered ones).
    watchers: AtomicUsize,
}

impl SharedBatches {
    /// Counts a watcher that may take chunks, until [`SharedBatches::watcher_ended`].
    pub(crate) fn watcher_started(&self) {
        self.watchers.fetch_add(1, Ordering::Relaxed);
    }

    /// Uncounts a watcher; the last one takes every chunk with it. Chunks are only a cache of
    /// window events, so one dropped while a new watcher starts is rebuilt from the window.
    pub(crate) fn watcher_ended(&self) {
        if self.watchers.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.lock().clear();
        }
    }

    /// The events after `position`, at most `max` (and at most [`CHUNK_LIMIT`]), and the new
    /// position: from the chunk that holds them if there is one, else from a chunk built now
    /// from `contents` (held locked by the caller) and kept for the others. An empty batch
    /// when nothing is new; `None` when the window no longer holds the change after
    /// `position` (the watcher fell behind and needs a catch-up).
    pub(crate) fn take(
        &self,
        contents: &KindContents,
        position: u64,
        max: usize,
    ) -> Option<(EventBatch, u64)> {
        let max = max.max(1);
        if position >= contents.head() {
            // Nothing new (the common wake-up check): no lock taken.
            return Some((EventBatch::from(Vec::new()), position));
        }
        let next = position + 1;
        let taken = |batch: EventBatch| {
            let position = position + batch.len() as u64;
            (batch, position)
        };
        // Up to the head, without reaching into the next chunk.
        let room = {
            let chunks = self.lock();
            if let Some((_, chunk)) = chunks.range(..=next).next_back() {
                if chunk.end() > next {
                    return Some(taken(chunk.after(position, max)));
                }
            }
            chunks
                .range(next..)
                .next()
                .map_or(CHUNK_LIMIT as u64, |(&first, _)| first - next)
                .min(CHUNK_LIMIT as u64) as usize
        };
        // Built without the lock (the caller's read lock keeps the window still), so the
        // others look up theirs meanwhile; one that built the same chunk first wins.
        let events = contents.window_events(position, room)?;
        let mut chunks = self.lock();
        if let Some(chunk) = chunks.get(&next) {
            return Some(taken(chunk.after(position, max)));
        }
        let chunk = Chunk {
            first: next,
            events,
        };
        let batch = chunk.after(position, max);
        let oldest = contents.window_oldest();
        chunks.retain(|_, chunk| chunk.end() > oldest);
        while chunks.len() >= MAX_CHUNKS {
            chunks.pop_first();
        }
        chunks.insert(next, chunk);
        Some(taken(batch))
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Chunk>> {
        // Every change under the lock is a single insert or removal: a panic elsewhere cannot
        // leave the map half-changed.
        self.chunks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for SharedBatches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chunks = self.lock();
        f.debug_list()
            .entries(chunks.values().map(|chunk| chunk.first..chunk.end()))
            .finish()
    }
}
