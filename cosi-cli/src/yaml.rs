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

/// A string as a YAML scalar, quoted when it must be (`demo`, `'a: b'`).
pub(crate) fn scalar(text: &str) -> String {
    // A string always serializes; the fallback only guards the invariant.
    to_string(text)
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| format!("{text:?}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn scalars_are_quoted_only_when_yaml_needs_it() {
        assert_eq!(super::scalar("demo"), "demo");
        assert_eq!(super::scalar("a: b"), "'a: b'");
        assert_eq!(super::scalar("true"), "'true'");
    }
}
