//! The life of a config, told as an operator sees it (`get -o yaml`, `get` tables, apply
//! results): applied, patched, dry-run with its diff, rejected with its path, tried and rolled
//! back, and the history after it. Run with `--nocapture` to read the transcript; the
//! assertions check what it must show.

mod config_support;

use std::fmt::Write;
use std::time::Duration;

use config_support::{Node, BASE};
use cosi_core::{dynamic, table, ResourceSpec, StateExt};
use cosi_node::config::{
    ApplyMode, ApplyOutcome, ApplyRequest, ConfigHistory, MachineConfig, ACTIVE,
};

fn outcome(out: &mut String, command: &str, result: &ApplyOutcome) {
    writeln!(out, "$ {command}").unwrap();
    for w in &result.warnings {
        writeln!(out, "warning: {w}").unwrap();
    }
    writeln!(out, "{}", result.details).unwrap();
    writeln!(
        out,
        "(mode {}, active v{}, persisted v{})\n",
        result.mode,
        result.active_version.map_or(0, |v| v.get()),
        result.persisted_version.map_or(0, |v| v.get())
    )
    .unwrap();
}

async fn get_mc(node: &Node, out: &mut String) {
    let mc = node
        .state
        .get(&MachineConfig::pointer(ACTIVE))
        .await
        .unwrap();
    writeln!(
        out,
        "$ cosictl get mc active -o yaml\n{}",
        dynamic::to_yaml(&*mc).unwrap()
    )
    .unwrap();
}

async fn get_history(node: &Node, out: &mut String) {
    let list = node
        .state
        .list(&ConfigHistory::kind(), &Default::default())
        .await
        .unwrap();
    writeln!(
        out,
        "$ cosictl get confighistory\n{}",
        table::render(&ConfigHistory::definition(), &list).unwrap()
    )
    .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_config_applied_patched_dry_run_rejected_tried_and_rolled_back_leaves_its_history() {
    let node = Node::new();
    let mut out = String::new();

    let applied = node
        .applier
        .apply(ApplyRequest::config(BASE, ApplyMode::Auto, "admin@laptop"))
        .await
        .unwrap();
    outcome(&mut out, "cosictl apply-config -f node.yaml", &applied);
    get_mc(&node, &mut out).await;

    let patched = node
        .applier
        .apply(
            ApplyRequest::patches(
                ["machine:\n  nodeLabels:\n    tier: gold\n"],
                ApplyMode::NoReboot,
                "admin@laptop",
            )
            .expect_version(cosi_core::Version::new(1)),
        )
        .await
        .unwrap();
    outcome(
        &mut out,
        "cosictl patch mc --mode no-reboot -p '{machine: {nodeLabels: {tier: gold}}}'",
        &patched,
    );

    let dry = node.applier
        .apply(ApplyRequest::patches([r#"[{"op": "replace", "path": "/machine/kubelet/extraArgs/max-pods", "value": "250"}]"#], ApplyMode::Auto, "admin@laptop").dry_run())
        .await
        .unwrap();
    outcome(&mut out, "cosictl patch mc --dry-run -p '[{\"op\": \"replace\", \"path\": \"/machine/kubelet/extraArgs/max-pods\", \"value\": \"250\"}]'", &dry);

    let rejected = node.applier
        .apply(ApplyRequest::patches(["machine:\n  nodeLabels:\n    bad key: x\n  network:\n    interfaces:\n    - interface: eth0\n      addresses: [192.0.2.300/24]\n"], ApplyMode::NoReboot, "admin@laptop"))
        .await
        .unwrap_err();
    writeln!(out, "$ cosictl patch mc -p @bad.yaml\nerror: {rejected}\n").unwrap();

    let tried = node
        .applier
        .apply(
            ApplyRequest::patches(
                ["machine:\n  nodeLabels:\n    canary: 'true'\n"],
                ApplyMode::Try,
                "admin@laptop",
            )
            .try_timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    outcome(
        &mut out,
        "cosictl patch mc --mode try --timeout 1m -p '{machine: {nodeLabels: {canary: \"true\"}}}'",
        &tried,
    );
    tokio::time::advance(Duration::from_secs(61)).await;
    node.state
        .watch_for(&MachineConfig::pointer(ACTIVE), |r| {
            r.is_some_and(|r| r.metadata().version().get() == 4)
        })
        .await
        .unwrap();
    writeln!(out, "(one minute later the try is rolled back)\n").unwrap();
    get_mc(&node, &mut out).await;
    get_history(&node, &mut out).await;
    println!("{out}");

    assert!(
        dry.details
            .contains("-      max-pods: '110'\n+      max-pods: '250'"),
        "{}",
        dry.details
    );
    assert!(rejected.to_string().starts_with("MachineConfig: invalid machine.nodeLabels[\"bad key\"], machine.network.interfaces[0].addresses[1]: 2 problems"), "{rejected}");
    let history = node.history().await;
    let modes: Vec<&str> = history.iter().map(|h| h.spec.mode.as_str()).collect();
    assert_eq!(modes, ["no-reboot", "no-reboot", "try", "rollback"]);
    let active = node
        .state
        .get_typed::<MachineConfig>(&MachineConfig::pointer(ACTIVE))
        .await
        .unwrap();
    assert!(active
        .spec
        .config()
        .machine()
        .node_labels
        .contains_key("tier"));
    assert!(!active
        .spec
        .config()
        .machine()
        .node_labels
        .contains_key("canary"));
}
