//! What a watcher wants to see: an id filter (exact id for pointer watches, a regex for kind
//! watches) and label queries, and how a change looks through them — an update that makes a
//! resource start matching is seen as `Created`, one that makes it stop matching as `Destroyed`.

use std::sync::Arc;

use cosi_core::{AnyResource, Bookmark, Event, IdQuery, LabelQueries};

use super::history::{Change, ChangeOp};

/// Which ids a watcher follows.
#[derive(Clone, Debug)]
pub(crate) enum IdFilter {
    /// Every id.
    All,
    /// Exactly one id (pointer watches).
    Exact(Arc<str>),
    /// Ids matching a regex.
    Query(IdQuery),
}

impl IdFilter {
    /// Whether `id` passes.
    pub(crate) fn matches(&self, id: &str) -> bool {
        match self {
            IdFilter::All => true,
            IdFilter::Exact(want) => **want == *id,
            IdFilter::Query(query) => query.matches(id),
        }
    }
}

/// The id and label filter of one watcher (or list).
#[derive(Clone, Debug)]
pub(crate) struct WatchFilter {
    pub(crate) ids: IdFilter,
    pub(crate) labels: LabelQueries,
}

impl WatchFilter {
    /// From the id and label options of a list or kind watch.
    pub(crate) fn new(ids: Option<&IdQuery>, labels: &LabelQueries) -> Self {
        WatchFilter {
            ids: ids.map_or(IdFilter::All, |q| IdFilter::Query(q.clone())),
            labels: labels.clone(),
        }
    }

    /// Whether the filter has a label part (the only part that can change with a write).
    pub(crate) fn has_labels(&self) -> bool {
        !self.labels.is_empty()
    }

    /// Whether everything passes (no id filter, no label filter): then every change is seen
    /// as it happened ([`Change::event`]).
    pub(crate) fn passes_everything(&self) -> bool {
        matches!(self.ids, IdFilter::All) && !self.has_labels()
    }

    /// Whether the resource's labels pass.
    pub(crate) fn labels_match(&self, resource: &dyn AnyResource) -> bool {
        self.labels.matches(resource.metadata().labels())
    }

    /// Whether the resource passes both parts.
    pub(crate) fn matches(&self, resource: &dyn AnyResource) -> bool {
        self.ids.matches(resource.metadata().id()) && self.labels_match(resource)
    }

    /// The event a watcher with this filter sees for `change`, if any.
    pub(crate) fn translate(&self, change: &Change, origin: u64) -> Option<Event> {
        if self.passes_everything() {
            return Some(change.event(origin));
        }
        if !self.ids.matches(change.resource.metadata().id()) {
            return None;
        }
        let bookmark = Bookmark::at(origin, change.seq);
        let resource = change.resource.clone();
        let all_labels = !self.has_labels();
        match change.op {
            ChangeOp::Created => {
                (all_labels || self.labels_match(&*resource)).then_some(Event::Created {
                    resource,
                    bookmark,
                    compacted: false,
                })
            }
            ChangeOp::Destroyed => {
                (all_labels || self.labels_match(&*resource)).then_some(Event::Destroyed {
                    resource,
                    bookmark,
                    compacted: false,
                })
            }
            ChangeOp::Updated => {
                let old = change.old.as_ref();
                let (was, is) = if all_labels {
                    (true, true)
                } else {
                    (
                        old.is_some_and(|o| self.labels_match(&**o)),
                        self.labels_match(&*resource),
                    )
                };
                match (was, is) {
                    (true, true) => Some(Event::Updated {
                        old: old.cloned(),
                        resource,
                        bookmark,
                        compacted: false,
                    }),
                    (false, true) => Some(Event::Created {
                        resource,
                        bookmark,
                        compacted: false,
                    }),
                    // The resource left the filter: the watcher sees it go, with the state that
                    // no longer matches (the state at this bookmark).
                    (true, false) => Some(Event::Destroyed {
                        resource,
                        bookmark,
                        compacted: false,
                    }),
                    (false, false) => None,
                }
            }
        }
    }
}
