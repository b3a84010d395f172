//! Watch events and bookmarks, and [`Watch`], the receiving end every backend returns.

use std::fmt;

use async_trait::async_trait;

use crate::{Bookmark, Error, SharedResource};

/// One thing a watcher learns.
///
/// `compacted` is set on events of a catch-up: the watcher fell behind the exact history window
/// and receives one event per changed resource carrying its latest state; intermediate versions
/// were skipped. A compacted `Updated` has no `old` (the store no longer knows which version the
/// watcher last saw).
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
    /// The watcher's view cannot be repaired by a catch-up: drop it. A full set of `Created`
    /// events follows, then `Bootstrapped`, then live events.
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
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Watch")
    }
}
