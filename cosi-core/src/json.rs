//! JSON text from outside, checked before it is parsed: what serde_json would read other than
//! as written, or what the YAML form could not carry back.
//!
//! serde_json (without its `arbitrary_precision` feature, which would make every number in the
//! workspace slower) reads an integer literal beyond 64 bits, `18446744073709551616` or
//! `-9223372036854775809`, as the nearest float: silently another number. The YAML form refuses
//! such an integer, naming its field; [`check_integers`] finds it in JSON text, in one pass over
//! the bytes that parses nothing, so JSON is refused the same way. A float written as a float
//! (`1e30`, `18446744073709551616.0`) stays a float, in both forms.
//!
//! The same pass holds the nesting of [`dynamic`](crate::dynamic) documents to YAML's limit
//! (serde_json allows 128 levels, YAML 64, so a document nested 100 deep decoded and then its
//! YAML export could not be read back).

use std::fmt;

/// An integer literal in JSON text that does not fit 64 bits (see the [module docs](self)).
///
/// ```
/// use cosi_core::json::check_integers;
/// let err = check_integers(br#"{"size": [1, 18446744073709551616]}"#).unwrap_err();
/// assert_eq!(err.path, "size[1]");
/// assert_eq!(
///     err.to_string(),
///     "integer 18446744073709551616 is outside the 64-bit range a spec's integers are kept in \
///      at line 1 column 14"
/// );
/// // The largest and smallest 64-bit integers fit; a float stays a float.
/// assert!(check_integers(br#"[18446744073709551615, -9223372036854775808, 1e30]"#).is_ok());
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct WideInteger {
    /// Where the integer is inside the JSON value, written as `serde_path_to_error` writes paths
    /// (`a.b[1]`, `.` for the value itself); in a stream of values, inside the one holding it.
    pub path: String,
    /// The literal as written, [clipped](crate::text::clipped) as errors quote caller text.
    pub literal: String,
    /// The literal's line, counting from 1.
    pub line: usize,
    /// The literal's column, in characters, counting from 1.
    pub column: usize,
}

impl fmt::Display for WideInteger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "integer {} is outside the 64-bit range a spec's integers are kept in at line {} \
             column {}",
            self.literal, self.line, self.column
        )
    }
}

impl std::error::Error for WideInteger {}

/// Finds the first integer literal in `json` that does not fit 64 bits (an `i64` when
/// negative, a `u64` otherwise). Text that is not JSON is the parser's to report: this finds
/// what it can and errs on nothing else.
pub fn check_integers(json: &[u8]) -> Result<(), WideInteger> {
    if !has_long_digit_run(json) {
        return Ok(());
    }
    match scan(json, usize::MAX) {
        Some(Finding::WideInteger(_, wide)) => Err(wide),
        Some(Finding::TooDeep { .. }) | None => Ok(()),
    }
}

/// What [`scan`] found first.
pub(crate) enum Finding {
    /// An opening bracket past the depth limit, in the `document`-th value of the stream.
    TooDeep {
        document: usize,
        line: usize,
        column: usize,
    },
    /// An integer literal beyond 64 bits, in the `document`-th value of the stream.
    WideInteger(usize, WideInteger),
}

/// A literal needs checking only from this many digits: `i64::MIN` has 19.
const FEWEST_WIDE_DIGITS: usize = 19;

/// Whether `text` holds [`FEWEST_WIDE_DIGITS`] digits in a row anywhere (strings included).
/// Looks at about one byte in that many: where a byte is not a digit, no such run covers it,
/// so the next one that could is that many bytes on.
fn has_long_digit_run(text: &[u8]) -> bool {
    let digit = |at: usize| text.get(at).is_some_and(u8::is_ascii_digit);
    let mut probe = FEWEST_WIDE_DIGITS - 1;
    while probe < text.len() {
        if !digit(probe) {
            probe += FEWEST_WIDE_DIGITS;
            continue;
        }
        let mut start = probe;
        while start > 0 && digit(start - 1) {
            start -= 1;
        }
        let mut end = probe + 1;
        while digit(end) {
            end += 1;
        }
        if end - start >= FEWEST_WIDE_DIGITS {
            return true;
        }
        // `text[end]` is no digit: a run after it ends no sooner than this.
        probe = end + FEWEST_WIDE_DIGITS;
    }
    false
}

/// One pass over `text`, outside strings: lists and objects nested deeper than `max_depth`
/// (the top value of a document is depth 1, as in YAML), and integer literals beyond 64 bits.
/// What comes first in the text is reported.
pub(crate) fn scan(text: &[u8], max_depth: usize) -> Option<Finding> {
    let (mut depth, mut document, mut line, mut line_start) = (0usize, 1usize, 1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    // Where the current run of digits started, if in one.
    let mut digits: Option<usize> = None;
    for (at, &byte) in text.iter().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if byte.is_ascii_digit() {
            digits.get_or_insert(at);
            continue;
        }
        if let Some(start) = digits.take() {
            if at - start >= FEWEST_WIDE_DIGITS {
                if let Some(wide) = wide_integer(text, start, at, line, line_start) {
                    return Some(Finding::WideInteger(document, wide));
                }
            }
        }
        match byte {
            b'"' => in_string = true,
            b'\n' => (line, line_start) = (line + 1, at + 1),
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    let column = column(text, line_start, at);
                    return Some(Finding::TooDeep {
                        document,
                        line,
                        column,
                    });
                }
            }
            b']' | b'}' => {
                // Unbalanced text is the parser's to report.
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    document += 1;
                }
            }
            _ => {}
        }
    }
    let start = digits?;
    if text.len() - start < FEWEST_WIDE_DIGITS {
        return None;
    }
    wide_integer(text, start, text.len(), line, line_start)
        .map(|wide| Finding::WideInteger(document, wide))
}

