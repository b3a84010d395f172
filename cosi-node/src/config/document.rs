//! Config text ↔ typed [`Config`]: splitting a multi-document stream into identified documents
//! ([`Documents`]), decoding them strictly, and encoding a config back to its canonical text.
//!
//! A document is the **main** one when it has `version` and no `kind`; otherwise it is a
//! **named** document identified by `apiVersion: v1alpha1`, `kind` and `name`
//! (`ServiceConfig/web`). Decoding rejects, with the path: text that is not UTF-8 or larger
//! than [`MAX_CONFIG_BYTES`], YAML errors, a document that is not a map, an unknown kind, a
//! second document with the same identity, unknown fields, values of the wrong shape, and a
//! config with no main document. Every document is decoded even after one fails, so the error
//! lists the first problem of each.

use serde::Serialize;

use super::error::{join_index, join_key, ConfigErrors, FieldError};
use super::schema::{Config, MainDocument, ServiceConfig};
use super::tree::{Map, Node};
use super::yaml;

/// The largest config (or patch) text accepted, in bytes.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// The `apiVersion` of named documents.
pub const API_VERSION: &str = "v1alpha1";

/// The `kind` of service documents.
pub const SERVICE_CONFIG_KIND: &str = "ServiceConfig";

/// The identity of one document.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum DocumentId {
    /// The `version: v1alpha1` document.
    Main,
    /// A document with a kind and a name.
    Named {
        /// `kind`, e.g. `ServiceConfig`.
        kind: String,
        /// `name`.
        name: String,
    },
}

impl DocumentId {
    /// The path prefix of this document's fields: empty for the main document,
    /// `ServiceConfig/web` for a named one.
    pub fn path(&self) -> String {
        match self {
            DocumentId::Main => String::new(),
            DocumentId::Named { kind, name } => format!("{kind}/{name}"),
        }
    }

    /// How messages name the document: `v1alpha1` or `ServiceConfig/web`.
    pub fn label(&self) -> String {
        match self {
            DocumentId::Main => API_VERSION.to_string(),
            named => named.path(),
        }
    }
}

/// The documents of a config or a patch, identified, in written order, identities unique.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Documents {
    /// Each document with its identity.
    pub items: Vec<(DocumentId, Node)>,
}

impl Documents {
    /// The document with identity `id`.
    pub fn get(&self, id: &DocumentId) -> Option<&Node> {
        self.items.iter().find(|(i, _)| i == id).map(|(_, n)| n)
    }
}

/// Checks the size and encoding of a config or patch text.
pub fn text_of<'b>(bytes: &'b [u8], subject: &str) -> Result<&'b str, ConfigErrors> {
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(ConfigErrors::one(
            subject,
            format!(
                "{} bytes is more than the {MAX_CONFIG_BYTES} bytes accepted",
                bytes.len()
            ),
        ));
    }
    std::str::from_utf8(bytes)
        .map_err(|e| ConfigErrors::one(subject, format!("not UTF-8 text: {e}")))
}

/// Reads the documents of config text and identifies them. `subject` prefixes positional
/// paths (`documents[1]`).
pub fn read(text: &str, subject: &str) -> Result<Documents, ConfigErrors> {
    read_with(text, subject, false)
}

/// Reads the documents of a strategic patch: like [`read`], except that a map without `kind`
/// is a patch of the main document even without `version`.
pub fn read_patch(text: &str, subject: &str) -> Result<Documents, ConfigErrors> {
    read_with(text, subject, true)
}

