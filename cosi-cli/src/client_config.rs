//! The client config file: named contexts, like talosconfig. A context names the cluster CA,
//! the client certificate and key (as files, or inline PEM), its endpoints and default nodes;
//! one context is current.
//!
//! ```yaml
//! context: demo
//! contexts:
//!   demo:
//!     endpoints: [127.0.0.1:50000]
//!     nodes: [127.0.0.1:50000, 127.0.0.1:50001]
//!     caFile: pki/ca.pem            # relative to the config file's folder
//!     crtFile: pki/admin.pem
//!     keyFile: pki/admin-key.pem
//!   demo-reader:
//!     endpoints: [127.0.0.1:50000]
//!     ca: |                         # or inline PEM
//!       -----BEGIN CERTIFICATE-----
//!       ...
//! ```
//!
//! Where it is: `--config PATH`, else `$COSICONFIG`, else `~/.cosi/config`. It is written
//! readable by its owner only (it may hold a private key), through a temporary file renamed
//! over the old one, so a failed write never leaves half a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cosi_api::client::ClientSecurity;
use cosi_api::pki::CertifiedKey;
use serde::{Deserialize, Serialize};

use crate::error::CliError;
use crate::files::{self, MAX_CLIENT_CONFIG, MAX_PEM};
use crate::terminal::escape_controls;
use crate::yaml;

/// The environment variable naming the client config file.
pub const CONFIG_ENV: &str = "COSICONFIG";

/// The file: contexts by name and the current one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientConfig {
    /// The current context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Every context, by name (a name given twice is an error, not a silent overwrite).
    #[serde(default, deserialize_with = "unique_contexts")]
    pub contexts: BTreeMap<String, Context>,
}

fn unique_contexts<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, Context>, D::Error> {
    struct Unique;
    impl<'de> serde::de::Visitor<'de> for Unique {
        type Value = BTreeMap<String, Context>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of context names to contexts")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut contexts = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                if contexts.contains_key(&name) {
                    return Err(serde::de::Error::custom(format!(
                        "context {name:?} is given twice"
                    )));
                }
                let context = map.next_value()?;
                contexts.insert(name, context);
            }
            Ok(contexts)
        }
    }
    deserializer.deserialize_map(Unique)
}

/// One cluster as one identity sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Context {
    /// Addresses to dial when no node is named (the first one is used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<String>,
    /// The nodes commands go to when `-n` names none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// The cluster CA, inline PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// The cluster CA, a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// The client certificate, inline PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crt: Option<String>,
    /// The client certificate, a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crt_file: Option<PathBuf>,
    /// The client key, inline PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The client key, a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

/// The PEM texts of a context.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// The cluster CA.
    pub ca_pem: String,
    /// The client certificate and key.
    pub identity: CertifiedKey,
    /// What the operator should fix about them (a private key others can read), to be shown
    /// as warnings; the credentials work all the same.
    pub warnings: Vec<String>,
}

impl Credentials {
    /// The mutual-TLS security of these credentials.
    pub fn security(&self) -> ClientSecurity {
        ClientSecurity::MutualTls {
            ca_pem: self.ca_pem.clone(),
            identity: self.identity.clone(),
        }
    }
}

/// Where the client config is: `explicit`, else `$COSICONFIG`, else `~/.cosi/config`.
pub fn config_path(explicit: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os(CONFIG_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".cosi").join("config")),
        None => Err(CliError::Usage(format!(
            "no client config: HOME is not set; name one with --config or ${CONFIG_ENV}"
        ))),
    }
}

impl ClientConfig {
    /// Reads the file (at most [`MAX_CLIENT_CONFIG`] bytes); a missing file is an error that
    /// says how to make one.
    pub fn load(path: &Path) -> Result<Self, CliError> {
        let text = match files::read_text(path, MAX_CLIENT_CONFIG, "a client config") {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CliError::Config {
                    path: path.to_path_buf(),
                    message: "does not exist: make one with `cosictl gen config --pki DIR` or \
                              `cosictl config add`, or name another with --config or \
                              $COSICONFIG"
                        .into(),
                })
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::FileTooLarge | std::io::ErrorKind::InvalidData
                ) =>
            {
                return Err(CliError::Config {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })
            }
            Err(e) => return Err(CliError::file(path, e)),
        };
        Self::parse(&text).map_err(|message| CliError::Config {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Reads the file, or an empty config when there is none.
    pub fn load_or_default(path: &Path) -> Result<Self, CliError> {
        if path.exists() {
            Self::load(path)
        } else {
            Ok(Self::default())
        }
    }

    /// Parses the text; the message names the offending field.
    ///
    /// ```
    /// use cosi_cli::client_config::ClientConfig;
    /// let config = ClientConfig::parse("context: demo\ncontexts: {demo: {endpoints: [10.0.0.1]}}").unwrap();
    /// let (name, context) = config.context(None).unwrap();
    /// assert_eq!((name, context.default_nodes()), ("demo", vec!["10.0.0.1".to_string()]));
    /// assert!(ClientConfig::parse("contexts: {demo: {endpoint: x}}").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, String> {
        yaml::from_str(text)
    }

    /// The config as YAML text.
    pub fn to_text(&self) -> String {
        // Strings, lists and maps of strings always serialize.
        yaml::to_string(self).unwrap_or_default()
    }

    /// Writes the file (owner-only), creating its folder.
    pub fn save(&self, path: &Path) -> Result<(), CliError> {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        std::fs::create_dir_all(dir).map_err(|e| CliError::file(dir, e))?;
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| CliError::file(dir, e))?;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| CliError::file(path, e))?;
        file.write_all(self.to_text().as_bytes())
            .and_then(|_| file.as_file().sync_all())
            .map_err(|e| CliError::file(path, e))?;
        file.persist(path)
            .map_err(|e| CliError::file(path, e.error))?;
        Ok(())
    }

    /// The context `name` (default: the current one), with its name.
    pub fn context(&self, name: Option<&str>) -> Result<(&str, &Context), String> {
        let name =
            match name.or(self.context.as_deref()) {
                Some(name) => name,
                None => return Err(
                    "has no current context: choose one with `cosictl config use-context NAME` \
                     or --context"
                        .into(),
                ),
            };
        self.contexts
            .get_key_value(name)
            .map(|(name, context)| (name.as_str(), context))
            .ok_or_else(|| {
                let known: Vec<&str> = self.contexts.keys().map(String::as_str).collect();
                format!(
                    "has no context {name:?} (contexts: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )
            })
    }
}

