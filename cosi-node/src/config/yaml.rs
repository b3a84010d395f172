//! The only module of `cosi-node` that touches YAML (`serde_yaml`, the maintained
//! `serde_norway` fork): a stream of documents read into [`Node`] trees, and serde values
//! written back as a stream. A change of YAML library is a change of this file.
//!
//! Reading is bounded: the text is first held to the workspace's YAML limits
//! ([`cosi_core::yaml::check`]: size, nesting depth, and values with aliases expanded, so deep
//! nesting and a "billion laughs" are refused before anything is built), it may hold at most
//! [`MAX_DOCUMENTS`] documents, and an empty document (`---` alone, or only comments) is
//! skipped.

use serde::Serialize;

use super::tree::Node;

/// The most documents one text may hold.
pub const MAX_DOCUMENTS: usize = 256;

/// Why a YAML text could not be read.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct YamlError {
    /// Which document (0-based, counting empty ones) failed.
    pub document: usize,
    /// What the library said, with the line and column.
    pub message: String,
}

/// Reads every non-empty document of `text`.
pub fn read_documents(text: &str) -> Result<Vec<Node>, YamlError> {
    use serde::Deserialize;
    cosi_core::yaml::check(text).map_err(|e| YamlError {
        document: e.document,
        message: e.to_string(),
    })?;
    let mut documents = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        if index >= MAX_DOCUMENTS {
            return Err(YamlError {
                document: index,
                message: format!("more than {MAX_DOCUMENTS} documents"),
            });
        }
        match Node::deserialize(document) {
            Ok(Node::Null) => {}
            Ok(node) => documents.push(node),
            Err(e) => {
                return Err(YamlError {
                    document: index,
                    message: e.to_string(),
                })
            }
        }
    }
    Ok(documents)
}

/// Writes `documents` as one stream, `---` between documents.
pub fn write_documents<T: Serialize>(documents: &[T]) -> Result<String, String> {
    let mut text = String::new();
    for (index, document) in documents.iter().enumerate() {
        if index > 0 {
            text.push_str("---\n");
        }
        text.push_str(&serde_yaml::to_string(document).map_err(|e| e.to_string())?);
    }
    Ok(text)
}
