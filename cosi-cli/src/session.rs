//! What a command runs with: [`Io`] (where output goes, when to stop, what time it is) and a
//! [`Session`] (the nodes, connected with the chosen context's credentials), plus the fan-out
//! that calls every node concurrently.

use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use cosi_api::client::ClientSecurity;

use crate::client_config::{config_path, open_context};
use crate::error::CliError;
use crate::nodes::{connect, Node};
use crate::terminal::{escape_controls, message_line};

/// Where a command writes, when a streaming command stops, and the clock ages are read from.
pub struct Io<'a> {
    /// Results.
    pub out: &'a mut dyn Write,
    /// Warnings and errors.
    pub err: &'a mut dyn Write,
    /// Resolves when a streaming command (`get -w`, `logs -f`, `events`) should stop (Ctrl-C).
    pub stop: Pin<Box<dyn Future<Output = ()> + 'a>>,
    /// The time now (ages in `services` are measured against it).
    pub now: Box<dyn Fn() -> SystemTime + 'a>,
}

impl<'a> Io<'a> {
    /// Output to `out` and `err`, never stopping by itself, on the system clock.
    pub fn new(out: &'a mut dyn Write, err: &'a mut dyn Write) -> Self {
        Io {
            out,
            err,
            stop: Box::pin(std::future::pending()),
            now: Box::new(SystemTime::now),
        }
    }

    /// Stops streaming commands when `stop` resolves.
    pub fn with_stop(mut self, stop: impl Future<Output = ()> + 'a) -> Self {
        self.stop = Box::pin(stop);
        self
    }

    /// Reads the time from `now`.
    pub fn with_clock(mut self, now: impl Fn() -> SystemTime + 'a) -> Self {
        self.now = Box::new(now);
        self
    }

    /// Prints an error line (`error: ...`). An error is one short line of inert text: it
    /// quotes what nodes sent, so its control characters (a newline too) are escaped and a
    /// long one is cut in the middle ([`message_line`]).
    pub fn error_line(&mut self, error: &CliError) {
        let text = error.to_string();
        let _ = writeln!(self.err, "error: {}", message_line(&text));
    }
}

/// How a command ended when it did not fail as a whole: how many nodes failed (each reported
/// on its own error line). Any failure makes the exit code 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Nodes (or items) that failed.
    pub failures: usize,
}

impl Report {
    /// Counts `error` (already printed) as a failure.
    pub(crate) fn fail(&mut self, io: &mut Io<'_>, error: &CliError) {
        io.error_line(error);
        self.failures += 1;
    }
}

/// The nodes a command talks to.
#[derive(Debug)]
pub struct Session {
    /// In the order named.
    pub nodes: Vec<Node>,
}

impl Session {
    /// Connects (lazily) to `names` with `security`; each call to them has
    /// [`crate::nodes::DEFAULT_DEADLINE`] (see [`Session::with_deadline`]).
    pub async fn open(names: &[String], security: ClientSecurity) -> Result<Self, CliError> {
        if names.is_empty() {
            return Err(CliError::Usage(
                "no nodes: name them with -n, or give the context nodes or endpoints".into(),
            ));
        }
        let mut nodes = Vec::with_capacity(names.len());
        for name in names {
            nodes.push(connect(name, security.clone()).await?);
        }
        Ok(Session { nodes })
    }

    /// Gives every call to the nodes `deadline` (`None`: none) instead of
    /// [`crate::nodes::DEFAULT_DEADLINE`].
    pub fn with_deadline(mut self, deadline: Option<Duration>) -> Self {
        for node in &mut self.nodes {
            node.deadline = deadline;
        }
        self
    }

    /// The nodes of `-n` (else the context's), with the credentials of the context chosen by
    /// `--context` (else the current one) of the client config at `config` (else the default).
    /// What is wrong with the credentials but does not stop them (a private key others can
    /// read) is written to `warnings`.
    pub async fn from_config(
        config: Option<&Path>,
        context: Option<&str>,
        nodes: &[String],
        warnings: &mut dyn Write,
    ) -> Result<Self, CliError> {
        let path = config_path(config)?;
        let (_, context, credentials) = open_context(&path, context)?;
        for warning in &credentials.warnings {
            let _ = writeln!(warnings, "warning: {warning}");
        }
        let names = if nodes.is_empty() {
            context.default_nodes()
        } else {
            nodes.to_vec()
        };
        Self::open(&names, credentials.security()).await
    }

    /// Calls `call` on every node concurrently; results in the nodes' order.
    pub(crate) async fn each<'s, T, F, Fut>(
        &'s self,
        call: F,
    ) -> Vec<(&'s Node, Result<T, CliError>)>
    where
        F: Fn(&'s Node) -> Fut,
        Fut: Future<Output = Result<T, CliError>>,
    {
        let call = &call;
        futures::future::join_all(
            self.nodes
                .iter()
                .map(|node| async move { (node, call(node).await) }),
        )
        .await
    }

    /// Whether free text lines should carry a `<node>: ` prefix (several nodes).
    pub(crate) fn prefixed(&self) -> bool {
        self.nodes.len() > 1
    }
}

/// Writes `text` (a node's, as a rule) line by line, each prefixed with `<node>: ` when
/// `prefix` is set; the control characters of each line are escaped.
pub(crate) fn write_lines(
    out: &mut dyn Write,
    node: &str,
    prefix: bool,
    text: &str,
) -> std::io::Result<()> {
    for line in text.lines() {
        let line = escape_controls(line);
        if prefix {
            writeln!(out, "{node}: {line}")?;
        } else {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}
