//! Reading a workload's output back: the `name value unit` median lines and the
//! `# name min X max Y unit (N runs)` spread lines that [`Report::print`] writes, turned into one
//! [`FigureSummary`] per figure. The suite (`src/bin/suite.rs`) and W6 (which runs each
//! measurement in a fresh process) read workload output this way, so the printed format is the
//! only interface between a workload and whatever collects its figures.
//!
//! [`Report::print`]: crate::report::Report::print

use crate::check::WorkloadError;

/// One figure as a workload printed it: the median with the spread over its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct FigureSummary {
    /// Dotted name: `w1.create`.
    pub name: String,
    /// Unit as printed: `ops/s`, `ms`, `x`.
    pub unit: String,
    /// Median over the runs.
    pub median: f64,
    /// Smallest value over the runs.
    pub min: f64,
    /// Largest value over the runs.
    pub max: f64,
    /// How many runs the figure summarises.
    pub runs: usize,
}

/// Every figure in a workload's standard output, in printed order.
///
/// Every figure line must have a spread line of the same name and unit, and every line that
/// does not start with `#` must be a figure: anything else means the output is not what the
/// workload contract says, and is an error rather than a figure silently dropped.
///
/// ```
/// let output = "# w0: demo\n# w0.create min 1 max 3 ops/s (3 runs)\nw0.create 2 ops/s\n";
/// let figures = benches::output::parse_figures(output).unwrap();
/// assert_eq!(figures.len(), 1);
/// assert_eq!((figures[0].median, figures[0].min, figures[0].max), (2.0, 1.0, 3.0));
/// assert_eq!(figures[0].runs, 3);
/// assert!(benches::output::parse_figures("w0.create fast\n").is_err());
/// ```
pub fn parse_figures(output: &str) -> Result<Vec<FigureSummary>, WorkloadError> {
    let mut spreads: Vec<(String, f64, f64, String, usize)> = Vec::new();
    let mut figures = Vec::new();
    for line in output.lines() {
        let line = line.trim_end();
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(spread) = parse_spread(comment) {
                spreads.push(spread);
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let median = match fields.as_slice() {
            [_, value, _] => value.parse::<f64>().ok(),
            _ => None,
        }
        .ok_or_else(|| {
            WorkloadError::new(format!(
                "output line {line:?} is neither a `#` comment nor `name value unit`"
            ))
        })?;
        let (name, unit) = (fields[0], fields[2]);
        let (_, min, max, _, runs) = spreads
            .iter()
            .find(|(n, _, _, u, _)| n == name && u == unit)
            .ok_or_else(|| {
                WorkloadError::new(format!("figure {name} has no `# {name} min .. max` line"))
            })?;
        figures.push(FigureSummary {
            name: name.to_string(),
            unit: unit.to_string(),
            median,
            min: *min,
            max: *max,
            runs: *runs,
        });
    }
    Ok(figures)
}

/// One printed figure of a single run: `name value unit`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Value {
    /// Dotted name: `w1.create`.
    pub name: String,
    /// The value.
    pub value: f64,
    /// Unit as printed.
    pub unit: String,
}

/// Every `name value unit` line of one run's output, in printed order, without requiring
/// spread lines: how the suite reads the reference binary, which runs once per process and
/// prints no spread. `#` lines are comments; a `FAILED:` line is the run's own verdict and is
/// returned as the error; any other line is an error too.
///
/// ```
/// let output = "# w1: N = 100000\nw1.create 804170 ops/s\nw2.events_delivered 1.42004e+06 events/s\n";
/// let values = benches::output::parse_values(output).unwrap();
/// assert_eq!(values.len(), 2);
/// assert_eq!((values[1].value, values[1].unit.as_str()), (1_420_040.0, "events/s"));
/// let failed = benches::output::parse_values("FAILED: w3t: C item 7 is 3, expected 9\n");
/// assert_eq!(failed.unwrap_err().to_string(), "FAILED: w3t: C item 7 is 3, expected 9");
/// ```
pub fn parse_values(output: &str) -> Result<Vec<Value>, WorkloadError> {
    let mut values = Vec::new();
    for line in output.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with("FAILED") {
            return Err(WorkloadError::new(line));
        }
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            [name, value, unit] => match value.parse::<f64>() {
                Ok(value) if value.is_finite() => values.push(Value {
                    name: name.to_string(),
                    value,
                    unit: unit.to_string(),
                }),
                _ => {
                    return Err(WorkloadError::new(format!(
                        "output line {line:?}: {value:?} is not a finite number"
                    )))
                }
            },
            _ => {
                return Err(WorkloadError::new(format!(
                    "output line {line:?} is neither a `#` comment nor `name value unit`"
                )))
            }
        }
    }
    Ok(values)
}

/// `name min X max Y unit (N runs)` (after the `#`), or `None` for any other comment.
fn parse_spread(comment: &str) -> Option<(String, f64, f64, String, usize)> {
    match comment.split_whitespace().collect::<Vec<_>>().as_slice() {
        [name, "min", min, "max", max, unit, runs, "runs)"] => Some((
            name.to_string(),
            min.parse().ok()?,
            max.parse().ok()?,
            unit.to_string(),
            runs.strip_prefix('(')?.parse().ok()?,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Report;

    #[test]
    fn printed_report_parses_back_to_its_figures() {
        let mut report = Report::default();
        for (ops, ms) in [(3.0, 10.0), (1.0, 30.0), (2.0, 20.0)] {
            report.record("w0.create", ops, "ops/s");
            report.record("w0.list", ms, "ms");
        }
        let text = report
            .spread_lines()
            .into_iter()
            .chain(report.summary_lines())
            .collect::<Vec<_>>()
            .join("\n");
        let figures = parse_figures(&text).unwrap();
        assert_eq!(
            figures,
            vec![
                FigureSummary {
                    name: "w0.create".into(),
                    unit: "ops/s".into(),
                    median: 2.0,
                    min: 1.0,
                    max: 3.0,
                    runs: 3
                },
                FigureSummary {
                    name: "w0.list".into(),
                    unit: "ms".into(),
                    median: 20.0,
                    min: 10.0,
                    max: 30.0,
                    runs: 3
                },
            ]
        );
    }

    #[test]
    fn figure_without_spread_line_is_an_error() {
        let error = parse_figures("w0.create 2 ops/s\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "figure w0.create has no `# w0.create min .. max` line"
        );
    }

    #[test]
    fn other_comment_lines_are_ignored() {
        let text = "# w0: demo, N = 10\n# run 1: create 3 ms\n# note min of max\n";
        assert_eq!(parse_figures(text).unwrap(), vec![]);
    }
}
