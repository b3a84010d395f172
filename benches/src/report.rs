//! Figures of a workload: one value per run, summarised as median, min and max, printed as one
//! `name value unit` line per figure (the median). Spread and notes go on `#` lines, so a
//! script can keep the figures with `grep -v '^#'`.

use std::fmt::Write as _;
use std::time::Duration;

/// One figure's values over the runs of a workload.
#[derive(Clone, Debug)]
pub struct Figure {
    /// Dotted name, prefixed with the workload: `w1.create`.
    pub name: String,
    /// Unit as printed: `ops/s`, `ms`, `MiB`, `x` (a ratio).
    pub unit: String,
    /// One value per run, in run order.
    pub values: Vec<f64>,
}

impl Figure {
    /// The median of the values (the mean of the middle two for an even count); `NaN` when empty.
    pub fn median(&self) -> f64 {
        median(&self.values)
    }

    /// The smallest value; `NaN` when empty.
    pub fn min(&self) -> f64 {
        self.values
            .iter()
            .copied()
            .reduce(f64::min)
            .unwrap_or(f64::NAN)
    }

    /// The largest value; `NaN` when empty.
    pub fn max(&self) -> f64 {
        self.values
            .iter()
            .copied()
            .reduce(f64::max)
            .unwrap_or(f64::NAN)
    }
}

/// The figures of a workload, in the order they were first recorded.
///
/// ```
/// use benches::report::Report;
/// let mut report = Report::default();
/// for ops in [3.0, 1.0, 2.0] {
///     report.record("w0.create", ops, "ops/s");
/// }
/// assert_eq!(report.figure("w0.create").unwrap().median(), 2.0);
/// assert_eq!(report.summary_lines(), vec!["w0.create 2 ops/s".to_string()]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Report {
    figures: Vec<Figure>,
}

impl Report {
    /// Adds one run's value of a figure.
    pub fn record(&mut self, name: &str, value: f64, unit: &str) {
        match self.figures.iter_mut().find(|f| f.name == name) {
            Some(figure) => figure.values.push(value),
            None => self.figures.push(Figure {
                name: name.to_string(),
                unit: unit.to_string(),
                values: vec![value],
            }),
        }
    }

    /// Adds a rate: `count` operations over `elapsed`, in `ops/s` (or `unit`).
    pub fn record_rate(&mut self, name: &str, count: usize, elapsed: Duration, unit: &str) {
        self.record(name, count as f64 / elapsed.as_secs_f64(), unit);
    }

    /// Adds a duration in milliseconds.
    pub fn record_ms(&mut self, name: &str, elapsed: Duration) {
        self.record(name, elapsed.as_secs_f64() * 1e3, "ms");
    }

    /// A recorded figure.
    pub fn figure(&self, name: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.name == name)
    }

    /// Every recorded figure.
    pub fn figures(&self) -> &[Figure] {
        &self.figures
    }

    /// The `name value unit` line of every figure's median.
    pub fn summary_lines(&self) -> Vec<String> {
        self.figures
            .iter()
            .map(|f| format!("{} {} {}", f.name, format_value(f.median()), f.unit))
            .collect()
    }

    /// The `#` line with every figure's spread: `# name min .. max unit (n runs)`.
    pub fn spread_lines(&self) -> Vec<String> {
        self.figures
            .iter()
            .map(|f| {
                format!(
                    "# {} min {} max {} {} ({} runs)",
                    f.name,
                    format_value(f.min()),
                    format_value(f.max()),
                    f.unit,
                    f.values.len()
                )
            })
            .collect()
    }

    /// Prints the spread lines, then the median lines, to stdout.
    pub fn print(&self) {
        let mut out = String::new();
        for line in self.spread_lines().into_iter().chain(self.summary_lines()) {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "{line}");
        }
        print!("{out}");
    }
}

/// The median of `values` (the mean of the middle two for an even count); `NaN` when empty.
///
/// ```
/// assert_eq!(benches::report::median(&[3.0, 1.0, 2.0]), 2.0);
/// assert_eq!(benches::report::median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
/// assert!(benches::report::median(&[]).is_nan());
/// ```
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Formats a figure with four significant digits (whole numbers from 1000 on): `1234567`,
/// `85.34`, `0.4123`, `0.02170`. Four digits keep the ratio of two printed figures exact to
/// 0.1 %, which the side-by-side comparison relies on.
pub fn format_value(value: f64) -> String {
    let magnitude = value.abs();
    if !value.is_finite() {
        format!("{value}")
    } else if magnitude >= 1000.0 || value == value.trunc() {
        format!("{value:.0}")
    } else {
        // Digits after the point for four significant ones: 1 for 85.34, 5 for 0.02170.
        let decimals = (3 - magnitude.log10().floor() as i32).max(1) as usize;
        format!("{value:.decimals$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_count_is_mean_of_middle_two() {
        let figure = Figure {
            name: "x".into(),
            unit: "ms".into(),
            values: vec![4.0, 1.0, 3.0, 2.0],
        };
        assert_eq!(figure.median(), 2.5);
        assert_eq!(figure.min(), 1.0);
        assert_eq!(figure.max(), 4.0);
    }

    #[test]
    fn figures_keep_first_recorded_order() {
        let mut report = Report::default();
        report.record("b", 1.0, "ms");
        report.record("a", 2.0, "ms");
        report.record("b", 3.0, "ms");
        let names: Vec<_> = report.figures().iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(report.figure("b").unwrap().values, [1.0, 3.0]);
    }

    #[test]
    fn values_format_by_magnitude() {
        assert_eq!(format_value(1_234_567.8), "1234568");
        assert_eq!(format_value(85.344), "85.34");
        assert_eq!(format_value(0.41234), "0.4123");
        assert_eq!(format_value(0.021704), "0.02170");
        assert_eq!(format_value(999.94), "999.9");
        assert_eq!(format_value(3.0), "3");
    }
}
