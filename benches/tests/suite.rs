//! The `suite` binary against stand-in workload binaries (shell scripts in a temporary
//! directory, passed with `--bin-dir`): what it records from a workload's printed figures, and
//! that a failing workload fails the suite without writing results.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// Every workload binary the quick plan runs, but the optional `w3_kube`.
const WORKLOADS: [&str; 5] = ["w1", "w2", "w3", "w5", "w6"];

/// Writes a stand-in for each workload: prints one figure named after the binary
/// (`w1.create`, `w2.create`, ...), except for `failing`, which fails like a workload whose
/// result check failed.
fn stand_ins(dir: &Path, failing: Option<&str>) {
    stand_ins_of(dir, &WORKLOADS, failing);
}

fn stand_ins_of(dir: &Path, workloads: &[&str], failing: Option<&str>) {
    for &name in workloads {
        let body = if Some(name) == failing {
            format!("echo 'FAILED: {name}: C item-0000007 has value 3, expected 9' >&2\nexit 1\n")
        } else {
            format!(
                "echo '# {name}: stand-in'\n\
                 echo '# {name}.create min 1000 max 4000 ops/s (3 runs)'\n\
                 echo '{name}.create 2000 ops/s'\n"
            )
        };
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn run_quick_suite(bin_dir: &Path, out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_suite"))
        .arg("--quick")
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(out)
        .output()
        .expect("the suite binary starts")
}

#[test]
fn suite_records_every_printed_figure_with_its_spread_and_the_w4_cost() {
    // Given stand-in workloads that each print one figure,
    let bin_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    stand_ins(bin_dir.path(), None);

    // when the quick suite runs,
    let output = run_quick_suite(bin_dir.path(), out.path());

    // then it succeeds and writes one record per figure: 8 steps (W1 at 3 sizes, W2, W3 at 2
    // sizes, W5, W6; the optional `w3_kube` was not built) plus a W4 per-item cost for each W1
    // step.
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = std::fs::read_to_string(out.path().join("suite-quick.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(results["mode"], "quick");
    let records = results["records"].as_array().unwrap();
    assert_eq!(records.len(), 11);
    assert_eq!(
        records[0],
        serde_json::json!({
            "workload": "W1", "figure": "w1.create", "parameters": { "n": 1000 },
            "median": 2000.0, "min": 1000.0, "max": 4000.0, "runs": 3, "unit": "ops/s"
        })
    );
    assert_eq!(
        records[1],
        serde_json::json!({
            "workload": "W4", "figure": "w4.w1.create", "parameters": { "n": 1000 },
            "median": 500000.0, "min": 250000.0, "max": 1000000.0, "runs": 3, "unit": "ns/item"
        })
    );
    let workloads: Vec<&str> = records
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        workloads,
        ["W1", "W4", "W1", "W4", "W1", "W4", "W2", "W3", "W3", "W5", "W6"]
    );
    let png = std::fs::read(out.path().join("w4-quick.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn failing_workload_fails_the_suite_and_no_results_are_written() {
    // Given stand-in workloads of which W3 fails its result check,
    let bin_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    stand_ins(bin_dir.path(), Some("w3"));

    // when the quick suite runs,
    let output = run_quick_suite(bin_dir.path(), out.path());

    // then it exits with status 1, names the failing steps with the workload's message, and
    // writes no results file.
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "FAILED: suite: 2 of 9 steps failed, no results written:\n  \
             w3 N = 1000: exit status: 1: FAILED: w3: C item-0000007 has value 3, expected 9\n  \
             w3 N = 10000: exit status: 1: FAILED: w3: C item-0000007 has value 3, expected 9\n"
        ),
        "{stderr}"
    );
    assert!(!out.path().join("suite-quick.json").exists());
}

#[test]
fn optional_kube_peer_step_runs_when_its_binary_was_built() {
    // Given stand-in workloads including the feature-gated `w3_kube`,
    let bin_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    stand_ins_of(
        bin_dir.path(),
        &["w1", "w2", "w3", "w3_kube", "w5", "w6"],
        None,
    );

    // when the quick suite runs,
    let output = run_quick_suite(bin_dir.path(), out.path());

    // then its figure is recorded after W3's, at W3's headline size.
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = std::fs::read_to_string(out.path().join("suite-quick.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&json).unwrap();
    let records = results["records"].as_array().unwrap();
    assert_eq!(records.len(), 12);
    assert_eq!(
        records[9],
        serde_json::json!({
            "workload": "W3-kube", "figure": "w3_kube.create", "parameters": { "n": 10000 },
            "median": 2000.0, "min": 1000.0, "max": 4000.0, "runs": 3, "unit": "ops/s"
        })
    );
}
