//! `apply-config` and `patch`: changes of the machine config through the machine service's
//! one apply call, and how their results print (talosctl's: warnings, then the node's account
//! of what it did; on a dry run, the diff).
//!
//! `patch` sends the patches themselves (`@file` arguments are read here): the node patches its
//! own config, so the client needs no config schema. It first reads the config resource for
//! its version and sends it along, so a patch computed against one version never lands on
//! another (the node answers a conflict).

use std::time::Duration;

use cosi_api::auth::Role;
use cosi_api::client::ClientSecurity;
use cosi_api::machine::{ApplyMode, ApplyOutcome, ApplyRequest};
use cosi_api::tls::Fingerprint;
use cosi_core::{AnyResource, Kind, Pointer, State};

use crate::args::{ApplyConfigArgs, ApplyFlags, Mode, PatchArgs};
use crate::error::CliError;
use crate::files::{self, MAX_CONFIG_CHANGE};
use crate::nodes::Node;
use crate::resolve;
use crate::session::{write_lines, Io, Report, Session};
use crate::terminal::message_line;

/// The id of the config a change starts from, unless the operator names one: the config the
/// node runs, or for a staged change the one it starts with next (the node's own rule).
pub(crate) fn default_config_id(mode: Mode) -> &'static str {
    match mode {
        Mode::Staged => "persisted",
        _ => "active",
    }
}

pub(crate) fn wire_mode(mode: Mode) -> ApplyMode {
    match mode {
        Mode::Auto => ApplyMode::Auto,
        Mode::NoReboot => ApplyMode::NoReboot,
        Mode::Reboot => ApplyMode::Reboot,
        Mode::Staged => ApplyMode::Staged,
        Mode::Try => ApplyMode::Try,
    }
}

/// Checks the flags that only make sense together.
pub(crate) fn check_flags(flags: &ApplyFlags) -> Result<Option<Duration>, CliError> {
    match (flags.timeout, flags.mode) {
        (Some(_), mode) if mode != Mode::Try => Err(CliError::Usage(
            "--timeout applies only to --mode try".into(),
        )),
        (timeout, _) => Ok(timeout),
    }
}

/// A request carrying `flags`.
pub(crate) fn request(flags: &ApplyFlags) -> Result<ApplyRequest, CliError> {
    Ok(ApplyRequest {
        mode: wire_mode(flags.mode),
        dry_run: flags.dry_run,
        try_timeout: check_flags(flags)?,
        ..ApplyRequest::default()
    })
}

/// Prints what an apply did: warnings (to the error stream), then the node's account.
pub(crate) fn print_outcome(
    io: &mut Io<'_>,
    node: &str,
    prefix: bool,
    outcome: &ApplyOutcome,
) -> Result<(), CliError> {
    let write = CliError::output;
    for warning in &outcome.warnings {
        // A warning is one short line: a newline in it is escaped, not a line of its own.
        let line = format!("Warning: {}", message_line(warning));
        write_lines(io.err, node, prefix, &line).map_err(write)?;
    }
    write_lines(io.out, node, prefix, &outcome.details).map_err(write)?;
    // The node's account may already quote the diff (a dry run's summary does).
    let diff = outcome.diff.trim_end();
    if !diff.is_empty() && !outcome.details.contains(diff) {
        write_lines(io.out, node, prefix, diff).map_err(write)?;
    }
    io.out.flush().map_err(write)
}

/// Reads a file the operator named to send (`what`: "a machine config"), refused past
/// [`MAX_CONFIG_CHANGE`] before it is read whole or sent.
pub(crate) fn read_file(path: &std::path::Path, what: &str) -> Result<Vec<u8>, CliError> {
    files::read(path, MAX_CONFIG_CHANGE, what).map_err(|e| CliError::file(path, e))
}

/// The session of `apply-config --insecure`: the nodes of `-n`, in maintenance mode (server-only
/// TLS), each server key pinned to one of the given fingerprints.
pub async fn maintenance_session(
    cli_nodes: &[String],
    args: &ApplyConfigArgs,
) -> Result<Session, CliError> {
    if args.cert_fingerprint.is_empty() {
        return Err(CliError::Usage(
            "--insecure needs --cert-fingerprint: the fingerprint of the node's server key, \
             which a node in maintenance mode logs"
                .into(),
        ));
    }
    if cli_nodes.is_empty() {
        return Err(CliError::Usage(
            "--insecure needs the node named with -n (a node in maintenance mode is in no \
             context)"
                .into(),
        ));
    }
    let fingerprints = args
        .cert_fingerprint
        .iter()
        .map(|f| f.parse::<Fingerprint>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CliError::Usage(format!("--cert-fingerprint {e}")))?;
    Session::open(cli_nodes, ClientSecurity::Pinned { fingerprints }).await
}

