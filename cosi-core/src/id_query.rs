//! Id queries: a regular expression over resource ids.

use regex::{Regex, RegexBuilder};

use crate::{Error, Result};

/// The longest id query pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4 * 1024;

/// The most memory an id query's compiled program (and each of its lazy DFAs) may take.
pub const MAX_COMPILED_BYTES: usize = 4 * 1024 * 1024;

/// How much of a pattern an error quotes.
const QUOTED_PATTERN_BYTES: usize = 64;

/// The pattern, quoted; past [`QUOTED_PATTERN_BYTES`], its start and how many bytes were cut.
fn quoted_start(pattern: &str) -> String {
    format!(
        "{:?}",
        crate::text::clipped_to(pattern, QUOTED_PATTERN_BYTES)
    )
}

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
    ///
    /// Patterns come from remote callers, so both the text and what it compiles to are bounded:
    /// a pattern longer than [`MAX_PATTERN_BYTES`], or one whose compiled program would exceed
    /// [`MAX_COMPILED_BYTES`], is refused before it takes the memory and time to build it. An
    /// error quotes a long pattern by its start only.
    ///
    /// ```
    /// use cosi_core::id_query::{IdQuery, MAX_PATTERN_BYTES};
    /// let long = "a".repeat(MAX_PATTERN_BYTES + 1);
    /// let refused = IdQuery::new(&long).unwrap_err().to_string();
    /// assert!(refused.contains("4097 bytes"), "{refused}");
    /// assert!(IdQuery::new("a{1000}{1000}").is_err()); // compiles too large
    /// ```
    pub fn new(pattern: &str) -> Result<Self> {
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(Error::invalid(
                "id query",
                "pattern",
                format!(
                    "{} ({} bytes) is longer than the {MAX_PATTERN_BYTES} bytes a pattern may have",
                    quoted_start(pattern),
                    pattern.len()
                ),
            ));
        }
        RegexBuilder::new(pattern)
            .size_limit(MAX_COMPILED_BYTES)
            .dfa_size_limit(MAX_COMPILED_BYTES)
            .build()
            .map(IdQuery)
            .map_err(|e| {
                let reason = match &e {
                    // The parser's message repeats the whole pattern, unescaped, with a marker
                    // under it: keep only its last line (what is wrong); the pattern is quoted
                    // before it, escaped.
                    regex::Error::Syntax(message) => message
                        .lines()
                        .rev()
                        .find(|line| !line.trim().is_empty())
                        .unwrap_or(message)
                        .trim()
                        .to_string(),
                    other => other.to_string(),
                };
                Error::invalid(
                    "id query",
                    "pattern",
                    format!("{}: {reason}", quoted_start(pattern)),
                )
            })
    }

    /// The pattern that selects exactly `id`: the id, escaped, between anchors.
    ///
    /// ```
    /// use cosi_core::IdQuery;
    /// assert_eq!(IdQuery::exact_pattern("a.b"), r"^a\.b$");
    /// ```
    pub fn exact_pattern(id: &str) -> String {
        format!("^{}$", regex::escape(id))
    }

    /// The query that selects exactly `id` (refused, as any pattern, if the escaped id is longer
    /// than [`MAX_PATTERN_BYTES`]).
    ///
    /// ```
    /// use cosi_core::IdQuery;
    /// let q = IdQuery::exact("eth0.1").unwrap();
    /// assert!(q.matches("eth0.1"));
    /// assert!(!q.matches("eth0x1"));
    /// ```
    pub fn exact(id: &str) -> Result<Self> {
        Self::new(&Self::exact_pattern(id))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_of_the_limit_compiles_and_one_byte_more_is_refused() {
        let literal = "a".repeat(MAX_PATTERN_BYTES);
        assert!(IdQuery::new(&literal).unwrap().matches(&literal));
        let refused = IdQuery::new(&format!("{literal}a"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("(4097 bytes) is longer than the 4096 bytes"),
            "{refused}"
        );
    }

    #[test]
    fn a_pattern_that_compiles_beyond_the_memory_limit_is_refused() {
        // Short text, a program of millions of states.
        let refused = IdQuery::new("[a-z]{100000}").unwrap_err().to_string();
        assert!(refused.contains("exceeds size limit"), "{refused}");
    }

    #[test]
    fn an_error_quotes_a_long_pattern_by_its_start_and_says_what_is_wrong() {
        let pattern = format!("({}", "x".repeat(1_000));
        let refused = IdQuery::new(&pattern).unwrap_err().to_string();
        assert!(refused.len() < 300, "{} bytes: {refused}", refused.len());
        assert!(
            refused.contains(&format!("\"({}\"…", "x".repeat(63))),
            "{refused}"
        );
        assert!(refused.contains("unclosed group"), "{refused}");
    }

    #[test]
    fn an_error_quotes_the_pattern_once_escaped_on_one_line() {
        let refused = IdQuery::new("\u{1b}[2J(").unwrap_err().to_string();
        assert_eq!(
            refused,
            "id query: invalid pattern: \"\\u{1b}[2J(\": error: unclosed character class"
        );
    }

    #[test]
    fn an_error_quotes_a_short_pattern_whole() {
        let refused = IdQuery::new("(").unwrap_err().to_string();
        assert!(refused.contains("\"(\""), "{refused}");
        assert!(refused.contains("unclosed group"), "{refused}");
    }
}
