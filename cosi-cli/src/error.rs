//! What goes wrong, as the operator reads it. A call to a node that fails is a
//! [`CliError::Node`]: its message names the node and says which of four things happened, each
//! in its own words — the node was **unreachable** (where, and what to check), **refused** the
//! call (which role it needs), **rejected** the input (the field path), or reported a
//! **conflict** (re-read and retry) — or passes the node's error on. A node that does not answer
//! in time is a [`CliError::Deadline`], which says how to wait longer.

use std::path::PathBuf;
use std::time::Duration;

use cosi_api::auth::Role;
use cosi_core::Error;

/// Why a command failed.
///
/// A failed call reads differently by cause:
///
/// ```
/// use cosi_api::auth::Role;
/// use cosi_cli::error::CliError;
/// use cosi_core::{Error, Pointer, Version};
/// let mc = Pointer::new("config", "MachineConfigs.config.cosi.dev", "active");
///
/// let refused = Error::AccessDenied { subject: mc.to_string(), message: "not authorized".into() };
/// assert_eq!(
///     CliError::node("10.0.0.1", "edit mc", refused, Role::Admin).to_string(),
///     "node 10.0.0.1 refused edit mc: not authorized; it needs a client certificate with role \
///      os:admin (see `cosictl config contexts`)"
/// );
///
/// let rejected = Error::invalid("MachineConfig", "machine.type", "required");
/// assert_eq!(
///     CliError::node("10.0.0.1", "apply-config", rejected, Role::Admin).to_string(),
///     "node 10.0.0.1 rejected apply-config: MachineConfig: invalid machine.type: required"
/// );
///
/// let conflict = Error::VersionConflict { pointer: mc, expected: Version::new(3), actual: Version::new(4) };
/// assert_eq!(
///     CliError::node("10.0.0.1", "patch mc", conflict, Role::Admin).to_string(),
///     "node 10.0.0.1: conflict (patch mc): config/MachineConfigs.config.cosi.dev/active changed \
///      since it was read (read at version 3, now 4); re-read it and retry"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The arguments do not fit together.
    #[error("{0}")]
    Usage(String),
    /// The client config file is missing or wrong.
    #[error("client config {}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, and what to do.
        message: String,
    },
    /// A local file could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A call to a node failed.
    #[error("{}", describe(node, what, error, *needs))]
    Node {
        /// The node as the operator named it.
        node: String,
        /// What was asked of it (`get Members.cluster.cosi.dev`, `apply-config`).
        what: String,
        /// The node's (or the transport's) error.
        error: Box<Error>,
        /// The role the call needs (said when the node refuses it).
        needs: Role,
    },
    /// A node did not answer a call (or, with `started`, did not finish a stream that ends)
    /// within the deadline (`--request-timeout`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use cosi_cli::error::CliError;
    /// let late = CliError::Deadline {
    ///     node: "10.0.0.1".into(),
    ///     what: "list services".into(),
    ///     deadline: Duration::from_millis(300),
    ///     started: false,
    /// };
    /// assert_eq!(
    ///     late.to_string(),
    ///     "node 10.0.0.1 did not answer list services within 300ms; wait longer with \
    ///      --request-timeout DURATION (0: no deadline)"
    /// );
    /// ```
    #[error(
        "node {node} did not {} {what} within {}; wait longer with --request-timeout DURATION \
         (0: no deadline)",
        if *started { "finish" } else { "answer" },
        humantime::format_duration(*deadline)
    )]
    Deadline {
        /// The node as the operator named it.
        node: String,
        /// What was asked of it.
        what: String,
        /// The deadline that passed.
        deadline: Duration,
        /// Whether the node had answered (a stream that ends, cut short by the deadline).
        started: bool,
    },
    /// The output stream could not be written (a closed pipe, as with `| head`, is not
    /// reported: see [`CliError::is_closed_output`]).
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
    /// Anything else, said in full.
    #[error("{0}")]
    Other(String),
}

impl CliError {
    /// A failed call to `node`.
    pub fn node(node: &str, what: impl Into<String>, error: Error, needs: Role) -> Self {
        CliError::Node {
            node: node.to_string(),
            what: what.into(),
            error: Box::new(error),
            needs,
        }
    }

    /// The output could not be written.
    pub fn output(source: std::io::Error) -> Self {
        CliError::Output(source)
    }

    /// Whether the reader of the output went away (`cosictl get x | head`): the command
    /// stops quietly, as a filter does.
    pub fn is_closed_output(&self) -> bool {
        matches!(self, CliError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// A file error.
    pub fn file(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CliError::File {
            path: path.into(),
            source,
        }
    }
}

/// Whether the error is the transport failing (no answer from the node), not the node saying no.
fn is_unreachable(error: &Error) -> Option<&str> {
    match error {
        // Errors the node sends carry their own structure; a bare transport code arrives as
        // `<Code>: <message>` (see cosi_api::status::from_status).
        Error::Backend {
            message,
            retryable: true,
            ..
        } if [
            "Unavailable: ",
            "Unknown: ",
            "DeadlineExceeded: ",
            "Cancelled: ",
        ]
        .iter()
        .any(|code| message.starts_with(code)) =>
        {
            Some(
                message
                    .split_once(": ")
                    .map_or(message.as_str(), |(_, m)| m),
            )
        }
        _ => None,
    }
}

fn describe(node: &str, what: &str, error: &Error, needs: Role) -> String {
    if let Some(cause) = is_unreachable(error) {
        return format!(
            "node {node} is unreachable ({what}): {cause}; check that the node runs and listens \
             at {node}, that -n or the context's nodes name it, and that the cluster CA of the \
             context signed both the node's certificate and the context's client certificate"
        );
    }
    match error {
        Error::AccessDenied { message, .. }
            if message.contains(cosi_api::auth::MAINTENANCE_REFUSAL) =>
        {
            format!(
                "node {node} refused {what}: it is in maintenance mode (it has no config yet) \
                 and accepts only a first config: `cosictl -n {node} apply-config --insecure \
                 --cert-fingerprint FINGERPRINT -f FILE`, with the fingerprint the node printed"
            )
        }
        Error::AccessDenied { message, .. } => format!(
            "node {node} refused {what}: {message}; it needs a client certificate with role \
             {needs} (see `cosictl config contexts`)"
        ),
        Error::InvalidArgument { .. } => format!("node {node} rejected {what}: {error}"),
        Error::VersionConflict {
            pointer,
            expected,
            actual,
        } => format!(
            "node {node}: conflict ({what}): {pointer} changed since it was read (read at \
             version {expected}, now {actual}); re-read it and retry"
        ),
        Error::NotFound { pointer } => format!("node {node}: {pointer} not found ({what})"),
        other => format!("node {node}: {what}: {other}"),
    }
}
