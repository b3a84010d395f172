//! The contents of one kind under its lock: the live resources in id order (each with the
//! sequence numbers of its creation and last change), the history window and the destroy
//! markers, the log of which ids changed when, and the cursors of the live watchers (which size
//! the window and the markers) — and the computations that need them at one instant: applying a
//! write, bootstrap, and the catch-up of a watcher that fell behind.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use cosi_core::{
    Bookmark, DestroyOptions, Error, Event, Pointer, Result, SharedResource, UpdateOptions,
};

use super::change_log::{ChangeLog, SCAN_RATIO};
use super::cursors::{Cursor, Cursors};
use super::delivered::Delivered;
use super::destroy_markers::{DestroyMarker, DestroyMarkers};
use super::history::{ChangeOp, HistoryWindow};
use super::id_map::{Entry, IdMap, Identified};
use super::watch_filter::{IdFilter, WatchFilter};
use super::{write_rules, MemoryOptions};

/// A live resource and where its history starts.
#[derive(Clone, Debug)]
pub(crate) struct StoredEntry {
    /// The stored value.
    pub(crate) resource: SharedResource,
    /// Sequence number of the create of this incarnation.
    pub(crate) created_seq: u64,
    /// Sequence number of its last change.
    pub(crate) changed_seq: u64,
}

impl Identified for StoredEntry {
    fn id(&self) -> &Arc<str> {
        self.resource.metadata().pointer().shared_id()
    }
}

/// How a catch-up finds the live resources changed since its position.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
// Only tests force `Scan` or `Log`, to check that both find the same resources.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum ChangedSearch {
    /// The change log when it still covers the position (it keeps only as many changes as
    /// are cheaper to look up than a scan), else a scan.
    Cheapest,
    /// Every live resource, in id order: O(live).
    Scan,
}

/// Everything one kind holds.
#[derive(Debug)]
pub(crate) struct KindContents {
    resources: IdMap<StoredEntry>,
    window: HistoryWindow,
    markers: DestroyMarkers,
    /// Every live resource changed after the log's `complete_after` has an entry at its
    /// `changed_seq` (plus stale entries).
    changes: ChangeLog,
    /// Where the live watchers are: what the window and the markers must keep for them.
    cursors: Cursors,
    /// The store instance its bookmarks name.
    origin: u64,
}

impl KindContents {
    /// Empty contents sized by `options` whose first change gets sequence `head + 1`.
    pub(crate) fn new(options: &MemoryOptions, head: u64) -> Self {
        Self::with_scan_ratio(options, head, SCAN_RATIO)
    }

    /// The same contents issuing bookmarks of the store instance `origin`.
    pub(crate) fn with_origin(mut self, origin: u64) -> Self {
        self.origin = origin;
        self
    }

    /// The bookmark of sequence number `seq` of this kind.
    pub(crate) fn bookmark(&self, seq: u64) -> Bookmark {
        Bookmark::at(self.origin, seq)
    }

    /// The sequence number `bookmark` names, if this store issued it.
    pub(crate) fn sequence_of(&self, bookmark: &Bookmark) -> Option<u64> {
        bookmark.position_in(self.origin)
    }

    /// Empty contents whose change log keeps one entry per `scan_ratio` live resources (tests
    /// use small ratios so that small kinds exercise the log).
    pub(crate) fn with_scan_ratio(options: &MemoryOptions, head: u64, scan_ratio: usize) -> Self {
        let MemoryOptions {
            history,
            history_min,
            max_destroy_markers,
        } = *options;
        KindContents {
            resources: IdMap::default(),
            window: HistoryWindow::new(history_min, history, head),
            markers: DestroyMarkers::new(max_destroy_markers, history_min, head),
            // Sized by the window's limit: a catch-up from a position no live watcher holds may
            // start anywhere before the window.
            changes: ChangeLog::new(head, history.max(1), scan_ratio),
            cursors: Cursors::new(),
            origin: 0,
        }
    }

    /// Registers a watcher that has taken everything up to `position`: until it moves on, the
    /// window and the markers keep what it has not read (within their limits). Call under the
    /// kind's lock (a read guard is enough), so no write slips between reading the position and
    /// registering it.
    pub(crate) fn register_watcher(&self, position: u64) -> Arc<Cursor> {
        self.cursors.register(position)
    }

