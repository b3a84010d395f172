//! [`Node`]: one config document as an ordered tree of plain values, the form patches work on.
//!
//! Maps keep the order they were written in (a `$patch: delete` list item is selected by its
//! *first* key), and reading one is strict: a repeated key or a float JSON cannot hold is an
//! error, never a silent overwrite. This module knows no text format: the config's one YAML
//! module reads and writes the text.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value in a config document.
#[derive(Clone, PartialEq, Debug)]
pub enum Node {
    /// `null` (also an empty YAML value).
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A finite number.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// A list.
    List(Vec<Node>),
    /// A map with string keys, in written order.
    Map(Map),
}

/// A map with string keys that keeps its order. Keys are unique (reading enforces it, and
/// [`Map::insert`] replaces in place). Two maps are equal when they hold the same entries in
/// the same order.
///
/// Lookups take constant time: a config or patch from outside may hold a map with a hundred
/// thousand keys, and reading or merging it must stay linear.
#[derive(Clone, Debug, Default)]
pub struct Map {
    entries: indexmap::IndexMap<String, Node>,
}

impl PartialEq for Map {
    fn eq(&self, other: &Self) -> bool {
        self.entries.len() == other.entries.len() && self.entries.iter().eq(other.entries.iter())
    }
}

impl Map {
    /// An empty map.
    pub fn new() -> Self {
        Map::default()
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entries.get(key)
    }

    /// The value under `key`, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        self.entries.get_mut(key)
    }

    /// Sets `key` (in place when present, at the end otherwise).
    pub fn insert(&mut self, key: String, value: Node) {
        self.entries.insert(key, value);
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Node> {
        self.entries.shift_remove(key)
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

impl IntoIterator for Map {
    type Item = (String, Node);
    type IntoIter = indexmap::map::IntoIter<String, Node>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl Node {
    /// The map, if this is one.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Node::Map(map) => Some(map),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    /// A short name of the value's shape, for messages.
    pub fn shape(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Number(_) => "a number",
            Node::String(_) => "a string",
            Node::List(_) => "a list",
            Node::Map(_) => "a map",
        }
    }

    /// The same value as JSON (map order becomes JSON's key order).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Node::Null => serde_json::Value::Null,
            Node::Bool(b) => serde_json::Value::Bool(*b),
            Node::Number(n) => serde_json::Value::Number(n.clone()),
            Node::String(s) => serde_json::Value::String(s.clone()),
            Node::List(items) => items.iter().map(Node::to_json).collect(),
            Node::Map(map) => serde_json::Value::Object(
                map.iter()
                    .map(|(k, v)| (k.to_string(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// The value of a JSON tree.
    pub fn from_json(value: &serde_json::Value) -> Node {
        match value {
            serde_json::Value::Null => Node::Null,
            serde_json::Value::Bool(b) => Node::Bool(*b),
            serde_json::Value::Number(n) => Node::Number(n.clone()),
            serde_json::Value::String(s) => Node::String(s.clone()),
            serde_json::Value::Array(items) => {
                Node::List(items.iter().map(Node::from_json).collect())
            }
            serde_json::Value::Object(map) => Node::Map(Map {
                entries: map
                    .iter()
                    .map(|(k, v)| (k.clone(), Node::from_json(v)))
                    .collect(),
            }),
        }
    }
}

impl Serialize for Node {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Node::Null => serializer.serialize_unit(),
            Node::Bool(b) => serializer.serialize_bool(*b),
            Node::Number(n) => n.serialize(serializer),
            Node::String(s) => serializer.serialize_str(s),
            Node::List(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Map(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (k, v) in map.iter() {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a null, boolean, number, string, list or map with string keys")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        serde_json::Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a finite number")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Node, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.get(&key).is_some() {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            let value = access.next_value()?;
            map.entries.insert(key, value);
        }
        Ok(Node::Map(map))
    }
}
