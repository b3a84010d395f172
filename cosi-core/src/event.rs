//! Watch events and bookmarks, and [`Watch`], the receiving end every backend returns.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

use async_trait::async_trait;

use crate::{Bookmark, Error, SharedResource};

/// One thing a watcher learns.
///
/// Events are relative to what the watcher *holds*: the resources its earlier events built (a
/// `Created` adds one, a `Destroyed` removes one, a `Resync` drops them all). A watch with a
/// bootstrap starts holding nothing and builds its view from the bootstrap; one without starts
/// holding what matched its filter where it starts (the current contents, or the contents at
/// its `since` or `tail` position), which is what its exact events assume. So a consumer can
/// apply every event to a map by id without ever meeting a `Created` for an id it has, or an
/// `Updated` or `Destroyed` for one it has not.
///
/// # Catch-ups
///
/// `compacted` is set on the events of a catch-up: the watcher fell behind the exact history
/// window, and instead of every change it missed it receives, at once and in id order, one event
/// per resource that changed since its position, carrying the latest state, relative to what it
/// holds and to its label and id filters:
///
/// - `Created` for a resource it does not hold that exists and matches now (created, or entered
///   the filter, while it lagged);
/// - `Updated { old: None }` for one it holds that still matches (the store no longer knows
///   which version it last saw);
/// - `Destroyed` for one it holds that is gone (with its last state) or no longer matches (with
///   the current state, which does not match);
/// - nothing for one it does not hold and that does not match now — it never matched while the
///   watcher looked, or it was created and destroyed within the gap.
///
/// Intermediate versions are skipped. Every event of a catch-up carries the bookmark of the head
/// it was computed at: the batch is resumable from its end, not from its middle. Then live
/// events follow. When a catch-up cannot be computed (the destroy markers it needs were
/// dropped, or a filtered watch resumed from a position older than the window, where what it
/// held is unknown), the watcher receives [`Event::Resync`] instead.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::Arc;
/// use cosi_core::{Bookmark, DynamicResource, Event, Metadata, Pointer, SharedResource};
///
/// /// What a consumer holds, kept from the events alone.
/// fn apply(view: &mut BTreeMap<String, SharedResource>, event: Event) {
///     match event {
///         Event::Created { resource, .. } | Event::Updated { resource, .. } => {
///             view.insert(resource.metadata().id().to_string(), resource);
///         }
///         Event::Destroyed { resource, .. } => {
///             view.remove(resource.metadata().id());
///         }
///         Event::Resync { .. } => view.clear(),
///         _ => {}
///     }
/// }
///
/// let resource = |id: &str| -> SharedResource {
///     Arc::new(DynamicResource {
///         metadata: Metadata::new(Pointer::new("ns", "Things.test.cosi.dev", id)),
///         spec: serde_json::Value::Null,
///     })
/// };
/// let mut view = BTreeMap::new();
/// let at = Bookmark::from_bytes(b"head");
/// apply(&mut view, Event::Created { resource: resource("a"), bookmark: at.clone(), compacted: false });
/// // A catch-up: `b` entered the filter while the watcher lagged, `a` left it.
/// apply(&mut view, Event::Destroyed { resource: resource("a"), bookmark: at.clone(), compacted: true });
/// apply(&mut view, Event::Created { resource: resource("b"), bookmark: at, compacted: true });
/// assert_eq!(view.keys().collect::<Vec<_>>(), ["b"]);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// The resource appeared (or, with a label/id filter, started to match).
    Created {
        /// Its state.
        resource: SharedResource,
        /// Position of this event.
        bookmark: Bookmark,
        /// Part of a catch-up.
        compacted: bool,
    },
    /// The resource changed.
    Updated {
        /// The previous state; `None` only in a catch-up.
        old: Option<SharedResource>,
        /// The new state.
        resource: SharedResource,
        /// Position of this event.
        bookmark: Bookmark,
        /// Part of a catch-up.
        compacted: bool,
    },
    /// The resource is gone (or, with a filter, stopped matching).
    Destroyed {
        /// Its last state.
        resource: SharedResource,
        /// Position of this event.
        bookmark: Bookmark,
        /// Part of a catch-up.
        compacted: bool,
    },
    /// The initial contents were all delivered; live events follow.
    Bootstrapped {
        /// Position of the contents just delivered.
        bookmark: Bookmark,
    },
    /// The watcher's view cannot be repaired by a catch-up: drop it. A `Created` event for
    /// every resource that matches the watch's filters now follows (in id order), then
    /// `Bootstrapped`, then live events relative to that new view.
    Resync {
        /// Position of the contents that follow.
        bookmark: Bookmark,
    },
    /// The watch failed; it ends after this event.
    Errored {
        /// What went wrong.
        error: Error,
    },
    /// Nothing changed for this watcher; only the position moved (used to hand out bookmarks).
    /// A label- or id-filtered kind watch receives one when changes its filter skipped moved
    /// its position past its last bookmark, so that bookmark stays resumable.
    Noop {
        /// The new position.
        bookmark: Bookmark,
    },
}

