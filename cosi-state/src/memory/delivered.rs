//! [`Delivered`]: what a label-filtered watcher's consumer holds, so that a catch-up after it
//! fell behind the window is relative to what it saw.
//!
//! Without a label filter the store can tell what a watcher holds from the history it keeps:
//! every resource that existed at the watcher's position (and passes the id filter, which cannot
//! change). A label filter can: a resource may have matched at the position and not now, or the
//! reverse, and the store does not keep every past state. So a label-filtered watcher keeps the
//! ids its consumer holds — those that matched at its position — and updates them with every
//! event it queues: `Created` adds, `Destroyed` removes, `Resync` clears.
//!
//! The set is bounded by the resources that matched the filter at the watcher's position: an id
//! enters only with a `Created` of a live resource and leaves with the `Destroyed` that reports
//! its destruction or its leaving the filter, which the watcher queues (exactly, or in a
//! catch-up) when its position passes that change. It holds ids only (each shared with the
//! stored resource's `Arc<str>`), never resource values.

use std::collections::HashSet;
use std::sync::Arc;

use cosi_core::Event;

/// What a watcher's consumer holds, as far as a catch-up needs to know.
#[derive(Debug)]
pub(crate) enum Delivered {
    /// No label filter: what existed at the watcher's position (the contents know that).
    Untracked,
    /// The ids of the resources the consumer holds: those that matched at its position.
    Ids(HashSet<Arc<str>>),
    /// Not known (a watch resumed from a position older than the window, where what matched
    /// cannot be worked out): its catch-up is a resync, after which the set is known.
    Unknown,
}

impl Delivered {
    /// Whether the consumer holds `id`, or `None` when it is untracked.
    pub(crate) fn holds(&self, id: &str) -> Option<bool> {
        match self {
            Delivered::Untracked => None,
            Delivered::Ids(ids) => Some(ids.contains(id)),
            Delivered::Unknown => Some(false),
        }
    }

    /// Whether events change it (it is not [`Delivered::Untracked`]).
    pub(crate) fn is_tracked(&self) -> bool {
        !matches!(self, Delivered::Untracked)
    }

    /// Whether a catch-up cannot be computed and must resync.
    pub(crate) fn is_unknown(&self) -> bool {
        matches!(self, Delivered::Unknown)
    }

    /// Records an event the consumer will receive.
    pub(crate) fn apply(&mut self, event: &Event) {
        match (&mut *self, event) {
            (Delivered::Untracked, _) => {}
            (_, Event::Resync { .. }) => *self = Delivered::Ids(HashSet::new()),
            (Delivered::Unknown, _) => {}
            (Delivered::Ids(ids), Event::Created { resource, .. }) => {
                ids.insert(resource.metadata().pointer().shared_id().clone());
            }
            (Delivered::Ids(ids), Event::Destroyed { resource, .. }) => {
                ids.remove(resource.metadata().id());
            }
            (Delivered::Ids(_), _) => {}
        }
    }

    /// How many ids it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match self {
            Delivered::Ids(ids) => ids.len(),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{Bookmark, DynamicResource, Metadata, Pointer, SharedResource};

    fn resource(id: &str) -> SharedResource {
        Arc::new(DynamicResource {
            metadata: Metadata::new(Pointer::new("ns", "T.test.cosi.dev", id)),
            spec: serde_json::Value::Null,
        })
    }

    fn created(id: &str) -> Event {
        Event::Created {
            resource: resource(id),
            bookmark: Bookmark::at(1, 1),
            compacted: false,
        }
    }

    fn destroyed(id: &str) -> Event {
        Event::Destroyed {
            resource: resource(id),
            bookmark: Bookmark::at(1, 1),
            compacted: true,
        }
    }

    #[test]
    fn created_adds_destroyed_removes_and_resync_clears() {
        let mut delivered = Delivered::Ids(HashSet::new());
        delivered.apply(&created("a"));
        delivered.apply(&created("b"));
        delivered.apply(&destroyed("a"));
        assert_eq!(
            (delivered.holds("a"), delivered.holds("b")),
            (Some(false), Some(true))
        );
        delivered.apply(&Event::Resync {
            bookmark: Bookmark::at(1, 2),
        });
        assert_eq!((delivered.holds("b"), delivered.len()), (Some(false), 0));
    }

    #[test]
    fn an_unknown_set_is_known_after_a_resync() {
        let mut delivered = Delivered::Unknown;
        delivered.apply(&created("a"));
        assert!(delivered.is_unknown());
        delivered.apply(&Event::Resync {
            bookmark: Bookmark::at(1, 2),
        });
        delivered.apply(&created("a"));
        assert_eq!(delivered.holds("a"), Some(true));
        assert!(!delivered.is_unknown());
    }

    #[test]
    fn an_untracked_watcher_holds_nothing_here() {
        let mut delivered = Delivered::Untracked;
        delivered.apply(&created("a"));
        assert_eq!(delivered.holds("a"), None);
    }
}
