//! The store tour runs to completion and prints what it promises: the watcher's events, the table and
//! the YAML form.

use std::process::Command;

#[test]
fn the_store_tour_prints_events_table_and_yaml() {
    // Given the store binary, when it runs
    let output = Command::new(env!("CARGO_BIN_EXE_store"))
        .output()
        .expect("the store binary starts");

    // Then it succeeds and prints every part
    let stdout = String::from_utf8(output.stdout).expect("utf-8 output");
    assert!(
        output.status.success(),
        "store failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "   runtime/Services.runtime.cosi.dev/etcd: version conflict: expected 1, stored 2",
        "   modify with nothing to change writes nothing: still version 2",
        "   created      runtime/Services.runtime.cosi.dev/apid version 1",
        "   updated      runtime/Services.runtime.cosi.dev/etcd version 2",
        "   destroyed    runtime/Services.runtime.cosi.dev/apid version 1",
        "NAMESPACE   TYPE      ID        VERSION   State     Healthy   Restarts   Image",
        "runtime     Service   etcd      2         running   true      0          gcr.io/etcd:v3.5.16",
        "runtime     Service   kubelet   2         running   false     1          ghcr.io/cosi/kubelet:v1.31.1",
        "  id: etcd",
        "  version: 2",
        "  state: running",
        "== close the store and reopen the file: every acknowledged write is there",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing line {line:?} in:\n{stdout}"
        );
    }
}

#[test]
fn store_contents_survive_closing_and_reopening_the_store() {
    // Given the store binary, when it runs
    let output = Command::new(env!("CARGO_BIN_EXE_store"))
        .output()
        .expect("the store binary starts");
    let stdout = String::from_utf8(output.stdout).expect("utf-8 output");
    assert!(output.status.success(), "store failed:\n{stdout}");

    // Then the table after reopening the file equals the table before closing it
    let table_rows = |from: &str| -> Vec<String> {
        let start = stdout.find(from).expect("section present");
        stdout[start..]
            .lines()
            .skip(1)
            .take_while(|l| !l.starts_with("=="))
            .map(str::to_string)
            .collect()
    };
    let before = table_rows("== table");
    let after = table_rows("== close the store and reopen the file");
    assert_eq!(before.len(), 3, "header and two rows expected: {before:?}");
    assert_eq!(before, after);
}