impl Event {
    /// The event's bookmark (`None` for errors).
    pub fn bookmark(&self) -> Option<&Bookmark> {
        match self {
            Event::Created { bookmark, .. }
            | Event::Updated { bookmark, .. }
            | Event::Destroyed { bookmark, .. }
            | Event::Bootstrapped { bookmark }
            | Event::Resync { bookmark }
            | Event::Noop { bookmark } => Some(bookmark),
            Event::Errored { .. } => None,
        }
    }

    /// The resource the event carries (the new state, or the last one for `Destroyed`).
    pub fn resource(&self) -> Option<&SharedResource> {
        match self {
            Event::Created { resource, .. }
            | Event::Updated { resource, .. }
            | Event::Destroyed { resource, .. } => Some(resource),
            _ => None,
        }
    }

    /// Whether this event belongs to a catch-up.
    pub fn is_compacted(&self) -> bool {
        matches!(
            self,
            Event::Created {
                compacted: true,
                ..
            } | Event::Updated {
                compacted: true,
                ..
            } | Event::Destroyed {
                compacted: true,
                ..
            }
        )
    }

    /// A short name of the event type: `created`, `updated`, `destroyed`, `bootstrapped`,
    /// `resync`, `errored`, `noop`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::Created { .. } => "created",
            Event::Updated { .. } => "updated",
            Event::Destroyed { .. } => "destroyed",
            Event::Bootstrapped { .. } => "bootstrapped",
            Event::Resync { .. } => "resync",
            Event::Errored { .. } => "errored",
            Event::Noop { .. } => "noop",
        }
    }
}

/// What a backend implements to feed a [`Watch`].
#[async_trait]
pub trait EventSource: Send {
    /// The next event, or `None` once the watch has ended.
    async fn next(&mut self) -> Option<Event>;

    /// Every event available now (at least one, waiting for it if needed), at most `max`.
    /// `None` once the watch has ended.
    async fn next_batch(&mut self, max: usize) -> Option<Vec<Event>> {
        let _ = max;
        self.next().await.map(|e| vec![e])
    }

    /// Like [`EventSource::next_batch`], as an [`EventBatch`]: a backend that hands the same
    /// events to many watchers can give each a view of one shared buffer instead of a copy.
    async fn next_shared_batch(&mut self, max: usize) -> Option<EventBatch> {
        self.next_batch(max).await.map(EventBatch::from)
    }
}

