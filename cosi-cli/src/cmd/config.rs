//! `config contexts|use-context|info|add`: the client config file, as talosctl's `config`
//! commands read and change talosconfig.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::args::{ConfigAddArgs, ConfigCommand};
use crate::client_config::{config_path, open_context, ClientConfig, Context};
use crate::error::CliError;
use crate::files::{self, MAX_PEM};
use crate::session::Io;
use crate::table::TabWriter;
use crate::terminal::escape_controls;

/// Runs a `config` command on the file at `config` (else the default path).
pub fn run(
    config: Option<&Path>,
    context: Option<&str>,
    command: &ConfigCommand,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let path = config_path(config)?;
    match command {
        ConfigCommand::Contexts => contexts(&ClientConfig::load(&path)?, io),
        ConfigCommand::UseContext { name } => {
            let mut file = ClientConfig::load(&path)?;
            if !file.contexts.contains_key(name) {
                let message = file.context(Some(name)).err().unwrap_or_default();
                return Err(CliError::Config { path, message });
            }
            file.context = Some(name.clone());
            file.save(&path)
        }
        ConfigCommand::Info => info(&path, context, io),
        ConfigCommand::Add(args) => add(&path, args, io),
    }
}

fn contexts(file: &ClientConfig, io: &mut Io<'_>) -> Result<(), CliError> {
    let mut table = TabWriter::default();
    table.row(["CURRENT", "NAME", "ENDPOINTS", "NODES"]);
    for (name, context) in &file.contexts {
        let current = if file.context.as_deref() == Some(name) {
            "*"
        } else {
            ""
        };
        table.row([
            current.to_string(),
            name.clone(),
            context.endpoints.join(","),
            context.nodes.join(","),
        ]);
    }
    table.flush(io.out).map_err(CliError::output)
}

/// The roles and expiry of a client certificate.
fn certificate_facts(pem: &str) -> Result<(Vec<String>, SystemTime), String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let cert = pem.parse_x509().map_err(|e| e.to_string())?;
    let roles = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string)
        .collect();
    let not_after = cert.validity().not_after.timestamp();
    let expires =
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(not_after).unwrap_or(0));
    Ok((roles, expires))
}

fn info(path: &Path, context: Option<&str>, io: &mut Io<'_>) -> Result<(), CliError> {
    let config_error = |message: String| CliError::Config {
        path: path.to_path_buf(),
        message,
    };
    let (name, context, credentials) = open_context(path, context)?;
    for warning in &credentials.warnings {
        writeln!(io.err, "warning: {warning}").map_err(CliError::output)?;
    }
    let (roles, expires) = certificate_facts(&credentials.identity.cert_pem)
        .map_err(|e| config_error(format!("context {name:?}: the client certificate: {e}")))?;
    // What the file (and the certificate) say is outside input: shown with its control
    // characters escaped.
    let list = |items: &[String]| {
        if items.is_empty() {
            "not defined".to_string()
        } else {
            escape_controls(&items.join(", ")).into_owned()
        }
    };
    let left = expires
        .duration_since((io.now)())
        .map(|d| format!("{} days from now", (d.as_secs() + 43_200) / 86_400))
        .unwrap_or_else(|_| "expired".to_string());
    let date = humantime::format_rfc3339_seconds(expires).to_string();
    writeln!(
        io.out,
        "Current context:     {}\nNodes:               {}\nEndpoints:           {}\nRoles:               {}\nCertificate expires: {left} ({})",
        escape_controls(&name),
        list(&context.nodes),
        list(&context.endpoints),
        list(&roles),
        &date[..10],
    )
    .map_err(CliError::output)
}

fn add(path: &Path, args: &ConfigAddArgs, io: &mut Io<'_>) -> Result<(), CliError> {
    let mut file = ClientConfig::load_or_default(path)?;
    let absolute = |p: &Path| std::fs::canonicalize(p).map_err(|e| CliError::file(p, e));
    let read =
        |p: &Path| files::read_text(p, MAX_PEM, "a PEM file").map_err(|e| CliError::file(p, e));
    let mut context = Context {
        endpoints: args.endpoints.clone(),
        nodes: args.default_nodes.clone(),
        ..Context::default()
    };
    if args.inline {
        context.ca = Some(read(&args.ca)?);
        context.crt = Some(read(&args.crt)?);
        context.key = Some(read(&args.key)?);
    } else {
        context.ca_file = Some(absolute(&args.ca)?);
        context.crt_file = Some(absolute(&args.crt)?);
        context.key_file = Some(absolute(&args.key)?);
    }
    file.contexts.insert(args.name.clone(), context);
    if file.context.is_none() {
        file.context = Some(args.name.clone());
    }
    file.save(path)?;
    writeln!(
        io.out,
        "added context {:?} to {}",
        args.name,
        path.display()
    )
    .map_err(CliError::output)
}