/// The context `context` (else the current one) of the client config at `path`, with its
/// name and credentials read.
pub fn open_context(
    path: &Path,
    context: Option<&str>,
) -> Result<(String, Context, Credentials), CliError> {
    let file = ClientConfig::load(path)?;
    let config_error = |message: String| CliError::Config {
        path: path.to_path_buf(),
        message,
    };
    let (name, context) = file.context(context).map_err(config_error)?;
    let base = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let mut credentials = context.credentials(name, &base).map_err(config_error)?;
    // The key is in its keyFile, or inline in the config file itself.
    let key = context
        .key_file
        .as_ref()
        .map_or_else(|| path.to_path_buf(), |file| base.join(file));
    if let Some(mode) = readable_by_others(&key) {
        let key = escape_controls(&key.to_string_lossy()).into_owned();
        credentials.warnings.push(format!(
            "the private key of context {name:?} can be read by others: {key} has mode {mode:o}; \
             make it its owner's alone: chmod 600 {key}"
        ));
    }
    Ok((name.to_string(), context.clone(), credentials))
}

/// The permission bits of `path` when its group or everyone may read it (helm warns of such a
/// kubeconfig; ssh refuses such a key).
fn readable_by_others(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o044 != 0).then_some(mode)
}

impl Context {
    /// The nodes a command goes to when `-n` names none: the context's nodes, else its first
    /// endpoint.
    pub fn default_nodes(&self) -> Vec<String> {
        if self.nodes.is_empty() {
            self.endpoints.iter().take(1).cloned().collect()
        } else {
            self.nodes.clone()
        }
    }

    /// Reads the PEM texts, inline or from files (relative to `base`, the config's folder; at
    /// most [`MAX_PEM`] bytes each).
    pub fn credentials(&self, name: &str, base: &Path) -> Result<Credentials, String> {
        let read =
            |field: &str, inline: &Option<String>, file: &Option<PathBuf>| match (inline, file) {
                (Some(pem), None) => Ok(pem.clone()),
                (None, Some(file)) => {
                    let path = base.join(file);
                    files::read_text(&path, MAX_PEM, "a PEM file").map_err(|e| {
                        format!("context {name:?}: {field}File {}: {e}", path.display())
                    })
                }
                (Some(_), Some(_)) => Err(format!(
                    "context {name:?}: give {field} or {field}File, not both"
                )),
                (None, None) => Err(format!(
                    "context {name:?}: {field} (or {field}File) is required"
                )),
            };
        Ok(Credentials {
            ca_pem: read("ca", &self.ca, &self.ca_file)?,
            identity: CertifiedKey {
                cert_pem: read("crt", &self.crt, &self.crt_file)?,
                key_pem: read("key", &self.key, &self.key_file)?,
            },
            warnings: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_rejected_with_their_name() {
        let err = ClientConfig::parse("contexts: {a: {endpoint: [x]}}").unwrap_err();
        assert!(err.contains("unknown field `endpoint`"), "{err}");
    }

    #[test]
    fn a_context_given_twice_is_rejected() {
        let err = ClientConfig::parse("contexts: {a: {}, a: {}}").unwrap_err();
        assert!(err.contains("context \"a\" is given twice"), "{err}");
    }

    #[test]
    fn default_nodes_are_the_nodes_else_the_first_endpoint() {
        let mut context = Context {
            endpoints: vec!["a".into(), "b".into()],
            ..Context::default()
        };
        assert_eq!(context.default_nodes(), ["a"]);
        context.nodes = vec!["c".into(), "d".into()];
        assert_eq!(context.default_nodes(), ["c", "d"]);
    }

    #[test]
    fn inline_and_file_for_one_credential_is_an_error() {
        let context = Context {
            ca: Some("pem".into()),
            ca_file: Some("ca.pem".into()),
            ..Context::default()
        };
        assert_eq!(
            context.credentials("demo", Path::new("/")).unwrap_err(),
            "context \"demo\": give ca or caFile, not both"
        );
    }

    #[test]
    fn a_missing_context_names_the_known_ones() {
        let config = ClientConfig::parse("context: x\ncontexts: {a: {}, b: {}}").unwrap();
        assert_eq!(
            config.context(None).unwrap_err(),
            "has no context \"x\" (contexts: a, b)"
        );
    }
}
