//! `edit TYPE [ID]`: the machine config in the operator's editor, applied with the version it
//! was read at, node by node.
//!
//! The editor is `$COSICTL_EDITOR`, else `$EDITOR`, else `vi`, run through `sh -c` (so
//! `code --wait` works) on a temporary file that starts with `# Editing <type>/<id> at node
//! <node>`. What comes back, without the comment lines the command wrote above the config (the
//! config's own comments stay):
//! - empty → "Apply was skipped: empty file.";
//! - unchanged → "Apply was skipped: no changes detected.";
//! - otherwise it is applied with the version it was read at. A rejected config re-opens the
//!   editor with the node's error as `# ` lines above the operator's text; saving the same
//!   rejected text again ends the edit ("Edit canceled"), keeping a copy of it. A conflict (the
//!   config changed meanwhile) ends the edit with the conflict: re-run it on the new version.

use std::path::Path;

use cosi_api::auth::Role;
use cosi_core::Error;

use crate::args::EditArgs;
use crate::cmd::apply::{config_target, print_outcome, read_config, request};
use crate::error::CliError;
use crate::files::{self, MAX_CONFIG_CHANGE};
use crate::nodes::Node;
use crate::session::{Io, Report, Session};

/// The environment variables naming the editor, in order of preference.
pub const EDITOR_ENV: [&str; 2] = ["COSICTL_EDITOR", "EDITOR"];

/// The editor command: the first of [`EDITOR_ENV`] that is set, else `vi`.
pub fn editor() -> String {
    EDITOR_ENV
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|value| !value.trim().is_empty())
        .unwrap_or_else(|| "vi".to_string())
}

/// The text without the comment lines this command put above it (`written`: the header and any
/// error lines). When the operator changed those too, every leading comment line goes.
fn body<'t>(text: &'t str, written: &str) -> &'t str {
    if let Some(rest) = text.strip_prefix(written) {
        return rest;
    }
    let mut rest = text;
    while rest.starts_with('#') {
        rest = rest.split_once('\n').map_or("", |(_, after)| after);
    }
    rest
}

async fn run_editor(editor: &str, path: &Path) -> Result<(), CliError> {
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .await
        .map_err(|e| CliError::Other(format!("cannot run the editor {editor:?}: {e}")))?;
    if !status.success() {
        return Err(CliError::Other(format!(
            "the editor {editor:?} failed ({status}); nothing was applied"
        )));
    }
    Ok(())
}

/// Runs `edit`.
pub async fn run(session: &Session, args: &EditArgs, io: &mut Io<'_>) -> Result<Report, CliError> {
    let base = request(&args.flags)?;
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
    for &i in &live {
        let node = &session.nodes[i];
        if let Err(e) = edit_one(node, &pointer, &base, io).await {
            report.fail(io, &e);
        }
    }
    Ok(report)
}

async fn edit_one(
    node: &Node,
    pointer: &cosi_core::Pointer,
    base: &cosi_api::machine::ApplyRequest,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let write = CliError::output;
    let (original, version) = read_config(node, pointer).await?;
    let display = format!("{}/{}", pointer.resource_type(), pointer.id());
    let header = format!("# Editing {display} at node {}\n", node.name);
    let file = tempfile::Builder::new()
        .prefix(&format!(
            "{}-{}-edit-",
            pointer.resource_type(),
            pointer.id()
        ))
        .suffix(".yaml")
        .tempfile()
        .map_err(|e| CliError::Other(format!("cannot create the file to edit: {e}")))?;
    let path = file.path().to_path_buf();
    let editor = editor();
    let mut comments = header.clone();
    let mut text = original.clone();
    let mut rejected: Option<String> = None;
    loop {
        std::fs::write(&path, format!("{comments}{text}")).map_err(|e| CliError::file(&path, e))?;
        run_editor(&editor, &path).await?;
        let edited = files::read_text(&path, MAX_CONFIG_CHANGE, "a machine config")
            .map_err(|e| CliError::file(&path, e))?;
        let edited = body(&edited, &comments).to_string();
        if edited.trim().is_empty() {
            writeln!(io.out, "Apply was skipped: empty file.").map_err(write)?;
            return Ok(());
        }
        if edited == original {
            writeln!(io.out, "Apply was skipped: no changes detected.").map_err(write)?;
            return Ok(());
        }
        if rejected.as_deref() == Some(edited.as_str()) {
            // Keep what the operator wrote: the temporary file would go with `file`.
            let kept = file
                .keep()
                .map(|(_, path)| path)
                .map_err(|e| CliError::Other(format!("cannot keep the edited file: {e}")))?;
            return Err(CliError::Other(format!(
                "edit canceled, no valid changes were saved; a copy of your changes is in {}",
                kept.display()
            )));
        }
        let mut request = base.clone();
        request.data = edited.clone().into_bytes();
        request.expected_version = Some(version);
        let applied = node
            .within(
                format!("edit {display}"),
                node.machine.apply_configuration(request),
            )
            .await?;
        match applied {
            Ok(outcome) => {
                return print_outcome(io, &node.name, false, &outcome);
            }
            Err(error @ Error::InvalidArgument { .. }) => {
                let refusal =
                    CliError::node(&node.name, format!("edit {display}"), error, Role::Admin);
                let lines: String = refusal
                    .to_string()
                    .lines()
                    .map(|line| format!("# {line}\n"))
                    .collect();
                comments = format!("{header}{lines}");
                text = edited.clone();
                rejected = Some(edited);
            }
            Err(error) => {
                return Err(CliError::node(
                    &node.name,
                    format!("edit {display}"),
                    error,
                    Role::Admin,
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_body_starts_after_the_comments_the_command_wrote() {
        let written = "# Editing x\n# error\n";
        assert_eq!(
            super::body("# Editing x\n# error\n# own\nx: 1\n", written),
            "# own\nx: 1\n"
        );
    }

    #[test]
    fn changed_header_lines_are_dropped_with_every_leading_comment() {
        let written = "# Editing x\n";
        assert_eq!(
            super::body("# changed\n# b\nx: 1\n# c\n", written),
            "x: 1\n# c\n"
        );
        assert_eq!(super::body("# only\n", written), "");
        assert_eq!(super::body("x: 1\n", written), "x: 1\n");
    }
}
