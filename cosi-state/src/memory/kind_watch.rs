//! [`KindWatcher`]: the event source behind every in-memory watch (kind and pointer watches).
//!
//! A watcher is a cursor into its kind's history window, not a queue: it remembers the last
//! sequence number it has taken and a small buffer of events ready to hand out (the bootstrap,
//! a catch-up, or a prefetched batch). On each call it takes what the window holds after its
//! cursor, under the kind's read lock, filtered, and publishes its new position to the kind (so
//! the window keeps what it has not read yet). When its cursor fell out of the window it
//! computes a compacted catch-up (or a resync) from the contents instead; in strict mode it ends
//! with `WatchOverrun`. A label-filtered watcher also keeps the ids its consumer holds
//! ([`Delivered`]), so that its catch-up is relative to what the consumer saw.
//!
//! A watch that starts before the window (a `since` or a `tail` older than what it holds) can be
//! given the missing changes by a backend that keeps them elsewhere — the disk backend's durable
//! log: [`KindWatcher::of_kind_with_gap`] says which ([`Gap`]), [`KindWatcher::fill_gap`] takes
//! them. Without them the watcher catches up as usual.
//!
//! A filtered kind watcher also hands out bookmarks for the changes it skips: when the changes
//! it took moved its position past the last bookmark it queued, it queues one `Noop` at its new
//! position (at most one per batch taken, none on the unfiltered path). Without it, a consumer
//! whose filter matched nothing for a while would hold a bookmark the window has left behind,
//! and a resume from it would catch up (or resync) although it missed nothing.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use cosi_core::{Error, Event, EventBatch, EventSource, Pointer, Result, WatchKindOptions};

use super::collection::{check_watch_options, tombstone, Collection, WaitingGuard};
use super::contents::KindContents;
use super::cursors::Cursor;
use super::delivered::Delivered;
use super::history::Change;
use super::watch_filter::{IdFilter, WatchFilter};

/// How many events a single-event `next` prefetches, so that per-event calls do not take the
/// kind lock once per event.
const PREFETCH: usize = 64;

/// Changes a starting watch needs that the window no longer holds: those after `after` up to
/// `upto` (the head when it started).
#[derive(Debug)]
pub(crate) struct Gap {
    /// The watch's requested position.
    pub(crate) after: u64,
    /// Whether the gap may start later than `after`: a `tail` asks for *up to* so many of the
    /// latest events, so it takes what a log still holds of them; a `since` must resume exactly
    /// (or catch up).
    pub(crate) up_to: bool,
    /// The head when it started: the watcher continues from here once it has the gap.
    pub(crate) upto: u64,
    /// The store instance the events' bookmarks name.
    origin: u64,
    /// What the consumer holds once it has the gap's events.
    delivered: Delivered,
}

/// A cursor-based watcher of one kind.
pub(crate) struct KindWatcher {
    collection: Arc<Collection>,
    filter: WatchFilter,
    /// The last sequence number whose event (if it passed the filter) is in `ready`.
    position: u64,
    /// `position`, as the kind's writers see it.
    cursor: Arc<Cursor>,
    /// What the consumer holds once it has taken `ready`.
    delivered: Delivered,
    /// Events taken from the collection and not handed out yet.
    ready: VecDeque<Event>,
    strict: bool,
    /// Set once an error was queued: nothing is read after it.
    failed: bool,
    /// Whether it queues a `Noop` when skipped changes moved its position: a filtered kind
    /// watch (an unfiltered one skips nothing; a pointer watch reports its resource's states
    /// only, as its consumers expect).
    noops: bool,
    /// The position the latest bookmark queued stands for (its start before any).
    announced: u64,
    /// The resource of a pointer watch: its resync says it is absent with a tombstone.
    pointer: Option<Pointer>,
}

