//! The whole benchmark suite in one command: every workload (W1, W2, W3 in its variants, W5,
//! W6, W7) and the W4 scale sweep, each run as its own process (the workload binaries built beside
//! this one), with a progress line per step. Every workload checks its own result; a workload
//! that fails makes the suite fail. Writes `results/suite-<mode>.json` (one record per figure),
//! `results/w4-<mode>.png` (W4 per-item cost against N) and prints a table of every figure.
//!
//! With `--peer PATH` (the reference's `cosi-go-bench`) it runs the side-by-side comparison
//! instead: interleaved pairs of fresh processes, reference and project, `--pairs` repetitions
//! of each paired workload (see [`benches::side_by_side`]), and writes
//! `results/side-by-side.{json,txt,md}`.
//!
//! The workloads run as separate processes rather than as library calls because each one's
//! peak-memory figures (`VmHWM`, W6's resident-size deltas) are only meaningful in a process of
//! its own, and because the printed `name value unit` lines are already the workloads'
//! contract: the suite reads exactly what a person running one workload reads.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output};
use std::time::{Instant, SystemTime};

use benches::args::parse_env;
use benches::check::{exit_on_error, WorkloadError};
use benches::output::{parse_figures, parse_values, Value};
use benches::report::format_value;
use benches::side_by_side::stats::Spread;
use benches::side_by_side::table::{self, SideBySide};
use benches::side_by_side::{self as pairs, PairedWorkload, Side, REFERENCE_ENV};
use benches::suite::{plan, w4_record, Mode, Record, Step};
use clap::Parser;
use serde::Serialize;

/// The results file.
#[derive(Serialize)]
struct Results<'a> {
    mode: Mode,
    /// Seconds since the Unix epoch at the start.
    started_unix: u64,
    machine: String,
    wall_seconds: f64,
    records: &'a [Record],
}

fn main() -> ExitCode {
    exit_on_error("suite", run())
}

/// Runs every workload (the full plan unless `--quick`), or, with `--peer`, the side-by-side
/// comparison with the reference.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Options {
    /// Small sizes, few runs: a smoke run of every workload.
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// The sizes of benches/WORKLOADS.md, several runs each (the default).
    #[arg(long)]
    full: bool,
    /// Where the results are written.
    #[arg(long, value_name = "DIR", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/results"))]
    out: PathBuf,
    /// Where the workload binaries are (default: beside this binary).
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// Side by side with the reference: the path of its benchmark binary (cosi-go-bench).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["quick", "full"])]
    peer: Option<PathBuf>,
    /// Side by side: repetitions of each paired workload (at least 5 for figures worth quoting).
    #[arg(long, value_name = "N", default_value_t = pairs::DEFAULT_PAIRS, requires = "peer", value_parser = benches::args::positive)]
    pairs: usize,
    /// Side by side: only these paired workloads (w1, w2, w3-level, w3-queue, w3-queue4,
    /// w3-level-2t, w3-queue-2t).
    #[arg(long, value_name = "KEYS", value_delimiter = ',', requires = "peer")]
    only: Vec<String>,
}

