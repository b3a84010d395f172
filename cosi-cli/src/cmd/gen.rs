//! `gen ca|certs|config`: the files a cluster starts from.
//!
//! - `gen ca`: `ca.pem`, `ca-key.pem` (Ed25519, 10 years).
//! - `gen certs`: with the CA, a node's server certificate (`server.pem`, `server-key.pem`)
//!   for the given addresses and names, and one client certificate per role — `admin.pem`,
//!   `operator.pem`, `reader.pem` (and their `-key.pem`) — whose Organization is the role
//!   (`os:admin`, `os:operator`, `os:reader`), the way the node reads roles.
//! - `gen config CLUSTER ENDPOINT`: starter machine configs `controlplane.yaml` and
//!   `worker.yaml` (a template: the client knows no config schema; the node validates) with
//!   the hostname of `--hostname` and the kubelet image of `--kubelet-image`, and
//!   with `--pki DIR` the client config `cosiconfig`: a context per client certificate found
//!   there (`CLUSTER` for admin, `CLUSTER-operator`, `CLUSTER-reader`), `CLUSTER` current.
//!
//! Existing files are never overwritten without `--force`.

use std::path::{Path, PathBuf};

use cosi_api::auth::Role;
use cosi_api::pki::{CertificateAuthority, CertifiedKey, CERT_VALIDITY};

use crate::args::{GenCaArgs, GenCertsArgs, GenConfigArgs};
use crate::client_config::{ClientConfig, Context};
use crate::error::CliError;
use crate::files::{self, MAX_PEM};
use crate::nodes::{split_address, DEFAULT_PORT};
use crate::session::Io;
use crate::yaml;

/// The client config file `gen config` writes.
pub const CLIENT_CONFIG_FILE: &str = "cosiconfig";

/// The roles `gen certs` issues client certificates for, with their file names.
pub const CLIENT_CERTS: [(Role, &str); 3] = [
    (Role::Admin, "admin"),
    (Role::Operator, "operator"),
    (Role::Reader, "reader"),
];

fn pki_error(e: cosi_api::pki::PkiError) -> CliError {
    CliError::Other(e.to_string())
}

/// Fails, naming the first one, when any of `paths` exists and `force` is not set.
fn refuse_overwrite(paths: &[PathBuf], force: bool) -> Result<(), CliError> {
    if force {
        return Ok(());
    }
    match paths.iter().find(|p| p.exists()) {
        Some(existing) => Err(CliError::Usage(format!(
            "{} exists: remove it or pass --force to overwrite",
            existing.display()
        ))),
        None => Ok(()),
    }
}

fn pem_paths(dir: &Path, name: &str) -> [PathBuf; 2] {
    [
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}-key.pem")),
    ]
}

fn create_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::file(dir, e))
}

/// Runs `gen ca`.
pub fn ca(args: &GenCaArgs, io: &mut Io<'_>) -> Result<(), CliError> {
    let paths = pem_paths(&args.out, "ca");
    refuse_overwrite(&paths, args.force)?;
    create_dir(&args.out)?;
    let ca = CertificateAuthority::generate(&args.organization).map_err(pki_error)?;
    ca.certified()
        .write_pem(&args.out, "ca")
        .map_err(pki_error)?;
    for path in &paths {
        writeln!(io.out, "wrote {}", path.display()).map_err(CliError::output)?;
    }
    Ok(())
}