impl KindWatcher {
    /// A watcher at `position` that first hands out `ready`, registered with the kind whose
    /// `contents` the caller holds locked.
    fn new(
        collection: &Arc<Collection>,
        contents: &KindContents,
        filter: WatchFilter,
        position: u64,
        ready: VecDeque<Event>,
        mut delivered: Delivered,
        strict: bool,
    ) -> Self {
        for event in &ready {
            delivered.apply(event);
        }
        if filter.passes_everything() {
            collection.shared_batches().watcher_started();
        }
        KindWatcher {
            collection: collection.clone(),
            noops: !filter.passes_everything(),
            filter,
            position,
            cursor: contents.register_watcher(position),
            delivered,
            ready,
            strict,
            failed: false,
            announced: position,
            pointer: None,
        }
    }

    /// Starts a kind watch.
    pub(crate) fn of_kind(collection: &Arc<Collection>, options: WatchKindOptions) -> Result<Self> {
        Self::start(collection, options, false).map(|(watcher, _)| watcher)
    }

    /// Starts a kind watch, and says which changes it needs that the window no longer holds
    /// (for a `since` or a `tail` reaching before it), for the caller to supply with
    /// [`KindWatcher::fill_gap`] if it keeps them.
    pub(crate) fn of_kind_with_gap(
        collection: &Arc<Collection>,
        options: WatchKindOptions,
    ) -> Result<(Self, Option<Gap>)> {
        Self::start(collection, options, true)
    }

    fn start(
        collection: &Arc<Collection>,
        options: WatchKindOptions,
        want_gap: bool,
    ) -> Result<(Self, Option<Gap>)> {
        let subject = || collection.kind().to_string();
        check_watch_options(collection.kind(), &options)?;
        let filter = WatchFilter::new(options.ids.as_ref(), &options.labels);
        let mut pending = VecDeque::new();
        let contents = collection.read();
        let head = contents.head();
        // Where the watch starts if the caller supplies what the window lacks.
        let mut wanted = None;
        let position = if let Some(since) = &options.since {
            let Some(position) = contents.sequence_of(since) else {
                return Err(Error::bookmark_not_issued_here(subject(), since));
            };
            if position > head {
                return Err(Error::invalid(
                    subject(),
                    "since",
                    format!("bookmark {since} is in the future (the latest is {head})"),
                ));
            }
            wanted = Some(position);
            position
        } else if let Some(tail) = options.tail {
            wanted = Some(head - (tail as u64).min(head));
            head - (tail.min(contents.window_len()) as u64)
        } else {
            if options.bootstrap {
                contents.bootstrap(&filter, &mut pending);
            }
            head
        };
        // A label-filtered consumer holds what matched where it starts: nothing before its
        // bootstrap's events, else what matched at its position (as its exact events assume).
        let delivered = if !filter.has_labels() {
            Delivered::Untracked
        } else if options.bootstrap {
            Delivered::Ids(Default::default())
        } else {
            contents
                .matching_at(position, &filter)
                .map_or(Delivered::Unknown, Delivered::Ids)
        };
        let gap = wanted
            .filter(|&after| want_gap && !contents.window_reaches(after))
            .map(|after| Gap {
                after,
                up_to: options.tail.is_some(),
                upto: head,
                origin: contents.origin(),
                // After the gap's events, the consumer holds what matches at the head.
                delivered: if filter.has_labels() {
                    Delivered::Ids(contents.matching_ids(&filter))
                } else {
                    Delivered::Untracked
                },
            });
        let watcher = KindWatcher::new(
            collection,
            &contents,
            filter,
            position,
            pending,
            delivered,
            options.strict,
        );
        Ok((watcher, gap))
    }

    /// Hands out `changes` — exactly the changes of the gap, in order — before anything else,
    /// and continues from the gap's end.
    pub(crate) fn fill_gap(&mut self, gap: Gap, changes: &[Change]) {
        self.ready.clear();
        self.ready.extend(
            changes
                .iter()
                .filter_map(|change| self.filter.translate(change, gap.origin)),
        );
        self.position = gap.upto;
        self.delivered = gap.delivered;
        self.cursor.advance(gap.upto);
        if self.noops {
            self.announced = gap.after;
            self.bookmark_skipped(gap.origin, 0);
        }
    }

