//! Id queries: a regular expression over resource ids.

use regex::Regex;

use crate::{Error, Result};

/// A regex that ids must match (anywhere, unless anchored with `^`/`$`).
///
/// ```
/// use cosi_core::IdQuery;
/// let q = IdQuery::new("^eth[0-9]+$").unwrap();
/// assert!(q.matches("eth0"));
/// assert!(!q.matches("lo"));
/// assert!(IdQuery::new("(").is_err());
/// ```
#[derive(Clone, Debug)]
pub struct IdQuery(Regex);

impl IdQuery {
    /// Compiles the pattern; an invalid one is an invalid-argument error naming the pattern.
    pub fn new(pattern: &str) -> Result<Self> {
        Regex::new(pattern)
            .map(IdQuery)
            .map_err(|e| Error::invalid("id query", "pattern", format!("{pattern:?}: {e}")))
    }

    /// Whether `id` matches.
    pub fn matches(&self, id: &str) -> bool {
        self.0.is_match(id)
    }

    /// The pattern text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl PartialEq for IdQuery {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
