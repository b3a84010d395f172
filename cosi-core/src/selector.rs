//! Selector strings: the text form of [`LabelQueries`], parsed with [`LabelQueries::parse`] (or
//! `str::parse`) and written back by `Display`. Displaying and parsing again gives an equal value.
//!
//! # Syntax
//!
//! A selector is one or more **queries** separated by `|`; a resource matches when any query
//! matches. A query is one or more **terms** separated by `,`; it matches when every term does.
//! The empty selector (only whitespace) has no queries and matches everything; a query written `*`
//! has no terms and also matches everything. Whitespace is allowed around every token.
//!
//! | term              | meaning                                                   | query term                   |
//! |-------------------|-----------------------------------------------------------|------------------------------|
//! | `key`             | the key is present                                        | `Exists`                     |
//! | `!key`            | the key is absent                                         | `Exists`, inverted           |
//! | `key=v`, `key==v` | the value is `v`                                          | `Equal(v)`                   |
//! | `key!=v`          | the value is not `v`, or the key is absent                | `Equal(v)`, inverted         |
//! | `key in (a,b)`    | the value is one of `a`, `b`                              | `In([a, b])`                 |
//! | `key notin (a,b)` | the value is none of `a`, `b`, or the key is absent       | `In([a, b])`, inverted       |
//! | `key<n`           | the value is a number below `n`                           | `LtNumeric(n)`               |
//! | `key<=n`          | the value is a number below or equal to `n`               | `LteNumeric(n)`              |
//! | `key>n`           | the value is a number above `n`                           | `LteNumeric(n)`, inverted    |
//! | `key>=n`          | the value is a number above or equal to `n`               | `LtNumeric(n)`, inverted     |
//! | `key lt s`        | the value sorts before the string `s`                     | `Lt(s)`                      |
//! | `key lte s`       | the value sorts before or equals `s`                      | `Lte(s)`                     |
//! | `key gt s`        | the value sorts after `s`                                 | `Lte(s)`, inverted           |
//! | `key gte s`       | the value sorts after or equals `s`                       | `Lt(s)`, inverted            |
//!
//! Numbers take the unit suffixes of [`parse_quantity`]: `k m g t p`
//! (powers of 1000) and `ki mi gi ti pi` (powers of 1024), so `mem<10ki` is `LtNumeric(10240)`.
//! `>` and `>=` are the inverted `<=` and `<`; since a comparison with a missing or non-numeric
//! value is false even when inverted, `a>5` does not match a resource without `a`, nor one whose
//! `a` is `x`. The same holds for `gt` and `gte`. String comparisons order by bytes (UTF-8).
//!
//! Keys and values are **bare words** (any characters except whitespace, control characters and
//! `= ! < > , ( ) | ; * " \`; `;` is reserved) or **double-quoted strings**, in which `\"`, `\\`, `\n`, `\r`, `\t`
//! and `\u{hex}` are escapes. `Display` quotes exactly the strings that need it, so every key and
//! value round-trips. Keys are not checked against the Kubernetes label syntax here (the store
//! accepts any label); use [`validate_label_key`](crate::validate_label_key) where that is promised.
//!
//! A parse error is [`Error::InvalidArgument`] with subject `selector`, field `column N` (1-based,
//! counted in characters) and a message saying what was expected and what was found.
//!
//! ```
//! use cosi_core::{LabelQueries, Labels};
//! let selector: LabelQueries = "app=web, tier in (a,b), !legacy | mem>=1gi".parse().unwrap();
//! let labels: Labels = [("mem".to_string(), "2gi".to_string())].into();
//! assert!(selector.matches(&labels));
//! assert_eq!(selector.to_string(), "app=web,tier in (a,b),!legacy | mem>=1073741824");
//!
//! let err = LabelQueries::parse("app=web,tier in a").unwrap_err();
//! assert_eq!(err.to_string(), "selector: invalid column 17: expected '(' after 'in', found 'a'");
//! ```

use std::fmt::{self, Write as _};
use std::str::FromStr;

use crate::{parse_quantity, Error, LabelOp, LabelQueries, LabelQuery, LabelTerm, Result};

const SEPARATOR_QUERIES: char = '|';
const EVERYTHING: char = '*';

/// Characters that end a bare word.
fn is_special(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '=' | '!' | '<' | '>' | ',' | '(' | ')' | '|' | ';' | '*' | '"' | '\\'
        )
}