/// Runs `gen certs`.
pub fn certs(args: &GenCertsArgs, io: &mut Io<'_>) -> Result<(), CliError> {
    let ca_dir = args.ca_dir.as_deref().unwrap_or(&args.out);
    let [ca_cert, ca_key] = pem_paths(ca_dir, "ca");
    let ca = CertificateAuthority::from_pem(
        CertifiedKey::read_pem(&ca_cert, &ca_key).map_err(pki_error)?,
    )
    .map_err(pki_error)?;
    let server = !args.addresses.is_empty() || !args.names.is_empty();
    let mut names: Vec<&str> = CLIENT_CERTS.iter().map(|(_, name)| *name).collect();
    if server {
        names.push(&args.server_file);
    }
    let paths: Vec<PathBuf> = names
        .iter()
        .flat_map(|name| pem_paths(&args.out, name))
        .collect();
    refuse_overwrite(&paths, args.force)?;
    create_dir(&args.out)?;
    // Issue everything before writing anything, so a refused name writes no file.
    let mut issued = Vec::new();
    if server {
        let dns: Vec<&str> = args.names.iter().map(String::as_str).collect();
        issued.push((
            args.server_file.as_str(),
            ca.issue_server(&args.addresses, &dns, CERT_VALIDITY)
                .map_err(pki_error)?,
        ));
    }
    for (role, name) in CLIENT_CERTS {
        issued.push((
            name,
            ca.issue_client(name, role, CERT_VALIDITY)
                .map_err(pki_error)?,
        ));
    }
    for (name, certified) in issued {
        let (cert, key) = certified.write_pem(&args.out, name).map_err(pki_error)?;
        writeln!(io.out, "wrote {}\nwrote {}", cert.display(), key.display())
            .map_err(CliError::output)?;
    }
    Ok(())
}

/// A random join token (32 hex digits).
fn token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| CliError::Other(format!("no randomness for the join token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What a starter machine config names besides the cluster.
#[derive(Clone, Copy, Debug)]
pub struct Starter<'a> {
    /// `machine.network.hostname`, if any.
    pub hostname: Option<&'a str>,
    /// `machine.kubelet.image`, if any.
    pub kubelet_image: Option<&'a str>,
}

/// The starter machine config of a `role` machine (`controlplane` or `worker`).
///
/// ```
/// use cosi_cli::cmd::gen::{machine_config, Starter};
/// let text = machine_config("worker", "demo", "https://10.0.0.1:6443", "t0k3n", Starter {
///     hostname: Some("w-1"),
///     kubelet_image: Some("ghcr.io/siderolabs/kubelet:v1.31.1"),
/// });
/// assert!(text.contains("  type: worker\n  token: t0k3n\n  network:\n    hostname: w-1\n"));
/// assert!(text.contains("  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.31.1\n"));
/// ```
pub fn machine_config(
    role: &str,
    cluster: &str,
    endpoint: &str,
    token: &str,
    starter: Starter<'_>,
) -> String {
    let mut network = match starter.hostname {
        Some(hostname) => format!("  network:\n    hostname: {}\n", yaml::scalar(hostname)),
        None => String::new(),
    };
    if let Some(image) = starter.kubelet_image {
        network.push_str(&format!("  kubelet:\n    image: {}\n", yaml::scalar(image)));
    }
    format!(
        "# A starter {role} config of cluster {cluster:?}, written by `cosictl gen config`.\n\
         # Apply it with `cosictl apply-config -f {role}.yaml` (or --insecure to a node in\n\
         # maintenance mode); the node validates it and names any field it refuses.\n\
         version: v1alpha1\n\
         machine:\n  type: {role}\n  token: {token}\n{network}\
         cluster:\n  name: {}\n  controlPlane:\n    endpoint: {}\n  network:\n    \
         podSubnets: [10.244.0.0/16]\n    serviceSubnets: [10.96.0.0/12]\n",
        yaml::scalar(cluster),
        yaml::scalar(endpoint),
    )
}

/// The API endpoint the client config names by default: the cluster endpoint's host, on the
/// API port.
fn default_endpoint(endpoint: &str) -> Result<String, CliError> {
    let bad = || {
        CliError::Usage(format!(
            "the cluster endpoint {endpoint:?} is not an https://host:port URL"
        ))
    };
    let rest = endpoint.strip_prefix("https://").ok_or_else(bad)?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, _) = split_address(authority).map_err(|_| bad())?;
    Ok(if host.contains(':') {
        format!("[{host}]:{DEFAULT_PORT}")
    } else {
        format!("{host}:{DEFAULT_PORT}")
    })
}

fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::fs::canonicalize(path).map_err(|e| CliError::file(path, e))
}

/// The client config of the certificates in `pki` (see the module docs).
fn client_config(args: &GenConfigArgs, pki: &Path) -> Result<ClientConfig, CliError> {
    let endpoints = if args.endpoints.is_empty() {
        vec![default_endpoint(&args.endpoint)?]
    } else {
        args.endpoints.clone()
    };
    let ca = absolute(&pki.join("ca.pem"))?;
    let mut config = ClientConfig {
        context: Some(args.cluster.clone()),
        ..ClientConfig::default()
    };
    for (role, name) in CLIENT_CERTS {
        let [cert, key] = pem_paths(pki, name);
        if !cert.exists() {
            continue;
        }
        let context_name = match role {
            Role::Admin => args.cluster.clone(),
            _ => format!("{}-{name}", args.cluster),
        };
        let (cert, key) = (absolute(&cert)?, absolute(&key)?);
        let mut context = Context {
            endpoints: endpoints.clone(),
            ..Context::default()
        };
        if args.inline {
            let read = |path: &Path| {
                files::read_text(path, MAX_PEM, "a PEM file").map_err(|e| CliError::file(path, e))
            };
            context.ca = Some(read(&ca)?);
            context.crt = Some(read(&cert)?);
            context.key = Some(read(&key)?);
        } else {
            context.ca_file = Some(ca.clone());
            context.crt_file = Some(cert);
            context.key_file = Some(key);
        }
        config.contexts.insert(context_name, context);
    }
    if !config.contexts.contains_key(&args.cluster) {
        return Err(CliError::Usage(format!(
            "{} has no admin.pem: run `cosictl gen certs --out {}` first",
            pki.display(),
            pki.display()
        )));
    }
    Ok(config)
}

/// Runs `gen config`.
pub fn config(args: &GenConfigArgs, io: &mut Io<'_>) -> Result<(), CliError> {
    default_endpoint(&args.endpoint)?;
    let mut paths = vec![
        args.out.join("controlplane.yaml"),
        args.out.join("worker.yaml"),
    ];
    if args.pki.is_some() {
        paths.push(args.out.join(CLIENT_CONFIG_FILE));
    }
    refuse_overwrite(&paths, args.force)?;
    let client = match &args.pki {
        Some(pki) => Some(client_config(args, pki)?),
        None => None,
    };
    create_dir(&args.out)?;
    let token = token()?;
    for (role, path) in ["controlplane", "worker"].iter().zip(&paths) {
        let kubelet_image = Some(args.kubelet_image.as_str()).filter(|image| *image != "none");
        let starter = Starter {
            hostname: args.hostname.as_deref(),
            kubelet_image,
        };
        let text = machine_config(role, &args.cluster, &args.endpoint, &token, starter);
        std::fs::write(path, text).map_err(|e| CliError::file(path, e))?;
        writeln!(io.out, "wrote {}", path.display()).map_err(CliError::output)?;
    }
    if let Some(client) = client {
        let path = &paths[2];
        client.save(path)?;
        writeln!(io.out, "wrote {}", path.display()).map_err(CliError::output)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_endpoint_is_the_cluster_host_on_the_api_port() {
        assert_eq!(
            default_endpoint("https://10.0.0.1:6443").unwrap(),
            "10.0.0.1:50000"
        );
        assert_eq!(
            default_endpoint("https://cp.example:6443/x").unwrap(),
            "cp.example:50000"
        );
        assert_eq!(
            default_endpoint("https://[fd00::1]:6443").unwrap(),
            "[fd00::1]:50000"
        );
        assert_eq!(
            default_endpoint("http://10.0.0.1:6443")
                .unwrap_err()
                .to_string(),
            "the cluster endpoint \"http://10.0.0.1:6443\" is not an https://host:port URL"
        );
    }
}
