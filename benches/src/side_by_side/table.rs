//! The side-by-side result as tables: aligned text for the terminal and `side-by-side.txt`,
//! Markdown for `side-by-side.md` (what the results page quotes). Both open with the date, the
//! machine and the loads, because a ratio from a shared machine means little without them.

use std::fmt::Write as _;

use serde::Serialize;

use super::stats::Spread;
use super::{Comparison, WorkloadResult};
use crate::report::format_value;

/// Everything a side-by-side run produced: what `side-by-side.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideBySide {
    /// The start, UTC, RFC 3339.
    pub date: String,
    /// Seconds since the Unix epoch at the start.
    pub started_unix: u64,
    /// CPU count and model.
    pub machine: String,
    /// The reference binary's path as given.
    pub reference: String,
    /// Environment the reference ran with.
    pub reference_env: Vec<String>,
    /// Repetitions per workload.
    pub pairs_per_workload: usize,
    /// The 1-minute load average before each pair, in running order.
    pub loads: Vec<f64>,
    /// Their spread.
    pub load: Spread,
    /// The whole run's wall time.
    pub wall_seconds: f64,
    /// Per workload: the pairs and the comparison of each figure.
    pub workloads: Vec<WorkloadResult>,
}

/// A ratio as the tables print it: `3.21×` for speed, `0.44` for a share.
///
/// ```
/// use benches::side_by_side::{table::ratio, Comparison};
/// assert_eq!(ratio(Comparison::Time, 3.2149), "3.21×");
/// assert_eq!(ratio(Comparison::Rate, 33.04), "33.0×");
/// assert_eq!(ratio(Comparison::Share, 0.4449), "0.44");
/// ```
pub fn ratio(comparison: Comparison, value: f64) -> String {
    let digits = if value.abs() >= 10.0 { 1 } else { 2 };
    match comparison {
        Comparison::Rate | Comparison::Time => format!("{value:.digits$}×"),
        Comparison::Share => format!("{value:.digits$}"),
    }
}

fn spread(spread: &Spread) -> String {
    format!(
        "{} ({}–{})",
        format_value(spread.median),
        format_value(spread.min),
        format_value(spread.max)
    )
}

/// The lines above either table: date, machine, reference, pairs, loads.
fn preamble(result: &SideBySide) -> Vec<String> {
    vec![
        format!(
            "Side by side, {} ({} s): {}",
            result.date,
            result.wall_seconds.round(),
            result.machine
        ),
        format!(
            "Reference: {} ({}); {} interleaved pairs per workload, fresh processes, sides \
             alternating",
            result.reference,
            result.reference_env.join(" "),
            result.pairs_per_workload
        ),
        format!(
            "1-minute load average before each pair: median {:.2}, {:.2}–{:.2} ({})",
            result.load.median,
            result.load.min,
            result.load.max,
            result
                .loads
                .iter()
                .map(|l| format!("{l:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        "Ratios: for rates and times, above 1 means the project is faster (project ÷ reference \
         for rates, reference ÷ project for times); for memory and call counts, the project's \
         share of the reference's."
            .to_string(),
    ]
}

/// Rows of text padded into columns: `left` lists the columns aligned left (names), the others
/// are aligned right (numbers). Trailing spaces are trimmed.
///
/// ```
/// let text = benches::side_by_side::table::aligned(
///     &["name", "value"],
///     &[vec!["a".into(), "1".into()], vec!["bb".into(), "22".into()]],
///     &[0],
/// );
/// assert_eq!(text, "name  value\na         1\nbb       22\n");
/// ```
pub fn aligned(header: &[&str], rows: &[Vec<String>], left: &[usize]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(column, (cell, &width))| {
                let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
                if left.contains(&column) {
                    format!("{cell}{pad}")
                } else {
                    format!("{pad}{cell}")
                }
            })
            .collect();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// The aligned text table, with its preamble.
pub fn text(result: &SideBySide) -> String {
    let mut rows = Vec::new();
    for workload in &result.workloads {
        for figure in &workload.figures {
            rows.push(vec![
                workload.workload.to_string(),
                figure.figure.to_string(),
                figure.unit.to_string(),
                spread(&figure.reference),
                spread(&figure.project),
                ratio(figure.comparison, figure.ratio_of_medians),
                ratio(figure.comparison, figure.median_of_pair_ratios),
            ]);
        }
    }
    let mut out = preamble(result).join("\n");
    out.push_str("\n\n");
    out.push_str(&aligned(
        &[
            "workload",
            "figure",
            "unit",
            "reference median (min–max)",
            "project median (min–max)",
            "ratio of medians",
            "median of pair ratios",
        ],
        &rows,
        &[0, 1, 2],
    ));
    let notes: Vec<String> = result
        .workloads
        .iter()
        .filter(|w| !w.note.is_empty())
        .map(|w| format!("{}: {}", w.workload, w.note))
        .collect();
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}

/// The Markdown table, with its preamble as a paragraph.
pub fn markdown(result: &SideBySide) -> String {
    let mut out = preamble(result).join("\n");
    out.push_str(
        "\n\n| workload | figure | reference, median (min–max) | project, median (min–max) | \
         ratio of medians | median of per-pair ratios |\n|---|---|---|---|---|---|\n",
    );
    for workload in &result.workloads {
        for figure in &workload.figures {
            let _ = writeln!(
                out,
                "| {} | {} | {} {} | {} {} | {} | **{}** |",
                workload.workload,
                figure.figure,
                spread(&figure.reference),
                figure.unit,
                spread(&figure.project),
                figure.unit,
                ratio(figure.comparison, figure.ratio_of_medians),
                ratio(figure.comparison, figure.median_of_pair_ratios),
            );
        }
    }
    for workload in result.workloads.iter().filter(|w| !w.note.is_empty()) {
        let _ = write!(out, "\n{}: {}.", workload.workload, workload.note);
    }
    out.push('\n');
    out
}
