//! The statistics of one paired figure: each side's median with min–max, the ratio of the two
//! medians, and the median of the per-pair ratios.
//!
//! Both ratios are reported because they answer different questions on a noisy machine. The
//! ratio of medians compares each side's typical run; the median of per-pair ratios compares
//! the two sides under the same load (a pair runs back to back), so a burst of load that hits
//! one pair hits both of its sides and cancels out. When the two disagree, the load moved
//! during the run, and the per-pair figure is the one to trust.

use serde::Serialize;

use super::{Comparison, PairedFigure};
use crate::report::median;

/// Median, smallest and largest of one side's values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; every field is `NaN` when there are none.
    ///
    /// ```
    /// use benches::side_by_side::stats::Spread;
    /// let spread = Spread::of(&[3.0, 1.0, 2.0, 10.0]);
    /// assert_eq!((spread.median, spread.min, spread.max), (2.5, 1.0, 10.0));
    /// ```
    pub fn of(values: &[f64]) -> Spread {
        let fold = |f: fn(f64, f64) -> f64| values.iter().copied().reduce(f).unwrap_or(f64::NAN);
        Spread {
            median: median(values),
            min: fold(f64::min),
            max: fold(f64::max),
        }
    }
}

/// One figure compared over every pair.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FigureComparison {
    /// What the table calls it.
    pub figure: &'static str,
    /// The reference's figure name.
    pub reference_figure: String,
    /// The project's figure name.
    pub project_figure: String,
    /// The unit of both sides' values.
    pub unit: &'static str,
    /// How the ratios are oriented.
    pub comparison: Comparison,
    /// The reference's values.
    pub reference: Spread,
    /// The project's values.
    pub project: Spread,
    /// The oriented ratio of the two medians.
    pub ratio_of_medians: f64,
    /// The median of [`Self::pair_ratios`].
    pub median_of_pair_ratios: f64,
    /// The oriented ratio of each pair, in pair order.
    pub pair_ratios: Vec<f64>,
}

/// Compares `figure` over `pairs` of `(reference, project)` values, in pair order.
///
/// ```
/// use benches::side_by_side::{plan, stats::compare};
/// let create = &plan()[0].figures[0]; // W1 create, ops/s: project ÷ reference
/// let result = compare(create, &[(1.0e6, 2.0e6), (0.5e6, 2.5e6), (1.0e6, 3.0e6)]);
/// assert_eq!(result.reference.median, 1.0e6);
/// assert_eq!(result.project.median, 2.5e6);
/// assert_eq!(result.ratio_of_medians, 2.5);
/// assert_eq!(result.pair_ratios, [2.0, 5.0, 3.0]);
/// assert_eq!(result.median_of_pair_ratios, 3.0);
/// ```
pub fn compare(figure: &PairedFigure, pairs: &[(f64, f64)]) -> FigureComparison {
    let reference: Vec<f64> = pairs.iter().map(|&(r, _)| r).collect();
    let project: Vec<f64> = pairs.iter().map(|&(_, p)| p).collect();
    let pair_ratios: Vec<f64> = pairs
        .iter()
        .map(|&(r, p)| figure.comparison.ratio(r, p))
        .collect();
    let reference = Spread::of(&reference);
    let project = Spread::of(&project);
    FigureComparison {
        figure: figure.label,
        reference_figure: figure.reference.clone(),
        project_figure: figure.project.clone(),
        unit: figure.unit,
        comparison: figure.comparison,
        ratio_of_medians: figure.comparison.ratio(reference.median, project.median),
        median_of_pair_ratios: median(&pair_ratios),
        reference,
        project,
        pair_ratios,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(comparison: Comparison) -> PairedFigure {
        PairedFigure {
            label: "x",
            reference: "r.x".into(),
            project: "p.x".into(),
            unit: "s",
            comparison,
        }
    }

    #[test]
    fn a_time_ratio_is_reference_over_project() {
        let result = compare(&figure(Comparison::Time), &[(0.75, 0.25), (1.0, 0.125)]);
        assert_eq!(result.pair_ratios, [3.0, 8.0]);
        assert_eq!(result.ratio_of_medians, 0.875 / 0.1875);
    }

    #[test]
    fn a_share_is_project_over_reference() {
        let result = compare(&figure(Comparison::Share), &[(80.0, 20.0), (100.0, 30.0)]);
        assert_eq!(result.pair_ratios, [0.25, 0.3]);
        assert_eq!(result.ratio_of_medians, 25.0 / 90.0);
    }

    #[test]
    fn per_pair_ratios_cancel_load_that_the_ratio_of_medians_does_not() {
        // Given three pairs where load slowed both sides of the last two pairs threefold,
        let pairs = [(1.0, 0.25), (3.0, 0.75), (3.0, 0.75)];
        // when compared,
        let result = compare(&figure(Comparison::Time), &pairs);
        // then every pair says 4x, and so does the median of pair ratios, while the medians
        // happen to agree here too; shift one side's load and they part:
        assert_eq!(result.median_of_pair_ratios, 4.0);
        let skewed = compare(
            &figure(Comparison::Time),
            &[(1.0, 0.25), (3.0, 0.25), (3.0, 0.75)],
        );
        assert_eq!(skewed.ratio_of_medians, 12.0);
        assert_eq!(skewed.median_of_pair_ratios, 4.0);
    }

    #[test]
    fn spread_of_one_pair_is_that_pair() {
        let result = compare(&figure(Comparison::Rate), &[(2.0, 5.0)]);
        assert_eq!(
            (
                result.project.median,
                result.project.min,
                result.project.max
            ),
            (5.0, 5.0, 5.0)
        );
        assert_eq!(result.median_of_pair_ratios, 2.5);
    }

    #[test]
    fn an_empty_comparison_is_nan_not_a_panic() {
        let result = compare(&figure(Comparison::Rate), &[]);
        assert!(result.ratio_of_medians.is_nan());
        assert!(result.median_of_pair_ratios.is_nan());
    }
}