impl LabelQueries {
    /// Parses a selector string (syntax in the [module docs](crate::selector)).
    ///
    /// ```
    /// use cosi_core::{LabelOp, LabelQueries, LabelQuery, LabelTerm};
    /// let parsed = LabelQueries::parse("a>5").unwrap();
    /// let expected: LabelQueries = LabelQuery::new()
    ///     .with(LabelTerm::new("a", LabelOp::LteNumeric(5.0)).inverted())
    ///     .into();
    /// assert_eq!(parsed, expected);
    /// ```
    pub fn parse(selector: &str) -> Result<LabelQueries> {
        Parser::new(selector).selector()
    }
}

impl FromStr for LabelQueries {
    type Err = Error;

    fn from_str(selector: &str) -> Result<Self> {
        LabelQueries::parse(selector)
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn new(text: &str) -> Self {
        Parser {
            chars: text.chars().collect(),
            pos: 0,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    /// Skips whitespace; returns whether there was any.
    fn skip_whitespace(&mut self) -> bool {
        let start = self.pos;
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
        self.pos > start
    }

    fn error_at(&self, pos: usize, expected: &str) -> Error {
        let found = match self.chars.get(pos) {
            Some(c) => format!("{c:?}"),
            None => "end of selector".to_string(),
        };
        Error::invalid(
            "selector",
            format!("column {}", pos + 1),
            format!("expected {expected}, found {found}"),
        )
    }

    fn error(&self, expected: &str) -> Error {
        self.error_at(self.pos, expected)
    }

    fn selector(mut self) -> Result<LabelQueries> {
        self.skip_whitespace();
        if self.peek().is_none() {
            return Ok(LabelQueries::default());
        }
        let mut queries = vec![self.query()?];
        loop {
            match self.peek() {
                None => return Ok(LabelQueries(queries)),
                Some(SEPARATOR_QUERIES) => {
                    self.pos += 1;
                    self.skip_whitespace();
                    queries.push(self.query()?);
                }
                Some(_) => return Err(self.error("',', '|' or end of selector")),
            }
        }
    }

    /// A query; leaves the position after trailing whitespace.
    fn query(&mut self) -> Result<LabelQuery> {
        if self.peek() == Some(EVERYTHING) {
            self.pos += 1;
            self.skip_whitespace();
            return Ok(LabelQuery::new());
        }
        let mut query = LabelQuery::new();
        loop {
            query.terms.push(self.term()?);
            if self.peek() == Some(',') {
                self.pos += 1;
                self.skip_whitespace();
            } else {
                return Ok(query);
            }
        }
    }

    /// A term; leaves the position after trailing whitespace.
    fn term(&mut self) -> Result<LabelTerm> {
        if self.peek() == Some('!') {
            self.pos += 1;
            self.skip_whitespace();
            let key = self.token("a label key after '!'")?;
            self.skip_whitespace();
            return Ok(LabelTerm::new(key, LabelOp::Exists).inverted());
        }
        let key = self.token("a label key, '!key' or '*'")?;
        let spaced = self.skip_whitespace();
        let term = match (self.peek(), self.peek_at(1)) {
            (None | Some(',' | SEPARATOR_QUERIES), _) => {
                return Ok(LabelTerm::new(key, LabelOp::Exists))
            }
            (Some('='), Some('=')) => {
                self.pos += 2;
                LabelTerm::new(key, LabelOp::Equal(self.value("a value after '=='")?))
            }
            (Some('='), _) => {
                self.pos += 1;
                LabelTerm::new(key, LabelOp::Equal(self.value("a value after '='")?))
            }
            (Some('!'), Some('=')) => {
                self.pos += 2;
                LabelTerm::new(key, LabelOp::Equal(self.value("a value after '!='")?)).inverted()
            }
            (Some('<'), Some('=')) => {
                self.pos += 2;
                LabelTerm::new(key, LabelOp::LteNumeric(self.number("<=")?))
            }
            (Some('<'), _) => {
                self.pos += 1;
                LabelTerm::new(key, LabelOp::LtNumeric(self.number("<")?))
            }
            (Some('>'), Some('=')) => {
                self.pos += 2;
                LabelTerm::new(key, LabelOp::LtNumeric(self.number(">=")?)).inverted()
            }
            (Some('>'), _) => {
                self.pos += 1;
                LabelTerm::new(key, LabelOp::LteNumeric(self.number(">")?)).inverted()
            }
            (Some(c), _) if spaced && !is_special(c) => self.keyword_term(key)?,
            _ => {
                return Err(self.error(
                    "an operator (=, ==, !=, <, <=, >, >=, in, notin, lt, lte, gt, gte), \
                     ',', '|' or end of selector",
                ))
            }
        };
        self.skip_whitespace();
        Ok(term)
    }

    /// The rest of `key in (..)`, `key notin (..)`, `key lt v`, ...
    fn keyword_term(&mut self, key: String) -> Result<LabelTerm> {
        let start = self.pos;
        let word = self.bare_word();
        match word.as_str() {
            "in" | "notin" => {
                self.skip_whitespace();
                if self.peek() != Some('(') {
                    return Err(self.error(&format!("'(' after '{word}'")));
                }
                self.pos += 1;
                let values = self.value_list()?;
                let term = LabelTerm::new(key, LabelOp::In(values));
                Ok(if word == "notin" {
                    term.inverted()
                } else {
                    term
                })
            }
            "lt" | "lte" | "gt" | "gte" => {
                if !self.skip_whitespace() {
                    return Err(self.error(&format!("whitespace after '{word}'")));
                }
                let value = self.token(&format!("a value after '{word}'"))?;
                Ok(match word.as_str() {
                    "lt" => LabelTerm::new(key, LabelOp::Lt(value)),
                    "lte" => LabelTerm::new(key, LabelOp::Lte(value)),
                    "gt" => LabelTerm::new(key, LabelOp::Lte(value)).inverted(),
                    _ => LabelTerm::new(key, LabelOp::Lt(value)).inverted(),
                })
            }
            _ => Err(self.error_at(
                start,
                "an operator (=, ==, !=, <, <=, >, >=, in, notin, lt, lte, gt, gte), \
                 ',', '|' or end of selector",
            )),
        }
    }

    /// The values of an `in` list, after its `(`, up to and including the `)`.
    fn value_list(&mut self) -> Result<Vec<String>> {
        let mut values = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(')') {
            self.pos += 1;
            return Ok(values);
        }
        loop {
            self.skip_whitespace();
            values.push(self.token("a value")?);
            self.skip_whitespace();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(')') => {
                    self.pos += 1;
                    return Ok(values);
                }
                _ => return Err(self.error("',' or ')' in the value list")),
            }
        }
    }

    fn value(&mut self, expected: &str) -> Result<String> {
        self.skip_whitespace();
        self.token(expected)
    }

    fn number(&mut self, operator: &str) -> Result<f64> {
        self.skip_whitespace();
        let start = self.pos;
        let expected = format!("a number after '{operator}' (optionally with a unit suffix)");
        let text = self.token(&expected)?;
        // A finite mantissa times a unit factor can still overflow to infinity.
        parse_quantity(&text)
            .filter(|n| n.is_finite())
            .ok_or_else(|| {
                Error::invalid(
                    "selector",
                    format!("column {}", start + 1),
                    format!(
                        "expected {expected}, found {:?} (units: k m g t p, ki mi gi ti pi)",
                        crate::text::clipped(&text)
                    ),
                )
            })
    }

    fn bare_word(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| !is_special(c)) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// A bare word or a quoted string.
    fn token(&mut self, expected: &str) -> Result<String> {
        match self.peek() {
            Some('"') => self.quoted(),
            Some(c) if !is_special(c) => Ok(self.bare_word()),
            _ => Err(self.error(expected)),
        }
    }

    fn quoted(&mut self) -> Result<String> {
        let open = self.pos;
        self.pos += 1;
        let mut text = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(Error::invalid(
                    "selector",
                    format!("column {}", open + 1),
                    "expected a closing '\"' for the string opened here, found end of selector",
                ));
            };
            self.pos += 1;
            match c {
                '"' => return Ok(text),
                '\\' => text.push(self.escape()?),
                c => text.push(c),
            }
        }
    }

