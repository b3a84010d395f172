//! The suite's side-by-side mode (`suite --peer PATH`): this project's workloads against the
//! reference runtime's benchmark binary (`cosi-go-bench`), run as **interleaved pairs of fresh
//! processes** in one sitting, because figures taken at different times on these shared
//! machines are not comparable (`benches/WORKLOADS.md`, "Side by side").
//!
//! One repetition runs every paired workload once on each side, reference and project back to
//! back, the 1-minute load average read before each pair; which side goes first alternates from
//! pair to pair ([`first_side`]), so that neither side always inherits the other's warm caches
//! or its leftover load. Per figure the result is both sides' median with min–max, the ratio
//! of the medians and the median of the per-pair ratios ([`stats`]); the tables are in
//! [`table`].
//!
//! This module holds what can be checked without starting a process: the [`plan`] (which
//! reference workload pairs with which project binary, and which figures compare), the loop
//! over the pairs ([`run_pairs`], given a runner) and the summary ([`summarise`]). The `suite`
//! binary supplies the runner that starts the processes.

pub mod stats;
pub mod table;

use serde::Serialize;

use crate::check::WorkloadError;
use crate::output::Value;
use stats::FigureComparison;

/// The environment the reference runs with: the reference figures were taken with Go's
/// scheduler on two threads, the size of these machines.
pub const REFERENCE_ENV: [(&str, &str); 1] = [("GOMAXPROCS", "2")];

/// Repetitions per workload unless `--pairs` says otherwise (the contract asks for at least 5).
pub const DEFAULT_PAIRS: usize = 5;

/// One side of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The reference runtime's benchmark binary.
    Reference,
    /// This project's workload binary.
    Project,
}

impl Side {
    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::Reference => Side::Project,
            Side::Project => Side::Reference,
        }
    }

    /// `reference` or `project`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Reference => "reference",
            Side::Project => "project",
        }
    }
}

/// Which side runs first in pair `pair` of workload `workload` (both counted from 0): the
/// sides alternate from pair to pair, and neighbouring workloads start on opposite sides, so
/// over the whole run each side goes first equally often (within one).
///
/// ```
/// use benches::side_by_side::{first_side, Side};
/// let firsts: Vec<Side> = (0..4).map(|pair| first_side(pair, 0)).collect();
/// assert_eq!(firsts, [Side::Reference, Side::Project, Side::Reference, Side::Project]);
/// assert_eq!(first_side(0, 1), Side::Project);
/// ```
pub fn first_side(pair: usize, workload: usize) -> Side {
    if (pair + workload) % 2 == 0 {
        Side::Reference
    } else {
        Side::Project
    }
}

/// How the two sides' values of a figure are compared. Every ratio is oriented so that it
/// reads the same way in the table: for speed, above 1 means the project is faster; for a
/// share, below 1 means the project uses less (memory) or does less (calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparison {
    /// A rate (ops/s, events/s): project ÷ reference.
    Rate,
    /// A duration (s, ms): reference ÷ project.
    Time,
    /// Memory or a count: project ÷ reference.
    Share,
}

impl Comparison {
    /// The oriented ratio of one pair (or of two medians).
    ///
    /// ```
    /// use benches::side_by_side::Comparison;
    /// assert_eq!(Comparison::Rate.ratio(100.0, 300.0), 3.0);
    /// assert_eq!(Comparison::Time.ratio(0.5, 0.25), 2.0);
    /// assert_eq!(Comparison::Share.ratio(80.0, 20.0), 0.25);
    /// ```
    pub fn ratio(self, reference: f64, project: f64) -> f64 {
        match self {
            Comparison::Rate | Comparison::Share => project / reference,
            Comparison::Time => reference / project,
        }
    }

    /// How a ratio of this comparison reads: `faster` or `of the reference`.
    pub fn reads_as(self) -> &'static str {
        match self {
            Comparison::Rate | Comparison::Time => "× faster",
            Comparison::Share => "of the reference",
        }
    }
}

/// One figure both sides print.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PairedFigure {
    /// What the table calls it: `create`, `phase 1`.
    pub label: &'static str,
    /// The reference's figure name: `w3t.phase1`.
    pub reference: String,
    /// The project's figure name: `w3.level.phase1`.
    pub project: String,
    /// The unit both print it in.
    pub unit: &'static str,
    /// How the two compare.
    pub comparison: Comparison,
}