fn seconds_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn run() -> Result<(), WorkloadError> {
    let options: Options = parse_env()?;
    let bin_dir = match options.bin_dir.clone() {
        Some(dir) => dir,
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .ok_or_else(|| WorkloadError::new("cannot find the directory of the suite binary"))?,
    };
    if let Some(peer) = &options.peer {
        return side_by_side(&options, peer, &bin_dir);
    }
    let mode = if options.quick {
        Mode::Quick
    } else {
        Mode::Full
    };
    let steps = plan(mode);
    let started_unix = seconds_since_epoch(SystemTime::now());
    let machine = benches::machine::describe();
    eprintln!(
        "suite ({} mode): {} steps; machine: {machine}",
        mode.name(),
        steps.len()
    );
    let start = Instant::now();
    let mut records = Vec::new();
    let mut failures = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        eprint!(
            "[{:>2}/{}] {} ({}) N = {} x {} runs ... ",
            index + 1,
            steps.len(),
            step.workload,
            step.binary,
            step.n,
            step.runs
        );
        if step.is_optional() && !bin_dir.join(step.binary).is_file() {
            eprintln!(
                "skipped: not built (`cargo build --release -p benches --features kube-peer`)"
            );
            continue;
        }
        let step_start = Instant::now();
        match run_step(&bin_dir, step) {
            Ok(step_records) => {
                eprintln!(
                    "ok, {} figures, {:.1} s (total {:.0} s)",
                    step_records.len(),
                    step_start.elapsed().as_secs_f64(),
                    start.elapsed().as_secs_f64()
                );
                records.extend(step_records);
            }
            Err(error) => {
                eprintln!("FAILED: {error}");
                failures.push(format!("{} N = {}: {error}", step.binary, step.n));
            }
        }
    }
    let wall_seconds = start.elapsed().as_secs_f64();
    print_table(&records);
    std::fs::create_dir_all(&options.out)
        .map_err(|e| WorkloadError::new(format!("cannot create {}: {e}", options.out.display())))?;
    if failures.is_empty() {
        let json_path = options.out.join(format!("suite-{}.json", mode.name()));
        let results = Results {
            mode,
            started_unix,
            machine,
            wall_seconds,
            records: &records,
        };
        let json = serde_json::to_string_pretty(&results)
            .map_err(|e| WorkloadError::new(format!("cannot encode the results: {e}")))?;
        std::fs::write(&json_path, json + "\n").map_err(|e| {
            WorkloadError::new(format!("cannot write {}: {e}", json_path.display()))
        })?;
        let png_path = options.out.join(format!("w4-{}.png", mode.name()));
        benches::plot::per_item_cost(&png_path, &records)?;
        println!(
            "\nsuite: {} figures in {wall_seconds:.0} s; wrote {} and {}",
            records.len(),
            json_path.display(),
            png_path.display()
        );
        Ok(())
    } else {
        Err(WorkloadError::new(format!(
            "{} of {} steps failed, no results written:\n  {}",
            failures.len(),
            steps.len(),
            failures.join("\n  ")
        )))
    }
}

/// Runs one workload binary and returns its figures, plus the W4 per-item costs of a sweep step.
fn run_step(bin_dir: &Path, step: &Step) -> Result<Vec<Record>, WorkloadError> {
    let output = run_binary(&mut workload_command(bin_dir, step.binary, &step.args()))?;
    let figures = parse_figures(&String::from_utf8_lossy(&output.stdout))?;
    if figures.is_empty() {
        return Err(WorkloadError::new("printed no figures"));
    }
    let mut records: Vec<Record> = figures
        .iter()
        .map(|figure| Record::from_figure(step, figure))
        .collect();
    records.extend(figures.iter().filter_map(|figure| w4_record(step, figure)));
    Ok(records)
}

/// The command of a project workload binary in `bin_dir`.
fn workload_command(bin_dir: &Path, binary: &str, args: &[String]) -> Command {
    let mut command = Command::new(bin_dir.join(binary));
    command.args(args);
    command
}

/// Runs `command` to its end; a failure to start or an unsuccessful exit is an error that
/// carries what the program said (stderr, or a `FAILED` line on stdout).
fn run_binary(command: &mut Command) -> Result<Output, WorkloadError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command.output().map_err(|e| {
        WorkloadError::new(format!(
            "cannot start {program} (build the workloads with `cargo build --release -p \
             benches`): {e}"
        ))
    })?;
    if !output.status.success() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said = match stderr.trim() {
            "" => stdout
                .lines()
                .find(|line| line.starts_with("FAILED"))
                .unwrap_or("no message")
                .to_string(),
            stderr => stderr.to_string(),
        };
        return Err(WorkloadError::new(format!("{}: {said}", output.status)));
    }
    Ok(output)
}

