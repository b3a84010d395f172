//! Patches of a machine config: strategic-merge YAML and RFC 6902 JSON patches, told apart by
//! their content, applied in order to the config's documents.
//!
//! **Detection** ([`Patch::parse`]): text whose only document is a list is a JSON patch (a
//! list of operations, in JSON or YAML syntax); anything else is a strategic-merge patch (a
//! stream of documents; an empty text is an empty patch, which changes nothing).
//!
//! **Strategic merge**: each patch document is merged into the config document with the same
//! identity (the main document for a map without `kind`; `apiVersion`/`kind`/`name` for named
//! documents), and a patch document with no match is added. Within a document:
//! - maps merge per key, recursively; a scalar (or a value of another shape) replaces;
//! - lists append, except these, which the patch replaces: `cluster.network.podSubnets`,
//!   `cluster.network.serviceSubnets`, and a service's `args` and `healthCheck.exec` (a command
//!   line is one value);
//! - keyed lists merge item by item: `machine.network.interfaces` by `interface` (an item with
//!   a known `interface` merges into it, another is appended);
//! - `$patch: delete` removes: a key (`hostname: {$patch: delete}`), a map entry the same way,
//!   a list item selected by the item's first key other than `$patch`
//!   (`- {interface: eth0, $patch: delete}`), or a whole named document (a document holding
//!   its identity and `$patch: delete`; the main document cannot be deleted). Deleting what is
//!   not there is not an error.
//!
//! **JSON patches** work on one JSON object: the main document, plus the named documents under
//! the key `$docs`, by kind and name: `/machine/network/hostname` addresses the main document
//! as in a single-document config, `/$docs/ServiceConfig/web/args/0` a service document;
//! adding `/$docs/ServiceConfig/new` adds a document (its `apiVersion`, `kind` and `name` come
//! from the path when left out) and removing it deletes one. So JSON patches work on
//! multi-document configs too.
//!
//! A JSON patch is applied one operation at a time under the bounds a config text is read
//! under ([`MAX_OPERATIONS`] operations; values, nesting and string bytes as
//! [`cosi_core::yaml::Limits`] counts them): each operation's value is measured before it is
//! placed, so a few hundred `copy` operations cannot double the config into gigabytes, nor
//! `move`s nest it thousands of levels deep (which the recursive readers of the result would
//! not survive).
//!
//! The result is decoded strictly: a patch that makes the config ill-formed is rejected with
//! the offending field's path.

use std::collections::HashMap;

use json_patch::PatchOperation;

use super::document::{self, DocumentId, Documents, API_VERSION};
use super::error::{join_index, join_key, ConfigErrors, FieldError};
use super::schema::Config;
use super::tree::{Map, Node};
use super::yaml;

/// The key of `$patch` directives.
const DIRECTIVE: &str = "$patch";
/// The key under which JSON patches see the named documents.
pub const NAMED_DOCUMENTS_KEY: &str = "$docs";
/// The most operations one JSON patch may have.
pub const MAX_OPERATIONS: usize = 1024;
/// The deepest nesting JSON patches may leave in the combined document: a named document sits
/// three levels down (`/$docs/Kind/name`), and may be as deep as a text's documents.
const MAX_COMBINED_DEPTH: usize = cosi_core::yaml::MAX_DEPTH + 3;

/// One parsed patch.
#[derive(Clone, PartialEq, Debug)]
pub enum Patch {
    /// Strategic-merge documents.
    Strategic(Documents),
    /// RFC 6902 operations.
    Json(Vec<PatchOperation>),
}

