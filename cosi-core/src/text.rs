//! Text helpers for messages that quote what a caller sent: ids, patterns and log lines can be
//! megabytes, and an error or status that quotes them must stay small.

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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
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
