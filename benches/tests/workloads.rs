//! Every workload binary runs at a small size, passes its own result checks and prints its
//! figures as `name value unit` lines. (How fast they run is measured by running them in release
//! mode, never asserted here.)

use std::process::Command;

/// Runs a workload binary and returns the names of the figures it printed.
fn figure_names(binary: &str, args: &[&str]) -> Vec<String> {
    let output = Command::new(binary)
        .args(args)
        .output()
        .expect("the workload binary starts");
    let stdout = String::from_utf8(output.stdout).expect("utf-8 output");
    assert!(
        output.status.success(),
        "workload failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            assert_eq!(fields.len(), 3, "not a `name value unit` line: {line:?}");
            assert!(
                fields[1].parse::<f64>().is_ok(),
                "value is not a number: {line:?}"
            );
            fields[0].to_string()
        })
        .collect()
}

#[test]
fn w1_checks_its_result_and_prints_every_figure() {
    let names = figure_names(env!("CARGO_BIN_EXE_w1"), &["--n", "500", "--runs", "2"]);
    for figure in [
        "w1.create",
        "w1.update",
        "w1.list",
        "w1.destroy",
        "w1.peak_rss",
        "w1.create_vs_map",
    ] {
        assert!(
            names.iter().any(|n| n == figure),
            "missing {figure} in {names:?}"
        );
    }
}

#[test]
fn w2_checks_its_result_and_prints_every_figure() {
    let names = figure_names(env!("CARGO_BIN_EXE_w2"), &["--n", "50", "--runs", "1"]);
    for figure in [
        "w2.events_delivered",
        "w2.wall",
        "w2.caught_up_watchers",
        "w2.history16k.events_delivered",
        "w2.vs_broadcast",
    ] {
        assert!(
            names.iter().any(|n| n == figure),
            "missing {figure} in {names:?}"
        );
    }
}

#[cfg(feature = "kube-peer")]
#[test]
fn w3_kube_checks_its_result_and_prints_every_figure() {
    let names = figure_names(
        env!("CARGO_BIN_EXE_w3_kube"),
        &["--n", "200", "--runs", "1"],
    );
    assert_eq!(
        names,
        [
            "w3.kube.phase1",
            "w3.kube.phase1_rate",
            "w3.kube.phase2",
            "w3.kube.phase1_vs_raw",
            "w3.kube.phase2_vs_raw",
            "w3.kube.reconciles_c1",
            "w3.kube.reconciles_c2",
        ]
    );
}

#[test]
fn catch_up_checks_its_result_and_prints_every_figure() {
    let names = figure_names(
        env!("CARGO_BIN_EXE_catch_up"),
        &["--n", "5000", "--runs", "1"],
    );
    assert_eq!(
        names,
        [
            "catch_up.k5000",
            "catch_up.k5000_vs_list",
            "catch_up.k_n10",
            "catch_up.k_n10_vs_list",
        ]
    );
}

#[test]
fn many_kinds_checks_its_result_and_prints_every_figure() {
    let names = figure_names(
        env!("CARGO_BIN_EXE_many_kinds"),
        &["--n", "3", "--runs", "1"],
    );
    assert_eq!(
        names,
        [
            "many_kinds.rss",
            "many_kinds.per_kind",
            "many_kinds.peak_rss",
            "many_kinds.writes",
        ]
    );
}

#[test]
fn catch_up_refuses_sizes_that_would_not_overrun_the_window() {
    let output = Command::new(env!("CARGO_BIN_EXE_catch_up"))
        .args(["--n", "4999"])
        .output()
        .expect("the probe binary starts");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "FAILED: catch_up: --n: at least 5000 items, so that 5000 changes overrun the window\n"
    );
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_w1"))
        .args(["--runs", "zero"])
        .output()
        .expect("the workload binary starts");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "FAILED: w1: invalid value 'zero' for '--runs <RUNS>': expected a positive integer\n"
    );
}

#[test]
fn w2_with_one_history_window_runs_only_that_window() {
    let names = figure_names(
        env!("CARGO_BIN_EXE_w2"),
        &["--n", "50", "--runs", "1", "--history", "exact"],
    );
    assert_eq!(
        names,
        [
            "w2.history16k.events_delivered",
            "w2.history16k.events_received",
            "w2.history16k.wall",
            "w2.history16k.caught_up_watchers",
            "w2.history16k.compacted_events",
            "w2.history16k.resyncs",
        ]
    );
}

/// The figures of one W3 variant, in printed order.
fn w3_figures(variant: &str) -> Vec<String> {
    [
        "phase1",
        "phase1_rate",
        "phase2",
        "phase1_cpu",
        "phase2_cpu",
        "phase1_vs_raw",
        "phase2_vs_raw",
        "reconciles_c1",
        "reconciles_c2",
        "phase1_c1_calls",
        "phase1_c2_calls",
        "phase2_c1_calls",
        "phase2_c2_calls",
    ]
    .map(|figure| format!("w3.{variant}.{figure}"))
    .to_vec()
}

#[test]
fn w3_runs_its_three_variants_and_checks_each() {
    let names = figure_names(env!("CARGO_BIN_EXE_w3"), &["--n", "100", "--runs", "1"]);
    let expected: Vec<String> = ["level", "queue", "queue4"]
        .into_iter()
        .flat_map(w3_figures)
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn w3_with_a_variant_runs_only_that_variant() {
    let names = figure_names(
        env!("CARGO_BIN_EXE_w3"),
        &["--n", "100", "--runs", "1", "--variant", "queue"],
    );
    assert_eq!(names, w3_figures("queue"));
}

#[test]
fn a_workload_runs_on_the_runtime_workers_it_is_given() {
    let output = Command::new(env!("CARGO_BIN_EXE_w3"))
        .args([
            "--n",
            "100",
            "--runs",
            "1",
            "--variant",
            "level",
            "--workers",
            "1",
        ])
        .output()
        .expect("the workload binary starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let runtime: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("# runtime:"))
        .collect();
    assert_eq!(
        runtime,
        ["# runtime: 1 runtime worker beside the main thread, which runs the writer"]
    );
}

#[test]
fn w3_rejects_an_unknown_variant() {
    let output = Command::new(env!("CARGO_BIN_EXE_w3"))
        .args(["--variant", "fast"])
        .output()
        .expect("the workload binary starts");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "FAILED: w3: invalid value 'fast' for '--variant <VARIANT>'\n"
    );
}

#[test]
fn w6_measures_each_run_in_its_own_process_and_prints_every_figure() {
    let names = figure_names(env!("CARGO_BIN_EXE_w6"), &["--n", "2000", "--runs", "2"]);
    assert_eq!(
        names,
        [
            "w6.n2000.store",
            "w6.n2000.arc_vec",
            "w6.n2000.raw",
            "w6.n2000.store_vs_raw",
            "w6.n2000.store_vs_arc_vec",
        ]
    );
}

#[test]
fn suite_rejects_unknown_arguments_without_running_anything() {
    let output = Command::new(env!("CARGO_BIN_EXE_suite"))
        .args(["--fast"])
        .output()
        .expect("the suite binary starts");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "FAILED: suite: unexpected argument '--fast' found\n"
    );
}