impl Patch {
    /// Parses patch text, telling the kind from the content. `subject` names the patch in
    /// error paths (`patches[0]`).
    pub fn parse(bytes: &[u8], subject: &str) -> Result<Patch, ConfigErrors> {
        let text = document::text_of(bytes, subject)?;
        let nodes = yaml::read_documents(text).map_err(|e| {
            ConfigErrors::one(
                join_index(subject, e.document),
                format!("not valid YAML or JSON: {}", e.message),
            )
        })?;
        if let [Node::List(ops)] = nodes.as_slice() {
            let mut parsed = Vec::with_capacity(ops.len());
            let mut errors = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                match serde_json::from_value::<PatchOperation>(op.to_json()) {
                    Ok(op) => parsed.push(op),
                    Err(e) => errors.push(FieldError::new(
                        join_index(subject, i),
                        format!("not a JSON patch operation: {e}"),
                    )),
                }
            }
            return if errors.is_empty() {
                Ok(Patch::Json(parsed))
            } else {
                Err(ConfigErrors(errors))
            };
        }
        document::read_patch(text, subject).map(Patch::Strategic)
    }
}

/// Applies `patches` in order to `base` and decodes the result strictly.
///
/// ```
/// use cosi_node::config::document::decode;
/// use cosi_node::config::patch::{apply, Patch};
/// let base = decode(b"version: v1alpha1\nmachine:\n  nodeLabels: {a: '1'}\n").unwrap();
/// let strategic = Patch::parse(b"machine:\n  nodeLabels: {b: '2'}\n", "patches[0]").unwrap();
/// let json = Patch::parse(br#"[{"op": "remove", "path": "/machine/nodeLabels/a"}]"#, "patches[1]").unwrap();
/// let patched = apply(&base, &[strategic, json]).unwrap();
/// assert_eq!(patched.machine().node_labels.keys().collect::<Vec<_>>(), ["b"]);
/// ```
pub fn apply(base: &Config, patches: &[Patch]) -> Result<Config, ConfigErrors> {
    let mut documents = document::to_documents(base);
    for (index, patch) in patches.iter().enumerate() {
        let subject = join_index("patches", index);
        match patch {
            Patch::Strategic(patch) => merge_documents(&mut documents, patch)?,
            Patch::Json(ops) => documents = json_patch_documents(&documents, ops, &subject)?,
        }
    }
    document::to_config(&documents)
}

