//! Recovery: turning what the file holds for one kind into a live in-memory collection whose
//! history window and destroy markers are rebuilt from the durable change log, so that a
//! bookmark taken before a restart resumes exactly after it.
//!
//! The log holds the last changes of the kind; the resources table holds the state after the
//! last one. Undoing the log from that state gives the state just before the oldest retained
//! change (its `base`); loading that state silently and replaying the log through the ordinary
//! apply steps rebuilds the window, the markers and every resource's creation/change positions
//! exactly as they were. A watcher resuming at or after `base` is then served exactly (or by
//! catch-up); one before `base` gets a resync, because nothing older is known.

use std::collections::BTreeMap;
use std::sync::Arc;

use cosi_core::{Kind, SharedResource};

use super::file::{LoadedChange, LoadedKind};
use super::record::ChangeOp;
use crate::memory::Collection;
use crate::MemoryOptions;

/// Builds the collection of `kind` from its loaded contents.
pub(crate) fn restore(
    kind: Kind,
    loaded: LoadedKind,
    options: &MemoryOptions,
    origin: u64,
) -> Arc<Collection> {
    if let Some(collection) = replay(&kind, &loaded, options, origin) {
        return Arc::new(collection);
    }
    tracing::warn!(%kind, "the change log does not match the stored resources; watches resuming before the restart will resync");
    let collection = Collection::resumed_at(kind, options, origin, loaded.last_seq);
    {
        let mut contents = collection.write();
        for resource in loaded.resources {
            contents.load(resource);
        }
    }
    Arc::new(collection)
}

/// Rebuilds the window from the log; `None` if the log and the resources disagree.
fn replay(
    kind: &Kind,
    loaded: &LoadedKind,
    options: &MemoryOptions,
    origin: u64,
) -> Option<Collection> {
    let changes = &loaded.changes;
    let base = loaded.last_seq.checked_sub(changes.len() as u64)?;
    // The retained log must be the contiguous tail of the kind's sequence.
    let contiguous = changes
        .iter()
        .enumerate()
        .all(|(i, c)| c.seq == base + 1 + i as u64);
    if !contiguous {
        return None;
    }
    let mut state: BTreeMap<Arc<str>, SharedResource> = loaded
        .resources
        .iter()
        .map(|r| (r.metadata().pointer().shared_id().clone(), r.clone()))
        .collect();
    for change in changes.iter().rev() {
        undo(&mut state, change)?;
    }
    let collection = Collection::resumed_at(kind.clone(), options, origin, base);
    {
        let mut contents = collection.write();
        for resource in state.into_values() {
            contents.load(resource);
        }
        for change in changes {
            let seq = match change.op {
                ChangeOp::Created => contents.apply_create(change.resource.clone()),
                ChangeOp::Updated => contents.apply_update(change.resource.clone()),
                ChangeOp::Destroyed => contents.apply_destroy(change.resource.metadata().pointer()),
            }
            .ok()?;
            debug_assert_eq!(seq, change.seq);
        }
        // The replayed state must be the stored one, version for version.
        if contents.len() != loaded.resources.len() {
            return None;
        }
        for resource in &loaded.resources {
            let replayed = contents.get(resource.metadata().id())?;
            if replayed.metadata().version() != resource.metadata().version() {
                return None;
            }
        }
    }
    Some(collection)
}

fn undo(state: &mut BTreeMap<Arc<str>, SharedResource>, change: &LoadedChange) -> Option<()> {
    let id = change.resource.metadata().pointer().shared_id().clone();
    match change.op {
        ChangeOp::Created => state.remove(&id).map(|_| ()),
        ChangeOp::Updated => {
            let old = change.old.clone()?;
            state.insert(id, old).map(|_| ())
        }
        ChangeOp::Destroyed => match state.insert(id, change.resource.clone()) {
            None => Some(()),
            Some(_) => None,
        },
    }
}