    /// The character of an escape, after its backslash.
    fn escape(&mut self) -> Result<char> {
        let expected = "an escape (\\\", \\\\, \\n, \\r, \\t or \\u{hex})";
        let c = match self.peek() {
            Some('"') => '"',
            Some('\\') => '\\',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('u') if self.peek_at(1) == Some('{') => {
                let start = self.pos;
                self.pos += 2;
                let digits_start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                    self.pos += 1;
                }
                let digits: String = self.chars[digits_start..self.pos].iter().collect();
                if self.peek() != Some('}') {
                    return Err(self.error("hex digits and '}' in a \\u{..} escape"));
                }
                return match u32::from_str_radix(&digits, 16)
                    .ok()
                    .and_then(char::from_u32)
                {
                    Some(c) => {
                        self.pos += 1;
                        Ok(c)
                    }
                    None => Err(Error::invalid(
                        "selector",
                        format!("column {start}"),
                        format!(
                            "expected a Unicode scalar value in \\u{{..}}, found {:?}",
                            crate::text::clipped(&digits)
                        ),
                    )),
                };
            }
            _ => return Err(self.error(expected)),
        };
        self.pos += 1;
        Ok(c)
    }
}

/// Writes `text` bare when it reads back as itself, quoted otherwise.
fn write_token(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    if !text.is_empty() && !text.chars().any(is_special) {
        return f.write_str(text);
    }
    f.write_char('"')?;
    for c in text.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if c.is_control() => write!(f, "\\u{{{:x}}}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl fmt::Display for LabelTerm {
    /// Writes the term in selector syntax. A numeric bound that is not finite (the parser never
    /// produces one) is written as `NaN` or `inf`, which does not parse back.
    ///
    /// ```
    /// use cosi_core::{LabelOp, LabelTerm};
    /// let term = LabelTerm::new("tier", LabelOp::In(vec!["a".into(), "b c".into()])).inverted();
    /// assert_eq!(term.to_string(), r#"tier notin (a,"b c")"#);
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (LabelOp::Exists, true) = (&self.op, self.invert) {
            f.write_char('!')?;
        }
        write_token(f, &self.key)?;
        match (&self.op, self.invert) {
            (LabelOp::Exists, _) => Ok(()),
            (LabelOp::Equal(v), invert) => {
                f.write_str(if invert { "!=" } else { "=" })?;
                write_token(f, v)
            }
            (LabelOp::In(values), invert) => {
                f.write_str(if invert { " notin (" } else { " in (" })?;
                for (i, v) in values.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write_token(f, v)?;
                }
                f.write_char(')')
            }
            (LabelOp::Lt(v), invert) => {
                f.write_str(if invert { " gte " } else { " lt " })?;
                write_token(f, v)
            }
            (LabelOp::Lte(v), invert) => {
                f.write_str(if invert { " gt " } else { " lte " })?;
                write_token(f, v)
            }
            (LabelOp::LtNumeric(n), invert) => write!(f, "{}{n}", if invert { ">=" } else { "<" }),
            (LabelOp::LteNumeric(n), invert) => write!(f, "{}{n}", if invert { ">" } else { "<=" }),
        }
    }
}

