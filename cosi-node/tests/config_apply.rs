//! The apply entry point: modes, dry run, try rollback and confirmation (paused clock),
//! concurrency, expected versions, atomicity of rejections, and the node's start.

mod config_support;

use std::sync::Arc;
use std::time::Duration;

use config_support::{Node, BASE, LIVE_PATCH, RESTART_PATCH};
use cosi_core::{
    Call, CreateOptions, DestroyOptions, Kind, ListOptions, Pointer, SharedResource, State,
    UpdateOptions, Version, Watch, WatchKindOptions, WatchOptions,
};
use cosi_node::config::{
    load_at_start, ApplyError, ApplyMode, ApplyRequest, MachineConfig, MachineRole, ACTIVE,
    PERSISTED,
};
use cosi_state::MemoryState;
use tokio::sync::Semaphore;

#[derive(Clone, Copy, Debug)]
enum Change {
    Live,
    Restart,
}

impl Change {
    fn patch(self) -> &'static str {
        match self {
            Change::Live => LIVE_PATCH,
            Change::Restart => RESTART_PATCH,
        }
    }
}

/// What one cell of the mode table expects.
#[derive(Debug)]
struct Expect {
    /// The resolved mode, or the refusal.
    result: std::result::Result<ApplyMode, &'static str>,
    active: u64,
    persisted: u64,
    /// The fields of the restart request, when one is expected.
    restart: Option<&'static [&'static str]>,
    pending_try: bool,
}

const fn ok(mode: ApplyMode, active: u64, persisted: u64) -> Expect {
    Expect {
        result: Ok(mode),
        active,
        persisted,
        restart: None,
        pending_try: false,
    }
}

const REFUSED: Expect = Expect {
    result: Err("restart required"),
    active: 1,
    persisted: 1,
    restart: None,
    pending_try: false,
};

fn expectation(mode: ApplyMode, change: Change) -> Expect {
    use ApplyMode::*;
    match (mode, change) {
        (Auto, Change::Live) => ok(NoReboot, 2, 2),
        (Auto, Change::Restart) => Expect {
            restart: Some(&["machine.type"]),
            ..ok(Reboot, 1, 2)
        },
        (NoReboot, Change::Live) => ok(NoReboot, 2, 2),
        (NoReboot, Change::Restart) => REFUSED,
        (Reboot, Change::Live) => Expect {
            restart: Some(&[]),
            ..ok(Reboot, 1, 2)
        },
        (Reboot, Change::Restart) => Expect {
            restart: Some(&["machine.type"]),
            ..ok(Reboot, 1, 2)
        },
        (Staged, _) => ok(Staged, 1, 2),
        (Try, Change::Live) => Expect {
            pending_try: true,
            ..ok(Try, 2, 1)
        },
        (Try, Change::Restart) => REFUSED,
    }
}

#[tokio::test(start_paused = true)]
async fn apply_mode_table_holds_for_every_mode_change_and_dry_run() {
    for mode in ApplyMode::ALL {
        for change in [Change::Live, Change::Restart] {
            for dry_run in [false, true] {
                let case = format!("{mode} {change:?} dry_run={dry_run}");
                // Given a node running BASE (active and persisted at version 1)
                let node = Node::with_base().await;
                let before = node.snapshot().await;
                let expect = expectation(mode, change);

                // When the change is applied in this mode
                let mut request = ApplyRequest::patches([change.patch()], mode, "admin");
                if dry_run {
                    request = request.dry_run();
                }
                let result = node.applier.apply(request).await;

                // Then the resolved mode (or the refusal) is the table's
                match (&result, expect.result) {
                    (Ok(outcome), Ok(mode)) => {
                        assert_eq!(outcome.mode, mode, "{case}");
                        assert_eq!(outcome.dry_run, dry_run, "{case}");
                    }
                    (Err(ApplyError::RestartRequired { fields, .. }), Err(_)) => {
                        assert_eq!(fields, &["machine.type"], "{case}");
                    }
                    (other, _) => panic!("{case}: {other:?}"),
                }
                if dry_run {
                    // A dry run writes nothing, restarts nothing, arms nothing.
                    assert_eq!(node.snapshot().await, before, "{case}");
                    assert!(node.restarts.taken().is_empty(), "{case}");
                    assert!(node.applier.pending_try().is_none(), "{case}");
                    continue;
                }
                assert_eq!(node.version(ACTIVE).await, Some(expect.active), "{case}");
                assert_eq!(
                    node.version(PERSISTED).await,
                    Some(expect.persisted),
                    "{case}"
                );
                let restarts: Vec<Vec<String>> = node
                    .restarts
                    .taken()
                    .into_iter()
                    .map(|r| r.fields)
                    .collect();
                match expect.restart {
                    Some(fields) => assert_eq!(restarts, [fields.to_vec()], "{case}"),
                    None => assert!(restarts.is_empty(), "{case}"),
                }
                assert_eq!(
                    node.applier.pending_try().is_some(),
                    expect.pending_try,
                    "{case}"
                );
                if expect.result.is_err() {
                    assert_eq!(node.snapshot().await, before, "{case}");
                }
            }
        }
    }
}

