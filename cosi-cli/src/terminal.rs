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
