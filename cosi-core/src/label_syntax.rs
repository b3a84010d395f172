//! The syntax of label keys and values, Kubernetes style, for code that validates user input
//! (machine config node labels, command-line flags). The store itself accepts any strings as
//! labels; these checks are for the places that promise Kubernetes-compatible labels.
//!
//! - A **key** is an optional prefix and a name separated by `/`. The name is 1 to 63 characters,
//!   starts and ends with an ASCII letter or digit, and has only letters, digits, `-`, `_` and `.`
//!   between. The prefix is a DNS subdomain: at most 253 characters, dot-separated parts of lowercase
//!   letters, digits and `-`, each starting and ending with a letter or digit.
//! - A **value** is empty, or follows the same rules as a key's name.

use crate::text::clipped;
use crate::Error;

/// Why a label key or value is not valid. Turn it into the runtime's error, naming where the label
/// came from, with [`LabelSyntaxError::at`].
///
/// ```
/// use cosi_core::validate_label_value;
/// let err = validate_label_value("-bad").unwrap_err();
/// assert_eq!(err.to_string(), "label value \"-bad\" must start with a letter or digit");
/// let err = err.at("config", "machine.nodeLabels.tier");
/// assert_eq!(
///     err.to_string(),
///     "config: invalid machine.nodeLabels.tier: label value \"-bad\" must start with a letter or digit"
/// );
/// ```
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("{message}")]
pub struct LabelSyntaxError {
    message: String,
}

impl LabelSyntaxError {
    fn new(message: String) -> Self {
        LabelSyntaxError { message }
    }

    /// What is wrong, as a sentence fragment naming the key or value.
    ///
    /// ```
    /// let err = cosi_core::validate_label_key("a/").unwrap_err();
    /// assert_eq!(err.message(), "label key \"a/\" has an empty name");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The runtime's [`Error::InvalidArgument`] for this problem, found in `field` of `subject`.
    ///
    /// ```
    /// use cosi_core::{validate_label_key, Error};
    /// let err = validate_label_key("bad key").unwrap_err().at("node-1", "labels");
    /// assert!(matches!(err, Error::InvalidArgument { ref field, .. } if field == "labels"));
    /// ```
    pub fn at(self, subject: impl Into<String>, field: impl Into<String>) -> Error {
        Error::invalid(subject, field, self.message)
    }
}

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

/// Checks a label key, `[prefix/]name`: the name is 1 to 63 ASCII letters, digits, `-`, `_`
/// and `.`, starting and ending with a letter or digit; the optional prefix is a lowercase DNS
/// subdomain of at most 253 characters.
///
/// ```
/// use cosi_core::validate_label_key;
/// assert!(validate_label_key("app").is_ok());
/// assert!(validate_label_key("node.cosi.dev/role").is_ok());
/// assert!(validate_label_key("Node.cosi.dev/role").is_err()); // prefixes are lowercase
/// assert!(validate_label_key("").is_err());
/// ```
pub fn validate_label_key(key: &str) -> Result<(), LabelSyntaxError> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        validate_prefix(key, prefix)?;
    }
    if name.is_empty() {
        return Err(LabelSyntaxError::new(format!(
            "label key {:?} has an empty name",
            clipped(key)
        )));
    }
    validate_name("label key", key, name)
}

/// Checks a label value: empty, or 1 to 63 ASCII letters, digits, `-`, `_` and `.`, starting and
/// ending with a letter or digit.
///
/// ```
/// use cosi_core::validate_label_value;
/// assert!(validate_label_value("").is_ok());
/// assert!(validate_label_value("v1.2_rc-3").is_ok());
/// assert!(validate_label_value("a b").is_err());
/// assert!(validate_label_value(&"x".repeat(64)).is_err());
/// ```
pub fn validate_label_value(value: &str) -> Result<(), LabelSyntaxError> {
    if value.is_empty() {
        return Ok(());
    }
    validate_name("label value", value, value)
}

/// Checks `name` (part of `whole`, a `what`) against the name rule.
fn validate_name(what: &str, whole: &str, name: &str) -> Result<(), LabelSyntaxError> {
    let length = name.chars().count();
    if length > NAME_MAX {
        return Err(LabelSyntaxError::new(format!(
            "{what} {:?}: name is {length} characters long, at most {NAME_MAX} are allowed",
            clipped(whole)
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(LabelSyntaxError::new(format!(
            "{what} {:?} contains {bad:?}: only letters, digits, '-', '_' and '.' are allowed",
            clipped(whole)
        )));
    }
    // Non-empty and ASCII-only by the checks above.
    let bytes = name.as_bytes();
    if !bytes[0].is_ascii_alphanumeric() {
        return Err(LabelSyntaxError::new(format!(
            "{what} {:?} must start with a letter or digit",
            clipped(whole)
        )));
    }
    if !bytes[bytes.len() - 1].is_ascii_alphanumeric() {
        return Err(LabelSyntaxError::new(format!(
            "{what} {:?} must end with a letter or digit",
            clipped(whole)
        )));
    }
    Ok(())
}

fn validate_prefix(key: &str, prefix: &str) -> Result<(), LabelSyntaxError> {
    if prefix.is_empty() {
        return Err(LabelSyntaxError::new(format!(
            "label key {:?} has an empty prefix before '/'",
            clipped(key)
        )));
    }
    if prefix.len() > PREFIX_MAX {
        return Err(LabelSyntaxError::new(format!(
            "label key {:?}: prefix is {} characters long, at most {PREFIX_MAX} are allowed",
            clipped(key),
            prefix.len()
        )));
    }
    for part in prefix.split('.') {
        let valid_chars = part
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let bytes = part.as_bytes();
        let valid_ends = !part.is_empty()
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric();
        if !valid_chars || !valid_ends {
            return Err(LabelSyntaxError::new(format!(
                "label key {:?}: prefix {:?} is not a DNS subdomain \
                 (dot-separated parts of lowercase letters, digits and '-', \
                 each starting and ending with a letter or digit)",
                clipped(key),
                clipped(prefix)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_with_prefix_and_name_is_valid() {
        assert_eq!(validate_label_key("cosi.dev/role-1.a_b"), Ok(()));
    }

    #[test]
    fn key_with_two_slashes_is_invalid() {
        let err = validate_label_key("a.dev/b/c").unwrap_err();
        assert_eq!(
            err.message(),
            "label key \"a.dev/b/c\" contains '/': only letters, digits, '-', '_' and '.' are allowed"
        );
    }

    #[test]
    fn key_name_longer_than_63_is_invalid() {
        assert!(validate_label_key(&"a".repeat(63)).is_ok());
        let err = validate_label_key(&"a".repeat(64)).unwrap_err();
        assert!(err.message().contains("64 characters long"), "{err}");
    }

    #[test]
    fn prefix_with_empty_part_or_uppercase_is_invalid() {
        for key in ["a..b/c", "A.b/c", "-a.b/c", "/c", "a.b-/c"] {
            assert!(validate_label_key(key).is_err(), "{key}");
        }
    }

    #[test]
    fn value_must_start_and_end_alphanumeric() {
        assert!(validate_label_value("a").is_ok());
        assert!(validate_label_value("_a").is_err());
        assert!(validate_label_value("a.").is_err());
        assert!(validate_label_value("é").is_err());
    }
}
