//! Patches: strategic-merge rules, `$patch: delete`, JSON patches on multi-document configs,
//! detection and ordering.

mod config_support;

use config_support::BASE;
use cosi_node::config::document::{decode, encode};
use cosi_node::config::patch::{apply, Patch};
use cosi_node::config::{Config, ConfigErrors};

fn patched(patches: &[&str]) -> Result<Config, ConfigErrors> {
    let base = decode(BASE.as_bytes()).unwrap();
    let parsed: Vec<Patch> = patches
        .iter()
        .enumerate()
        .map(|(i, p)| Patch::parse(p.as_bytes(), &format!("patches[{i}]")))
        .collect::<Result<_, _>>()?;
    apply(&base, &parsed)
}

fn ok(patches: &[&str]) -> Config {
    patched(patches).unwrap()
}

fn err(patches: &[&str]) -> String {
    patched(patches).unwrap_err().to_string()
}

#[test]
fn maps_merge_per_key() {
    let config = ok(&[
        "machine:\n  nodeLabels:\n    tier: gold\n  kubelet:\n    extraArgs:\n      v: '2'\n",
    ]);
    let labels: Vec<&String> = config.machine().node_labels.keys().collect();
    assert_eq!(labels, ["tier", "zone"]);
    let kubelet = config.machine().kubelet.as_ref().unwrap();
    assert_eq!(kubelet.image.as_deref(), Some("kubelet:v1.31"));
    assert_eq!(kubelet.extra_args.len(), 2);
}

#[test]
fn scalars_replace() {
    let config = ok(&["machine:\n  network:\n    hostname: node-2\n"]);
    assert_eq!(config.machine().network.hostname.as_deref(), Some("node-2"));
}

#[test]
fn lists_append() {
    let config =
        ok(&["apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ndependsOn: [kubelet]\n"]);
    assert_eq!(config.service("web").unwrap().depends_on, ["kubelet"]);
    let config = ok(&[
        "apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ndependsOn: [kubelet]\n",
        "apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ndependsOn: [db]\n---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: db\ncommand: /bin/db\n",
    ]);
    assert_eq!(config.service("web").unwrap().depends_on, ["kubelet", "db"]);
}

#[test]
fn pod_and_service_subnets_and_service_args_are_replaced() {
    let config = ok(&[
        "cluster:\n  network:\n    podSubnets: [10.100.0.0/16]\n    serviceSubnets: [10.200.0.0/16]\n",
        "apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\nargs: [-V]\n",
    ]);
    assert_eq!(config.cluster().network.pod_subnets, ["10.100.0.0/16"]);
    assert_eq!(config.cluster().network.service_subnets, ["10.200.0.0/16"]);
    assert_eq!(config.service("web").unwrap().args, ["-V"]);
}

#[test]
fn interfaces_merge_by_interface_name() {
    let config = ok(&["machine:\n  network:\n    interfaces:\n    - interface: eth0\n      mtu: 9000\n      addresses: [198.51.100.1/24]\n    - interface: eth1\n      addresses: [203.0.113.1/24]\n"]);
    let interfaces = &config.machine().network.interfaces;
    assert_eq!(interfaces.len(), 2);
    assert_eq!(interfaces[0].interface.as_deref(), Some("eth0"));
    assert_eq!(interfaces[0].mtu, Some(9000));
    assert_eq!(
        interfaces[0].addresses,
        ["192.0.2.10/24", "198.51.100.1/24"]
    );
    assert_eq!(interfaces[1].interface.as_deref(), Some("eth1"));
}

#[test]
fn patch_delete_removes_a_key() {
    let config = ok(&["machine:\n  network:\n    hostname:\n      $patch: delete\n"]);
    assert_eq!(config.machine().network.hostname, None);
}

#[test]
fn patch_delete_removes_a_map_entry() {
    let config = ok(&["machine:\n  nodeLabels:\n    zone:\n      $patch: delete\n"]);
    assert!(config.machine().node_labels.is_empty());
}

#[test]
fn patch_delete_removes_a_list_item_selected_by_its_first_key() {
    let config = ok(&[
        "machine:\n  network:\n    interfaces:\n    - interface: eth0\n      $patch: delete\n",
    ]);
    assert!(config.machine().network.interfaces.is_empty());
}

