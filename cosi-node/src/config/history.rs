//! Writing the [`ConfigHistory`]: one entry per change of the machine config, the newest
//! [`HISTORY_LIMIT`] kept. Only the apply path (and the node's own rollback and start) write
//! it; readers `get confighistory`.

use std::time::SystemTime;

use cosi_core::{
    CreateOptions, DestroyOptions, ListOptions, Resource, ResourceSpec, Result, State, StateExt,
    Version,
};

use super::diff::ConfigDiff;
use super::resources::ConfigHistory;
use super::HISTORY_LIMIT;

/// What one history entry records (the sequence number and time are added when written).
pub(crate) struct Change<'a> {
    pub mode: &'a str,
    pub actor: &'a str,
    pub active: Option<Version>,
    pub persisted: Option<Version>,
    pub diff: &'a ConfigDiff,
    /// When the change took effect: taken before its first write, so the change's event is
    /// older than every reaction to it (see [`crate::node::NodeEvents`]).
    pub at: SystemTime,
}

/// The id of the entry with `sequence`: zero-padded so id order is time order.
pub fn history_id(sequence: u64) -> String {
    format!("{sequence:08}")
}

/// Appends an entry and destroys the oldest beyond [`HISTORY_LIMIT`].
pub(crate) async fn record(state: &dyn State, change: Change<'_>) -> Result<()> {
    let kind = ConfigHistory::kind();
    let existing = state
        .list_typed::<ConfigHistory>(&kind, &ListOptions::default())
        .await?;
    let sequence = existing.last().map_or(1, |e| e.spec.sequence + 1);
    let entry = ConfigHistory {
        sequence,
        time: humantime::format_rfc3339_millis(change.at).to_string(),
        mode: change.mode.to_string(),
        actor: change.actor.to_string(),
        active_version: change.active.map(|v| v.get()),
        persisted_version: change.persisted.map(|v| v.get()),
        summary: change.diff.summary(),
        changed: change.diff.changed.clone(),
        lines_added: change.diff.lines_added,
        lines_removed: change.diff.lines_removed,
    };
    let resource = Resource::new(history_id(sequence), entry);
    state
        .create(resource.into_shared(), CreateOptions::default())
        .await?;
    let excess = (existing.len() + 1).saturating_sub(HISTORY_LIMIT);
    for old in existing.iter().take(excess) {
        match state
            .destroy(old.metadata.pointer(), DestroyOptions::default())
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
