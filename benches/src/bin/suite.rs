//! The whole benchmark suite in one command: every workload (W1, W2, W3 both variants, W5, W6)
//! and the W4 scale sweep, each run as its own process (the workload binaries built beside this
//! one), with a progress line per step. Every workload checks its own result; a workload that
//! fails makes the suite fail. Writes `results/suite-<mode>.json` (one record per figure),
//! `results/w4-<mode>.png` (W4 per-item cost against N) and prints a table of every figure.
//!
//! Usage: `suite [--quick | --full] [--out DIR] [--bin-dir DIR]` (default: the full plan,
//! `benches/results`, the workload binaries beside this one).
//!
//! The workloads run as separate processes rather than as library calls because each one's
//! peak-memory figures (`VmHWM`, W6's resident-size deltas) are only meaningful in a process of
//! its own, and because the printed `name value unit` lines are already the workloads'
//! contract: the suite reads exactly what a person running one workload reads.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use benches::check::{exit_on_error, WorkloadError};
use benches::output::parse_figures;
use benches::report::format_value;
use benches::suite::{plan, w4_record, Mode, Record, Step};
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

struct Options {
    mode: Mode,
    out: PathBuf,
    /// Where the workload binaries are; `None`: beside this binary.
    bin_dir: Option<PathBuf>,
}

const USAGE: &str = "usage: suite [--quick | --full] [--out DIR] [--bin-dir DIR]";

fn parse_args() -> Result<Options, WorkloadError> {
    let mut options = Options {
        mode: Mode::Full,
        out: Path::new(env!("CARGO_MANIFEST_DIR")).join("results"),
        bin_dir: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.mode = Mode::Quick,
            "--full" => options.mode = Mode::Full,
            "--out" | "--bin-dir" => {
                let dir = args
                    .next()
                    .map(PathBuf::from)
                    .ok_or_else(|| WorkloadError::new(format!("{arg} needs a directory")))?;
                if arg == "--out" {
                    options.out = dir;
                } else {
                    options.bin_dir = Some(dir);
                }
            }
            _ => {
                return Err(WorkloadError::new(format!(
                    "unknown argument {arg:?}; {USAGE}"
                )))
            }
        }
    }
    Ok(options)
}

fn run() -> Result<(), WorkloadError> {
    let options = parse_args()?;
    let bin_dir = match options.bin_dir.clone() {
        Some(dir) => dir,
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .ok_or_else(|| WorkloadError::new("cannot find the directory of the suite binary"))?,
    };
    let steps = plan(options.mode);
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let machine = benches::machine::describe();
    eprintln!(
        "suite ({} mode): {} steps; machine: {machine}",
        options.mode.name(),
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
        let json_path = options
            .out
            .join(format!("suite-{}.json", options.mode.name()));
        let results = Results {
            mode: options.mode,
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
        let png_path = options.out.join(format!("w4-{}.png", options.mode.name()));
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
    let binary = bin_dir.join(step.binary);
    let output = Command::new(&binary)
        .args(step.args())
        .output()
        .map_err(|e| {
            WorkloadError::new(format!(
                "cannot start {} (build it with `cargo build --release -p benches`): {e}",
                binary.display()
            ))
        })?;
    if !output.status.success() {
        return Err(WorkloadError::new(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
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

fn print_table(records: &[Record]) {
    let rows: Vec<[String; 8]> = records
        .iter()
        .map(|r| {
            [
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
    ]
    .map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    println!();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(column, (cell, width))| {
                // Names left-aligned, numbers right-aligned.
                if column < 2 || column == 6 {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect();
        println!("{}", cells.join("  ").trim_end());
    }
}
