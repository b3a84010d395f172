//! Text helpers for what a caller sent: ids, patterns and log lines can be megabytes, and an
//! error or status that quotes them must stay small ([`clipped`], [`prefix_within`]); and they
//! can hold characters that a terminal obeys or that change how a line reads
//! ([`escape_for_terminal`]).

use std::borrow::Cow;
use std::fmt;

/// The most bytes of one piece of caller text (an id, a label value, a name, a path) that an
/// error quotes.
pub const QUOTED_BYTES: usize = 256;

/// The most bytes of an error's message that its text shows: a message is the runtime's own
/// words around quoted pieces, each bounded by [`QUOTED_BYTES`]; this bounds what it
/// quotes from elsewhere (a parser's message quoting a value, say).
pub const MESSAGE_BYTES: usize = 2048;

/// Caller text as an error shows it: whole up to a bound, else its first bytes up to it (cut
/// on a character boundary) and how many bytes were cut. `{}` writes the text, `{:?}` quotes
/// it; the marker stays outside the quotes, so it never reads as part of the text.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Clipped<'t> {
    kept: &'t str,
    cut: usize,
}

/// `text` cut to [`QUOTED_BYTES`]: what every error uses to quote caller text.
///
/// ```
/// use cosi_core::text::clipped;
/// assert_eq!(format!("{:?}", clipped("eth0")), "\"eth0\"");
/// let id = "é".repeat(200); // 400 bytes
/// assert_eq!(
///     format!("{:?}", clipped(&id)),
///     format!("{:?}… (144 bytes cut)", "é".repeat(128))
/// );
/// assert_eq!(clipped(&id).to_string(), format!("{}… (144 bytes cut)", "é".repeat(128)));
/// ```
pub fn clipped(text: &str) -> Clipped<'_> {
    clipped_to(text, QUOTED_BYTES)
}

/// `text` cut to `max_bytes` as [`clipped`] cuts it.
pub fn clipped_to(text: &str, max_bytes: usize) -> Clipped<'_> {
    let kept = prefix_within(text, max_bytes);
    Clipped {
        kept,
        cut: text.len() - kept.len(),
    }
}

impl Clipped<'_> {
    fn marker(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cut > 0 {
            write!(f, "… ({} bytes cut)", self.cut)?;
        }
        Ok(())
    }
}

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kept)?;
        self.marker(f)
    }
}

impl fmt::Debug for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.kept)?;
        self.marker(f)
    }
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character
/// boundary.
///
/// ```
/// use cosi_core::text::prefix_within;
/// assert_eq!(prefix_within("eth0", 16), "eth0");
/// assert_eq!(prefix_within("eth0", 3), "eth");
/// // "é" is two bytes: a cut inside it falls back to before it.
/// assert_eq!(prefix_within("né", 2), "n");
/// ```
pub fn prefix_within(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Whether a table cell or an error line shows `c` as its escape rather than itself: every
/// control character (category Cc: C0, DEL, C1), which a terminal obeys; the bidirectional
/// embeddings, overrides and isolates and the direction marks (U+202A–U+202E, U+2066–U+2069,
/// U+200E, U+200F, U+061C), which reorder how the rest of a line reads (CVE-2021-42574); and the
/// invisible spaces (U+200B, U+2060, U+FEFF) and the other characters that show as nothing and
/// that no script needs (the soft hyphen U+00AD, the combining grapheme joiner U+034F, the
/// Mongolian vowel separator U+180E, the invisible operators U+2061–U+2064, the deprecated
/// format characters U+206A–U+206F), which make two different ids look the same. The joiners
/// U+200C and U+200D stay: scripts and emoji need them.
pub fn shown_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{061c}'
                | '\u{200b}'
                | '\u{2060}'..='\u{2064}'
                | '\u{206a}'..='\u{206f}'
                | '\u{feff}'
                | '\u{ad}'
                | '\u{34f}'
                | '\u{180e}'
        )
}

/// `text` as one line that moves no cursor and reads as it is stored: every character
/// [`shown_escaped`] is written as its Rust escape (`\u{1b}`, `\n`, `\u{202e}`); the rest,
/// unicode included, is left as it is. Borrowed when there is nothing to escape.
///
/// ```
/// use cosi_core::text::escape_for_terminal;
/// assert_eq!(escape_for_terminal("etcd né"), "etcd né");
/// assert_eq!(escape_for_terminal("\u{1b}]0;owned\u{7}up\r\n"), "\\u{1b}]0;owned\\u{7}up\\r\\n");
/// assert_eq!(escape_for_terminal("admin\u{202e}txt.exe"), "admin\\u{202e}txt.exe");
/// assert_eq!(escape_for_terminal("eth\u{200b}0"), "eth\\u{200b}0");
/// ```
pub fn escape_for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(shown_escaped) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if shown_escaped(c) {
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
    use proptest::prelude::*;

    #[test]
    fn every_zero_width_invisible_character_is_shown_escaped() {
        // Each makes "eth0" and another id read the same; none is needed by a script or emoji.
        for (invisible, shown) in [
            ('\u{ad}', "eth\\u{ad}0"),     // soft hyphen
            ('\u{34f}', "eth\\u{34f}0"),   // combining grapheme joiner
            ('\u{180e}', "eth\\u{180e}0"), // Mongolian vowel separator
            ('\u{2061}', "eth\\u{2061}0"), // function application
            ('\u{2062}', "eth\\u{2062}0"), // invisible times
            ('\u{2063}', "eth\\u{2063}0"), // invisible separator
            ('\u{2064}', "eth\\u{2064}0"), // invisible plus
            ('\u{206a}', "eth\\u{206a}0"), // deprecated format characters U+206A–U+206F
            ('\u{206f}', "eth\\u{206f}0"),
        ] {
            assert_eq!(escape_for_terminal(&format!("eth{invisible}0")), shown);
        }
        // The joiners stay.
        assert_eq!(
            escape_for_terminal("a\u{200c}b\u{200d}c"),
            "a\u{200c}b\u{200d}c"
        );
    }

    proptest! {
        /// Whatever the text, the escaped text holds no character shown escaped, and text
        /// without any comes back unchanged.
        #[test]
        fn escaped_text_holds_nothing_a_terminal_obeys_or_reorders(
            text in "\\PC{0,20}[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{202a}-\\u{202e}\\u{2066}-\\u{2069}\\u{200b}-\\u{200f}\\u{061c}\\u{2060}-\\u{2064}\\u{206a}-\\u{206f}\\u{feff}\\u{ad}\\u{34f}\\u{180e}]{0,4}\\PC{0,20}"
        ) {
            let escaped = escape_for_terminal(&text);
            prop_assert!(!escaped.chars().any(shown_escaped));
            if !text.chars().any(shown_escaped) {
                prop_assert_eq!(escaped.as_ref(), text.as_str());
            }
        }

        #[test]
        fn the_prefix_is_the_longest_within_the_limit(text in "\\PC{0,40}", max in 0usize..160) {
            let prefix = prefix_within(&text, max);
            prop_assert!(text.starts_with(prefix));
            prop_assert!(prefix.len() <= max);
            // One more character would pass the limit (or there is none).
            let next = text[prefix.len()..].chars().next();
            prop_assert!(next.is_none_or(|c| prefix.len() + c.len_utf8() > max));
        }
    }
}