#[tokio::test]
async fn the_outcome_names_mode_versions_and_what_it_did() {
    let node = Node::with_base().await;
    let outcome = node
        .applier
        .apply(ApplyRequest::patches(
            [LIVE_PATCH],
            ApplyMode::Auto,
            "admin",
        ))
        .await
        .unwrap();
    assert_eq!(outcome.mode, ApplyMode::NoReboot);
    assert_eq!(outcome.details, "Applied configuration without a reboot");
    assert_eq!(outcome.active_version, Some(Version::new(2)));
    assert_eq!(outcome.persisted_version, Some(Version::new(2)));
    assert_eq!(outcome.diff.changed, ["machine.nodeLabels.tier"]);
    assert!(outcome.restart_fields.is_empty());
}

#[tokio::test]
async fn auto_with_a_restart_field_persists_and_asks_the_runtime_to_restart() {
    let node = Node::with_base().await;
    let outcome = node
        .applier
        .apply(ApplyRequest::patches(
            [RESTART_PATCH],
            ApplyMode::Auto,
            "alice",
        ))
        .await
        .unwrap();
    assert_eq!(outcome.mode, ApplyMode::Reboot);
    assert_eq!(
        outcome.details,
        "Persisted the configuration; a restart is needed for machine.type, so the node runtime restarts to apply it"
    );
    let requests = node.restarts.taken();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].persisted_version, Version::new(2));
    assert_eq!(requests[0].actor, "alice");
    let active = node.config(ACTIVE).await.unwrap();
    assert_eq!(
        active.spec.config().machine().machine_type,
        Some(MachineRole::Worker)
    );
}