/// The character column of byte `at` on the line starting at byte `line_start`.
fn column(text: &[u8], line_start: usize, at: usize) -> usize {
    // Every byte but UTF-8's continuation bytes starts a character.
    1 + text[line_start..at]
        .iter()
        .filter(|&&b| b & 0xc0 != 0x80)
        .count()
}

/// The digits `text[start..end]`, if they are the integer literal of a number (not its
/// fraction or exponent, not followed by either) and the literal does not fit 64 bits.
fn wide_integer(
    text: &[u8],
    start: usize,
    end: usize,
    line: usize,
    line_start: usize,
) -> Option<WideInteger> {
    let before = |back: usize| start.checked_sub(back).map(|i| text[i]);
    if matches!(text.get(end), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let negative = match before(1) {
        Some(b'.' | b'e' | b'E' | b'+') => return None,
        Some(b'-') if matches!(before(2), Some(b'e' | b'E')) => return None,
        Some(b'-') => true,
        _ => false,
    };
    let start = if negative { start - 1 } else { start };
    // Invariant: ASCII digits and a minus sign are UTF-8.
    let literal = std::str::from_utf8(&text[start..end]).expect("ASCII digits");
    let fits = if negative {
        literal.parse::<i64>().is_ok()
    } else {
        literal.parse::<u64>().is_ok()
    };
    if fits {
        return None;
    }
    Some(WideInteger {
        path: path_at(text, start),
        literal: crate::text::clipped(literal).to_string(),
        line,
        column: column(text, line_start, start),
    })
}

/// The path to the value at byte `offset`, inside the top value of the stream holding it. Runs
/// only for an error, so it parses the keys it passes.
fn path_at(text: &[u8], offset: usize) -> String {
    enum Step {
        Map { key: String, awaiting_key: bool },
        Seq(usize),
    }
    let mut steps: Vec<Step> = Vec::new();
    let mut at = 0;
    while at < offset {
        match text[at] {
            b'"' => {
                let end = string_end(text, at);
                if let Some(Step::Map { key, awaiting_key }) = steps.last_mut() {
                    if *awaiting_key {
                        let raw = &text[at..end.min(text.len())];
                        *key = serde_json::from_slice::<String>(raw)
                            .unwrap_or_else(|_| String::from_utf8_lossy(raw).into_owned());
                        *awaiting_key = false;
                    }
                }
                at = end;
                continue;
            }
            b'{' => steps.push(Step::Map {
                key: String::new(),
                awaiting_key: true,
            }),
            b'[' => steps.push(Step::Seq(0)),
            b'}' | b']' => {
                steps.pop();
            }
            b',' => match steps.last_mut() {
                Some(Step::Seq(index)) => *index += 1,
                Some(Step::Map { awaiting_key, .. }) => *awaiting_key = true,
                None => {}
            },
            _ => {}
        }
        at += 1;
    }
    if steps.is_empty() {
        return ".".to_string();
    }
    let mut path = String::new();
    for step in steps {
        match step {
            Step::Map { key, .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
            }
            Step::Seq(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// The byte after the string opening at `start` (its closing quote included).
fn string_end(text: &[u8], start: usize) -> usize {
    let mut escaped = false;
    for (at, &byte) in text.iter().enumerate().skip(start + 1) {
        match byte {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return at + 1,
            _ => {}
        }
    }
    text.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wide(json: &str) -> Option<WideInteger> {
        check_integers(json.as_bytes()).err()
    }

    #[test]
    fn integers_past_64_bits_are_found_at_their_path() {
        let found = wide(r#"{"a": {"b\"c": [0, {"d": -9223372036854775809}]}}"#).unwrap();
        assert_eq!(found.path, r#"a.b"c[1].d"#);
        assert_eq!(found.literal, "-9223372036854775809");
        assert_eq!((found.line, found.column), (1, 26));
        let top = wide("\n  18446744073709551616").unwrap();
        assert_eq!((top.path.as_str(), top.line, top.column), (".", 2, 3));
    }

    #[test]
    fn what_fits_64_bits_and_what_is_not_an_integer_literal_pass() {
        for json in [
            "18446744073709551615",
            "-9223372036854775808",
            "00000000000000000000000001",
            "1e30",
            "18446744073709551616.0",
            "18446744073709551616e0",
            "1.18446744073709551616",
            "1e18446744073709551616",
            "1E-18446744073709551616",
            "1e+18446744073709551616",
            r#""18446744073709551616""#,
            r#"{"18446744073709551616": "\"18446744073709551616"}"#,
        ] {
            assert_eq!(wide(json), None, "{json}");
        }
    }

    proptest::proptest! {
        /// The quick look finds a run of digits wherever it is, as a look at every byte would.
        #[test]
        fn the_quick_look_finds_every_long_run_of_digits(text in "([0-9]{0,25}[a ]){0,5}[0-9]{0,25}") {
            let every_byte = text
                .as_bytes()
                .split(|b| !b.is_ascii_digit())
                .any(|run| run.len() >= FEWEST_WIDE_DIGITS);
            proptest::prop_assert_eq!(has_long_digit_run(text.as_bytes()), every_byte);
        }
    }

    #[test]
    fn a_long_literal_is_quoted_in_part() {
        let found = wide(&"9".repeat(1000)).unwrap();
        assert_eq!(
            found.literal,
            format!("{}… (744 bytes cut)", "9".repeat(256))
        );
    }
}
