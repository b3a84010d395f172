//! The crate's only YAML use (the `serde_norway` fork behind the workspace's `serde_yaml` name):
//! the client config file, printed resources, and scalars in generated configs.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A value as a YAML document (no leading `---`).
pub(crate) fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
    serde_yaml::to_string(value).map_err(|e| e.to_string())
}

/// A YAML document as a value.
pub(crate) fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_yaml::from_str(text).map_err(|e| e.to_string())
}

/// A string as a one-line YAML scalar, to put after a key in a template: quoted when it must
/// be (`demo`, `'a: b'`). Text with a line break or another control character would serialize
/// as a block scalar, whose lines must be indented under a key this function does not know
/// (`hostname: |-` then the text at the wrong depth, where its lines became keys of the
/// config); it is written as a double-quoted scalar with `\uXXXX` escapes instead (a JSON
/// string, which YAML reads the same).
pub(crate) fn scalar(text: &str) -> String {
    let breaks = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if !text.chars().any(breaks) {
        if let Ok(plain) = to_string(text) {
            let plain = plain.trim_end();
            if !plain.contains('\n') {
                return plain.to_string();
            }
        }
    }
    // serde_json escapes C0, quotes and backslashes; DEL, C1 and the Unicode line separators
    // (line breaks to YAML) are escaped here.
    let mut quoted = String::new();
    for c in serde_json::Value::from(text).to_string().chars() {
        if breaks(c) {
            quoted.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            quoted.push(c);
        }
    }
    quoted
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_scalar_is_one_line_whatever_the_text() {
        // A scalar is put after a key in a template: a block scalar's lines would have to be
        // indented under that key, which this function does not know.
        let long = "word ".repeat(60);
        for text in [
            "a\nmachine:\n  type: controlplane",
            "x\n",
            "\n",
            "a\r\nb",
            "a\u{85}b\u{2028}c",
            long.as_str(),
        ] {
            let scalar = super::scalar(text);
            assert!(!scalar.contains('\n'), "{scalar:?}");
            assert_eq!(super::from_str::<String>(&scalar).unwrap(), text);
        }
    }

    #[test]
    fn scalars_are_quoted_only_when_yaml_needs_it() {
        assert_eq!(super::scalar("demo"), "demo");
        assert_eq!(super::scalar("a: b"), "'a: b'");
        assert_eq!(super::scalar("true"), "'true'");
    }
}