    /// Starts a pointer watch: the current state (or a tombstone), then every change.
    pub(crate) fn of_pointer(
        collection: &Arc<Collection>,
        pointer: &Pointer,
        strict: bool,
    ) -> Self {
        let filter = WatchFilter {
            ids: IdFilter::Exact(pointer.shared_id().clone()),
            labels: Default::default(),
        };
        let contents = collection.read();
        let head = contents.head();
        let bookmark = contents.bookmark(head);
        let first = match contents.get_pointer(pointer) {
            Some(resource) => Event::Created {
                resource: resource.clone(),
                bookmark,
                compacted: false,
            },
            None => Event::Destroyed {
                resource: tombstone(pointer),
                bookmark,
                compacted: false,
            },
        };
        let mut watcher = KindWatcher::new(
            collection,
            &contents,
            filter,
            head,
            VecDeque::from([first]),
            Delivered::Untracked,
            strict,
        );
        watcher.noops = false;
        watcher.pointer = Some(pointer.clone());
        watcher
    }

    /// Moves up to `max` new events into `ready` (never blocks). Returns whether any arrived.
    fn fill(&mut self, max: usize) -> bool {
        if self.failed {
            return false;
        }
        let before = self.ready.len();
        let mut caught_up = false;
        let contents = self.collection.read();
        match contents.read_window(self.position, &self.filter, &mut self.ready, max) {
            Some(position) => self.position = position,
            None if self.strict => {
                self.ready.push_back(Event::Errored {
                    error: Error::WatchOverrun {
                        kind: self.collection.kind().clone(),
                        position: contents.bookmark(self.position),
                    },
                });
                self.failed = true;
                self.cursor.release();
                return true;
            }
            None => {
                self.position = contents.catch_up(
                    self.position,
                    &self.filter,
                    &self.delivered,
                    &mut self.ready,
                );
                caught_up = true;
            }
        }
        // Published under the read lock, so the next writer sees it.
        self.cursor.advance(self.position);
        let origin = contents.origin();
        drop(contents);
        if caught_up {
            self.tombstone_in_resync(before);
        }
        if self.noops {
            self.bookmark_skipped(origin, before);
        }
        if self.delivered.is_tracked() {
            for event in self.ready.range(before..) {
                self.delivered.apply(event);
            }
        }
        self.ready.len() > before
    }

    /// Queues a `Noop` at the position when the changes taken since `ready[from]` moved it past
    /// the last bookmark queued (they were filtered out): at most one per batch, replacing a
    /// `Noop` still queued, so a consumer that keeps up holds a bookmark at the kind's latest
    /// change — one a resume serves exactly, not by a catch-up or a resync.
    fn bookmark_skipped(&mut self, origin: u64, from: usize) {
        if let Some(seq) = self
            .ready
            .range(from..)
            .next_back()
            .and_then(|event| event.bookmark()?.position_in(origin))
        {
            self.announced = seq;
        }
        if self.position <= self.announced {
            return;
        }
        self.announced = self.position;
        let bookmark = cosi_core::Bookmark::at(origin, self.position);
        match self.ready.back_mut() {
            Some(Event::Noop { bookmark: queued }) => *queued = bookmark,
            _ => self.ready.push_back(Event::Noop { bookmark }),
        }
    }