/// A batch of events from [`Watch::recv_shared`]: a read-only slice that may be shared with
/// the other watchers of the same changes.
///
/// Handing one buffer to every watcher of a kind, instead of a copy each, saves a watcher the
/// reference-count traffic of cloning and dropping every resource it is shown — the cost that
/// dominates a wide fan-out once the watchers run on more than one core. A consumer that wants
/// to keep events clones the ones it keeps (or the whole batch with [`EventBatch::into_vec`]).
///
/// ```
/// use std::sync::Arc;
/// use cosi_core::{Bookmark, Event, EventBatch};
///
/// let events: Arc<[Event]> = (1..=3)
///     .map(|seq| Event::Noop { bookmark: Bookmark::at(7, seq) })
///     .collect();
/// // Two watchers, each with its own part of the same buffer.
/// let first = EventBatch::shared(events.clone(), 0..2);
/// let second = EventBatch::shared(events, 1..3);
/// assert_eq!(first.len(), 2);
/// assert_eq!(second[0].bookmark(), Some(&Bookmark::at(7, 2)));
/// // Owned batches (from backends that do not share) read the same way.
/// let owned = EventBatch::from(vec![Event::Noop { bookmark: Bookmark::at(7, 9) }]);
/// assert_eq!(owned.iter().count(), 1);
/// assert_eq!(second.into_vec().len(), 2);
/// ```
#[derive(Clone)]
pub struct EventBatch {
    repr: BatchRepr,
}

#[derive(Clone)]
enum BatchRepr {
    Owned(Vec<Event>),
    Shared {
        events: Arc<[Event]>,
        range: Range<usize>,
    },
}

impl EventBatch {
    /// The events of `range` within `events` (clamped to the buffer: an out-of-range part is
    /// left out, never a panic).
    pub fn shared(events: Arc<[Event]>, range: Range<usize>) -> Self {
        let end = range.end.min(events.len());
        let start = range.start.min(end);
        EventBatch {
            repr: BatchRepr::Shared {
                events,
                range: start..end,
            },
        }
    }

    /// The events as a vector of their own (a copy of each event when shared: one
    /// reference-count increment per resource).
    pub fn into_vec(self) -> Vec<Event> {
        match self.repr {
            BatchRepr::Owned(events) => events,
            BatchRepr::Shared { events, range } => events[range].to_vec(),
        }
    }
}

impl From<Vec<Event>> for EventBatch {
    fn from(events: Vec<Event>) -> Self {
        EventBatch {
            repr: BatchRepr::Owned(events),
        }
    }
}

impl Deref for EventBatch {
    type Target = [Event];

    fn deref(&self) -> &[Event] {
        match &self.repr {
            BatchRepr::Owned(events) => events,
            BatchRepr::Shared { events, range } => &events[range.clone()],
        }
    }
}

impl<'a> IntoIterator for &'a EventBatch {
    type Item = &'a Event;
    type IntoIter = std::slice::Iter<'a, Event>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl fmt::Debug for EventBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The receiving end of a watch. Dropping it cancels the watch.
pub struct Watch {
    source: Box<dyn EventSource>,
}

impl Watch {
    /// Wraps a backend's event source.
    pub fn new(source: impl EventSource + 'static) -> Self {
        Watch {
            source: Box::new(source),
        }
    }

    /// The next event; `None` once the watch has ended. Cancellation-safe in `select!` as long as
    /// the backend's source is (every backend in this project is).
    pub async fn recv(&mut self) -> Option<Event> {
        self.source.next().await
    }

    /// The events available now, as one batch of at most `max` (aggregated delivery).
    pub async fn recv_batch(&mut self, max: usize) -> Option<Vec<Event>> {
        self.source.next_batch(max.max(1)).await
    }

    /// The events available now, as one read-only batch of at most `max` that may share its
    /// buffer with the other watchers of the same changes: the cheapest way to consume a watch
    /// that many others also follow (see [`EventBatch`]). The same events as
    /// [`Watch::recv_batch`], in the same order.
    pub async fn recv_shared(&mut self, max: usize) -> Option<EventBatch> {
        self.source.next_shared_batch(max.max(1)).await
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Watch")
    }
}