/// Runs `apply-config` (the session is [`maintenance_session`] for `--insecure`).
pub async fn apply_config(
    session: &Session,
    args: &ApplyConfigArgs,
    io: &mut Io<'_>,
) -> Result<Report, CliError> {
    if !args.insecure && !args.cert_fingerprint.is_empty() {
        return Err(CliError::Usage(
            "--cert-fingerprint applies only with --insecure".into(),
        ));
    }
    let mut request = request(&args.flags)?;
    request.data = read_file(&args.file, "a machine config")?;
    let results = session
        .each(|node| {
            let request = request.clone();
            async move {
                node.call(
                    "apply-config",
                    Role::Admin,
                    node.machine.apply_configuration(request),
                )
                .await
            }
        })
        .await;
    let mut report = Report::default();
    let prefix = session.prefixed();
    for (node, result) in results {
        match result {
            Ok(outcome) => print_outcome(io, &node.name, prefix, &outcome)?,
            Err(e) => report.fail(io, &e),
        }
    }
    Ok(report)
}

/// The config text of a config resource and its version; an error unless its spec is a text
/// (the machine config's shape).
pub(crate) async fn read_config(node: &Node, pointer: &Pointer) -> Result<(String, u64), CliError> {
    let resource = node
        .call(
            format!("get {pointer}"),
            Role::Admin,
            node.state.get(pointer),
        )
        .await?;
    let text = config_text(&*resource).ok_or_else(|| {
        CliError::Other(format!(
            "node {}: {pointer} is not a config: its spec is not a config text (patch and edit \
             work on the machine config, `mc`)",
            node.name
        ))
    })?;
    Ok((text, resource.metadata().version().get()))
}

fn config_text(resource: &dyn AnyResource) -> Option<String> {
    match resource.spec_value().ok()? {
        serde_json::Value::String(text) => Some(text),
        _ => None,
    }
}

/// A patch argument: `@file` is read here, anything else is the patch itself.
fn patch_bytes(argument: &str) -> Result<Vec<u8>, CliError> {
    match argument.strip_prefix('@') {
        Some("") => Err(CliError::Usage(
            "-p @ names no file: write -p @FILE for a patch in a file, or the patch itself".into(),
        )),
        Some(path) => read_file(std::path::Path::new(path), "a patch"),
        None => Ok(argument.as_bytes().to_vec()),
    }
}

/// The config kind and id `patch` and `edit` work on.
pub(crate) async fn config_target(
    session: &Session,
    resource_type: &str,
    id: Option<&str>,
    mode: Mode,
    io: &mut Io<'_>,
    report: &mut Report,
) -> Result<Option<(Kind, String, Vec<usize>)>, CliError> {
    let Some(target) = resolve::on_first_node(session, resource_type, None, io, report).await?
    else {
        return Ok(None);
    };
    let id = id.unwrap_or(default_config_id(mode)).to_string();
    Ok(Some((target.kind, id, target.live)))
}

/// Runs `patch`.
pub async fn patch(
    session: &Session,
    args: &PatchArgs,
    io: &mut Io<'_>,
) -> Result<Report, CliError> {
    let mut request = request(&args.flags)?;
    request.patches = args
        .patches
        .iter()
        .map(|p| patch_bytes(p))
        .collect::<Result<Vec<_>, _>>()?;
    let total: usize = request.patches.iter().map(Vec::len).sum();
    if total as u64 > MAX_CONFIG_CHANGE {
        return Err(CliError::Usage(format!(
            "the patches add up to more than {} MiB, more than one change may hold; send fewer \
             at a time",
            MAX_CONFIG_CHANGE >> 20
        )));
    }
    let mut report = Report::default();
    let Some((kind, id, live)) = config_target(
        session,
        &args.resource_type,
        args.id.as_deref(),
        args.flags.mode,
        io,
        &mut report,
    )
    .await?
    else {
        return Ok(report);
    };
    let pointer = kind.pointer(id.as_str());
    let nodes: Vec<&Node> = live.iter().map(|&i| &session.nodes[i]).collect();
    let results = futures::future::join_all(nodes.iter().map(|node| {
        let mut request = request.clone();
        let pointer = &pointer;
        async move {
            let (_, version) = read_config(node, pointer).await?;
            request.expected_version = Some(version);
            node.call(
                format!("patch {pointer}"),
                Role::Admin,
                node.machine.apply_configuration(request),
            )
            .await
        }
    }))
    .await;
    let prefix = session.prefixed();
    let write = CliError::output;
    for (node, result) in nodes.iter().zip(results) {
        match result {
            Ok(outcome) => {
                if !args.flags.dry_run && outcome.diff.trim().is_empty() {
                    write_lines(
                        io.out,
                        &node.name,
                        prefix,
                        "Apply was skipped: no changes detected.",
                    )
                    .map_err(write)?;
                    continue;
                }
                if !args.flags.dry_run {
                    let line = format!(
                        "patched {}/{} at the node {}",
                        kind.resource_type(),
                        id,
                        node.name
                    );
                    write_lines(io.out, &node.name, prefix, &line).map_err(write)?;
                }
                print_outcome(io, &node.name, prefix, &outcome)?;
            }
            Err(e) => report.fail(io, &e),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_at_sign_without_a_file_is_a_usage_error_saying_what_to_write() {
        assert_eq!(
            super::patch_bytes("@").unwrap_err().to_string(),
            "-p @ names no file: write -p @FILE for a patch in a file, or the patch itself"
        );
    }
}