/// How a list at a path merges.
#[derive(Clone, Copy, PartialEq, Debug)]
enum ListRule {
    Append,
    Replace,
    Keyed(&'static str),
}

fn list_rule(id: &DocumentId, path: &[String]) -> ListRule {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    match (id, path.as_slice()) {
        (DocumentId::Main, ["cluster", "network", "podSubnets" | "serviceSubnets"]) => {
            ListRule::Replace
        }
        (DocumentId::Main, ["machine", "network", "interfaces"]) => ListRule::Keyed("interface"),
        (DocumentId::Named { .. }, ["args"] | ["healthCheck", "exec"]) => ListRule::Replace,
        _ => ListRule::Append,
    }
}

/// Merges every document of a strategic patch into `documents`.
pub(crate) fn merge_documents(
    documents: &mut Documents,
    patch: &Documents,
) -> Result<(), ConfigErrors> {
    let mut errors = Vec::new();
    for (id, node) in &patch.items {
        if let Err(e) = merge_document(documents, id, node) {
            errors.push(e);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(errors))
    }
}

fn merge_document(
    documents: &mut Documents,
    id: &DocumentId,
    node: &Node,
) -> Result<(), FieldError> {
    let at = id.path();
    let mut node = node.clone();
    if let Node::Map(map) = &mut node {
        if let Some(directive) = map.remove(DIRECTIVE) {
            check_delete(&directive, &document_path(id, &at))?;
            if *id == DocumentId::Main {
                return Err(FieldError::new(
                    document_path(id, &at),
                    "the main document cannot be deleted",
                ));
            }
            documents.items.retain(|(i, _)| i != id);
            return Ok(());
        }
    }
    match documents.items.iter_mut().find(|(i, _)| i == id) {
        Some((_, base)) => merge(base, node, id, &mut Vec::new()),
        None => {
            let added = strip(node, &document_path(id, &at))?;
            documents.items.push((id.clone(), added));
            Ok(())
        }
    }
}

fn document_path(id: &DocumentId, at: &str) -> String {
    match id {
        DocumentId::Main => "v1alpha1".to_string(),
        _ => at.to_string(),
    }
}

fn field_path(id: &DocumentId, path: &[String]) -> String {
    path.iter().fold(id.path(), |at, key| join_key(&at, key))
}

fn check_delete(directive: &Node, at: &str) -> Result<(), FieldError> {
    match directive.as_str() {
        Some("delete") => Ok(()),
        _ => Err(FieldError::new(
            join_key(at, DIRECTIVE),
            format!(
                "unsupported directive {}: only \"delete\" is known",
                serde_json::to_string(&directive.to_json()).unwrap_or_default()
            ),
        )),
    }
}

/// Whether `node` is a map holding `$patch` (checked to be `delete`).
fn delete_directive(node: &Node, at: &str) -> Result<bool, FieldError> {
    match node.as_map().and_then(|m| m.get(DIRECTIVE)) {
        Some(directive) => check_delete(directive, at).map(|()| true),
        None => Ok(false),
    }
}

fn merge(
    base: &mut Node,
    patch: Node,
    id: &DocumentId,
    path: &mut Vec<String>,
) -> Result<(), FieldError> {
    match (base, patch) {
        (Node::Map(base), Node::Map(patch)) => {
            for (key, value) in patch {
                path.push(key.clone());
                let at = field_path(id, path);
                if key == DIRECTIVE {
                    path.pop();
                    return Err(FieldError::new(
                        at,
                        "$patch: delete belongs in the map entry, list item or document to delete",
                    ));
                }
                if delete_directive(&value, &at)? {
                    if value.as_map().is_some_and(|m| m.len() > 1) {
                        path.pop();
                        return Err(FieldError::new(
                            at,
                            "a map entry to delete must hold only $patch: delete",
                        ));
                    }
                    base.remove(&key);
                } else {
                    match base.get_mut(&key) {
                        Some(existing) => merge(existing, value, id, path)?,
                        None => base.insert(key, strip(value, &at)?),
                    }
                }
                path.pop();
            }
            Ok(())
        }
        (Node::List(base), Node::List(patch)) => merge_list(base, patch, id, path),
        (base, patch) => {
            *base = strip(patch, &field_path(id, path))?;
            Ok(())
        }
    }
}

fn merge_list(
    base: &mut Vec<Node>,
    patch: Vec<Node>,
    id: &DocumentId,
    path: &mut Vec<String>,
) -> Result<(), FieldError> {
    let at = field_path(id, path);
    let rule = list_rule(id, path);
    if rule == ListRule::Replace {
        let mut replaced = Vec::with_capacity(patch.len());
        for (i, item) in patch.into_iter().enumerate() {
            replaced.push(strip(item, &join_index(&at, i))?);
        }
        *base = replaced;
        return Ok(());
    }
    // Items are worked on in place, a deleted one leaving a hole, so that positions stay valid
    // for the lookup; the holes close at the end.
    let mut items: Vec<Option<Node>> = std::mem::take(base).into_iter().map(Some).collect();
    let mut lookup = ItemLookup::default();
    for (i, item) in patch.into_iter().enumerate() {
        let item_at = join_index(&at, i);
        if delete_directive(&item, &item_at)? {
            let (key, value) = selector(&item, &item_at)?;
            for position in lookup.take(&items, &key, &value) {
                items[position] = None;
            }
            continue;
        }
        if let ListRule::Keyed(key) = rule {
            let wanted = item.as_map().and_then(|m| m.get(key)).cloned();
            if let Some(position) = wanted.and_then(|wanted| lookup.first(&items, key, &wanted)) {
                let before = lookup.values_of(&items, position);
                if let Some(existing) = items[position].as_mut() {
                    merge(existing, item, id, path)?;
                }
                lookup.moved(&items, position, before);
                continue;
            }
        }
        items.push(Some(strip(item, &item_at)?));
        lookup.added(&items, items.len() - 1);
    }
    *base = items.into_iter().flatten().collect();
    Ok(())
}

/// Where the items of a list are, by the value they hold under a key: a keyed merge or a
/// `$patch: delete` finds its items without a scan, so a long patch of a long list stays
/// linear. A key's index is built when first asked for and kept current through every change.
#[derive(Default)]
struct ItemLookup {
    /// Key → the exact text of a value ([`value_key`]) → positions of the items holding it
    /// under that key, in list order. A position may be a hole (a deleted item).
    by_key: HashMap<String, HashMap<String, Vec<usize>>>,
}

/// An exact text of a value: equal texts for equal values only.
fn value_key(value: &Node) -> String {
    format!("{value:?}")
}

impl ItemLookup {
    fn index(&mut self, items: &[Option<Node>], key: &str) -> &mut HashMap<String, Vec<usize>> {
        self.by_key.entry(key.to_string()).or_insert_with(|| {
            let mut index: HashMap<String, Vec<usize>> = HashMap::new();
            for (position, item) in items.iter().enumerate() {
                if let Some(value) = item.as_ref().and_then(|i| i.as_map()?.get(key)) {
                    index.entry(value_key(value)).or_default().push(position);
                }
            }
            index
        })
    }

