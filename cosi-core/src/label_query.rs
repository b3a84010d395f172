//! Label queries: terms over a resource's labels. Terms in one [`LabelQuery`] are ANDed; the
//! queries in a [`LabelQueries`] are ORed (an empty set matches everything).
//!
//! Matching rule worth knowing: `exists`, `equal` and `in` on a missing key are false, and true when
//! inverted; the comparisons (`lt`, `lte`, numeric or not) on a missing key or a non-numeric value
//! are false **even when inverted** — a value that cannot be compared is never selected by a
//! comparison.

use crate::Labels;

/// The operation of one term.
#[derive(Clone, PartialEq, Debug)]
pub enum LabelOp {
    /// The key is present.
    Exists,
    /// The value equals this string.
    Equal(String),
    /// The value is one of these strings.
    In(Vec<String>),
    /// The value sorts before this string.
    Lt(String),
    /// The value sorts before or equals this string.
    Lte(String),
    /// The value, read as a number with an optional unit suffix, is below this one.
    LtNumeric(f64),
    /// The value, read as a number with an optional unit suffix, is below or equal to this one.
    LteNumeric(f64),
}

/// One term: a key, an operation, and whether the result is inverted.
#[derive(Clone, PartialEq, Debug)]
pub struct LabelTerm {
    /// The label key.
    pub key: String,
    /// The operation.
    pub op: LabelOp,
    /// Invert the result (see the module docs for comparisons on missing values).
    pub invert: bool,
}

impl LabelTerm {
    /// A term, not inverted.
    pub fn new(key: impl Into<String>, op: LabelOp) -> Self {
        LabelTerm {
            key: key.into(),
            op,
            invert: false,
        }
    }

    /// The same term, inverted.
    pub fn inverted(mut self) -> Self {
        self.invert = !self.invert;
        self
    }

    /// Whether `labels` satisfy this term.
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match (&self.op, value) {
            (LabelOp::Exists, v) => v.is_some() != self.invert,
            (LabelOp::Equal(_) | LabelOp::In(_), None) => self.invert,
            (LabelOp::Equal(want), Some(v)) => (v == want) != self.invert,
            (LabelOp::In(set), Some(v)) => set.iter().any(|s| s == v) != self.invert,
            (_, None) => false,
            (LabelOp::Lt(bound), Some(v)) => (v.as_str() < bound.as_str()) != self.invert,
            (LabelOp::Lte(bound), Some(v)) => (v.as_str() <= bound.as_str()) != self.invert,
            (LabelOp::LtNumeric(bound), Some(v)) => match parse_quantity(v) {
                Some(n) => (n < *bound) != self.invert,
                None => false,
            },
            (LabelOp::LteNumeric(bound), Some(v)) => match parse_quantity(v) {
                Some(n) => (n <= *bound) != self.invert,
                None => false,
            },
        }
    }
}

/// Terms that must all hold.
///
/// ```
/// use cosi_core::{LabelOp, LabelQuery, LabelTerm, Labels};
/// let q = LabelQuery::new()
///     .with(LabelTerm::new("app", LabelOp::Equal("web".into())))
///     .with(LabelTerm::new("mem", LabelOp::LtNumeric(2048.0)));
/// let labels: Labels = [("app".into(), "web".into()), ("mem".into(), "1ki".into())].into();
/// assert!(q.matches(&labels));
/// ```
#[derive(Clone, PartialEq, Debug, Default)]
pub struct LabelQuery {
    /// The terms, ANDed.
    pub terms: Vec<LabelTerm>,
}

impl LabelQuery {
    /// An empty query (matches everything).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a term.
    pub fn with(mut self, term: LabelTerm) -> Self {
        self.terms.push(term);
        self
    }

    /// Whether every term matches.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.terms.iter().all(|t| t.matches(labels))
    }
}

/// Queries of which at least one must hold; no queries at all matches everything.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct LabelQueries(pub Vec<LabelQuery>);

impl LabelQueries {
    /// Whether any query matches (or there are none).
    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.is_empty() || self.0.iter().any(|q| q.matches(labels))
    }

    /// Whether there is nothing to filter.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<LabelQuery> for LabelQueries {
    fn from(q: LabelQuery) -> Self {
        LabelQueries(vec![q])
    }
}

/// Reads a number with an optional unit suffix: `k m g t p` (powers of 1000) or
/// `ki mi gi ti pi` (powers of 1024), case-insensitive. Returns `None` for anything else.
///
/// ```
/// use cosi_core::parse_quantity;
/// assert_eq!(parse_quantity("10ki"), Some(10240.0));
/// assert_eq!(parse_quantity("1.5k"), Some(1500.0));
/// assert_eq!(parse_quantity("-3"), Some(-3.0));
/// assert_eq!(parse_quantity("ten"), None);
/// assert_eq!(parse_quantity(&format!("{}pi", "9".repeat(400))), None);
/// ```
pub fn parse_quantity(text: &str) -> Option<f64> {
    let lower = text.trim().to_ascii_lowercase();
    let units: [(&str, f64); 10] = [
        ("ki", 1024f64),
        ("mi", 1024f64.powi(2)),
        ("gi", 1024f64.powi(3)),
        ("ti", 1024f64.powi(4)),
        ("pi", 1024f64.powi(5)),
        ("k", 1e3),
        ("m", 1e6),
        ("g", 1e9),
        ("t", 1e12),
        ("p", 1e15),
    ];
    let (number, factor) = units
        .iter()
        .find_map(|(suffix, factor)| lower.strip_suffix(suffix).map(|n| (n, *factor)))
        .unwrap_or((lower.as_str(), 1.0));
    if number.is_empty()
        || !number
            .chars()
            .all(|c| c.is_ascii_digit() || "+-.".contains(c))
    {
        return None;
    }
    let value = number.parse::<f64>().ok()? * factor;
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equal_on_missing_key_is_false_and_true_when_inverted() {
        let term = LabelTerm::new("a", LabelOp::Equal("x".into()));
        assert!(!term.matches(&labels(&[])));
        assert!(term.inverted().matches(&labels(&[])));
    }

    #[test]
    fn comparison_on_missing_or_non_numeric_value_is_false_even_inverted() {
        let lt = LabelTerm::new("a", LabelOp::LtNumeric(10.0));
        for l in [labels(&[]), labels(&[("a", "abc")])] {
            assert!(!lt.matches(&l));
            assert!(!lt.clone().inverted().matches(&l));
        }
        let lts = LabelTerm::new("a", LabelOp::Lt("m".into()));
        assert!(!lts.matches(&labels(&[])));
        assert!(!lts.inverted().matches(&labels(&[])));
    }

    #[test]
    fn numeric_comparison_applies_units() {
        let term = LabelTerm::new("mem", LabelOp::LteNumeric(1024.0));
        assert!(term.matches(&labels(&[("mem", "1ki")])));
        assert!(!term.matches(&labels(&[("mem", "1.1k")])));
    }

    #[test]
    fn empty_queries_match_everything_and_queries_or() {
        assert!(LabelQueries::default().matches(&labels(&[])));
        let q = LabelQueries(vec![
            LabelQuery::new().with(LabelTerm::new("a", LabelOp::Exists)),
            LabelQuery::new().with(LabelTerm::new("b", LabelOp::Exists)),
        ]);
        assert!(q.matches(&labels(&[("b", "")])));
        assert!(!q.matches(&labels(&[("c", "")])));
    }
}
