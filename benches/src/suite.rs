//! The benchmark suite: which workload runs at which size and how often (the [`plan`] of a
//! quick or a full run), the results file's [`Record`]s, and W4's per-item costs derived from
//! the W1 and W3 runs of the sweep. The `suite` binary runs the plan; this module holds what
//! can be checked without running anything.

use serde::Serialize;

use crate::output::FigureSummary;

/// Which plan to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Small sizes, few runs: a smoke run of every workload, under two minutes on 2 cores.
    Quick,
    /// The sizes of `benches/WORKLOADS.md` (W4 up to 1M, W6 at 100k and 1M), several runs each.
    Full,
}

impl Mode {
    /// `quick` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Quick => "quick",
            Mode::Full => "full",
        }
    }
}

/// One invocation of a workload binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The workload as `benches/WORKLOADS.md` names it: `W1`.
    pub workload: &'static str,
    /// The binary beside the suite: `w1`.
    pub binary: &'static str,
    /// `--n`.
    pub n: usize,
    /// `--runs`.
    pub runs: usize,
}

/// Workload binaries built only with a cargo feature (`w3_kube`, the kube-runtime peer of W3:
/// `--features kube-peer`). The suite runs their steps when the binary is there and skips them
/// otherwise, so a default build still runs the whole suite.
pub const OPTIONAL_BINARIES: [&str; 1] = ["w3_kube"];

/// Workloads of a fixed size, which take no `--n`: W7 (250 controllers over 200 types, the
/// reference's largest user). Their steps carry that size for the records (`n` = 250, the
/// controllers).
pub const FIXED_SIZE_BINARIES: [&str; 1] = ["w7"];

impl Step {
    /// Whether the suite skips this step when its binary was not built.
    ///
    /// ```
    /// use benches::suite::{plan, Mode};
    /// let optional: Vec<_> = plan(Mode::Quick).into_iter().filter(|s| s.is_optional()).collect();
    /// assert_eq!(optional.len(), 1);
    /// assert_eq!(optional[0].binary, "w3_kube");
    /// ```
    pub fn is_optional(&self) -> bool {
        OPTIONAL_BINARIES.contains(&self.binary)
    }

    /// The command-line arguments of the workload binary (no `--n` for a fixed-size one).
    ///
    /// ```
    /// use benches::suite::Step;
    /// let w1 = Step { workload: "W1", binary: "w1", n: 1000, runs: 3 };
    /// assert_eq!(w1.args(), ["--n", "1000", "--runs", "3"]);
    /// let w7 = Step { workload: "W7", binary: "w7", n: 250, runs: 5 };
    /// assert_eq!(w7.args(), ["--runs", "5"]);
    /// ```
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if !FIXED_SIZE_BINARIES.contains(&self.binary) {
            args.extend(["--n".to_string(), self.n.to_string()]);
        }
        args.extend(["--runs".to_string(), self.runs.to_string()]);
        args
    }
}

/// The W4 sweep sizes of W1 and W3 in a mode.
pub fn sweep_sizes(mode: Mode) -> (Vec<usize>, Vec<usize>) {
    match mode {
        Mode::Quick => (vec![1_000, 10_000, 100_000], vec![1_000, 10_000]),
        Mode::Full => (
            vec![1_000, 10_000, 100_000, 1_000_000],
            vec![1_000, 10_000, 100_000],
        ),
    }
}

/// The steps of a mode, in running order. W1's step at 100,000 and W3's at 10,000 give the
/// headline W1 and W3 figures; all of the W1 and W3 steps together are the W4 sweep. The
/// `W3-kube` step (W3 through kube-runtime, at 10,000) is [optional](Step::is_optional).
///
/// ```
/// use benches::suite::{plan, Mode};
/// let binaries: Vec<_> = plan(Mode::Quick).iter().map(|s| s.binary).collect();
/// for binary in ["w1", "w2", "w3", "w5", "w6", "w7"] {
///     assert!(binaries.contains(&binary));
/// }
/// ```
pub fn plan(mode: Mode) -> Vec<Step> {
    let (w1_sizes, w3_sizes) = sweep_sizes(mode);
    let step = |workload, binary, n, runs| Step {
        workload,
        binary,
        n,
        runs,
    };
    let mut steps = Vec::new();
    for &n in &w1_sizes {
        // Small sizes take microseconds per run: more runs to steady the median.
        let runs = match (mode, n) {
            (Mode::Quick, n) if n <= 10_000 => 5,
            (Mode::Quick, _) => 3,
            (Mode::Full, n) if n <= 10_000 => 15,
            (Mode::Full, n) if n >= 1_000_000 => 3,
            (Mode::Full, _) => 7,
        };
        steps.push(step("W1", "w1", n, runs));
    }
    steps.push(match mode {
        Mode::Quick => step("W2", "w2", 1_000, 3),
        Mode::Full => step("W2", "w2", 1_000, 7),
    });
    for &n in &w3_sizes {
        let runs = match (mode, n) {
            (Mode::Quick, _) => 2,
            (Mode::Full, n) if n >= 100_000 => 3,
            (Mode::Full, _) => 5,
        };
        steps.push(step("W3", "w3", n, runs));
    }
    // The peer comparison: W3's headline size through kube-runtime's applier.
    steps.push(match mode {
        Mode::Quick => step("W3-kube", "w3_kube", 10_000, 2),
        Mode::Full => step("W3-kube", "w3_kube", 10_000, 5),
    });
    match mode {
        Mode::Quick => {
            steps.push(step("W5", "w5", 500, 1));
            steps.push(step("W6", "w6", 100_000, 1));
        }
        Mode::Full => {
            steps.push(step("W5", "w5", 10_000, 3));
            steps.push(step("W6", "w6", 100_000, 3));
            steps.push(step("W6", "w6", 1_000_000, 3));
        }
    }
    // Node scale: start to settled, a change of the root to settled, memory (about a second).
    steps.push(match mode {
        Mode::Quick => step("W7", "w7", 250, 3),
        Mode::Full => step("W7", "w7", 250, 7),
    });
    steps
}

