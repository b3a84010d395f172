//! `cosictl apply-config`, `patch` and `edit` against real nodes: what reaches the node, what
//! the operator reads, and that a refused change changes nothing.

mod support;

use std::path::Path;

use cosi_core::{ResourceSpec, State};
use support::{Cluster, Output};

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// The starter config with a node label.
fn labelled(cluster: &Cluster, label: &str) -> String {
    support::starter_config(cluster.dir.path())
        .replace("  token:", &format!("  nodeLabels: {{{label}}}\n  token:"))
}

fn assert_ok(out: &Output) {
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_config_applies_the_file_and_prints_what_the_node_did() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let file = write(
        cluster.dir.path(),
        "new.yaml",
        &labelled(&cluster, "zone: a"),
    );
    let out = cluster
        .cosictl(&[
            "-n",
            &node.name,
            "apply-config",
            "-f",
            &file,
            "--mode",
            "no-reboot",
        ])
        .await;
    assert_ok(&out);
    assert!(
        out.stdout
            .starts_with("Applied configuration without a reboot\n--- a\n+++ b\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\n+  nodeLabels:\n+    zone: a\n"),
        "{}",
        out.stdout
    );
    assert_eq!(node.config_version().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_config_names_the_field_and_leaves_the_version() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let file = write(
        cluster.dir.path(),
        "bad.yaml",
        &labelled(&cluster, "bad key: a"),
    );
    let out = cluster
        .cosictl(&["-n", &node.name, "apply-config", "-f", &file])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {} rejected apply-config: MachineConfig: invalid \
             machine.nodeLabels[\"bad key\"]: invalid label key \"bad key\": label key \"bad key\" \
             contains ' ': only letters, digits, '-', '_' and '.' are allowed\n",
            node.name
        )
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_prints_the_diff_and_changes_nothing() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let file = write(
        cluster.dir.path(),
        "new.yaml",
        &labelled(&cluster, "zone: a"),
    );
    let out = cluster
        .cosictl(&["-n", &node.name, "apply-config", "-f", &file, "--dry-run"])
        .await;
    assert_ok(&out);
    let token = support::starter_config(cluster.dir.path())
        .lines()
        .find_map(|l| l.strip_prefix("  token: ").map(str::to_string))
        .unwrap();
    assert_eq!(
        out.stdout,
        format!(
            "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\n\
             Config diff:\n\n--- a\n+++ b\n@@ -2,6 +2,8 @@\n machine:\n   \
             type: controlplane\n   token: {token}\n+  nodeLabels:\n+    zone: a\n   kubelet:\n     \
             image: ghcr.io/siderolabs/kubelet:v1.31.1\n   network:\n"
        )
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_without_try_is_a_usage_error() {
    let cluster = Cluster::start(1).await;
    let file = write(cluster.dir.path(), "new.yaml", "x");
    let out = cluster
        .cosictl(&[
            "-n",
            &cluster.nodes[0].name,
            "apply-config",
            "-f",
            &file,
            "--timeout",
            "10s",
        ])
        .await;
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (1, "", "error: --timeout applies only to --mode try\n")
    );
}

/// A try timeout longer than the wire's seconds (an i64) reaches the node as the longest one
/// the wire carries, so the node says it is too long, not that it is negative.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_timeout_beyond_the_wire_is_refused_as_too_long_not_negative() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&[
            "-n",
            &node.name,
            "patch",
            "mc",
            "-p",
            "{machine: {nodeLabels: {zone: a}}}",
            "--mode",
            "try",
            "--timeout",
            "300000000000y",
        ])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {} rejected patch config/MachineConfigs.config.cosi.dev/active: \
             MachineConfig: invalid try_timeout: 9223372036854775807s is longer than the 86400s \
             a try may last; to keep a config, apply it with no-reboot\n",
            node.name
        )
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_config_names_a_missing_file() {
    let cluster = Cluster::start(1).await;
    let out = cluster
        .cosictl(&[
            "-n",
            &cluster.nodes[0].name,
            "apply-config",
            "-f",
            "/nonexistent/c.yaml",
        ])
        .await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: /nonexistent/c.yaml: No such file or directory (os error 2)\n"
    );
}