    /// The position of the latest change.
    pub(crate) fn head(&self) -> u64 {
        self.window.head()
    }

    /// Whether nothing was ever stored: no resource and no change since the start (a durable
    /// backend resumes at a later head, so a recovered kind is never pristine).
    pub(crate) fn is_pristine(&self) -> bool {
        self.window.head() == 0 && self.resources.len() == 0
    }

    /// How many changes the history window holds.
    pub(crate) fn window_len(&self) -> usize {
        self.window.len()
    }

    /// Whether the window holds every change after `position`.
    pub(crate) fn window_reaches(&self, position: u64) -> bool {
        self.window.after(position).is_some()
    }

    /// The sequence number of the oldest change the window holds (`head + 1` when empty).
    pub(crate) fn window_oldest(&self) -> u64 {
        self.window.oldest()
    }

    /// The events of the changes after `position`, at most `max`, as one buffer (for
    /// [`super::shared_batches`]); `None` when the window no longer holds them all.
    pub(crate) fn window_events(&self, position: u64, max: usize) -> Option<Arc<[Event]>> {
        let changes = self.window.after(position)?;
        Some(changes.take(max).map(|c| c.event(self.origin)).collect())
    }

    /// The store instance its bookmarks name.
    pub(crate) fn origin(&self) -> u64 {
        self.origin
    }