/// One workload run on both sides.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PairedWorkload {
    /// What the table calls it: `W1`, `W3 level-triggered`.
    pub name: &'static str,
    /// What `suite --only` calls it: `w1`, `w3-level`.
    pub key: &'static str,
    /// The reference binary's arguments.
    pub reference_args: Vec<String>,
    /// The project's workload binary (beside the suite).
    pub project_binary: &'static str,
    /// Its arguments.
    pub project_args: Vec<String>,
    /// The figures compared.
    pub figures: Vec<PairedFigure>,
    /// What a reader must know to read the ratios (empty when the work is the same).
    pub note: &'static str,
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

fn figure(
    label: &'static str,
    reference: &str,
    project: &str,
    unit: &'static str,
    comparison: Comparison,
) -> PairedFigure {
    PairedFigure {
        label,
        reference: reference.to_string(),
        project: project.to_string(),
        unit,
        comparison,
    }
}

/// The W3 figures of one reference variant (`w3t`, `w3q`) and one project variant
/// (`w3.level`, ...): the phases, and the transform-call counters that show how much work each
/// side's controllers did.
fn w3_figures(reference: &str, project: &str) -> Vec<PairedFigure> {
    let name = |side: &str, figure: &str| format!("{side}.{figure}");
    let mut figures = vec![
        figure(
            "phase 1",
            &name(reference, "phase1"),
            &name(project, "phase1"),
            "s",
            Comparison::Time,
        ),
        figure(
            "phase 1 rate",
            &name(reference, "phase1_rate"),
            &name(project, "phase1_rate"),
            "items/s",
            Comparison::Rate,
        ),
        figure(
            "phase 2",
            &name(reference, "phase2"),
            &name(project, "phase2"),
            "s",
            Comparison::Time,
        ),
    ];
    for (label, counter) in [
        ("C1 transform calls, phase 1", "phase1_c1_calls"),
        ("C2 transform calls, phase 1", "phase1_c2_calls"),
        ("C1 transform calls, phase 2", "phase2_c1_calls"),
        ("C2 transform calls, phase 2", "phase2_c2_calls"),
    ] {
        figures.push(figure(
            label,
            &name(reference, counter),
            &name(project, counter),
            "calls",
            Comparison::Share,
        ));
    }
    figures
}

/// W3 at its headline size: the reference's variant `reference` (`w3t`, `w3q`) against the
/// project's `--variant variant`.
fn w3_workload(
    name: &'static str,
    key: &'static str,
    reference: &str,
    variant: &str,
    note: &'static str,
) -> PairedWorkload {
    PairedWorkload {
        name,
        key,
        reference_args: args(&["-w", reference, "-n", "10000"]),
        project_binary: "w3",
        project_args: args(&["--n", "10000", "--runs", "1", "--variant", variant]),
        figures: w3_figures(reference, &format!("w3.{variant}")),
        note,
    }
}

/// W3 as [`w3_workload`], the project on two threads: its writer's (the main thread) and one
/// runtime worker (`--workers 1`), as the reference runs at most two (`GOMAXPROCS=2`). On two
/// CPUs the headline's three threads (the writer's and a worker per CPU) take turns on the CPUs;
/// these rows show what that costs and where it pays.
fn w3_two_threads(
    name: &'static str,
    key: &'static str,
    reference: &str,
    variant: &str,
) -> PairedWorkload {
    let mut workload = w3_workload(
        name,
        key,
        reference,
        variant,
        "not the headline: the project with one runtime worker beside its writer's thread \
         (two threads at once, as the reference's GOMAXPROCS=2), not one per CPU",
    );
    workload.project_args.extend(args(&["--workers", "1"]));
    workload
}

