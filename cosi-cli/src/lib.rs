//! # cosi-cli
//!
//! `cosictl`, the operator's client of a node that has no shell: everything an operator sees or
//! changes goes through the node's API (the COSI State service and the machine service of
//! `cosi-api`), over mutual TLS with a client certificate whose Organization is its role.
//!
//! The client is **type-agnostic**: it knows no node type. It lists the definitions a node
//! publishes (`ResourceDefinition`s in namespace `meta`) and resolves `mc`, `members` or a full
//! type name by the node's own rules, then prints any resource from its `{metadata, spec}` form
//! and its definition's print columns.
//!
//! Everything is a library function that writes to any [`std::io::Write`] (through
//! [`session::Io`]), so a program can print what an operator would see through the same code;
//! the `cosictl` binary only parses, calls [`run`], and exits with its code.
//!
//! ```no_run
//! use clap::Parser;
//! # async fn demo() {
//! let cli = cosi_cli::args::Cli::parse_from(["cosictl", "-n", "127.0.0.1:50000", "get", "members"]);
//! let (mut out, mut err) = (Vec::new(), Vec::new());
//! let code = cosi_cli::run(cli, &mut cosi_cli::session::Io::new(&mut out, &mut err)).await;
//! println!("{}exit {code}", String::from_utf8_lossy(&out));
//! # }
//! ```
//!
//! ## A tour
//!
//! ```text
//! cosictl gen ca --out pki                                  # ca.pem, ca-key.pem
//! cosictl gen certs --out pki --address 127.0.0.1           # server.pem + admin/operator/reader.pem
//! cosictl gen config demo https://127.0.0.1:6443 --pki pki  # controlplane.yaml, worker.yaml, cosiconfig
//! export COSICONFIG=$PWD/cosiconfig
//! cosictl -n 127.0.0.1:50000 apply-config --insecure --cert-fingerprint FP -f controlplane.yaml
//! cosictl get rd                                            # the types the node defines
//! cosictl get members                                       # a table, NODE first
//! cosictl get mc active -o yaml                             # the machine config (admin only)
//! cosictl get services -w                                   # + created, - destroyed, space updated
//! cosictl patch mc -p '{machine: {nodeLabels: {zone: a}}}' --mode no-reboot
//! cosictl patch mc -p @label.yaml --mode try --timeout 1m --dry-run
//! cosictl edit mc                                           # $COSICTL_EDITOR, $EDITOR or vi
//! cosictl services; cosictl service kubelet restart; cosictl logs kubelet -f --tail 20
//! cosictl -n 10.0.0.1,10.0.0.2 events --tail 10             # several nodes, concurrently
//! cosictl --request-timeout 2m get members                  # a slow node: wait longer per call
//! cosictl config contexts; cosictl --context demo-reader get members
//! ```
//!
//! ## Conventions kept from talosctl, and where this client differs
//!
//! - Tables: `NODE NAMESPACE TYPE ID VERSION` plus the definition's print columns, upper-cased,
//!   columns padded by three spaces; `get -w` adds a `*` column after NODE with `+` created,
//!   `-` destroyed and a space for updated. Widths are sticky across a watch's rows (talosctl's
//!   tabwriter realigns per flush), so a watch stays aligned. Widths are display widths (CJK
//!   takes two columns) and a column grows to 128 at most (a wider cell overflows).
//! - What a node sends (ids, values, messages, errors) and what the client config says is
//!   printed with its control characters escaped (`\u{1b}`), in tables, error and warning
//!   lines and free text alike; YAML and JSON escape them in their own syntax. Only `logs`
//!   prints a service's raw output, as talosctl does. An error or warning line shows at most
//!   4 KiB of its escaped text ([`terminal::MAX_MESSAGE_LINE`]): its first 3 KiB, `[... N
//!   bytes cut ...]` and its last 1 KiB (where an error says what to do); YAML and JSON keep
//!   every text whole.
//! - YAML: `node:` first (then `event:` when watching), then `metadata` and `spec`, `---`
//!   between resources; JSON: the same keys, one object per resource.
//! - `-n a,b,c` queries the nodes **concurrently**; each node is **dialled directly** — there is
//!   no proxying through an endpoint as in Talos's apid, so every node must be reachable from
//!   the client. A node that fails gets its own `error:` line naming it while the others still
//!   print; the exit code is then 1. The type is resolved on the first node that answers.
//! - The client config has contexts like talosconfig (`--config`, `$COSICONFIG`,
//!   `~/.cosi/config`; `--context`); certificates are named as files or inlined as PEM. When
//!   `-n` names no node, the context's nodes are used, else its first endpoint. An address
//!   without a port means port 50000.
//! - `patch` sends the patches to the node, which patches its own config (so the client needs
//!   no config schema); `patch` and `edit` first read the config resource (`active`, or
//!   `persisted` with `--mode staged`) and send its version, so a change computed from one
//!   version never lands on another: the node answers a conflict.
//! - `apply-config`, `patch` and `edit` print warnings to the error stream and the node's
//!   account of the change (with the diff on a dry run) to the output stream (talosctl prints
//!   both to stderr). With several nodes, each line is prefixed `<node>: `, as `logs` does.
//! - `events` prints one line per event (`NODE ID EVENT SOURCE MESSAGE`), not talosctl's two.
//! - Maintenance mode: `apply-config --insecure --cert-fingerprint FP -n NODE` reaches a node
//!   without a config; the fingerprint (of the node's server key, which it logs) is required —
//!   the client never talks to an unverified server.
//! - Deadlines: every call to a node has one, `--request-timeout DURATION` (default 30s, see
//!   [`nodes::DEFAULT_DEADLINE`]; `0`: none). It is kubectl's name: `--timeout` is `--mode
//!   try`'s rollback timeout. A stream that goes on until interrupted (`get -w`, `logs -f`,
//!   `events`) is bounded only until the node has opened it, then runs as long as it lasts;
//!   `logs` without `-f` ends by itself and is bounded to its end. A node that misses the
//!   deadline gets its own error line naming it, the call and the deadline, and saying how to
//!   wait longer; the exit code is then 1, as for any node that fails. The connection itself
//!   (TCP and the TLS handshake) gives up after 5 s in any case (the node is unreachable); a
//!   shorter deadline comes first.
//! - Exit codes: 0 when everything succeeded, 1 otherwise (also for usage errors). Failures read
//!   differently by cause — unreachable, refused (with the role needed), rejected (with the
//!   field path), conflict (re-read and retry) — see [`error::CliError`].

