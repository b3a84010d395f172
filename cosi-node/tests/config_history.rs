//! The config history: one entry per change, newest last, bounded.

mod config_support;

/// One history row: id, mode, actor, active and persisted versions, summary.
type Row<'a> = (String, &'a str, &'a str, Option<u64>, Option<u64>, &'a str);

use config_support::{Node, LIVE_PATCH, RESTART_PATCH};
use cosi_core::{table, ResourceSpec};
use cosi_node::config::{history_id, ApplyMode, ApplyRequest, ConfigHistory, HISTORY_LIMIT};

/// Applies [`LIVE_PATCH`] as `actor`, in no-reboot mode.
async fn apply_live_patch(node: &Node, actor: &str) {
    node.applier
        .apply(ApplyRequest::patches(
            [LIVE_PATCH],
            ApplyMode::NoReboot,
            actor,
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn every_applied_change_is_one_history_entry_with_mode_actor_versions_and_summary() {
    let node = Node::with_base().await;
    apply_live_patch(&node, "alice").await;
    node.applier
        .apply(ApplyRequest::patches(
            [RESTART_PATCH],
            ApplyMode::Staged,
            "bob",
        ))
        .await
        .unwrap();
    let history = node.history().await;
    let rows: Vec<Row> = history
        .iter()
        .map(|h| {
            (
                h.metadata.id().to_string(),
                h.spec.mode.as_str(),
                h.spec.actor.as_str(),
                h.spec.active_version,
                h.spec.persisted_version,
                h.spec.summary.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                history_id(1),
                "no-reboot",
                "setup",
                Some(1),
                Some(1),
                "+37 -0: v1alpha1, ServiceConfig/web"
            ),
            (
                history_id(2),
                "no-reboot",
                "alice",
                Some(2),
                Some(2),
                "+1 -0: machine.nodeLabels.tier"
            ),
            (
                history_id(3),
                "staged",
                "bob",
                Some(2),
                Some(3),
                "+1 -1: machine.type"
            ),
        ]
    );
}

#[tokio::test]
async fn dry_runs_rejections_and_no_op_applies_leave_no_history() {
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches([LIVE_PATCH], ApplyMode::NoReboot, "a").dry_run())
        .await
        .unwrap();
    node.applier
        .apply(ApplyRequest::patches(
            [RESTART_PATCH],
            ApplyMode::NoReboot,
            "a",
        ))
        .await
        .unwrap_err();
    node.applier
        .apply(ApplyRequest::patches([""], ApplyMode::NoReboot, "a"))
        .await
        .unwrap();
    assert_eq!(node.history().await.len(), 1);
}

#[tokio::test]
async fn the_history_keeps_only_the_newest_entries() {
    let node = Node::with_base().await;
    for i in 0..HISTORY_LIMIT + 3 {
        node.applier
            .apply(ApplyRequest::patches(
                [format!("machine:\n  nodeLabels:\n    n: '{i}'\n")],
                ApplyMode::NoReboot,
                "loop",
            ))
            .await
            .unwrap();
    }
    let history = node.history().await;
    assert_eq!(history.len(), HISTORY_LIMIT);
    let total = HISTORY_LIMIT as u64 + 4;
    assert_eq!(
        history.first().unwrap().spec.sequence,
        total - HISTORY_LIMIT as u64 + 1
    );
    assert_eq!(history.last().unwrap().spec.sequence, total);
    assert_eq!(history.last().unwrap().metadata.id(), history_id(total));
}

#[tokio::test]
async fn history_entries_name_fields_but_never_values() {
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches(
            ["machine:\n  token: n3w-s3cr3t\n"],
            ApplyMode::Staged,
            "admin",
        ))
        .await
        .unwrap();
    let yaml = cosi_core::dynamic::to_yaml(&**node.history().await.last().unwrap()).unwrap();
    assert!(
        yaml.contains("- machine.token") && !yaml.contains("s3cr3t"),
        "{yaml}"
    );
    assert_eq!(
        ConfigHistory::definition().sensitivity,
        cosi_core::Sensitivity::Public
    );
}

#[tokio::test]
async fn the_history_prints_as_a_table() {
    let node = Node::with_base().await;
    let list = node
        .state
        .list(&ConfigHistory::kind(), &Default::default())
        .await
        .unwrap();
    let text = table::render(&ConfigHistory::definition(), &list).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "TYPE",
            "ID",
            "VERSION",
            "Time",
            "Mode",
            "Actor",
            "Active",
            "Persisted",
            "Changes"
        ]
    );
    assert!(
        text.lines().nth(1).unwrap().contains(
            "no-reboot   setup   1        1           +37 -0: v1alpha1, ServiceConfig/web"
        ),
        "{text}"
    );
}

/// The node's event log puts a config change before the services' reactions to it by this time
/// (its event is recorded only once the entry exists, after the writes the services react to).
#[tokio::test]
async fn an_entry_is_timed_before_the_config_writes_it_records() {
    let node = Node::with_base().await;
    apply_live_patch(&node, "alice").await;
    let entry = node.history().await.pop().unwrap();
    let time = humantime::parse_rfc3339(&entry.spec.time).unwrap();
    for id in [cosi_node::config::ACTIVE, cosi_node::config::PERSISTED] {
        let written = node.config(id).await.unwrap().metadata.updated();
        assert!(
            time <= written,
            "entry at {} after the {id} write at {}",
            entry.spec.time,
            humantime::format_rfc3339_nanos(written)
        );
    }
}