/// The paired workloads, in running order: W1, W2 with the reference's exact history, W3
/// level-triggered, W3 per-item queue like for like (concurrency 1, a finalizer on each
/// input), the project's queue at concurrency 4 beside the same reference figure, and both W3
/// variants again with the project on two threads (`--workers 1`).
///
/// ```
/// let plan = benches::side_by_side::plan();
/// let names: Vec<_> = plan.iter().map(|w| w.name).collect();
/// assert_eq!(
///     names,
///     [
///         "W1",
///         "W2",
///         "W3 level-triggered",
///         "W3 queue",
///         "W3 queue, project x4",
///         "W3 level-triggered, project on 2 threads",
///         "W3 queue, project on 2 threads",
///     ]
/// );
/// assert_eq!(plan[0].reference_args, ["-w", "w1", "-n", "100000"]);
/// assert_eq!(plan[5].project_args[plan[5].project_args.len() - 2..], ["--workers", "1"]);
/// ```
pub fn plan() -> Vec<PairedWorkload> {
    vec![
        PairedWorkload {
            name: "W1",
            key: "w1",
            reference_args: args(&["-w", "w1", "-n", "100000"]),
            project_binary: "w1",
            project_args: args(&["--n", "100000", "--runs", "1"]),
            figures: vec![
                figure(
                    "create",
                    "w1.create",
                    "w1.create",
                    "ops/s",
                    Comparison::Rate,
                ),
                figure(
                    "update",
                    "w1.update",
                    "w1.update",
                    "ops/s",
                    Comparison::Rate,
                ),
                figure("list", "w1.list", "w1.list", "ms", Comparison::Time),
                figure(
                    "destroy",
                    "w1.destroy",
                    "w1.destroy",
                    "ops/s",
                    Comparison::Rate,
                ),
                figure(
                    "peak RSS",
                    "w1.peak_rss",
                    "w1.peak_rss",
                    "MiB",
                    Comparison::Share,
                ),
            ],
            note: "",
        },
        PairedWorkload {
            name: "W2",
            key: "w2",
            reference_args: args(&["-w", "w2", "-n", "1000"]),
            project_binary: "w2",
            project_args: args(&["--n", "1000", "--runs", "1", "--history", "exact"]),
            figures: vec![
                figure(
                    "events delivered",
                    "w2.events_delivered",
                    "w2.history16k.events_delivered",
                    "events/s",
                    Comparison::Rate,
                ),
                figure(
                    "wall",
                    "w2.wall",
                    "w2.history16k.wall",
                    "s",
                    Comparison::Time,
                ),
            ],
            note: "both sides with an exact history of 16,384 events per kind",
        },
        w3_workload("W3 level-triggered", "w3-level", "w3t", "level", ""),
        w3_workload(
            "W3 queue",
            "w3-queue",
            "w3q",
            "queue",
            "both sides at concurrency 1 with a finalizer on each input",
        ),
        w3_workload(
            "W3 queue, project x4",
            "w3-queue4",
            "w3q",
            "queue4",
            "not like for like: the project at concurrency 4, the reference at its default 1; \
             both with a finalizer on each input",
        ),
        w3_two_threads(
            "W3 level-triggered, project on 2 threads",
            "w3-level-2t",
            "w3t",
            "level",
        ),
        w3_two_threads(
            "W3 queue, project on 2 threads",
            "w3-queue-2t",
            "w3q",
            "queue",
        ),
    ]
}