    /// The first item holding `value` under `key`.
    fn first(&mut self, items: &[Option<Node>], key: &str, value: &Node) -> Option<usize> {
        let positions = self.index(items, key).get(&value_key(value))?;
        positions.iter().copied().find(|&p| items[p].is_some())
    }

    /// Every item holding `value` under `key`, forgotten under that key (the caller deletes
    /// them; other keys skip the holes).
    fn take(&mut self, items: &[Option<Node>], key: &str, value: &Node) -> Vec<usize> {
        let positions = self.index(items, key).remove(&value_key(value));
        positions
            .unwrap_or_default()
            .into_iter()
            .filter(|&p| items[p].is_some())
            .collect()
    }

    /// The values the item at `position` holds under every indexed key.
    fn values_of(&self, items: &[Option<Node>], position: usize) -> Vec<(String, Option<String>)> {
        let map = items[position].as_ref().and_then(Node::as_map);
        self.by_key
            .keys()
            .map(|key| (key.clone(), map.and_then(|m| m.get(key)).map(value_key)))
            .collect()
    }

    /// The item at `position` changed (it was merged into): file it under its new values.
    fn moved(
        &mut self,
        items: &[Option<Node>],
        position: usize,
        before: Vec<(String, Option<String>)>,
    ) {
        let after = self.values_of(items, position);
        for ((key, old), (_, new)) in before.into_iter().zip(after) {
            if old == new {
                continue;
            }
            let Some(index) = self.by_key.get_mut(&key) else {
                continue;
            };
            if let Some(positions) = old.and_then(|old| index.get_mut(&old)) {
                positions.retain(|&p| p != position);
            }
            if let Some(new) = new {
                let positions = index.entry(new).or_default();
                let at = positions.partition_point(|&p| p < position);
                positions.insert(at, position);
            }
        }
    }

    /// An item was appended at `position`.
    fn added(&mut self, items: &[Option<Node>], position: usize) {
        let Some(map) = items[position].as_ref().and_then(Node::as_map) else {
            return;
        };
        for (key, index) in &mut self.by_key {
            if let Some(value) = map.get(key) {
                index.entry(value_key(value)).or_default().push(position);
            }
        }
    }
}

/// The `key: value` a `$patch: delete` list item selects by: its first other entry.
fn selector(item: &Node, at: &str) -> Result<(String, Node), FieldError> {
    item.as_map()
        .and_then(|m| m.iter().find(|(k, _)| *k != DIRECTIVE))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .ok_or_else(|| {
            FieldError::new(
                at,
                "a list item to delete needs a key: value that selects it besides $patch",
            )
        })
}

/// Content added by a patch, with directives removed: deleting inside something new deletes
/// nothing; any other directive is an error.
fn strip(node: Node, at: &str) -> Result<Node, FieldError> {
    match node {
        Node::Map(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                let value_at = join_key(at, &key);
                if key == DIRECTIVE {
                    check_delete(&value, at)?;
                    continue;
                }
                if delete_directive(&value, &value_at)? {
                    continue;
                }
                out.insert(key, strip(value, &value_at)?);
            }
            Ok(Node::Map(out))
        }
        Node::List(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let item_at = join_index(at, i);
                if !delete_directive(&item, &item_at)? {
                    out.push(strip(item, &item_at)?);
                }
            }
            Ok(Node::List(out))
        }
        other => Ok(other),
    }
}

