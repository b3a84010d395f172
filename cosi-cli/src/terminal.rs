//! Text from outside on the operator's terminal. Anything a node sends (ids, labels, spec
//! values, print column names, service and event messages, error texts) and anything read from
//! a file reaches a terminal that obeys control characters: an ESC sequence could retitle the
//! window, clear the screen, rewrite lines already printed or answer back as typed input; a
//! bidirectional override makes the rest of a line read in another order, and an invisible
//! space makes two ids look the same. So every control character (Unicode category Cc: C0, DEL
//! and C1), bidirectional control and invisible space in such text is written as its Rust
//! escape (`\u{1b}`, `\r`, `\n`, `\u{202e}`), as the print columns of `cosi_core::Columns`
//! write them (one rule: `cosi_core::text::shown_escaped`); the rest of the text, unicode
//! included, is left as it is.
//!
//! An error or warning line is also **short**: what a node sends can be megabytes, and one such
//! line shows at most [`MAX_MESSAGE_LINE`] bytes of its escaped text ([`message_line`]), with a
//! marker saying how many bytes were cut. The structured formats keep every text exact.
//!
//! Not escaped here: `logs`, which prints a service's raw output on purpose (as talosctl and
//! kubectl do), and the structured formats, which have escapes of their own (see
//! [`crate::print`]).

use std::borrow::Cow;

/// `text` with every control character, bidirectional control and invisible space written as
/// its escape, so it is one line, moves no cursor and reads as it is stored
/// ([`cosi_core::text::escape_for_terminal`]).
///
/// ```
/// use cosi_cli::terminal::escape_controls;
/// assert_eq!(escape_controls("etcd"), "etcd");
/// assert_eq!(escape_controls("\u{1b}]0;owned\u{7}up\r\n"), "\\u{1b}]0;owned\\u{7}up\\r\\n");
/// assert_eq!(escape_controls("\u{9b}2J né"), "\\u{9b}2J né");
/// assert_eq!(escape_controls("sda\u{202e}1"), "sda\\u{202e}1");
/// ```
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    cosi_core::text::escape_for_terminal(text)
}

/// The most bytes of escaped text one error or warning line shows (the cut's marker comes on
/// top).
pub const MAX_MESSAGE_LINE: usize = 4096;

/// How much of a cut line is its end: cosictl's errors end by saying what to do.
const KEPT_END: usize = MAX_MESSAGE_LINE / 4;

/// `text` as an error or warning line shows it: escaped ([`escape_controls`]) and, when that is longer
/// than [`MAX_MESSAGE_LINE`] bytes, cut in the middle on character boundaries — its first 3 KiB,
/// a marker with the number of bytes cut, and its last 1 KiB, where an error names the remedy.
///
/// ```
/// use cosi_cli::terminal::{message_line, MAX_MESSAGE_LINE};
/// assert_eq!(message_line("node a: refused\u{1b}"), "node a: refused\\u{1b}");
/// let long = format!("node a: {}; retry", "é".repeat(4096));
/// let shown = message_line(&long);
/// let (start, end) = shown.split_once("[... ").unwrap();
/// let (cut, end) = end.split_once(" bytes cut ...]").unwrap();
/// assert!(start.starts_with("node a: é") && end.ends_with("é; retry"));
/// assert!(start.len() + end.len() <= MAX_MESSAGE_LINE);
/// assert_eq!(start.len() + cut.parse::<usize>().unwrap() + end.len(), long.len());
/// ```
pub fn message_line(text: &str) -> Cow<'_, str> {
    let escaped = escape_controls(text);
    if escaped.len() <= MAX_MESSAGE_LINE {
        return escaped;
    }
    let start = cosi_core::text::prefix_within(&escaped, MAX_MESSAGE_LINE - KEPT_END);
    let mut end_at = escaped.len() - KEPT_END;
    while !escaped.is_char_boundary(end_at) {
        end_at += 1;
    }
    let end = &escaped[end_at..];
    let cut = escaped.len() - start.len() - end.len();
    Cow::Owned(format!("{start}[... {cut} bytes cut ...]{end}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the text, the line shows it whole when its escape fits, else its start,
        /// the number of bytes cut and its end, which add up to the escape and fit the cap.
        #[test]
        fn a_message_line_is_the_escape_or_its_two_ends_around_the_count_cut(
            text in "(\\PC|\\pC){0,3000}"
        ) {
            let escaped = escape_controls(&text);
            let shown = message_line(&text);
            if escaped.len() <= MAX_MESSAGE_LINE {
                proptest::prop_assert_eq!(&shown, &escaped);
            } else {
                let (start, rest) = shown.split_once("[... ").unwrap();
                let (cut, end) = rest.split_once(" bytes cut ...]").unwrap();
                let cut: usize = cut.parse().unwrap();
                proptest::prop_assert!(start.len() + end.len() <= MAX_MESSAGE_LINE);
                proptest::prop_assert!(escaped.starts_with(start) && escaped.ends_with(end));
                proptest::prop_assert_eq!(start.len() + cut + end.len(), escaped.len());
            }
        }
    }
}