/// The workloads of [`plan`] whose keys are in `keys` (all of them when `keys` is empty), in
/// plan order; an unknown key is an error listing the known ones.
///
/// ```
/// let chosen = benches::side_by_side::select(&["w3-level".to_string()]).unwrap();
/// assert_eq!(chosen.len(), 1);
/// assert_eq!(chosen[0].name, "W3 level-triggered");
/// assert!(benches::side_by_side::select(&["w9".to_string()]).is_err());
/// ```
pub fn select(keys: &[String]) -> Result<Vec<PairedWorkload>, WorkloadError> {
    let plan = plan();
    if let Some(unknown) = keys
        .iter()
        .find(|key| !plan.iter().any(|w| w.key == key.as_str()))
    {
        return Err(WorkloadError::new(format!(
            "--only: no paired workload {unknown:?} (known: {})",
            plan.iter().map(|w| w.key).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(plan
        .into_iter()
        .filter(|w| keys.is_empty() || keys.iter().any(|k| k == w.key))
        .collect())
}

/// One pair as it ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairRun {
    /// Repetition number, from 0.
    pub index: usize,
    /// The side that ran first.
    pub first: Side,
    /// The 1-minute load average just before the pair (`None` where it cannot be read).
    pub load: Option<f64>,
    /// Everything the reference printed.
    pub reference: Vec<Value>,
    /// Everything the project printed.
    pub project: Vec<Value>,
}

/// Runs `pairs` repetitions of every workload of `plan`, repetition by repetition (so each
/// workload's pairs are spread over the whole run), reading `load` before each pair and
/// starting each side through `run`. `progress` gets one line per pair. The first failure of
/// either side ends the run with that error, naming the workload, the pair and the side.
pub fn run_pairs(
    plan: &[PairedWorkload],
    pairs: usize,
    mut load: impl FnMut() -> Option<f64>,
    mut run: impl FnMut(&PairedWorkload, Side) -> Result<Vec<Value>, WorkloadError>,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Vec<PairRun>>, WorkloadError> {
    let mut runs: Vec<Vec<PairRun>> = plan.iter().map(|_| Vec::new()).collect();
    for index in 0..pairs {
        for (position, workload) in plan.iter().enumerate() {
            let load = load();
            let first = first_side(index, position);
            let mut values = [Vec::new(), Vec::new()];
            for side in [first, first.other()] {
                let printed = run(workload, side).map_err(|error| {
                    WorkloadError::new(format!(
                        "{} pair {}: the {} side failed: {error}",
                        workload.name,
                        index + 1,
                        side.name()
                    ))
                })?;
                values[usize::from(side == Side::Project)] = printed;
            }
            let [reference, project] = values;
            progress(&format!(
                "pair {}/{pairs} {}: load {}, {} first",
                index + 1,
                workload.name,
                load.map_or("unknown".to_string(), |l| format!("{l:.2}")),
                first.name()
            ));
            runs[position].push(PairRun {
                index,
                first,
                load,
                reference,
                project,
            });
        }
    }
    Ok(runs)
}

/// One workload's pairs and the comparison of each of its figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkloadResult {
    /// The workload's name in the table.
    pub workload: &'static str,
    /// The reference's command line (after the binary).
    pub reference_args: Vec<String>,
    /// The project's command line.
    pub project_command: String,
    /// What a reader must know to read the ratios.
    pub note: &'static str,
    /// Per figure: both sides' spread and the ratios.
    pub figures: Vec<FigureComparison>,
    /// The pairs, with everything each side printed.
    pub pairs: Vec<PairRun>,
}

/// The comparison of every figure of `workload` over its `pairs`. A figure missing from a
/// side's output, or printed in another unit than the plan's, is an error: a ratio of
/// mismatched figures would be a number without meaning.
pub fn summarise(
    workload: &PairedWorkload,
    pairs: Vec<PairRun>,
) -> Result<WorkloadResult, WorkloadError> {
    let mut figures = Vec::with_capacity(workload.figures.len());
    for figure in &workload.figures {
        let mut values = Vec::with_capacity(pairs.len());
        for pair in &pairs {
            let find = |side: Side, printed: &[Value], name: &str| {
                let value = printed.iter().find(|v| v.name == name).ok_or_else(|| {
                    WorkloadError::new(format!(
                        "{} pair {}: the {} side printed no {name}",
                        workload.name,
                        pair.index + 1,
                        side.name()
                    ))
                })?;
                if value.unit != figure.unit {
                    return Err(WorkloadError::new(format!(
                        "{} pair {}: the {} side printed {name} in {}, expected {}",
                        workload.name,
                        pair.index + 1,
                        side.name(),
                        value.unit,
                        figure.unit
                    )));
                }
                Ok(value.value)
            };
            values.push((
                find(Side::Reference, &pair.reference, &figure.reference)?,
                find(Side::Project, &pair.project, &figure.project)?,
            ));
        }
        figures.push(stats::compare(figure, &values));
    }
    Ok(WorkloadResult {
        workload: workload.name,
        reference_args: workload.reference_args.clone(),
        project_command: std::iter::once(workload.project_binary.to_string())
            .chain(workload.project_args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" "),
        note: workload.note,
        figures,
        pairs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(name: &str, value: f64, unit: &str) -> Value {
        Value {
            name: name.into(),
            value,
            unit: unit.into(),
        }
    }

    fn tiny_plan() -> Vec<PairedWorkload> {
        ["Wa", "Wb"]
            .into_iter()
            .map(|name| PairedWorkload {
                name,
                key: name,
                reference_args: args(&["-w", name]),
                project_binary: "w",
                project_args: Vec::new(),
                figures: vec![figure("x", "r.x", "p.x", "s", Comparison::Time)],
                note: "",
            })
            .collect()
    }

    #[test]
    fn each_side_goes_first_in_alternate_pairs() {
        let firsts: Vec<Side> = (0..5).map(|pair| first_side(pair, 0)).collect();
        assert_eq!(
            firsts,
            [
                Side::Reference,
                Side::Project,
                Side::Reference,
                Side::Project,
                Side::Reference
            ]
        );
    }

    #[test]
    fn over_a_run_each_side_goes_first_equally_often_within_one() {
        let plan_len = plan().len();
        for pairs in 1..8 {
            let reference_first = (0..pairs)
                .flat_map(|pair| (0..plan_len).map(move |w| first_side(pair, w)))
                .filter(|&side| side == Side::Reference)
                .count();
            let total = pairs * plan_len;
            assert!(
                reference_first.abs_diff(total - reference_first) <= 1,
                "{pairs} pairs: reference first {reference_first} of {total}"
            );
        }
    }

    #[test]
    fn pairs_run_repetition_by_repetition_with_the_load_read_before_each() {
        // Given a runner that logs every call,
        let plan = tiny_plan();
        let mut log = Vec::new();
        let mut loads = [1.0, 2.0, 3.0, 4.0].into_iter();
        let runs = run_pairs(
            &plan,
            2,
            || {
                let load = loads.next();
                log.push(format!("load {load:?}"));
                load
            },
            |_, side| {
                Ok(vec![match side {
                    Side::Reference => value("r.x", 2.0, "s"),
                    Side::Project => value("p.x", 1.0, "s"),
                }])
            },
            |_| {},
        )
        .unwrap();
        // then each workload has its pairs in order, each with the load read before it and the
        // first side alternating.
        assert_eq!(
            log,
            [
                "load Some(1.0)",
                "load Some(2.0)",
                "load Some(3.0)",
                "load Some(4.0)"
            ]
        );
        assert_eq!(runs.len(), 2);
        let summary: Vec<(usize, Side, Option<f64>)> = runs
            .iter()
            .flatten()
            .map(|p| (p.index, p.first, p.load))
            .collect();
        assert_eq!(
            summary,
            [
                (0, Side::Reference, Some(1.0)),
                (1, Side::Project, Some(3.0)),
                (0, Side::Project, Some(2.0)),
                (1, Side::Reference, Some(4.0)),
            ]
        );
    }

    #[test]
    fn sides_run_in_the_order_of_the_pair() {
        let plan = tiny_plan();
        let mut order = Vec::new();
        run_pairs(
            &plan[..1],
            3,
            || None,
            |_, side| {
                order.push(side);
                Ok(Vec::new())
            },
            |_| {},
        )
        .unwrap();
        use Side::{Project as P, Reference as R};
        assert_eq!(order, [R, P, P, R, R, P]);
    }

    #[test]
    fn a_failing_side_ends_the_run_naming_workload_pair_and_side() {
        let plan = tiny_plan();
        let mut calls = 0;
        let error = run_pairs(
            &plan,
            5,
            || None,
            |workload, side| {
                calls += 1;
                if workload.name == "Wb" && side == Side::Reference {
                    Err(WorkloadError::new("FAILED: w3t: wrong"))
                } else {
                    Ok(Vec::new())
                }
            },
            |_| {},
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "Wb pair 1: the reference side failed: FAILED: w3t: wrong"
        );
        // Wa's pair, then Wb's project side (Wb starts with the project in pair 1), then the
        // failing reference.
        assert_eq!(calls, 4);
    }

    fn pair(index: usize, reference: Vec<Value>, project: Vec<Value>) -> PairRun {
        PairRun {
            index,
            first: first_side(index, 0),
            load: None,
            reference,
            project,
        }
    }

    #[test]
    fn summary_pairs_each_figure_by_its_name_on_each_side() {
        let workload = &tiny_plan()[0];
        let result = summarise(
            workload,
            vec![
                pair(
                    0,
                    vec![value("r.x", 0.75, "s")],
                    vec![value("p.x", 0.25, "s")],
                ),
                pair(
                    1,
                    vec![value("r.x", 0.5, "s")],
                    vec![value("p.x", 0.25, "s")],
                ),
            ],
        )
        .unwrap();
        let x = &result.figures[0];
        assert_eq!(x.pair_ratios, [3.0, 2.0]);
        assert_eq!(result.project_command, "w");
    }

    #[test]
    fn a_figure_missing_on_one_side_is_an_error() {
        let workload = &tiny_plan()[0];
        let error = summarise(
            workload,
            vec![pair(
                0,
                vec![value("r.x", 0.3, "s")],
                vec![value("p.y", 0.1, "s")],
            )],
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "Wa pair 1: the project side printed no p.x"
        );
    }

    #[test]
    fn a_figure_in_another_unit_is_an_error() {
        let workload = &tiny_plan()[0];
        let error = summarise(
            workload,
            vec![pair(
                0,
                vec![value("r.x", 300.0, "ms")],
                vec![value("p.x", 0.1, "s")],
            )],
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "Wa pair 1: the reference side printed r.x in ms, expected s"
        );
    }

    #[test]
    fn every_planned_workload_compares_figures_in_one_unit_per_figure() {
        for workload in plan() {
            assert!(!workload.figures.is_empty(), "{}", workload.name);
            assert!(
                workload
                    .project_args
                    .windows(2)
                    .any(|w| w == ["--runs", "1"]),
                "{}: one run per process, as the reference",
                workload.name
            );
        }
    }
}