#[tokio::test]
async fn no_reboot_refuses_a_restart_field_naming_it() {
    let node = Node::with_base().await;
    let patch =
        "machine:\n  type: controlplane\n  install:\n    disk: /dev/sdb\n  nodeLabels:\n    a: b\n";
    let err = node
        .applier
        .apply(ApplyRequest::patches([patch], ApplyMode::NoReboot, "admin"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MachineConfig: invalid machine.install.disk, machine.type: mode no-reboot cannot apply this change without a restart (use auto, reboot or staged)"
    );
    assert!(matches!(
        err.to_state_error(),
        cosi_core::Error::InvalidArgument { .. }
    ));
}

#[tokio::test]
async fn the_first_config_applies_live_in_auto_mode() {
    let node = Node::new();
    let outcome = node
        .applier
        .apply(ApplyRequest::config(BASE, ApplyMode::Auto, "admin"))
        .await
        .unwrap();
    assert_eq!(outcome.mode, ApplyMode::NoReboot);
    assert_eq!(
        (node.version(ACTIVE).await, node.version(PERSISTED).await),
        (Some(1), Some(1))
    );
    assert!(node.restarts.taken().is_empty());
}

#[tokio::test]
async fn try_without_an_active_config_is_refused() {
    let node = Node::new();
    let err = node
        .applier
        .apply(ApplyRequest::config(BASE, ApplyMode::Try, "admin"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("MachineConfig: invalid mode: try needs an active config"),
        "{err}"
    );
    assert_eq!(node.snapshot().await, "");
}

#[tokio::test]
async fn a_patch_without_a_config_is_refused() {
    let node = Node::new();
    let err = node
        .applier
        .apply(ApplyRequest::patches(
            [LIVE_PATCH],
            ApplyMode::Auto,
            "admin",
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MachineConfig: invalid patches: there is no config to patch: apply a whole config first"
    );
}

#[tokio::test]
async fn more_patches_than_one_apply_takes_are_refused() {
    let node = Node::with_base().await;
    let patches = vec![""; cosi_node::config::apply::MAX_PATCHES + 1];
    let err = node
        .applier
        .apply(ApplyRequest::patches(patches, ApplyMode::NoReboot, "admin"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MachineConfig: invalid patches: 65 patches are more than the 64 one apply takes"
    );
}

#[tokio::test]
async fn a_whole_config_is_stored_as_written_and_a_patch_stores_canonical_text() {
    let node = Node::new();
    let text = format!("# my node\n{BASE}");
    node.applier
        .apply(ApplyRequest::config(
            text.clone(),
            ApplyMode::NoReboot,
            "admin",
        ))
        .await
        .unwrap();
    assert_eq!(node.config(ACTIVE).await.unwrap().spec.text(), text);
    node.applier
        .apply(ApplyRequest::patches(
            [LIVE_PATCH],
            ApplyMode::NoReboot,
            "admin",
        ))
        .await
        .unwrap();
    let patched = node.config(ACTIVE).await.unwrap();
    assert!(!patched.spec.text().contains("# my node"));
    assert_eq!(patched.spec.text(), patched.spec.canonical_text());
}

#[tokio::test]
async fn an_apply_that_changes_nothing_writes_nothing() {
    let node = Node::with_base().await;
    let before = node.snapshot().await;
    let outcome = node
        .applier
        .apply(ApplyRequest::config(
            format!("# same config, new comment\n{BASE}"),
            ApplyMode::NoReboot,
            "admin",
        ))
        .await
        .unwrap();
    assert!(outcome.diff.is_empty());
    assert!(
        outcome
            .details
            .ends_with("No changes: the config was already in place."),
        "{}",
        outcome.details
    );
    assert_eq!(node.snapshot().await, before);
}

#[tokio::test]
async fn an_expected_version_that_is_not_current_is_a_conflict_and_applies_nothing() {
    let node = Node::with_base().await;
    let before = node.snapshot().await;
    let err = node
        .applier
        .apply(
            ApplyRequest::patches([LIVE_PATCH], ApplyMode::NoReboot, "admin")
                .expect_version(Version::new(7)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "config/MachineConfigs.config.cosi.dev/active: version conflict: expected 7, stored 1"
    );
    assert!(err.is_retryable());
    assert!(err.to_state_error().is_version_conflict());
    assert_eq!(node.snapshot().await, before);
}

#[tokio::test]
async fn an_expected_version_that_is_current_applies() {
    let node = Node::with_base().await;
    let outcome = node
        .applier
        .apply(
            ApplyRequest::patches([LIVE_PATCH], ApplyMode::NoReboot, "admin")
                .expect_version(Version::new(1)),
        )
        .await
        .unwrap();
    assert_eq!(outcome.active_version, Some(Version::new(2)));
}

#[tokio::test]
async fn staged_applies_build_on_the_persisted_config() {
    let node = Node::with_base().await;
    for patch in [LIVE_PATCH, "machine:\n  nodeLabels:\n    rack: r7\n"] {
        node.applier
            .apply(ApplyRequest::patches([patch], ApplyMode::Staged, "admin"))
            .await
            .unwrap();
    }
    let persisted = node.config(PERSISTED).await.unwrap();
    let labels: Vec<&String> = persisted
        .spec
        .config()
        .machine()
        .node_labels
        .keys()
        .collect();
    assert_eq!(labels, ["rack", "tier", "zone"]);
    assert_eq!(node.version(ACTIVE).await, Some(1));
    // The expected version of a staged apply is the persisted one.
    let err = node
        .applier
        .apply(
            ApplyRequest::patches([LIVE_PATCH], ApplyMode::Staged, "admin")
                .expect_version(Version::new(1)),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("persisted: version conflict: expected 1, stored 3"),
        "{err}"
    );
}

/// A state whose `get` waits at a gate while it is closed, to hold an apply mid-flight.
struct GatedState {
    inner: MemoryState,
    gate: Semaphore,
    waiting: tokio::sync::Notify,
}

impl State for GatedState {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        Call::pending(async move {
            self.waiting.notify_one();
            drop(self.gate.acquire().await.unwrap());
            self.inner.get(pointer).await
        })
    }
    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        self.inner.list(kind, options)
    }
    fn create<'a>(&'a self, r: SharedResource, o: CreateOptions) -> Call<'a, SharedResource> {
        self.inner.create(r, o)
    }
    fn update<'a>(&'a self, r: SharedResource, o: UpdateOptions) -> Call<'a, SharedResource> {
        self.inner.update(r, o)
    }
    fn destroy<'a>(&'a self, p: &'a Pointer, o: DestroyOptions) -> Call<'a, ()> {
        self.inner.destroy(p, o)
    }
    fn watch<'a>(&'a self, p: &'a Pointer, o: WatchOptions) -> Call<'a, Watch> {
        self.inner.watch(p, o)
    }
    fn watch_kind<'a>(&'a self, k: &'a Kind, o: WatchKindOptions) -> Call<'a, Watch> {
        self.inner.watch_kind(k, o)
    }
}