/// The one JSON object JSON patches see: the main document plus `$docs`.
pub(crate) fn combined_json(documents: &Documents) -> serde_json::Value {
    let mut main = documents
        .get(&DocumentId::Main)
        .map(Node::to_json)
        .unwrap_or_else(|| serde_json::Value::Object(Default::default()));
    let mut named = serde_json::Map::new();
    for (id, node) in &documents.items {
        if let DocumentId::Named { kind, name } = id {
            let by_name = named
                .entry(kind.clone())
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
            if let serde_json::Value::Object(by_name) = by_name {
                by_name.insert(name.clone(), node.to_json());
            }
        }
    }
    if let serde_json::Value::Object(main) = &mut main {
        main.insert(NAMED_DOCUMENTS_KEY.into(), serde_json::Value::Object(named));
    }
    main
}

fn json_patch_documents(
    documents: &Documents,
    ops: &[PatchOperation],
    subject: &str,
) -> Result<Documents, ConfigErrors> {
    if ops.len() > MAX_OPERATIONS {
        return Err(ConfigErrors::one(
            subject,
            format!(
                "{} operations are more than the {MAX_OPERATIONS} a JSON patch may have",
                ops.len()
            ),
        ));
    }
    let mut combined = combined_json(documents);
    let mut budget = PatchBudget::new(&combined);
    for (index, op) in ops.iter().enumerate() {
        budget
            .admit(&combined, op)
            .map_err(|message| ConfigErrors::one(join_index(subject, index), message))?;
        // Without undo: on an error the whole document is dropped. (The library's undo of
        // earlier operations after a failed `move` can itself fail, and panics when it does.)
        json_patch::patch_unsafe(&mut combined, std::slice::from_ref(op)).map_err(|e| {
            ConfigErrors::one(
                join_index(subject, index),
                format!(
                    "{} at {:?} failed: {}",
                    op_name(op),
                    e.path.as_str(),
                    e.kind
                ),
            )
        })?;
    }
    split_combined(combined, subject)
}

/// What a JSON patch may still add to the combined document: its values and string bytes
/// (counted as placed; what operations remove is not given back), and an upper bound of its
/// depth.
struct PatchBudget {
    nodes: usize,
    bytes: usize,
    depth_bound: usize,
}

/// The values, nesting depth (a scalar 0, a collection one more than its deepest item) and
/// string bytes (keys and values) of `value`, counted without recursion.
fn measure(value: &serde_json::Value) -> (usize, usize, usize) {
    let (mut nodes, mut depth, mut bytes) = (0, 0, 0);
    let mut stack = vec![(value, 0)];
    while let Some((value, level)) = stack.pop() {
        nodes += 1;
        match value {
            serde_json::Value::Array(items) => {
                depth = depth.max(level + 1);
                stack.extend(items.iter().map(|item| (item, level + 1)));
            }
            serde_json::Value::Object(map) => {
                depth = depth.max(level + 1);
                for (key, item) in map {
                    nodes += 1;
                    bytes += key.len();
                    stack.push((item, level + 1));
                }
            }
            serde_json::Value::String(text) => {
                depth = depth.max(level);
                bytes += text.len();
            }
            _ => depth = depth.max(level),
        }
    }
    (nodes, depth, bytes)
}

impl PatchBudget {
    fn new(combined: &serde_json::Value) -> Self {
        let (nodes, depth_bound, bytes) = measure(combined);
        PatchBudget {
            nodes,
            bytes,
            depth_bound,
        }
    }