pub mod args;
pub mod client_config;
pub mod cmd;
pub mod error;
pub mod files;
pub mod nodes;
pub mod print;
pub mod resolve;
pub mod session;
pub mod table;
pub mod terminal;
mod yaml;

use args::{Cli, Command, GenCommand};
use error::CliError;
use session::{Io, Report, Session};

/// Runs a parsed command line; returns the exit code (0 ok, 1 any failure). Errors are printed
/// to `io.err` as `error: ...` lines.
pub async fn run(cli: Cli, io: &mut Io<'_>) -> i32 {
    match execute(cli, io).await {
        Ok(report) if report.failures == 0 => 0,
        Ok(_) => 1,
        Err(error) if error.is_closed_output() => 0,
        Err(error) => {
            io.error_line(&error);
            1
        }
    }
}

/// The session of `cli`'s nodes and context; warnings about the credentials go to `warnings`.
async fn session(cli: &Cli, warnings: &mut dyn std::io::Write) -> Result<Session, CliError> {
    let session = Session::from_config(
        cli.config.as_deref(),
        cli.context.as_deref(),
        &cli.nodes,
        warnings,
    )
    .await?;
    Ok(session.with_deadline(cli.deadline()))
}

/// Runs a parsed command line; a failure of the whole command is the error, failures of some
/// nodes are counted in the report (and already printed).
pub async fn execute(cli: Cli, io: &mut Io<'_>) -> Result<Report, CliError> {
    match &cli.command {
        Command::Get(args) => cmd::get::run(&session(&cli, io.err).await?, args, io).await,
        Command::ApplyConfig(args) => {
            let session = if args.insecure {
                cmd::apply::maintenance_session(&cli.nodes, args)
                    .await?
                    .with_deadline(cli.deadline())
            } else {
                session(&cli, io.err).await?
            };
            cmd::apply::apply_config(&session, args, io).await
        }
        Command::Patch(args) => cmd::apply::patch(&session(&cli, io.err).await?, args, io).await,
        Command::Edit(args) => cmd::edit::run(&session(&cli, io.err).await?, args, io).await,
        Command::Services => cmd::services::list(&session(&cli, io.err).await?, io).await,
        Command::Service(args) => cmd::services::one(&session(&cli, io.err).await?, args, io).await,
        Command::Logs(args) => cmd::stream::logs(&session(&cli, io.err).await?, args, io).await,
        Command::Events(args) => cmd::stream::events(&session(&cli, io.err).await?, args, io).await,
        Command::Version(args) => {
            if args.client {
                cmd::version::client(io)?;
                Ok(Report::default())
            } else {
                cmd::version::run(&session(&cli, io.err).await?, io).await
            }
        }
        Command::Gen(command) => {
            match command {
                GenCommand::Ca(args) => cmd::gen::ca(args, io)?,
                GenCommand::Certs(args) => cmd::gen::certs(args, io)?,
                GenCommand::Config(args) => cmd::gen::config(args, io)?,
            }
            Ok(Report::default())
        }
        Command::Config(command) => {
            cmd::config::run(cli.config.as_deref(), cli.context.as_deref(), command, io)?;
            Ok(Report::default())
        }
    }
}