impl fmt::Display for LabelQuery {
    /// Writes the terms joined by `,`, or `*` for a query without terms.
    ///
    /// ```
    /// use cosi_core::{LabelOp, LabelQuery, LabelTerm};
    /// let q = LabelQuery::new()
    ///     .with(LabelTerm::new("a", LabelOp::Exists))
    ///     .with(LabelTerm::new("n", LabelOp::LtNumeric(1.5)));
    /// assert_eq!(q.to_string(), "a,n<1.5");
    /// assert_eq!(LabelQuery::new().to_string(), "*");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_char(EVERYTHING);
        }
        for (i, term) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            term.fmt(f)?;
        }
        Ok(())
    }
}

impl fmt::Display for LabelQueries {
    /// Writes the queries joined by ` | `; no queries at all is the empty string.
    ///
    /// ```
    /// use cosi_core::LabelQueries;
    /// let q = LabelQueries::parse(r#"a == "x y" ;| b"#);
    /// assert!(q.is_err()); // ';' is not a separator: queries are separated by '|'
    /// let q = LabelQueries::parse(r#"a == "x y" | b"#).unwrap();
    /// assert_eq!(q.to_string(), r#"a="x y" | b"#);
    /// assert_eq!(LabelQueries::default().to_string(), "");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, query) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            query.fmt(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(key: &str, op: LabelOp) -> LabelTerm {
        LabelTerm::new(key, op)
    }

    fn one(terms: Vec<LabelTerm>) -> LabelQueries {
        LabelQuery { terms }.into()
    }

    fn parse_err(selector: &str) -> String {
        LabelQueries::parse(selector).unwrap_err().to_string()
    }

    #[test]
    fn every_term_form_parses_to_its_query_term() {
        let parsed = LabelQueries::parse(
            "a, !b, c=1, d==2, e!=3, f in (x, y), g notin (), h<10ki, i<=2g, j>5, k>=6, \
             l lt abc, m lte abd, n gt abe, o gte abf",
        )
        .unwrap();
        let expected = one(vec![
            term("a", LabelOp::Exists),
            term("b", LabelOp::Exists).inverted(),
            term("c", LabelOp::Equal("1".into())),
            term("d", LabelOp::Equal("2".into())),
            term("e", LabelOp::Equal("3".into())).inverted(),
            term("f", LabelOp::In(vec!["x".into(), "y".into()])),
            term("g", LabelOp::In(vec![])).inverted(),
            term("h", LabelOp::LtNumeric(10240.0)),
            term("i", LabelOp::LteNumeric(2e9)),
            term("j", LabelOp::LteNumeric(5.0)).inverted(),
            term("k", LabelOp::LtNumeric(6.0)).inverted(),
            term("l", LabelOp::Lt("abc".into())),
            term("m", LabelOp::Lte("abd".into())),
            term("n", LabelOp::Lte("abe".into())).inverted(),
            term("o", LabelOp::Lt("abf".into())).inverted(),
        ]);
        assert_eq!(parsed, expected);
    }

    #[test]
    fn pipe_separates_ored_queries() {
        let parsed = LabelQueries::parse("a | b,c").unwrap();
        assert_eq!(parsed.0.len(), 2);
        assert_eq!(parsed.0[1].terms.len(), 2);
    }

    #[test]
    fn empty_selector_has_no_queries_and_star_is_a_query_without_terms() {
        assert_eq!(LabelQueries::parse("  ").unwrap(), LabelQueries::default());
        assert_eq!(
            LabelQueries::parse("*|a").unwrap(),
            LabelQueries(vec![
                LabelQuery::new(),
                one(vec![term("a", LabelOp::Exists)]).0[0].clone()
            ])
        );
    }

    #[test]
    fn greater_than_does_not_match_missing_or_non_numeric_values() {
        let q = LabelQueries::parse("a>5").unwrap();
        let labels = |v: Option<&str>| -> crate::Labels {
            v.map(|v| [("a".to_string(), v.to_string())].into())
                .unwrap_or_default()
        };
        assert!(q.matches(&labels(Some("6"))));
        assert!(!q.matches(&labels(Some("5"))));
        assert!(!q.matches(&labels(None)));
        assert!(!q.matches(&labels(Some("x"))));
    }

    #[test]
    fn quoted_strings_take_escapes() {
        let parsed = LabelQueries::parse(r#""a b"="x\"\\\n\u{e9}""#).unwrap();
        assert_eq!(
            parsed,
            one(vec![term("a b", LabelOp::Equal("x\"\\\né".into()))])
        );
    }

    #[test]
    fn errors_name_the_column_and_what_was_expected() {
        assert_eq!(
            parse_err("a=b,"),
            "selector: invalid column 5: expected a label key, '!key' or '*', found end of selector"
        );
        assert_eq!(
            parse_err("a<ten"),
            "selector: invalid column 3: expected a number after '<' (optionally with a unit suffix), \
             found \"ten\" (units: k m g t p, ki mi gi ti pi)"
        );
        assert_eq!(
            parse_err("a foo b"),
            "selector: invalid column 3: expected an operator (=, ==, !=, <, <=, >, >=, in, notin, \
             lt, lte, gt, gte), ',', '|' or end of selector, found 'f'"
        );
        assert_eq!(
            parse_err("a in (x y)"),
            "selector: invalid column 9: expected ',' or ')' in the value list, found 'y'"
        );
        assert_eq!(
            parse_err("a=\"open"),
            "selector: invalid column 3: expected a closing '\"' for the string opened here, \
             found end of selector"
        );
        assert_eq!(
            parse_err("a || b"),
            "selector: invalid column 4: expected a label key, '!key' or '*', found '|'"
        );
        assert_eq!(
            parse_err("é=\"\\q\""),
            "selector: invalid column 5: expected an escape (\\\", \\\\, \\n, \\r, \\t or \\u{hex}), found 'q'"
        );
    }

    #[test]
    fn display_quotes_only_what_needs_it() {
        let q = one(vec![
            term("", LabelOp::Exists),
            term("a", LabelOp::Equal("x,y".into())),
            term("in", LabelOp::Lt("*".into())),
        ]);
        assert_eq!(q.to_string(), r#""",a="x,y",in lt "*""#);
        assert_eq!(LabelQueries::parse(&q.to_string()).unwrap(), q);
    }
}