/// A file one byte larger than one config change may hold; its path.
fn huge_file(cluster: &Cluster) -> String {
    let path = cluster.dir.path().join("huge.yaml");
    std::fs::write(
        &path,
        vec![b'#'; cosi_cli::files::MAX_CONFIG_CHANGE as usize + 1],
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// A file larger than a node accepts in one message is refused before it is sent (or read
/// whole), naming the file; nothing reaches the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_file_larger_than_a_node_accepts_is_refused_before_sending() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let path = huge_file(&cluster);
    let out = cluster
        .cosictl(&["-n", &node.name, "apply-config", "-f", &path])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: {path}: is larger than 16 MiB, more than a machine config holds; is it the \
             right file?\n"
        )
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_file_larger_than_a_node_accepts_is_refused_before_sending() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let path = huge_file(&cluster);
    let out = cluster
        .cosictl(&["-n", &node.name, "patch", "mc", "-p", &format!("@{path}")])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: {path}: is larger than 16 MiB, more than a patch holds; is it the right \
             file?\n"
        )
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_that_add_up_to_more_than_one_change_holds_are_refused_before_sending() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let half = vec![b'#'; cosi_cli::files::MAX_CONFIG_CHANGE as usize / 2 + 1];
    let path = cluster.dir.path().join("half.yaml");
    std::fs::write(&path, half).unwrap();
    let patch = format!("@{}", path.display());
    let out = cluster
        .cosictl(&["-n", &node.name, "patch", "mc", "-p", &patch, "-p", &patch])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        "error: the patches add up to more than 16 MiB, more than one change may hold; send \
         fewer at a time\n"
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_config_to_several_nodes_prefixes_each_line_with_its_node() {
    let cluster = Cluster::start(2).await;
    let file = write(
        cluster.dir.path(),
        "new.yaml",
        &labelled(&cluster, "zone: a"),
    );
    let nodes = cluster.all_nodes();
    let out = cluster
        .cosictl(&[
            "-n",
            &nodes,
            "apply-config",
            "-f",
            &file,
            "--mode",
            "staged",
        ])
        .await;
    assert_ok(&out);
    for node in &cluster.nodes {
        let first = format!(
            "{}: Staged configuration to be applied after the next restart\n",
            node.name
        );
        assert!(out.stdout.contains(&first), "{}", out.stdout);
        assert!(
            out.stdout
                .lines()
                .filter(|l| l.starts_with(&node.name))
                .count()
                > 3
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_reads_at_file_patches_and_applies_them_in_order() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let file = write(
        cluster.dir.path(),
        "zone.yaml",
        "machine: {nodeLabels: {zone: a}}\n",
    );
    let out = cluster
        .cosictl(&[
            "-n",
            &node.name,
            "patch",
            "mc",
            "-p",
            &format!("@{file}"),
            "-p",
            r#"[{"op": "replace", "path": "/machine/nodeLabels/zone", "value": "b"}]"#,
            "--mode",
            "no-reboot",
        ])
        .await;
    assert_ok(&out);
    assert!(out.stdout.starts_with(&format!(
        "patched MachineConfigs.config.cosi.dev/active at the node {}\nApplied configuration without a reboot\n",
        node.name
    )), "{}", out.stdout);
    assert!(
        out.stdout.contains("\n+  nodeLabels:\n+    zone: b\n"),
        "{}",
        out.stdout
    );
    assert_eq!(node.config_version().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_that_changes_nothing_is_skipped() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&[
            "-n",
            &node.name,
            "patch",
            "mc",
            "-p",
            "machine: {type: controlplane}",
        ])
        .await;
    assert_ok(&out);
    assert_eq!(out.stdout, "Apply was skipped: no changes detected.\n");
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_patch_names_the_field_and_leaves_the_version() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&[
            "-n",
            &node.name,
            "patch",
            "mc",
            "-p",
            "machine: {nodeLabels: {bad key: b}}",
        ])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert!(
        out.stderr.starts_with(&format!(
            "error: node {} rejected patch config/MachineConfigs.config.cosi.dev/active: \
             MachineConfig: invalid machine.nodeLabels[\"bad key\"]: ",
            node.name
        )),
        "{}",
        out.stderr
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_refuses_a_type_that_is_not_a_config() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&["-n", &node.name, "patch", "notes", "a", "-p", "text: x"])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {}: test/Notes.test.cosi.dev/a is not a config: its spec is not a config \
             text (patch and edit work on the machine config, `mc`)\n",
            node.name
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_by_an_operator_is_refused_naming_the_admin_role() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl(&[
            "--context",
            "demo-operator",
            "-n",
            &node.name,
            "patch",
            "mc",
            "-p",
            "machine: {}",
        ])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {} refused get config/MachineConfigs.config.cosi.dev/active: not \
             authorized: operator (os:operator) may not read a sensitive type; it needs a client \
             certificate with role os:admin (see `cosictl config contexts`)\n",
            node.name
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_applies_what_the_editor_saved_with_the_version_it_read() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let dir = cluster.dir.path();
    let editor = support::script(
        dir,
        "editor.sh",
        &format!(
            "cp \"$1\" {seen}\nsed -i 's/^  token:/  nodeLabels: {{zone: e}}\\n  token:/' \"$1\"",
            seen = dir.join("seen.yaml").display()
        ),
    );
    let out = cluster
        .cosictl_with(&["-n", &node.name, "edit", "mc"], &[("EDITOR", &editor)])
        .await;
    assert_ok(&out);
    assert!(
        out.stdout
            .starts_with("Applied configuration without a reboot\n"),
        "{}",
        out.stdout
    );
    let seen = std::fs::read_to_string(dir.join("seen.yaml")).unwrap();
    assert_eq!(
        seen,
        format!(
            "# Editing MachineConfigs.config.cosi.dev/active at node {}\n{}",
            node.name,
            support::starter_config(dir)
        )
    );
    assert_eq!(node.config_version().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_edit_reopens_the_editor_with_the_error_as_comments() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let dir = cluster.dir.path();
    let count = dir.join("count");
    let seen = dir.join("seen.yaml");
    let editor = support::script(
        dir,
        "editor.sh",
        &format!(
            "if [ -e {count} ]; then\n  cp \"$1\" {seen}\n  sed -i 's/bad key/good-key/' \"$1\"\n\
             else\n  touch {count}\n  sed -i 's/^  token:/  nodeLabels: {{bad key: x}}\\n  token:/' \"$1\"\nfi",
            count = count.display(),
            seen = seen.display()
        ),
    );
    let out = cluster
        .cosictl_with(
            &["-n", &node.name, "edit", "mc"],
            &[("COSICTL_EDITOR", &editor)],
        )
        .await;
    assert_ok(&out);
    let seen = std::fs::read_to_string(&seen).unwrap();
    let mut lines = seen.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "# Editing MachineConfigs.config.cosi.dev/active at node {}",
            node.name
        )
    );
    assert_eq!(
        lines.next().unwrap(),
        format!(
            "# node {} rejected edit MachineConfigs.config.cosi.dev/active: MachineConfig: \
             invalid machine.nodeLabels[\"bad key\"]: invalid label key \"bad key\": label key \
             \"bad key\" contains ' ': only letters, digits, '-', '_' and '.' are allowed",
            node.name
        )
    );
    // Then the operator's text, its own comments kept.
    assert_eq!(
        lines.next().unwrap(),
        "# A starter controlplane config of cluster \"demo\", written by `cosictl gen config`."
    );
    assert!(seen.contains("\n  nodeLabels: {bad key: x}\n"), "{seen}");
    assert_eq!(node.config_version().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saving_the_same_rejected_edit_again_cancels_and_keeps_a_copy() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let dir = cluster.dir.path();
    let editor = support::script(
        dir,
        "editor.sh",
        "grep -q 'bad key' \"$1\" || sed -i 's/^  token:/  nodeLabels: {bad key: x}\\n  token:/' \"$1\"",
    );
    // The copy goes to the temporary directory, here the test's own (so no run leaves one behind).
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let tmp_text = tmp.to_str().unwrap();
    let out = cluster
        .cosictl_with(
            &["-n", &node.name, "edit", "mc"],
            &[("EDITOR", &editor), ("TMPDIR", tmp_text)],
        )
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    let prefix = "error: edit canceled, no valid changes were saved; a copy of your changes is in ";
    let kept = out
        .stderr
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{}", out.stderr))
        .trim_end();
    assert!(kept.starts_with(tmp_text), "{kept}");
    let kept = std::fs::read_to_string(kept).unwrap();
    assert!(kept.contains("nodeLabels: {bad key: x}"), "{kept}");
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_edit_is_skipped() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let out = cluster
        .cosictl_with(&["-n", &node.name, "edit", "mc"], &[("EDITOR", "true")])
        .await;
    assert_ok(&out);
    assert_eq!(out.stdout, "Apply was skipped: no changes detected.\n");
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_edit_is_skipped() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let editor = support::script(cluster.dir.path(), "editor.sh", ": > \"$1\"");
    let out = cluster
        .cosictl_with(&["-n", &node.name, "edit", "mc"], &[("EDITOR", &editor)])
        .await;
    assert_ok(&out);
    assert_eq!(out.stdout, "Apply was skipped: empty file.\n");
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_that_lost_a_race_is_a_conflict_and_changes_nothing_more() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    // While the operator edits, someone else patches the config.
    let editor = support::script(
        cluster.dir.path(),
        "editor.sh",
        &format!(
            "{cosictl} -n {node} patch mc -p 'machine: {{nodeLabels: {{zone: other}}}}' > /dev/null\n\
             sed -i 's/^  token:/  nodeLabels: {{zone: mine}}\\n  token:/' \"$1\"",
            cosictl = env!("CARGO_BIN_EXE_cosictl"),
            node = node.name
        ),
    );
    let out = cluster
        .cosictl_with(&["-n", &node.name, "edit", "mc"], &[("EDITOR", &editor)])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {}: conflict (edit MachineConfigs.config.cosi.dev/active): \
             config/MachineConfigs.config.cosi.dev/active changed since it was read (read at \
             version 1, now 2); re-read it and retry\n",
            node.name
        )
    );
    assert_eq!(node.config_version().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_apply_reaches_a_node_in_maintenance_with_its_pinned_key() {
    let cluster = Cluster::start(0).await;
    let (node, fingerprint) = support::start_maintenance_node().await;
    let file = cluster.dir.path().join("controlplane.yaml");
    let out = cluster
        .cosictl(&[
            "-n",
            &node.name,
            "apply-config",
            "--insecure",
            "--cert-fingerprint",
            &fingerprint.to_string(),
            "-f",
            file.to_str().unwrap(),
        ])
        .await;
    assert_ok(&out);
    assert!(
        out.stdout
            .starts_with("Applied configuration without a reboot\n"),
        "{}",
        out.stdout
    );
    assert_eq!(node.config_version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_apply_refuses_a_node_whose_key_is_not_pinned() {
    let cluster = Cluster::start(0).await;
    let (node, _) = support::start_maintenance_node().await;
    let file = cluster.dir.path().join("controlplane.yaml");
    let other = "ab".repeat(32);
    let out = cluster
        .cosictl(&[
            "-n",
            &node.name,
            "apply-config",
            "--insecure",
            "--cert-fingerprint",
            &other,
            "-f",
            file.to_str().unwrap(),
        ])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert!(
        out.stderr.starts_with(&format!(
            "error: node {} is unreachable (apply-config): ",
            node.name
        )),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("is not pinned"), "{}", out.stderr);
    assert!(node
        .state
        .list(
            &cosi_node::config::MachineConfig::kind(),
            &Default::default()
        )
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_without_a_fingerprint_is_a_usage_error() {
    let cluster = Cluster::start(0).await;
    let out = cluster
        .cosictl(&[
            "-n",
            "127.0.0.1:1",
            "apply-config",
            "--insecure",
            "-f",
            "x.yaml",
        ])
        .await;
    assert_eq!(out.code, 1);
    assert_eq!(
        out.stderr,
        "error: --insecure needs --cert-fingerprint: the fingerprint of the node's server key, \
         which a node in maintenance mode logs\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_in_maintenance_is_explained_with_the_command_that_configures_it() {
    let cluster = Cluster::start(0).await;
    let (node, _) = support::start_maintenance_node_of(&cluster).await;
    let out = cluster.cosictl(&["-n", &node.name, "services"]).await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {0} refused list services: it is in maintenance mode (it has no config \
             yet) and accepts only a first config: `cosictl -n {0} apply-config --insecure \
             --cert-fingerprint FINGERPRINT -f FILE`, with the fingerprint the node printed\n",
            node.name
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_config_field_is_rejected_naming_its_path_and_leaves_the_version() {
    let cluster = Cluster::start(1).await;
    let node = &cluster.nodes[0];
    let config = support::starter_config(cluster.dir.path())
        .replace("  token:", "  nodeLabls: {zone: a}\n  token:");
    let file = write(cluster.dir.path(), "typo.yaml", &config);
    let out = cluster
        .cosictl(&["-n", &node.name, "apply-config", "-f", &file])
        .await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""));
    assert_eq!(
        out.stderr,
        format!(
            "error: node {} rejected apply-config: MachineConfig: invalid machine.nodeLabls: \
             unknown field `nodeLabls`, expected one of `type`, `token`, `install`, \
             `nodeLabels`, `kubelet`, `network`, `sysctls`\n",
            node.name
        )
    );
    assert_eq!(node.config_version().await, 1);
}
