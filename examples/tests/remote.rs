//! The remote tour runs to completion over mutual TLS and prints what it promises: the labels the
//! server's controller derived, seen through a remote watch, and each refusal with its reason.

use std::process::Command;

#[test]
fn the_remote_tour_prints_the_derived_labels_and_every_refusal() {
    // Given the remote binary, when it runs
    let output = Command::new(env!("CARGO_BIN_EXE_remote"))
        .output()
        .expect("the remote binary starts");

    // Then it succeeds and prints every part
    let stdout = String::from_utf8(output.stdout).expect("utf-8 output");
    assert!(
        output.status.success(),
        "remote failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    for line in [
        "   wrote disk sda: 100 GiB, version 1",
        "   wrote disk sdb: 400 GiB, version 1",
        "   watch: the server's controller created label sda: 100 GiB",
        "   watch: the server's controller created label sdb: 400 GiB",
        "   reader lists disks: 2 of them",
        "   reader reads the token: secrets/ApiTokens.secrets.cosi.dev: access denied: not authorized: dashboard (os:reader) may not read a sensitive type",
        "   reader writes a disk: /cosi.resource.State/Create: access denied: not authorized: dashboard (os:reader) may not call /cosi.resource.State/Create (needs os:admin)",
        "   admin writes a label: block/DiskLabels.block.cosi.dev/sda: access denied: not authorized: DiskLabels.block.cosi.dev is written by controller DiskLabels; change its inputs instead (on a node: the machine config, through ApplyConfiguration)",
        "   in the store: 2 disks, label sda still \"100 GiB\"",
        "== server and engine stopped",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing line {line:?} in:\n{stdout}"
        );
    }
}
