//! The `suite` binary against stand-in workload binaries (shell scripts in a temporary
//! directory, passed with `--bin-dir`): what it records from a workload's printed figures, and
//! that a failing workload fails the suite without writing results.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// Every workload binary the quick plan runs, but the optional `w3_kube`.
const WORKLOADS: [&str; 6] = ["w1", "w2", "w3", "w5", "w6", "w7"];

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
            // W7 has a fixed size and refuses `--n`, as the real binary does.
            let refuse_n = if name == "w7" {
                "case \" $* \" in *' --n '*) echo 'FAILED: w7: --n is not accepted' >&2; exit 1;; esac\n"
            } else {
                ""
            };
            format!(
                "{refuse_n}echo '# {name}: stand-in'\n\
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

    // then it succeeds and writes one record per figure: 9 steps (W1 at 3 sizes, W2, W3 at 2
    // sizes, W5, W6, W7 — without `--n`, which its stand-in refuses; the optional `w3_kube` was
    // not built) plus a W4 per-item cost for each W1 step.
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = std::fs::read_to_string(out.path().join("suite-quick.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(results["mode"], "quick");
    let records = results["records"].as_array().unwrap();
    assert_eq!(records.len(), 12);
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
        ["W1", "W4", "W1", "W4", "W1", "W4", "W2", "W3", "W3", "W5", "W6", "W7"]
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
            "FAILED: suite: 2 of 10 steps failed, no results written:\n  \
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
        &["w1", "w2", "w3", "w3_kube", "w5", "w6", "w7"],
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
    assert_eq!(records.len(), 13);
    assert_eq!(
        records[9],
        serde_json::json!({
            "workload": "W3-kube", "figure": "w3_kube.create", "parameters": { "n": 10000 },
            "median": 2000.0, "min": 1000.0, "max": 4000.0, "runs": 3, "unit": "ops/s"
        })
    );
}

/// Writes a stand-in for the reference binary and for the project's W1, W2 and W3 binaries.
/// Each appends `<side> <arguments> GOMAXPROCS=<value>` to `calls.log` beside itself and
/// prints the figures its side prints for the workload it was asked for; the project's figures
/// are three times the reference's rates and a third of its times, so every speed ratio is 3.
/// A side named in `failing` fails like a workload whose check failed.
fn side_by_side_stand_ins(dir: &Path, failing: Option<&str>) {
    let log = dir.join("calls.log");
    let log = log.display();
    let w3 = |prefix: &str, phase1: &str, phase2: &str, rate: &str| {
        format!(
            "echo '{prefix}.phase1 {phase1} s'\n\
             echo '{prefix}.phase1_rate {rate} items/s'\n\
             echo '{prefix}.phase2 {phase2} s'\n\
             echo '{prefix}.phase1_c1_calls 20000 calls'\n\
             echo '{prefix}.phase1_c2_calls 20000 calls'\n\
             echo '{prefix}.phase2_c1_calls 10000 calls'\n\
             echo '{prefix}.phase2_c2_calls 10000 calls'\n"
        )
    };
    let scripts = [
        (
            "cosi-go-bench",
            format!(
                "echo \"reference $* GOMAXPROCS=$GOMAXPROCS\" >> {log}\n\
                 case \"$2\" in\n\
                 w1) echo '# w1: stand-in'\n\
                     echo 'w1.create 1e+06 ops/s'; echo 'w1.update 500000 ops/s'\n\
                     echo 'w1.list 90 ms'; echo 'w1.destroy 1.5e+06 ops/s'\n\
                     echo 'w1.peak_rss 80 MiB'; echo 'w1.process_cpu 0.7 s' ;;\n\
                 w2) echo 'w2.events_delivered 4e+06 events/s'; echo 'w2.wall 0.3 s' ;;\n\
                 w3t) {}\
                     ;;\n\
                 w3q) {}\
                     ;;\n\
                 esac\n",
                w3("w3t", "0.18", "0.36", "54000"),
                w3("w3q", "0.54", "0.48", "18000")
            ),
        ),
        (
            "w1",
            format!(
                "echo \"project w1 $* GOMAXPROCS=$GOMAXPROCS\" >> {log}\n\
                 echo '# w1.create min 3000000 max 3000000 ops/s (1 runs)'\n\
                 echo 'w1.create 3000000 ops/s'; echo 'w1.update 1500000 ops/s'\n\
                 echo 'w1.list 30 ms'; echo 'w1.destroy 4500000 ops/s'\n\
                 echo 'w1.peak_rss 20 MiB'\n"
            ),
        ),
        (
            "w2",
            format!(
                "echo \"project w2 $* GOMAXPROCS=$GOMAXPROCS\" >> {log}\n\
                 echo 'w2.history16k.events_delivered 1.2e7 events/s'\n\
                 echo 'w2.history16k.wall 0.1 s'\n"
            ),
        ),
        (
            "w3",
            format!(
                "echo \"project w3 $* GOMAXPROCS=$GOMAXPROCS\" >> {log}\n\
                 case \"$6\" in\n\
                 level) {}\
                     ;;\n\
                 queue) {}\
                     ;;\n\
                 queue4) {}\
                     ;;\n\
                 esac\n",
                w3("w3.level", "0.06", "0.12", "162000"),
                w3("w3.queue", "0.18", "0.16", "54000"),
                w3("w3.queue4", "0.18", "0.16", "54000")
            ),
        ),
    ];
    for (name, body) in scripts {
        let body = if Some(name) == failing {
            format!("echo 'FAILED: {name}: C item-0000007 has value 3, expected 9'\nexit 1\n")
        } else {
            body
        };
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

fn run_side_by_side(bin_dir: &Path, out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_suite"))
        .arg("--peer")
        .arg(bin_dir.join("cosi-go-bench"))
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env_remove("GOMAXPROCS")
        .output()
        .expect("the suite binary starts")
}

#[test]
fn side_by_side_alternates_which_side_runs_first_and_gives_the_reference_two_threads() {
    // Given stand-ins for both sides,
    let bin_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    side_by_side_stand_ins(bin_dir.path(), None);

    // when W1 runs side by side in 3 pairs,
    let output = run_side_by_side(
        bin_dir.path(),
        out.path(),
        &["--only", "w1", "--pairs", "3"],
    );

    // then each pair runs a fresh process per side, the first side alternating, and only the
    // reference runs with GOMAXPROCS=2.
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = std::fs::read_to_string(bin_dir.path().join("calls.log")).unwrap();
    let reference = "reference -w w1 -n 100000 GOMAXPROCS=2";
    let project = "project w1 --n 100000 --runs 1 GOMAXPROCS=";
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [reference, project, project, reference, reference, project]
    );
}

#[test]
fn side_by_side_writes_both_medians_the_spread_and_both_ratios_per_figure() {
    // Given stand-ins whose project is three times as fast on every figure,
    let bin_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    side_by_side_stand_ins(bin_dir.path(), None);

    // when every paired workload runs side by side (5 pairs by default),
    let output = run_side_by_side(bin_dir.path(), out.path(), &[]);

    // then the results hold, per workload, the 5 pairs with the load before each, and per
    // figure both sides' median and spread and both ratios,
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json = std::fs::read_to_string(out.path().join("side-by-side.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(results["pairs_per_workload"], 5);
    assert_eq!(
        results["reference_env"],
        serde_json::json!(["GOMAXPROCS=2"])
    );
    assert_eq!(results["loads"].as_array().unwrap().len(), 35);
    let workloads = results["workloads"].as_array().unwrap();
    let names: Vec<&str> = workloads
        .iter()
        .map(|w| w["workload"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "W1",
            "W2",
            "W3 level-triggered",
            "W3 queue",
            "W3 queue, project x4",
            "W3 level-triggered, project on 2 threads",
            "W3 queue, project on 2 threads"
        ]
    );
    let w1 = &workloads[0];
    assert_eq!(w1["pairs"].as_array().unwrap().len(), 5);
    let firsts: Vec<&str> = w1["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["first"].as_str().unwrap())
        .collect();
    assert_eq!(
        firsts,
        ["reference", "project", "reference", "project", "reference"]
    );
    assert_eq!(
        w1["figures"][0],
        serde_json::json!({
            "figure": "create", "reference_figure": "w1.create", "project_figure": "w1.create",
            "unit": "ops/s", "comparison": "rate",
            "reference": { "median": 1e6, "min": 1e6, "max": 1e6 },
            "project": { "median": 3e6, "min": 3e6, "max": 3e6 },
            "ratio_of_medians": 3.0, "median_of_pair_ratios": 3.0,
            "pair_ratios": [3.0, 3.0, 3.0, 3.0, 3.0]
        })
    );
    let peak = &w1["figures"][4];
    assert_eq!(
        (&peak["figure"], &peak["ratio_of_medians"]),
        (&serde_json::json!("peak RSS"), &serde_json::json!(0.25))
    );
    let w2_events = &workloads[1]["figures"][0];
    assert_eq!(
        w2_events["project_figure"],
        "w2.history16k.events_delivered"
    );
    assert_eq!(w2_events["median_of_pair_ratios"], 3.0);
    // and the text and Markdown tables name the date, the machine and the loads.
    let text = std::fs::read_to_string(out.path().join("side-by-side.txt")).unwrap();
    assert!(
        text.contains("1-minute load average before each pair"),
        "{text}"
    );
    let markdown = std::fs::read_to_string(out.path().join("side-by-side.md")).unwrap();
    assert!(
        markdown.contains("| W1 | create | 1000000 (1000000–1000000) ops/s | 3000000 (3000000–3000000) ops/s | 3.00× | **3.00×** |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| W3 level-triggered | phase 1 | 0.1800 (0.1800–0.1800) s | 0.06000 (0.06000–0.06000) s | 3.00× | **3.00×** |"),
        "{markdown}"
    );
}

#[test]
fn a_failing_reference_fails_the_side_by_side_run_and_writes_nothing() {
    // Given a reference that fails its own check,
    let bin_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    side_by_side_stand_ins(bin_dir.path(), Some("cosi-go-bench"));

    // when the suite runs side by side,
    let output = run_side_by_side(bin_dir.path(), out.path(), &["--only", "w3-level"]);

    // then it exits with status 1 naming the workload, the pair and the side, with the
    // reference's own message, and writes no results.
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr)
            .lines()
            .last()
            .unwrap(),
        "FAILED: suite: W3 level-triggered pair 1: the reference side failed: exit status: 1: \
         FAILED: cosi-go-bench: C item-0000007 has value 3, expected 9"
    );
    assert!(!out.path().join("side-by-side.json").exists());
}

#[test]
fn side_by_side_refuses_a_missing_reference_and_unknown_workloads() {
    let bin_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    side_by_side_stand_ins(bin_dir.path(), None);

    let missing = Command::new(env!("CARGO_BIN_EXE_suite"))
        .args(["--peer", "/nonexistent/cosi-go-bench"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr),
        "FAILED: suite: --peer /nonexistent/cosi-go-bench: no such file (the reference's \
         benchmark binary, cosi-go-bench)\n"
    );

    let unknown = run_side_by_side(bin_dir.path(), out.path(), &["--only", "w9"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&unknown.stderr),
        "FAILED: suite: --only: no paired workload \"w9\" (known: w1, w2, w3-level, w3-queue, \
         w3-queue4, w3-level-2t, w3-queue-2t)\n"
    );
    assert!(!bin_dir.path().join("calls.log").exists());
}