#[tokio::test]
async fn a_concurrent_apply_is_refused_as_in_progress() {
    // Given an apply held at its first read
    let gated = Arc::new(GatedState {
        inner: MemoryState::default(),
        gate: Semaphore::new(0),
        waiting: tokio::sync::Notify::new(),
    });
    let node = Node::over(gated.clone());
    let first = tokio::spawn({
        let applier = node.applier.clone();
        async move {
            applier
                .apply(ApplyRequest::config(BASE, ApplyMode::NoReboot, "first"))
                .await
        }
    });
    gated.waiting.notified().await;

    // When a second apply comes
    let err = node
        .applier
        .apply(ApplyRequest::config(BASE, ApplyMode::NoReboot, "second"))
        .await
        .unwrap_err();

    // Then it is refused, and the first one completes once released
    assert_eq!(
        err.to_string(),
        "MachineConfig: another apply is in progress"
    );
    assert!(matches!(err, ApplyError::InProgress) && err.is_retryable());
    gated.gate.add_permits(1000);
    let outcome = first.await.unwrap().unwrap();
    assert_eq!(outcome.active_version, Some(Version::new(1)));
    assert_eq!(node.history().await.len(), 1);
}

/// Every kind of rejection, each with the path it must name.
fn rejections() -> Vec<(&'static str, ApplyRequest, &'static str)> {
    let patch = |p: &str, mode| ApplyRequest::patches([p.to_string()], mode, "admin");
    vec![
        ("yaml syntax", ApplyRequest::config("version: [", ApplyMode::NoReboot, "admin"), "documents[0]"),
        ("unknown field", ApplyRequest::config(format!("{BASE}\nbogus: 1\n").replace("---\napiVersion", "bogus2: 0\n---\napiVersion"), ApplyMode::NoReboot, "admin"), "bogus2"),
        ("duplicate document", ApplyRequest::config(format!("{BASE}---\n{}", BASE.split("---\n").nth(1).unwrap()), ApplyMode::NoReboot, "admin"), "documents[2]"),
        ("label syntax", patch("machine:\n  nodeLabels:\n    bad key: x\n", ApplyMode::NoReboot), "machine.nodeLabels[\"bad key\"]"),
        ("cidr", patch("machine:\n  network:\n    interfaces:\n    - interface: eth0\n      addresses: [192.0.2.300/24]\n", ApplyMode::NoReboot), "machine.network.interfaces[0].addresses[1]"),
        ("unknown dependency", patch("apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ndependsOn: [db]\n", ApplyMode::NoReboot), "ServiceConfig/web.dependsOn[0]"),
        ("strategic patch shape", patch("machine:\n  network:\n    mtu: 9000\n", ApplyMode::NoReboot), "machine.network.mtu"),
        ("json patch failure", patch(r#"[{"op": "test", "path": "/machine/type", "value": "controlplane"}]"#, ApplyMode::NoReboot), "patches[0][0]"),
        ("json patch syntax", patch(r#"[{"op": "frobnicate", "path": "/machine"}]"#, ApplyMode::NoReboot), "patches[0][0]"),
        ("restart required", patch(RESTART_PATCH, ApplyMode::NoReboot), "machine.type"),
        ("restart required in try", patch(RESTART_PATCH, ApplyMode::Try), "machine.type"),
        ("version conflict", patch(LIVE_PATCH, ApplyMode::NoReboot).expect_version(Version::new(99)), "active"),
        ("patched config over the size limit", patch(&aliased_sysctls(), ApplyMode::NoReboot), "patches: the patched config would not be accepted"),
        ("patched config over the document limit", patch(&many_services(300), ApplyMode::NoReboot), "patches: the patched config would not be accepted"),
    ]
}

/// A 60 KB patch whose 40 sysctls are one 60 KB value, anchored once and aliased 39 times:
/// 2.4 MB once merged, more than a config text may be.
fn aliased_sysctls() -> String {
    let mut text = format!("machine:\n  sysctls:\n    s0: &v {}\n", "x".repeat(60_000));
    for i in 1..40 {
        text.push_str(&format!("    s{i}: *v\n"));
    }
    text
}

/// A JSON patch adding `count` service documents, more than a config text may hold.
fn many_services(count: usize) -> String {
    let ops: Vec<String> = (0..count)
        .map(|i| {
            format!(
                r#"{{"op": "add", "path": "/$docs/ServiceConfig/s{i}", "value": {{"command": "/bin/true"}}}}"#
            )
        })
        .collect();
    format!("[{}]", ops.join(","))
}

#[tokio::test(start_paused = true)]
async fn a_rejected_apply_changes_nothing_anywhere_for_every_kind_of_rejection() {
    // Given a node running BASE with a try pending
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches(
            ["machine:\n  nodeLabels:\n    tried: 'yes'\n"],
            ApplyMode::Try,
            "admin",
        ))
        .await
        .unwrap();
    let pending = node.applier.pending_try().unwrap();
    let before = node.snapshot().await;

    for (name, request, path) in rejections() {
        // When the apply is rejected
        let err = node.applier.apply(request).await.unwrap_err();
        // Then the error names the path, and nothing changed: configs, history, the try
        assert!(err.to_string().contains(path), "{name}: {err}");
        assert_eq!(node.snapshot().await, before, "{name}");
        assert_eq!(node.applier.pending_try(), Some(pending), "{name}");
        assert!(node.restarts.taken().is_empty(), "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn try_rolls_back_after_its_timeout() {
    // Given a try with a 30 s timeout
    let node = Node::with_base().await;
    let outcome = node
        .applier
        .apply(
            ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin")
                .try_timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert!(
        outcome
            .details
            .ends_with("will be automatically reverted back in 30s"),
        "{}",
        outcome.details
    );
    assert_eq!(node.version(ACTIVE).await, Some(2));

    // When 29 s pass, it is still there
    tokio::time::advance(Duration::from_secs(29)).await;
    settle().await;
    assert_eq!(node.version(ACTIVE).await, Some(2));
    assert!(node.applier.pending_try().is_some());

    // Then past 30 s the active config is the one from before the try
    tokio::time::advance(Duration::from_secs(2)).await;
    wait_for_active_version(&node, 3).await;
    let active = node.config(ACTIVE).await.unwrap();
    assert!(!active
        .spec
        .config()
        .machine()
        .node_labels
        .contains_key("tier"));
    assert_eq!(node.version(PERSISTED).await, Some(1));
    assert!(node.applier.pending_try().is_none());
    let history = node.history().await;
    let last = &history.last().unwrap().spec;
    assert_eq!(
        (last.mode.as_str(), last.actor.as_str()),
        ("rollback", "node")
    );
    assert_eq!(last.changed, ["machine.nodeLabels.tier"]);
}

#[tokio::test(start_paused = true)]
async fn a_try_longer_than_a_day_is_refused_and_changes_nothing() {
    let node = Node::with_base().await;
    let before = node.snapshot().await;
    // A day is accepted (and left to roll back)...
    node.applier
        .apply(
            ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin")
                .dry_run()
                .try_timeout(Duration::from_secs(24 * 60 * 60)),
        )
        .await
        .unwrap();
    // ...a second more is not; the far end of the range is no panic either.
    for timeout in [
        Duration::from_secs(24 * 60 * 60 + 1),
        Duration::new(u64::MAX, 999_999_999),
    ] {
        let err = node
            .applier
            .apply(
                ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin").try_timeout(timeout),
            )
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("MachineConfig: invalid try_timeout: "),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("longer than the 86400s a try may last"),
            "{err}"
        );
    }
    assert_eq!(node.snapshot().await, before);
    assert!(node.applier.pending_try().is_none());
}

#[tokio::test(start_paused = true)]
async fn try_rolls_back_after_one_minute_by_default() {
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin"))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(59)).await;
    settle().await;
    assert_eq!(node.version(ACTIVE).await, Some(2));
    tokio::time::advance(Duration::from_secs(1)).await;
    wait_for_active_version(&node, 3).await;
}

#[tokio::test(start_paused = true)]
async fn a_later_non_try_apply_confirms_a_pending_try() {
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin"))
        .await
        .unwrap();
    let outcome = node
        .applier
        .apply(ApplyRequest::patches(
            ["machine:\n  nodeLabels:\n    tier: gold\n"],
            ApplyMode::NoReboot,
            "admin",
        ))
        .await
        .unwrap();
    assert!(
        outcome
            .details
            .contains("The pending 'try' config is confirmed"),
        "{}",
        outcome.details
    );
    assert!(node.applier.pending_try().is_none());
    tokio::time::advance(Duration::from_secs(120)).await;
    settle().await;
    let active = node.config(ACTIVE).await.unwrap();
    assert_eq!(active.spec.config().machine().node_labels["tier"], "gold");
    assert_eq!(node.version(PERSISTED).await, Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_dry_run_does_not_confirm_a_pending_try() {
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin"))
        .await
        .unwrap();
    let deadline = node.applier.pending_try().unwrap();
    for mode in ApplyMode::ALL {
        node.applier
            .apply(
                ApplyRequest::patches(
                    ["machine:\n  sysctls:\n    vm.swappiness: '1'\n"],
                    mode,
                    "admin",
                )
                .dry_run(),
            )
            .await
            .unwrap();
    }
    assert_eq!(node.applier.pending_try(), Some(deadline));
    tokio::time::advance(Duration::from_secs(61)).await;
    wait_for_active_version(&node, 3).await;
}

#[tokio::test(start_paused = true)]
async fn a_second_try_restarts_the_timer_and_rolls_back_to_the_config_before_the_first() {
    // Given a try, and 40 s later a second try with its own 30 s timeout
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin"))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(40)).await;
    node.applier
        .apply(
            ApplyRequest::patches(
                ["machine:\n  nodeLabels:\n    second: 'yes'\n"],
                ApplyMode::Try,
                "admin",
            )
            .try_timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(node.version(ACTIVE).await, Some(3));

    // When the first try's minute is over, nothing happens
    tokio::time::advance(Duration::from_secs(25)).await;
    settle().await;
    assert_eq!(node.version(ACTIVE).await, Some(3));

    // Then at the second try's deadline the active config is BASE again
    tokio::time::advance(Duration::from_secs(6)).await;
    wait_for_active_version(&node, 4).await;
    let active = node.config(ACTIVE).await.unwrap();
    let labels: Vec<&String> = active.spec.config().machine().node_labels.keys().collect();
    assert_eq!(labels, ["zone"]);
}

#[tokio::test(start_paused = true)]
async fn a_restart_reverts_a_pending_try() {
    // Given a pending try
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin"))
        .await
        .unwrap();
    // When the node runtime restarts (a new applier; the start loads persisted into active)
    let restarted = Node::over(node.state.clone());
    drop(node);
    let node = restarted;
    let start = load_at_start(&*node.state).await.unwrap();
    // Then the active config is the persisted one again
    assert!(start.changed);
    assert_eq!(start.active_version, Some(Version::new(3)));
    let active = node.config(ACTIVE).await.unwrap();
    assert!(!active
        .spec
        .config()
        .machine()
        .node_labels
        .contains_key("tier"));
    assert_eq!(node.history().await.last().unwrap().spec.mode, "start");
}

#[tokio::test(start_paused = true)]
async fn a_closed_applier_refuses_applies_and_never_rolls_back_its_pending_try() {
    // Given a pending try
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches([LIVE_PATCH], ApplyMode::Try, "admin"))
        .await
        .unwrap();
    let before = node.snapshot().await;

    // When the applier is closed (its runtime stops) and the try's timeout passes
    node.applier.close().await;
    tokio::time::advance(Duration::from_secs(120)).await;
    settle().await;

    // Then nothing was rolled back, nothing is pending, and a later apply is refused as closed
    assert_eq!(node.snapshot().await, before);
    assert!(node.applier.pending_try().is_none());
    let refused = node
        .applier
        .apply(ApplyRequest::patches(
            [LIVE_PATCH],
            ApplyMode::NoReboot,
            "admin",
        ))
        .await
        .unwrap_err();
    assert!(matches!(refused, ApplyError::Closed), "{refused:?}");
    assert_eq!(node.snapshot().await, before);
}

#[tokio::test]
async fn the_start_makes_a_staged_config_active() {
    let node = Node::with_base().await;
    node.applier
        .apply(ApplyRequest::patches(
            [RESTART_PATCH],
            ApplyMode::Staged,
            "admin",
        ))
        .await
        .unwrap();
    let start = load_at_start(&*node.state).await.unwrap();
    assert_eq!(
        start,
        cosi_node::config::apply::StartOutcome {
            active_version: Some(Version::new(2)),
            changed: true
        }
    );
    let active = node.config(ACTIVE).await.unwrap();
    assert_eq!(
        active.spec.config().machine().machine_type,
        Some(MachineRole::ControlPlane)
    );
    // A second start changes nothing.
    let again = load_at_start(&*node.state).await.unwrap();
    assert!(!again.changed);
}

#[tokio::test]
async fn the_start_without_a_persisted_config_leaves_the_node_in_maintenance() {
    let node = Node::new();
    let start = load_at_start(&*node.state).await.unwrap();
    assert_eq!(start.active_version, None);
    assert!(!start.changed);
    assert_eq!(node.snapshot().await, "");
}

#[tokio::test]
async fn the_persisted_config_survives_a_disk_restart_and_becomes_active() {
    use cosi_state::{DiskOptions, DiskState};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.redb");
    let types = || {
        let mut registry = cosi_core::Registry::new();
        cosi_node::config::register_types(&mut registry).unwrap();
        Arc::new(registry)
    };

    // Given a config applied and a change staged on the disk backend
    let disk = Arc::new(
        DiskState::open(&path, DiskOptions::default(), types())
            .await
            .unwrap(),
    );
    {
        let node = Node::over(disk.clone());
        node.applier
            .apply(ApplyRequest::config(BASE, ApplyMode::NoReboot, "admin"))
            .await
            .unwrap();
        node.applier
            .apply(ApplyRequest::patches(
                [RESTART_PATCH],
                ApplyMode::Staged,
                "admin",
            ))
            .await
            .unwrap();
    }
    close(disk).await;

    // When the node starts again on the same file
    let disk = Arc::new(
        DiskState::open(&path, DiskOptions::default(), types())
            .await
            .unwrap(),
    );
    let start = load_at_start(&*disk).await.unwrap();

    // Then the staged config is active, typed, with the text as stored
    assert!(start.changed);
    let node = Node::over(disk.clone());
    let active = node.config(ACTIVE).await.unwrap();
    assert_eq!(
        active.spec.config().machine().machine_type,
        Some(MachineRole::ControlPlane)
    );
    assert_eq!(
        active.spec.text(),
        node.config(PERSISTED).await.unwrap().spec.text()
    );
    drop(node);
    close(disk).await;
}

async fn close(disk: Arc<cosi_state::DiskState>) {
    disk.close().await;
}

/// Lets spawned tasks (a due rollback) run, without moving the clock.
async fn settle() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

async fn wait_for_active_version(node: &Node, version: u64) {
    use cosi_core::StateExt;
    let pointer = MachineConfig::pointer(ACTIVE);
    node.state
        .watch_for(&pointer, |r| {
            r.is_some_and(|r| r.metadata().version().get() == version)
        })
        .await
        .unwrap();
}