    /// A pointer watch's resync (queued from `ready[from]`) says the resource is absent the way
    /// its first event does, with a tombstone: the resync replaces the consumer's view, and a
    /// view without the resource must be said.
    fn tombstone_in_resync(&mut self, from: usize) {
        let Some(pointer) = &self.pointer else {
            return;
        };
        let Some(Event::Resync { bookmark }) = self.ready.get(from) else {
            return;
        };
        if self.ready.range(from..).any(|e| e.resource().is_some()) {
            return;
        }
        let absent = Event::Destroyed {
            resource: tombstone(pointer),
            bookmark: bookmark.clone(),
            compacted: false,
        };
        // Before the resync's `Bootstrapped`, its last event.
        let at = self.ready.len() - 1;
        self.ready.insert(at, absent);
    }

    /// Waits until `ready` holds at least one event, filling it with up to `max`.
    /// Returns `false` once the watch has ended.
    async fn wait_ready(&mut self, max: usize) -> bool {
        if !self.ready.is_empty() {
            return true;
        }
        if self.failed {
            return false;
        }
        self.wait_for(|watcher| watcher.fill(max).then_some(()))
            .await
            .is_some()
    }

    /// Calls `take` until it gives something, sleeping between calls until the kind changes.
    /// `None` once the watch has ended.
    async fn wait_for<T>(&mut self, mut take: impl FnMut(&mut Self) -> Option<T>) -> Option<T> {
        loop {
            if let Some(taken) = take(self) {
                return Some(taken);
            }
            // Register before re-checking, so a change made after the check wakes us.
            let collection = self.collection.clone();
            let wake = collection.watch_wake();
            let _waiting = WaitingGuard::new(wake);
            let notified = wake.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(taken) = take(self) {
                return Some(taken);
            }
            if wake.is_closed() {
                return None;
            }
            notified.await;
        }
    }

    /// Whether this watcher's events are the same as every other unfiltered watcher's, so it
    /// can take them from the kind's shared batches.
    fn shares(&self) -> bool {
        self.filter.passes_everything() && !self.delivered.is_tracked()
    }

    /// The next shared batch: `Some(Some(batch))`; `Some(None)` when `ready` now holds what
    /// the watcher needs instead (it fell behind the window: a catch-up, or the overrun error
    /// in strict mode); `None` when nothing is new.
    fn take_shared(&mut self, max: usize) -> Option<Option<EventBatch>> {
        let contents = self.collection.read();
        match self
            .collection
            .shared_batches()
            .take(&contents, self.position, max)
        {
            Some((batch, _)) if batch.is_empty() => None,
            Some((batch, position)) => {
                self.position = position;
                // Published under the read lock, so the next writer sees it.
                self.cursor.advance(position);
                Some(Some(batch))
            }
            None => {
                drop(contents);
                self.fill(max);
                Some(None)
            }
        }
    }
}

impl Drop for KindWatcher {
    fn drop(&mut self) {
        if self.filter.passes_everything() {
            self.collection.shared_batches().watcher_ended();
        }
    }
}

#[async_trait]
impl EventSource for KindWatcher {
    async fn next(&mut self) -> Option<Event> {
        if !self.wait_ready(PREFETCH).await {
            return None;
        }
        self.ready.pop_front()
    }

    async fn next_batch(&mut self, max: usize) -> Option<Vec<Event>> {
        let max = max.max(1);
        if !self.wait_ready(max).await {
            return None;
        }
        if self.ready.len() < max {
            self.fill(max - self.ready.len());
        }
        if self.ready.len() <= max {
            // The whole buffer is the batch: hand it over instead of copying it out (a batch
            // needs a buffer of its own either way).
            return Some(std::mem::take(&mut self.ready).into());
        }
        Some(self.ready.drain(..max).collect())
    }

    async fn next_shared_batch(&mut self, max: usize) -> Option<EventBatch> {
        let max = max.max(1);
        if self.ready.is_empty() && !self.failed && self.shares() {
            if let Some(batch) = self.wait_for(|watcher| watcher.take_shared(max)).await? {
                return Some(batch);
            }
        }
        // Its own events first (a bootstrap, a catch-up), or a filtered watcher.
        self.next_batch(max).await.map(EventBatch::from)
    }
}