/// Parameters of a record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Parameters {
    /// Item count (`--n`) of the run the figure comes from.
    pub n: usize,
}

/// One figure in the results file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// `W1` ... `W7`.
    pub workload: String,
    /// Dotted name: `w1.create`, `w4.w1.create`.
    pub figure: String,
    /// The size the figure was measured at.
    pub parameters: Parameters,
    /// Median over the runs.
    pub median: f64,
    /// Smallest value over the runs.
    pub min: f64,
    /// Largest value over the runs.
    pub max: f64,
    /// How many runs.
    pub runs: usize,
    /// Unit as the workload printed it.
    pub unit: String,
}

impl Record {
    /// The record of a figure a step printed.
    pub fn from_figure(step: &Step, figure: &FigureSummary) -> Self {
        Record {
            workload: step.workload.to_string(),
            figure: figure.name.clone(),
            parameters: Parameters { n: step.n },
            median: figure.median,
            min: figure.min,
            max: figure.max,
            runs: figure.runs,
            unit: figure.unit.clone(),
        }
    }
}

/// W1 and W3 figures that become W4 per-item costs.
const SWEPT: [&str; 12] = [
    "w1.create",
    "w1.update",
    "w1.list",
    "w1.destroy",
    "w1.construct",
    "w1.map.insert",
    "w1.map.update",
    "w1.map.list",
    "w1.map.remove",
    "w3.level.phase1_rate",
    "w3.queue.phase1_rate",
    "w1.peak_rss",
];

/// W4: the per-item cost, in ns/item, of a swept W1 or W3 figure measured at `n`: a rate
/// (`ops/s`, `items/s`) inverted, a whole-step time (`ms`) divided by `n`, and peak memory
/// (`MiB`) as bytes/item. `None` for other figures. The fastest run is the cheapest, so min and
/// max swap for rates.
///
/// ```
/// use benches::output::FigureSummary;
/// use benches::suite::{w4_record, Step};
/// let step = Step { workload: "W1", binary: "w1", n: 1000, runs: 3 };
/// let create = FigureSummary {
///     name: "w1.create".into(), unit: "ops/s".into(),
///     median: 1e6, min: 5e5, max: 2e6, runs: 3,
/// };
/// let record = w4_record(&step, &create).unwrap();
/// assert_eq!(record.figure, "w4.w1.create");
/// assert_eq!((record.median, record.min, record.max), (1000.0, 500.0, 2000.0));
/// assert_eq!(record.unit, "ns/item");
/// ```
pub fn w4_record(step: &Step, figure: &FigureSummary) -> Option<Record> {
    if !SWEPT.contains(&figure.name.as_str()) {
        return None;
    }
    let n = step.n as f64;
    let (median, min, max, unit) = match figure.unit.as_str() {
        "ops/s" | "items/s" => (
            1e9 / figure.median,
            1e9 / figure.max,
            1e9 / figure.min,
            "ns/item",
        ),
        "ms" => (
            figure.median * 1e6 / n,
            figure.min * 1e6 / n,
            figure.max * 1e6 / n,
            "ns/item",
        ),
        "MiB" => {
            let per_item = |mib: f64| mib * 1024.0 * 1024.0 / n;
            (
                per_item(figure.median),
                per_item(figure.min),
                per_item(figure.max),
                "B/item",
            )
        }
        _ => return None,
    };
    Some(Record {
        workload: "W4".to_string(),
        figure: format!("w4.{}", figure.name),
        parameters: Parameters { n: step.n },
        median,
        min,
        max,
        runs: figure.runs,
        unit: unit.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(name: &str, unit: &str, median: f64, min: f64, max: f64) -> FigureSummary {
        FigureSummary {
            name: name.into(),
            unit: unit.into(),
            median,
            min,
            max,
            runs: 3,
        }
    }

    fn w1_step(n: usize) -> Step {
        Step {
            workload: "W1",
            binary: "w1",
            n,
            runs: 3,
        }
    }

    #[test]
    fn step_time_in_ms_becomes_ns_per_item() {
        let record = w4_record(&w1_step(100_000), &figure("w1.list", "ms", 10.0, 8.0, 12.0));
        let record = record.unwrap();
        assert_eq!(
            (record.median, record.min, record.max),
            (100.0, 80.0, 120.0)
        );
        assert_eq!(record.parameters, Parameters { n: 100_000 });
    }

    #[test]
    fn peak_memory_becomes_bytes_per_item() {
        let record = w4_record(
            &w1_step(1_048_576),
            &figure("w1.peak_rss", "MiB", 64.0, 64.0, 64.0),
        );
        let record = record.unwrap();
        assert_eq!((record.median, record.unit.as_str()), (64.0, "B/item"));
    }

    #[test]
    fn ratios_are_not_swept() {
        assert_eq!(
            w4_record(
                &w1_step(1000),
                &figure("w1.create_vs_map", "x", 1.0, 1.0, 1.0)
            ),
            None
        );
    }

    #[test]
    fn quick_plan_sweeps_smaller_sizes_than_full() {
        let largest = |mode| plan(mode).iter().map(|s| s.n).max().unwrap();
        assert_eq!(largest(Mode::Quick), 100_000);
        assert_eq!(largest(Mode::Full), 1_000_000);
    }
}
