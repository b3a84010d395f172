//! Text from outside on the operator's terminal. Anything a node sends (ids, labels, spec
//! values, print column names, service and event messages, error texts) and anything read from
//! a file reaches a terminal that obeys control characters: an ESC sequence could retitle the
//! window, clear the screen, rewrite lines already printed or answer back as typed input. So
//! every control character (Unicode category Cc: C0, DEL and C1) in such text is written as its
//! Rust escape (`\u{1b}`, `\r`, `\n`), as the print columns of `cosi_core::Columns` already
//! write them; the rest of the text, unicode included, is left as it is.
//!
//! Not escaped here: `logs`, which prints a service's raw output on purpose (as talosctl and
//! kubectl do), and the structured formats, which have escapes of their own (see
//! [`crate::print`]).

use std::borrow::Cow;

/// `text` with every control character written as its escape, so it is one line and moves no
/// cursor.
///
/// ```
/// use cosi_cli::terminal::escape_controls;
/// assert_eq!(escape_controls("etcd"), "etcd");
/// assert_eq!(escape_controls("\u{1b}]0;owned\u{7}up\r\n"), "\\u{1b}]0;owned\\u{7}up\\r\\n");
/// assert_eq!(escape_controls("\u{9b}2J né"), "\\u{9b}2J né");
/// ```
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the text, the escaped text has no control character, and text without
        /// any comes back unchanged.
        #[test]
        fn escaped_text_has_no_control_characters(text in "\\PC{0,20}[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}]{0,4}\\PC{0,20}") {
            let escaped = escape_controls(&text);
            proptest::prop_assert!(!escaped.chars().any(char::is_control));
            if !text.chars().any(char::is_control) {
                proptest::prop_assert_eq!(escaped.as_ref(), text.as_str());
            }
        }
    }
}