#[test]
fn list_items_of_one_patch_apply_in_order_so_a_deleted_interface_comes_back_new() {
    let config = ok(&["machine:\n  network:\n    interfaces:\n    - interface: eth0\n      $patch: delete\n    - interface: eth0\n      mtu: 1400\n"]);
    let interfaces = &config.machine().network.interfaces;
    assert_eq!(interfaces.len(), 1);
    assert_eq!(interfaces[0].mtu, Some(1400));
    assert!(interfaces[0].addresses.is_empty());
}

#[test]
fn a_list_delete_selects_by_what_earlier_items_of_the_patch_merged() {
    // The first delete finds no item with mtu 1300; the merge gives eth0 one; the second
    // delete finds it.
    let config = ok(&["machine:\n  network:\n    interfaces:\n    - mtu: 1300\n      $patch: delete\n    - interface: eth0\n      mtu: 1300\n    - mtu: 1300\n      $patch: delete\n"]);
    assert!(config.machine().network.interfaces.is_empty());
}

#[test]
fn patch_delete_removes_a_whole_named_document() {
    let config = ok(&["apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\n$patch: delete\n"]);
    assert!(config.services().is_empty());
}

#[test]
fn deleting_what_is_not_there_changes_nothing() {
    let base = decode(BASE.as_bytes()).unwrap();
    let config = ok(&["machine:\n  nodeLabels:\n    nothere:\n      $patch: delete\n---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: ghost\n$patch: delete\n"]);
    assert_eq!(config, base);
}

#[test]
fn the_main_document_cannot_be_deleted() {
    assert_eq!(
        err(&["version: v1alpha1\n$patch: delete\n"]),
        "v1alpha1: the main document cannot be deleted"
    );
}

#[test]
fn an_unknown_directive_is_rejected() {
    assert_eq!(
        err(&["machine:\n  nodeLabels:\n    zone:\n      $patch: replace\n"]),
        "machine.nodeLabels.zone[\"$patch\"]: unsupported directive \"replace\": only \"delete\" is known"
    );
}

#[test]
fn a_patch_document_with_no_match_is_added() {
    let config = ok(&["apiVersion: v1alpha1\nkind: ServiceConfig\nname: db\ncommand: /bin/db\n"]);
    let names: Vec<&str> = config.services().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["db", "web"]);
}

#[test]
fn a_patch_that_makes_the_config_ill_formed_is_rejected_with_the_path() {
    assert!(err(&[
        "machine:\n  network:\n    interfaces:\n    - interface: eth0\n      mtu: big\n"
    ])
    .starts_with("machine.network.interfaces[0].mtu: invalid type: string \"big\""),);
}

#[test]
fn a_json_patch_works_on_the_main_document_of_a_multi_document_config() {
    let config = ok(&[
        r#"[{"op": "replace", "path": "/machine/network/hostname", "value": "node-9"}, {"op": "add", "path": "/machine/nodeLabels/tier", "value": "gold"}]"#,
    ]);
    assert_eq!(config.machine().network.hostname.as_deref(), Some("node-9"));
    assert_eq!(config.machine().node_labels["tier"], "gold");
    assert_eq!(config.services().len(), 1);
}