    /// Whether `op` may be applied to `combined`: the error says which bound it passes.
    fn admit(&mut self, combined: &serde_json::Value, op: &PatchOperation) -> Result<(), String> {
        let (placed, at) = match op {
            PatchOperation::Add(op) => (Some(&op.value), op.path.count()),
            PatchOperation::Replace(op) => (Some(&op.value), op.path.count()),
            // A missing source: the operation itself fails, with the library's message.
            PatchOperation::Copy(op) => match combined.pointer(op.from.as_str()) {
                Some(value) => (Some(value), op.path.count()),
                None => return Ok(()),
            },
            PatchOperation::Move(op) => {
                let (from, to) = (op.from.count(), op.path.count());
                // The moved value was at most `depth_bound - from` deep: measure it only when
                // that bound no longer proves the move harmless.
                let bound = self.depth_bound + to.saturating_sub(from);
                if bound <= MAX_COMBINED_DEPTH {
                    self.depth_bound = bound;
                    return Ok(());
                }
                match combined.pointer(op.from.as_str()) {
                    Some(value) => {
                        let (_, depth, _) = measure(value);
                        self.deepen(to + depth)?;
                    }
                    None => return Ok(()),
                }
                return Ok(());
            }
            PatchOperation::Remove(_) | PatchOperation::Test(_) => return Ok(()),
        };
        let Some(value) = placed else { return Ok(()) };
        let (nodes, depth, bytes) = measure(value);
        self.deepen(at + depth)?;
        self.nodes += nodes;
        if self.nodes > cosi_core::yaml::MAX_NODES {
            return Err(format!(
                "the patched config would hold more than {} values",
                cosi_core::yaml::MAX_NODES
            ));
        }
        self.bytes += bytes;
        if self.bytes > cosi_core::yaml::MAX_SCALAR_BYTES {
            return Err(format!(
                "the patched config would hold more than {} bytes of strings",
                cosi_core::yaml::MAX_SCALAR_BYTES
            ));
        }
        Ok(())
    }

    fn deepen(&mut self, depth: usize) -> Result<(), String> {
        if depth > MAX_COMBINED_DEPTH {
            return Err(format!(
                "the patched config would be nested more than {} levels deep",
                cosi_core::yaml::MAX_DEPTH
            ));
        }
        self.depth_bound = self.depth_bound.max(depth);
        Ok(())
    }
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

fn split_combined(combined: serde_json::Value, subject: &str) -> Result<Documents, ConfigErrors> {
    let serde_json::Value::Object(mut main) = combined else {
        return Err(ConfigErrors::one(
            subject,
            "the patched config is not a map: the main document was replaced",
        ));
    };
    let named = main.remove(NAMED_DOCUMENTS_KEY);
    let mut documents = Documents {
        items: vec![(
            DocumentId::Main,
            Node::from_json(&serde_json::Value::Object(main)),
        )],
    };
    let mut errors = Vec::new();
    let named = match named {
        None => serde_json::Map::new(),
        Some(serde_json::Value::Object(named)) => named,
        Some(_) => {
            return Err(ConfigErrors::one(
                format!("{subject}: /{NAMED_DOCUMENTS_KEY}"),
                "must be a map of kinds to maps of names to documents",
            ))
        }
    };
    for (kind, by_name) in named {
        let serde_json::Value::Object(by_name) = by_name else {
            errors.push(FieldError::new(
                format!("/{NAMED_DOCUMENTS_KEY}/{kind}"),
                "must be a map of names to documents",
            ));
            continue;
        };
        for (name, doc) in by_name {
            let at = format!("/{NAMED_DOCUMENTS_KEY}/{kind}/{name}");
            let mut node = Node::from_json(&doc);
            if let Node::Map(map) = &mut node {
                for (key, value) in [
                    ("apiVersion", API_VERSION),
                    ("kind", &kind),
                    ("name", &name),
                ] {
                    if map.get(key).is_none() {
                        map.insert(key.into(), Node::String(value.to_string()));
                    }
                }
                if map.get("name").and_then(Node::as_str) != Some(name.as_str())
                    || map.get("kind").and_then(Node::as_str) != Some(kind.as_str())
                {
                    errors.push(FieldError::new(
                        &at,
                        "the document's kind and name must match its place under $docs",
                    ));
                    continue;
                }
            }
            match document::identify(&node, &at, false) {
                Ok(id) => documents.items.push((id, node)),
                Err(e) => errors.push(e),
            }
        }
    }
    if errors.is_empty() {
        Ok(documents)
    } else {
        Err(ConfigErrors(errors))
    }
}