/// The side-by-side comparison: runs the pairs, prints the table, writes the results.
fn side_by_side(options: &Options, peer: &Path, bin_dir: &Path) -> Result<(), WorkloadError> {
    if !peer.is_file() {
        return Err(WorkloadError::new(format!(
            "--peer {}: no such file (the reference's benchmark binary, cosi-go-bench)",
            peer.display()
        )));
    }
    let plan = pairs::select(&options.only)?;
    for workload in &plan {
        let binary = bin_dir.join(workload.project_binary);
        if !binary.is_file() {
            return Err(WorkloadError::new(format!(
                "{} is missing: build the workloads with `cargo build --release -p benches`",
                binary.display()
            )));
        }
    }
    let started = SystemTime::now();
    let clock = Instant::now();
    let machine = benches::machine::hardware();
    eprintln!(
        "suite (side by side): {} workloads x {} pairs against {}; machine: {machine}",
        plan.len(),
        options.pairs,
        peer.display()
    );
    let runs = pairs::run_pairs(
        &plan,
        options.pairs,
        benches::machine::load_average,
        |workload, side| run_side(peer, bin_dir, workload, side),
        |line| eprintln!("{line} ({:.0} s)", clock.elapsed().as_secs_f64()),
    )?;
    // In running order: repetition by repetition, workload by workload.
    let loads: Vec<f64> = (0..options.pairs)
        .flat_map(|index| runs.iter().filter_map(move |pairs| pairs.get(index)))
        .filter_map(|pair| pair.load)
        .collect();
    let workloads = plan
        .iter()
        .zip(runs)
        .map(|(workload, pairs)| pairs::summarise(workload, pairs))
        .collect::<Result<Vec<_>, _>>()?;
    let result = SideBySide {
        date: humantime::format_rfc3339_seconds(started).to_string(),
        started_unix: seconds_since_epoch(started),
        machine,
        reference: peer.display().to_string(),
        reference_env: REFERENCE_ENV
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        pairs_per_workload: options.pairs,
        load: Spread::of(&loads),
        loads,
        wall_seconds: clock.elapsed().as_secs_f64(),
        workloads,
    };
    let text = table::text(&result);
    println!("\n{text}");
    std::fs::create_dir_all(&options.out)
        .map_err(|e| WorkloadError::new(format!("cannot create {}: {e}", options.out.display())))?;
    let json = serde_json::to_string_pretty(&result)
        .map_err(|e| WorkloadError::new(format!("cannot encode the results: {e}")))?;
    for (name, contents) in [
        ("side-by-side.json", json + "\n"),
        ("side-by-side.txt", text),
        ("side-by-side.md", table::markdown(&result)),
    ] {
        let path = options.out.join(name);
        std::fs::write(&path, contents)
            .map_err(|e| WorkloadError::new(format!("cannot write {}: {e}", path.display())))?;
    }
    println!(
        "suite: side by side in {:.0} s; wrote side-by-side.json, .txt and .md in {}",
        result.wall_seconds,
        options.out.display()
    );
    Ok(())
}

/// Runs one side of a pair as a fresh process and returns what it printed.
fn run_side(
    peer: &Path,
    bin_dir: &Path,
    workload: &PairedWorkload,
    side: Side,
) -> Result<Vec<Value>, WorkloadError> {
    let mut command = match side {
        Side::Reference => {
            let mut command = Command::new(peer);
            command.args(&workload.reference_args).envs(REFERENCE_ENV);
            command
        }
        Side::Project => workload_command(bin_dir, workload.project_binary, &workload.project_args),
    };
    let output = run_binary(&mut command)?;
    parse_values(&String::from_utf8_lossy(&output.stdout))
}

fn print_table(records: &[Record]) {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.workload.clone(),
                r.figure.clone(),
                r.parameters.n.to_string(),
                format_value(r.median),
                format_value(r.min),
                format_value(r.max),
                r.unit.clone(),
                r.runs.to_string(),
            ]
        })
        .collect();
    let header = [
        "workload", "figure", "N", "median", "min", "max", "unit", "runs",
    ];
    // Names left-aligned, numbers right-aligned.
    println!(
        "\n{}",
        table::aligned(&header, &rows, &[0, 1, 6]).trim_end()
    );
}
