//! What changed between two configs: a unified diff of their canonical texts (`similar`), the
//! changed field paths, and a one-line summary. Comments and layout never count: both sides
//! are compared in canonical encoding.

use similar::{ChangeTag, TextDiff};

use super::document::{self, DocumentId};
use super::error::{join_index, join_key};
use super::schema::Config;
use super::tree::Node;

/// The difference between an old config (maybe none) and a new one.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ConfigDiff {
    /// A unified diff (`--- a`, `+++ b`), empty when nothing changed.
    pub unified: String,
    /// Lines added.
    pub lines_added: usize,
    /// Lines removed.
    pub lines_removed: usize,
    /// Changed field paths, in document order: the deepest path where the two differ
    /// (`machine.nodeLabels.zone`), a list as a whole (`cluster.network.podSubnets`), a named
    /// document as a whole when it was added or removed (`ServiceConfig/web`).
    pub changed: Vec<String>,
}

impl ConfigDiff {
    /// Compares `old` (none: no config yet) with `new`.
    pub fn between(old: Option<&Config>, new: &Config) -> ConfigDiff {
        let old_text = old.map(document::encode).unwrap_or_default();
        let new_text = document::encode(new);
        let text = TextDiff::from_lines(&old_text, &new_text);
        let mut diff = ConfigDiff::default();
        for change in text.iter_all_changes() {
            match change.tag() {
                ChangeTag::Insert => diff.lines_added += 1,
                ChangeTag::Delete => diff.lines_removed += 1,
                ChangeTag::Equal => {}
            }
        }
        if diff.lines_added + diff.lines_removed > 0 {
            diff.unified = text.unified_diff().header("a", "b").to_string();
        }
        diff.changed = changed_paths(old, new);
        diff
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    /// One line: `+3 -1: machine.nodeLabels.zone, machine.kubelet.image`, or `no changes`.
    pub fn summary(&self) -> String {
        if self.is_empty() {
            return "no changes".to_string();
        }
        const SHOWN: usize = 5;
        let mut paths = self.changed[..self.changed.len().min(SHOWN)].join(", ");
        if self.changed.len() > SHOWN {
            paths.push_str(&format!(" and {} more", self.changed.len() - SHOWN));
        }
        format!("+{} -{}: {paths}", self.lines_added, self.lines_removed)
    }
}

fn changed_paths(old: Option<&Config>, new: &Config) -> Vec<String> {
    let new_docs = document::to_documents(new);
    let Some(old) = old else {
        return new_docs.items.iter().map(|(id, _)| id.label()).collect();
    };
    let old_docs = document::to_documents(old);
    let mut changed = Vec::new();
    for (id, new_node) in &new_docs.items {
        match old_docs.get(id) {
            None => changed.push(id.label()),
            Some(old_node) => {
                let root = match id {
                    DocumentId::Main => String::new(),
                    named => named.path(),
                };
                compare(old_node, new_node, &root, &mut changed);
            }
        }
    }
    for (id, _) in &old_docs.items {
        if new_docs.get(id).is_none() {
            changed.push(id.label());
        }
    }
    changed
}

fn compare(old: &Node, new: &Node, at: &str, changed: &mut Vec<String>) {
    match (old, new) {
        (Node::Map(old), Node::Map(new)) => {
            for (key, new_value) in new.iter() {
                let path = join_key(at, key);
                match old.get(key) {
                    Some(old_value) => compare(old_value, new_value, &path, changed),
                    None => changed.push(path),
                }
            }
            for (key, _) in old.iter() {
                if new.get(key).is_none() {
                    changed.push(join_key(at, key));
                }
            }
        }
        (Node::List(old_items), Node::List(new_items)) if old_items.len() == new_items.len() => {
            for (i, (o, n)) in old_items.iter().zip(new_items).enumerate() {
                compare(o, n, &join_index(at, i), changed);
            }
        }
        (old, new) if old == new => {}
        _ => changed.push(if at.is_empty() {
            "v1alpha1".into()
        } else {
            at.to_string()
        }),
    }
}