    /// The stored value of `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&SharedResource> {
        self.resources.get(id).map(|e| &e.resource)
    }

    /// How many resources are stored.
    pub(crate) fn len(&self) -> usize {
        self.resources.len()
    }

    /// Loads a resource that existed before the window starts, without an event: a durable
    /// backend rebuilding its contents at open. Its creation and last change count as at the
    /// window's start, which is what every catch-up from a position inside the window needs.
    /// Replaces a value already loaded under the same id.
    pub(crate) fn load(&mut self, resource: SharedResource) {
        let seq = self.window.head();
        let id = resource.metadata().pointer().shared_id().clone();
        let replaced = self.resources.insert(StoredEntry {
            resource,
            created_seq: seq,
            changed_seq: seq,
        });
        // A value replaced at the same head already has its log entry.
        if replaced.is_none_or(|old| old.changed_seq != seq) {
            self.changes.record(seq, self.resources.len(), || &id);
        }
    }

    /// The stored values passing `filter`, in id order.
    pub(crate) fn list(&self, filter: &WatchFilter) -> Vec<SharedResource> {
        match &filter.ids {
            IdFilter::Exact(id) => self
                .get(id)
                .filter(|r| filter.labels_match(&***r))
                .cloned()
                .into_iter()
                .collect(),
            // Unfiltered: an exact-size iterator, so the result is allocated once at its final
            // size (not grown by doubling, which copies and briefly holds up to twice as much),
            // and no stored value is read beyond its reference count.
            IdFilter::All if !filter.has_labels() => self
                .resources
                .values()
                .map(|e| e.resource.clone())
                .collect(),
            _ => self
                .resources
                .values()
                .filter(|e| filter.matches(&*e.resource))
                .map(|e| e.resource.clone())
                .collect(),
        }
    }

    /// The stored value of `pointer` (its id; the kind is the caller's to match), searched
    /// with the fast id comparison.
    pub(crate) fn get_pointer(&self, pointer: &Pointer) -> Option<&SharedResource> {
        self.resources.get(pointer.id()).map(|e| &e.resource)
    }

    /// Stores a new resource (already stamped); fails if the id exists. Returns the sequence
    /// number of the change.
    pub(crate) fn apply_create(&mut self, resource: SharedResource) -> Result<u64> {
        let pointer = resource.metadata().pointer();
        let live = self.resources.len() + 1;
        let Entry::Vacant(slot) = self.resources.entry(pointer.id()) else {
            return Err(Error::AlreadyExists {
                pointer: pointer.clone(),
            });
        };
        let seq = self
            .window
            .push(ChangeOp::Created, resource.clone(), None, &mut self.cursors);
        let stored = slot.insert(StoredEntry {
            resource,
            created_seq: seq,
            changed_seq: seq,
        });
        self.changes.record(seq, live, || {
            stored.resource.metadata().pointer().shared_id()
        });
        Ok(seq)
    }

    /// Checks an update against the stored value, stamps it and applies it, with one lookup
    /// (the in-memory path: check and apply under one lock). Returns the sequence number.
    pub(crate) fn check_and_update(
        &mut self,
        resource: &mut SharedResource,
        options: &UpdateOptions,
        now: SystemTime,
    ) -> Result<u64> {
        let Some(entry) = self.resources.get_mut(resource.metadata().id()) else {
            return Err(Error::NotFound {
                pointer: resource.metadata().pointer().clone(),
            });
        };
        write_rules::check_update(&*entry.resource, &**resource, options)?;
        write_rules::stamp_update(&*entry.resource, resource, now);
        let old = std::mem::replace(&mut entry.resource, resource.clone());
        let seq = self.window.push(
            ChangeOp::Updated,
            resource.clone(),
            Some(old),
            &mut self.cursors,
        );
        entry.changed_seq = seq;
        let live = self.resources.len();
        self.changes
            .record(seq, live, || resource.metadata().pointer().shared_id());
        Ok(seq)
    }

    /// Checks a destroy against the stored value and applies it, with one lookup. Returns the
    /// sequence number.
    pub(crate) fn check_and_destroy(
        &mut self,
        pointer: &Pointer,
        options: &DestroyOptions,
    ) -> Result<u64> {
        let Entry::Occupied(slot) = self.resources.entry(pointer.id()) else {
            return Err(Error::NotFound {
                pointer: pointer.clone(),
            });
        };
        write_rules::check_destroy(&*slot.get().resource, options)?;
        let entry = slot.remove();
        Ok(self.record_destroy(entry))
    }

    /// Replaces a stored resource with an already checked and stamped value; fails if it is
    /// absent. Returns the sequence number of the change.
    #[allow(dead_code)] // The publishing path of durable backends; memory uses check_and_*.
    pub(crate) fn apply_update(&mut self, resource: SharedResource) -> Result<u64> {
        let pointer = resource.metadata().pointer();
        let live = self.resources.len();
        let Some(entry) = self.resources.get_mut(pointer.id()) else {
            return Err(Error::NotFound {
                pointer: pointer.clone(),
            });
        };
        let old = std::mem::replace(&mut entry.resource, resource.clone());
        let seq = self
            .window
            .push(ChangeOp::Updated, resource, Some(old), &mut self.cursors);
        entry.changed_seq = seq;
        self.changes.record(seq, live, || {
            entry.resource.metadata().pointer().shared_id()
        });
        Ok(seq)
    }

    /// Removes a stored resource (already checked); fails if it is absent. Returns the
    /// sequence number of the change.
    #[allow(dead_code)] // The publishing path of durable backends; memory uses check_and_*.
    pub(crate) fn apply_destroy(&mut self, pointer: &Pointer) -> Result<u64> {
        let Some(entry) = self.resources.remove(pointer.shared_id()) else {
            return Err(Error::NotFound {
                pointer: pointer.clone(),
            });
        };
        Ok(self.record_destroy(entry))
    }

    // Kept inside both destroy paths: outlined, the call alone costs about 2 % of a destroy.
    #[inline(always)]
    fn record_destroy(&mut self, entry: StoredEntry) -> u64 {
        self.changes.shrink(self.resources.len());
        let seq = self.window.push(
            ChangeOp::Destroyed,
            entry.resource.clone(),
            None,
            &mut self.cursors,
        );
        self.markers.record(
            DestroyMarker {
                destroyed: seq,
                created: entry.created_seq,
                resource: entry.resource,
            },
            &mut self.cursors,
        );
        seq
    }

    /// Appends the events a watcher at `position` has not seen yet to `out`, at most `max` of
    /// them, and returns the new position — or `None` when the watcher fell behind the window.
    pub(crate) fn read_window(
        &self,
        position: u64,
        filter: &WatchFilter,
        out: &mut VecDeque<Event>,
        max: usize,
    ) -> Option<u64> {
        let mut position = position;
        let mut taken = 0;
        let changes = self.window.after(position)?;
        // At most this many: grown once (an emptied buffer was handed out whole, see
        // `KindWatcher::next_batch`), not by doubling.
        out.reserve(changes.len().min(max));
        if filter.passes_everything() {
            // Nothing to translate: every change is its own event.
            out.extend(changes.take(max).map(|change| {
                position = change.seq;
                change.event(self.origin)
            }));
            return Some(position);
        }
        for change in changes {
            if taken == max {
                break;
            }
            position = change.seq;
            if let Some(event) = filter.translate(change, self.origin) {
                out.push_back(event);
                taken += 1;
            }
        }
        Some(position)
    }

    /// Appends the contents passing `filter` as `Created` events in id order, then
    /// `Bootstrapped`, all at the current head.
    pub(crate) fn bootstrap(&self, filter: &WatchFilter, out: &mut VecDeque<Event>) {
        let bookmark = self.bookmark(self.head());
        let created = |resource: SharedResource| Event::Created {
            resource,
            bookmark: bookmark.clone(),
            compacted: false,
        };
        match &filter.ids {
            IdFilter::Exact(id) => out.extend(
                self.get(id)
                    .filter(|r| filter.labels_match(&***r))
                    .cloned()
                    .map(created),
            ),
            // Unfiltered: exact-size, so `out` grows once (see `list`).
            IdFilter::All if !filter.has_labels() => {
                out.extend(self.resources.values().map(|e| created(e.resource.clone())))
            }
            _ => out.extend(
                self.resources
                    .values()
                    .filter(|e| filter.matches(&*e.resource))
                    .map(|e| created(e.resource.clone())),
            ),
        }
        out.push_back(Event::Bootstrapped { bookmark });
    }

    /// The ids of the stored resources passing `filter`: what a label-filtered watcher that
    /// starts at the head (without a bootstrap) holds.
    pub(crate) fn matching_ids(&self, filter: &WatchFilter) -> HashSet<Arc<str>> {
        self.resources
            .values()
            .filter(|e| filter.matches(&*e.resource))
            .map(|e| e.resource.metadata().pointer().shared_id().clone())
            .collect()
    }

    /// The ids of the resources that passed `filter` at `position`, worked out by undoing the
    /// window's changes after it from the current contents; `None` when the window no longer
    /// reaches back to `position`.
    pub(crate) fn matching_at(
        &self,
        position: u64,
        filter: &WatchFilter,
    ) -> Option<HashSet<Arc<str>>> {
        let changes: Vec<_> = self.window.after(position)?.collect();
        let mut ids = self.matching_ids(filter);
        for change in changes.into_iter().rev() {
            let pointer = change.resource.metadata().pointer();
            if !filter.ids.matches(pointer.id()) {
                continue;
            }
            // The state just before the change.
            let before = match change.op {
                ChangeOp::Created => None,
                ChangeOp::Updated => change.old.as_ref(),
                ChangeOp::Destroyed => Some(&change.resource),
            };
            if before.is_some_and(|r| filter.labels_match(&**r)) {
                ids.insert(pointer.shared_id().clone());
            } else {
                ids.remove(pointer.id());
            }
        }
        Some(ids)
    }

    /// Appends what a watcher that fell behind at `position` needs to reach the current head:
    /// a compacted catch-up (one event per resource changed since `position`, carrying its
    /// latest state, in id order, relative to what the consumer holds: `delivered`) when the
    /// destroy markers still cover `position` and `delivered` is known, otherwise `Resync` and
    /// a full bootstrap. Returns the head the watcher is then at.
    pub(crate) fn catch_up(
        &self,
        position: u64,
        filter: &WatchFilter,
        delivered: &Delivered,
        out: &mut VecDeque<Event>,
    ) -> u64 {
        self.catch_up_with(position, filter, delivered, out, ChangedSearch::Cheapest)
    }

    /// [`catch_up`](Self::catch_up), finding the changed live resources with `search`.
    ///
    /// Relative to what the consumer holds: a resource it holds that matches now is `Updated
    /// { old: None }`; one it does not hold that matches now is `Created`; one it holds that
    /// no longer matches, or is gone, is `Destroyed` with its current or last state; one it
    /// does not hold and that does not match now gets nothing. What it holds is `delivered`
    /// for a label-filtered watcher, and otherwise what existed (passing the id filter) at
    /// `position`, which the creation positions and the markers tell exactly.
    pub(crate) fn catch_up_with(
        &self,
        position: u64,
        filter: &WatchFilter,
        delivered: &Delivered,
        out: &mut VecDeque<Event>,
        search: ChangedSearch,
    ) -> u64 {
        let head = self.head();
        let bookmark = self.bookmark(head);
        if !self.markers.complete_since(position) || delivered.is_unknown() {
            out.push_back(Event::Resync { bookmark });
            self.bootstrap(filter, out);
            return head;
        }
        // Per id destroyed since `position`: whether one of its incarnations existed at
        // `position`, and the last state of its latest incarnation.
        let mut gone: HashMap<&str, (bool, &SharedResource)> = HashMap::new();
        for marker in self.markers.after(position) {
            let id = marker.resource.metadata().id();
            if !filter.ids.matches(id) {
                continue;
            }
            let slot = gone.entry(id).or_insert((false, &marker.resource));
            slot.0 |= marker.created <= position;
            slot.1 = &marker.resource;
        }
        let changed = self.changed_since(position, filter, search);
        let mut events: Vec<Event> = Vec::with_capacity(changed.len());
        for entry in changed {
            let id = entry.resource.metadata().id();
            let held = delivered.holds(id).unwrap_or_else(|| {
                entry.created_seq <= position || gone.get(id).is_some_and(|g| g.0)
            });
            let resource = entry.resource.clone();
            if filter.labels_match(&*resource) {
                events.push(if held {
                    Event::Updated {
                        old: None,
                        resource,
                        bookmark: bookmark.clone(),
                        compacted: true,
                    }
                } else {
                    Event::Created {
                        resource,
                        bookmark: bookmark.clone(),
                        compacted: true,
                    }
                });
            } else if held {
                events.push(Event::Destroyed {
                    resource,
                    bookmark: bookmark.clone(),
                    compacted: true,
                });
            }
        }
        let mut destroyed: Vec<(&str, &SharedResource)> = gone
            .into_iter()
            .filter(|(id, (existed, _))| {
                delivered.holds(id).unwrap_or(*existed) && !self.resources.contains_key(id)
            })
            .map(|(id, (_, last))| (id, last))
            .collect();
        if destroyed.is_empty() {
            out.extend(events);
        } else {
            destroyed.sort_unstable_by(|a, b| a.0.cmp(b.0));
            events.extend(destroyed.into_iter().map(|(_, last)| Event::Destroyed {
                resource: last.clone(),
                bookmark: bookmark.clone(),
                compacted: true,
            }));
            // Ids are unique across live and destroyed entries, so an unstable sort is exact.
            events.sort_unstable_by(|a, b| event_id(a).cmp(event_id(b)));
            out.extend(events);
        }
        head
    }

    /// The live resources whose ids pass `filter` and that changed after `position`, in id
    /// order (labels are the caller's to judge: a resource that stopped matching is news too).
    fn changed_since(
        &self,
        position: u64,
        filter: &WatchFilter,
        search: ChangedSearch,
    ) -> Vec<&StoredEntry> {
        let changed = |e: &&StoredEntry| e.changed_seq > position;
        if let IdFilter::Exact(id) = &filter.ids {
            return self.resources.get(id).filter(changed).into_iter().collect();
        }
        let log = match search {
            ChangedSearch::Cheapest => self.changes.after(position),
            ChangedSearch::Scan => None,
        };
        let Some(log) = log else {
            // The sequence number is checked first: it sits in the map's slot, while the id
            // lives in the resource, elsewhere in memory.
            return self
                .resources
                .values()
                .filter(|e| changed(e) && filter.ids.matches(e.resource.metadata().id()))
                .collect();
        };
        // Every live resource changed after `position` has a log entry at its last change, so
        // the ids after `position` cover them all; stale entries are weeded out by the check
        // against the live entry (changed again later, destroyed, or listed twice).
        let mut ids: Vec<&str> = log.collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .filter(|id| filter.ids.matches(id))
            .filter_map(|id| self.resources.get(id))
            .filter(changed)
            .collect()
    }
}

#[cfg(test)]
mod tests;

fn event_id(event: &Event) -> &str {
    event.resource().map_or("", |r| r.metadata().id())
}