#[test]
fn a_json_patch_addresses_named_documents_under_docs() {
    let config = ok(&[
        r#"[{"op": "replace", "path": "/$docs/ServiceConfig/web/args/1", "value": "json.tool"}, {"op": "add", "path": "/$docs/ServiceConfig/db", "value": {"command": "/bin/db"}}]"#,
    ]);
    assert_eq!(config.service("web").unwrap().args, ["-m", "json.tool"]);
    assert_eq!(
        config.service("db").unwrap().command.as_deref(),
        Some("/bin/db")
    );
    let config = ok(&[r#"[{"op": "remove", "path": "/$docs/ServiceConfig/web"}]"#]);
    assert!(config.services().is_empty());
}

#[test]
fn a_json_patch_in_yaml_syntax_is_detected() {
    let config = ok(&["- op: add\n  path: /machine/sysctls\n  value: {vm.swappiness: '1'}\n"]);
    assert_eq!(config.machine().sysctls["vm.swappiness"], "1");
}

#[test]
fn a_failing_json_patch_names_the_operation() {
    assert_eq!(
        err(&[
            "[]",
            r#"[{"op": "test", "path": "/machine/type", "value": "worker"}, {"op": "remove", "path": "/machine/nothing"}]"#
        ]),
        "patches[1][1]: remove at \"/machine/nothing\" failed: path is invalid"
    );
}

#[test]
fn a_json_patch_document_renamed_under_docs_is_rejected() {
    assert_eq!(
        err(&[
            r#"[{"op": "add", "path": "/$docs/ServiceConfig/db", "value": {"name": "other", "command": "/bin/db"}}]"#
        ]),
        "/$docs/ServiceConfig/db: the document's kind and name must match its place under $docs"
    );
}

#[test]
fn empty_patches_are_the_identity() {
    let base = decode(BASE.as_bytes()).unwrap();
    assert_eq!(ok(&[""]), base);
    assert_eq!(ok(&["# nothing to do\n"]), base);
    assert_eq!(ok(&["[]"]), base);
}

#[test]
fn patches_apply_in_order() {
    let config = ok(&[
        "machine:\n  network:\n    hostname: first\n",
        r#"[{"op": "test", "path": "/machine/network/hostname", "value": "first"}, {"op": "replace", "path": "/machine/network/hostname", "value": "second"}]"#,
        "machine:\n  network:\n    hostname: third\n",
    ]);
    assert_eq!(config.machine().network.hostname.as_deref(), Some("third"));
}

#[test]
fn a_bad_json_patch_operation_is_rejected_at_parse() {
    let e = Patch::parse(br#"[{"op": "add"}]"#, "patches[0]").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("patches[0][0]: not a JSON patch operation"),
        "{e}"
    );
}

#[test]
fn a_patched_config_encodes_canonically() {
    let config = ok(&["machine:\n  nodeLabels:\n    tier: gold\n"]);
    assert_eq!(decode(encode(&config).as_bytes()).unwrap(), config);
}

fn ops_text(ops: &[String]) -> String {
    format!("[{}]", ops.join(","))
}

fn op(op: &str, path: &str, rest: &str) -> String {
    format!(r#"{{"op": "{op}", "path": "{path}"{rest}}}"#)
}

#[test]
fn a_json_patch_nesting_the_config_past_the_depth_limit_is_refused() {
    // Each round nests /x one level deeper under a fresh /w, with moves only.
    let mut ops = vec![op("add", "/x", r#", "value": {}"#)];
    for _ in 0..100 {
        ops.push(op("add", "/w", r#", "value": {}"#));
        ops.push(op("move", "/w/k", r#", "from": "/x""#));
        ops.push(op("move", "/x", r#", "from": "/w""#));
    }
    let error = err(&[&ops_text(&ops)]);
    assert!(
        error.starts_with("patches[0][")
            && error.ends_with("]: the patched config would be nested more than 64 levels deep"),
        "{error}"
    );
}

#[test]
fn a_json_patch_copying_the_config_past_the_size_limit_is_refused() {
    // Each round doubles /x: a 1 KB string becomes 4 MiB after 12 rounds.
    let mut ops = vec![op(
        "add",
        "/x",
        &format!(r#", "value": ["{}"]"#, "x".repeat(1024)),
    )];
    for _ in 0..30 {
        ops.push(op("add", "/t", r#", "value": []"#));
        ops.push(op("copy", "/t/-", r#", "from": "/x""#));
        ops.push(op("copy", "/t/-", r#", "from": "/x""#));
        ops.push(op("move", "/x", r#", "from": "/t""#));
    }
    let error = err(&[&ops_text(&ops)]);
    assert!(
        error.ends_with("]: the patched config would hold more than 4194304 bytes of strings"),
        "{error}"
    );
}

#[test]
fn a_json_patch_of_more_operations_than_the_limit_is_refused() {
    let ops = vec![op("test", "/machine/type", r#", "value": "worker""#); 1025];
    assert_eq!(
        err(&[&ops_text(&ops)]),
        "patches[0]: 1025 operations are more than the 1024 a JSON patch may have"
    );
}

#[test]
fn a_move_that_fails_after_other_operations_is_an_error_not_a_panic() {
    let ops = [
        op("add", "/a", r#", "value": {}"#),
        op("add", "/a/k", r#", "value": 1"#),
        op("add", "/arr", r#", "value": []"#),
        op("move", "/arr/5", r#", "from": "/a""#),
    ];
    assert_eq!(
        err(&[&ops_text(&ops)]),
        "patches[0][3]: move at \"/arr/5\" failed: path is invalid"
    );
}