fn read_with(text: &str, subject: &str, patch: bool) -> Result<Documents, ConfigErrors> {
    let nodes = yaml::read_documents(text).map_err(|e| {
        ConfigErrors::one(
            join_index(subject, e.document),
            format!("not valid YAML: {}", e.message),
        )
    })?;
    let mut documents = Documents::default();
    let mut errors = Vec::new();
    for (index, node) in nodes.into_iter().enumerate() {
        let at = join_index(subject, index);
        match identify(&node, &at, patch) {
            Ok(id) => {
                if documents.get(&id).is_some() {
                    errors.push(FieldError::new(
                        at,
                        format!("duplicate document {}", id.label()),
                    ));
                } else {
                    documents.items.push((id, node));
                }
            }
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The identity of one document (`at` is its positional path, for errors).
pub(crate) fn identify(node: &Node, at: &str, patch: bool) -> Result<DocumentId, FieldError> {
    let Node::Map(map) = node else {
        return Err(FieldError::new(
            at,
            format!("a document must be a map, found {}", node.shape()),
        ));
    };
    let Some(kind) = map.get("kind") else {
        if patch || map.get("version").is_some() {
            return Ok(DocumentId::Main);
        }
        return Err(FieldError::new(
            at,
            "neither a main document (version: v1alpha1) nor a named document (apiVersion, kind, name)",
        ));
    };
    let Some(kind) = kind.as_str() else {
        return Err(FieldError::new(
            format!("{at}.kind"),
            format!("must be a string, found {}", kind.shape()),
        ));
    };
    if kind != SERVICE_CONFIG_KIND {
        return Err(FieldError::new(
            format!("{at}.kind"),
            format!("unknown document kind {kind:?} (known: {SERVICE_CONFIG_KIND})"),
        ));
    }
    match map.get("apiVersion").map(|v| v.as_str()) {
        Some(Some(API_VERSION)) => {}
        Some(_) => {
            return Err(FieldError::new(
                format!("{at}.apiVersion"),
                format!("must be {API_VERSION:?}"),
            ))
        }
        None => {
            return Err(FieldError::new(
                format!("{at}.apiVersion"),
                format!("required: a {kind} document needs apiVersion: {API_VERSION}"),
            ))
        }
    }
    match map.get("name").map(|v| v.as_str()) {
        Some(Some(name)) if !name.is_empty() => Ok(DocumentId::Named {
            kind: kind.to_string(),
            name: name.to_string(),
        }),
        Some(_) => Err(FieldError::new(
            format!("{at}.name"),
            "must be a non-empty string",
        )),
        None => Err(FieldError::new(
            format!("{at}.name"),
            format!("required: a {kind} document needs a name"),
        )),
    }
}

/// Decodes config text (strictly, without semantic validation).
pub fn decode(bytes: &[u8]) -> Result<Config, ConfigErrors> {
    let text = text_of(bytes, "config")?;
    let documents = read(text, "documents")?;
    to_config(&documents)
}

/// Decodes identified documents into a typed config.
pub fn to_config(documents: &Documents) -> Result<Config, ConfigErrors> {
    let mut errors = Vec::new();
    let mut main = None;
    let mut services = Vec::new();
    for (id, node) in &documents.items {
        match id {
            DocumentId::Main => match typed::<MainDocument>(node, "") {
                Ok(doc) => main = Some(doc),
                Err(e) => errors.push(e),
            },
            DocumentId::Named { .. } => {
                let mut body = node.as_map().cloned().unwrap_or_default();
                body.remove("apiVersion");
                body.remove("kind");
                match typed::<ServiceConfig>(&Node::Map(body), &id.path()) {
                    Ok(doc) => services.push(doc),
                    Err(e) => errors.push(e),
                }
            }
        }
    }
    if main.is_none()
        && !documents
            .items
            .iter()
            .any(|(id, _)| *id == DocumentId::Main)
    {
        errors.push(FieldError::new(
            "documents",
            "the config has no main document (version: v1alpha1)",
        ));
    }
    match main {
        Some(main) if errors.is_empty() => Ok(Config::new(main, services)),
        _ => Err(ConfigErrors(errors)),
    }
}

fn typed<T: serde::de::DeserializeOwned>(node: &Node, prefix: &str) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(node.to_json()).map_err(|e| {
        let mut path = prefix.to_string();
        for segment in e.path().iter() {
            use serde_path_to_error::Segment;
            path = match segment {
                Segment::Seq { index } => join_index(&path, *index),
                Segment::Map { key } | Segment::Enum { variant: key } => join_key(&path, key),
                Segment::Unknown => format!("{path}.?"),
            };
        }
        if path.is_empty() {
            path = "documents".to_string();
        }
        FieldError::new(path, e.into_inner().to_string())
    })
}

#[derive(Serialize)]
struct NamedOut<'a, T> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Serialize)]
#[serde(untagged)]
enum DocumentOut<'a> {
    Main(&'a MainDocument),
    Service(NamedOut<'a, ServiceConfig>),
}

/// The canonical text of a config: the main document, then each service document by name;
/// fields in schema order, defaults left out, no comments.
pub fn encode(config: &Config) -> String {
    let mut documents = vec![DocumentOut::Main(&config.main)];
    documents.extend(config.services().iter().map(|s| {
        DocumentOut::Service(NamedOut {
            api_version: API_VERSION,
            kind: SERVICE_CONFIG_KIND,
            body: s,
        })
    }));
    // Invariant: the schema holds only strings, numbers, booleans, lists and string-keyed
    // maps, all of which YAML can write.
    yaml::write_documents(&documents).expect("a typed config always writes as YAML")
}

/// The documents of a typed config (the base a patch applies to).
pub fn to_documents(config: &Config) -> Documents {
    let value = |v: serde_json::Result<serde_json::Value>| Node::from_json(&v.unwrap_or_default());
    let mut items = vec![(DocumentId::Main, value(serde_json::to_value(&config.main)))];
    for service in config.services() {
        let mut doc = Map::new();
        doc.insert("apiVersion".into(), Node::String(API_VERSION.into()));
        doc.insert("kind".into(), Node::String(SERVICE_CONFIG_KIND.into()));
        if let Node::Map(body) = value(serde_json::to_value(service)) {
            for (k, v) in body {
                doc.insert(k, v);
            }
        }
        items.push((
            DocumentId::Named {
                kind: SERVICE_CONFIG_KIND.into(),
                name: service.name.clone(),
            },
            Node::Map(doc),
        ));
    }
    Documents { items }
}
