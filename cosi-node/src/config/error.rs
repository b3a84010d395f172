//! Errors about a config's content: [`FieldError`] (one problem at one field path) and
//! [`ConfigErrors`] (all of them, as decoding, patching and validation report them at once).
//!
//! Paths name the main document's fields from its root (`machine.network.interfaces[1].mtu`)
//! and a named document's fields after its identity (`ServiceConfig/web.dependsOn[0]`); a map
//! key that is not a plain word is quoted (`machine.nodeLabels["bad key"]`).

use std::fmt;

use crate::config::MACHINE_CONFIG_SUBJECT;

/// One problem at one field path.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FieldError {
    /// Where: `machine.type`, `ServiceConfig/web.command`, `documents[2]`, `patches[0]`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one config or patch, in the order found (never empty).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ConfigErrors(pub Vec<FieldError>);

impl ConfigErrors {
    /// One problem.
    pub fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigErrors(vec![FieldError::new(path, message)])
    }

    /// The paths of the problems, in order, without repeats.
    ///
    /// ```
    /// use cosi_node::config::{ConfigErrors, FieldError};
    /// let errors = ConfigErrors(vec![
    ///     FieldError::new("machine.type", "required"),
    ///     FieldError::new("cluster.name", "required"),
    ///     FieldError::new("machine.type", "unknown"),
    /// ]);
    /// assert_eq!(errors.paths(), ["machine.type", "cluster.name"]);
    /// ```
    pub fn paths(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::with_capacity(self.0.len());
        self.0
            .iter()
            .map(|e| e.path.as_str())
            .filter(|path| seen.insert(*path))
            .collect()
    }

    /// As the runtime's invalid-argument error: the field is every path (comma-separated), the
    /// message every problem.
    pub fn to_invalid_argument(&self) -> cosi_core::Error {
        cosi_core::Error::invalid(
            MACHINE_CONFIG_SUBJECT,
            self.paths().join(", "),
            self.messages(),
        )
    }

    fn messages(&self) -> String {
        match self.0.as_slice() {
            [one] => one.message.clone(),
            many => {
                let lines: Vec<String> = many.iter().map(ToString::to_string).collect();
                format!("{} problems: {}", many.len(), lines.join("; "))
            }
        }
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

impl std::error::Error for ConfigErrors {}

/// `parent.key`, or `parent["key"]` when the key is not a plain word (or `key` at the root).
pub(crate) fn join_key(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{key:?}]"),
    }
}

/// `parent[index]`.
pub(crate) fn join_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}
