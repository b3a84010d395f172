//! YAML from outside, bounded: the one check every YAML entry point of the workspace runs
//! before it decodes text that a remote caller, a file or a patch supplied, and this crate's
//! only use of the YAML library (`serde_yaml`, the maintained `serde_norway` fork).
//!
//! The library has no limits of its own that hold up against hostile text: its scanner spends
//! time proportional to the flow nesting depth on every token (a 100 KB `[[[[…` takes seconds),
//! it loads a whole document before decoding any of it, and it expands aliases, so a few lines
//! of anchors stand for billions of values. [`Limits::check`] refuses such text first, in time
//! linear in its length and bounded by the limits, never by what the text asks for:
//!
//! 1. **Size**: longer than [`Limits::max_bytes`] is refused before anything is read.
//! 2. **Nesting, as written**: one pass that follows the library's scanner finds every `[`/`{`
//!    it would open and every block list or map indented deeper; nesting deeper than
//!    [`Limits::max_depth`] is refused at that character, before the library sees the text.
//! 3. **Nesting and values**: one walk of what the library reads, document by document, counts
//!    every value the way a decoder would meet it — an alias counts as everything it stands
//!    for — and stops at [`Limits::max_depth`] levels, [`Limits::max_nodes`] values or
//!    [`Limits::max_scalar_bytes`] bytes of strings.
//!
//! Text the library cannot read at all passes the check: decoding it then fails on the same
//! syntax error, at the same place, no later than the check would have.
//!
//! ```
//! use cosi_core::yaml::{self, Limits};
//! assert!(yaml::check("metadata: {id: a}\nspec: [1, 2, {x: y}]\n").is_ok());
//!
//! let deep = "[".repeat(100_000);
//! let err = yaml::check(&deep).unwrap_err();
//! assert_eq!(err.to_string(), "line 1 column 65: more than 64 levels of nesting");
//!
//! let laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n\
//!               b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
//!               c: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n";
//! let small = Limits { max_nodes: 500, ..Limits::default() };
//! let err = small.check(laughs).unwrap_err();
//! assert_eq!(err.message, "more than 500 values once aliases are expanded (an alias counts \
//!     as all it stands for), reached at c[3][3][5]");
//! ```

mod scanner;

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};
use serde::Serialize;

/// The bounds [`Limits::check`] holds YAML text to. The [default](Limits::default) fits any
/// machine config or resource: [`MAX_BYTES`], [`MAX_DEPTH`], [`MAX_NODES`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Limits {
    /// The longest text, in bytes.
    pub max_bytes: usize,
    /// The deepest nesting of lists and maps (a scalar at the top is depth 0, a list of
    /// scalars depth 1).
    pub max_depth: usize,
    /// The most values (scalars, lists, maps; a map entry is its key and its value) in the
    /// whole text, with every alias counted as all the values it stands for.
    pub max_nodes: usize,
    /// The most bytes of strings (keys and values) in the whole text, with every alias
    /// counted as all it stands for: a few aliases of one long string stand for gigabytes.
    pub max_scalar_bytes: usize,
}

/// The default longest text: 1 MiB, the size of the largest machine config a node accepts.
pub const MAX_BYTES: usize = 1 << 20;
/// The default deepest nesting: 64 levels, several times what any config or spec needs.
pub const MAX_DEPTH: usize = 64;
/// The default most values: 1 Mi, more than a text of [`MAX_BYTES`] can hold without
/// aliases (a value takes at least two bytes), so only alias expansion ever reaches it.
pub const MAX_NODES: usize = 1 << 20;
/// The default most bytes of strings: 4 MiB, four times [`MAX_BYTES`], so only alias
/// expansion reaches it (a text's strings are no longer than the text).
pub const MAX_SCALAR_BYTES: usize = 4 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: MAX_BYTES,
            max_depth: MAX_DEPTH,
            max_nodes: MAX_NODES,
            max_scalar_bytes: MAX_SCALAR_BYTES,
        }
    }
}

/// A place in a YAML text, counted from 1.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Location {
    /// The line.
    pub line: usize,
    /// The column, in characters.
    pub column: usize,
}

/// Why [`Limits::check`] refused a text.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LimitError {
    /// The document (counted from 0) in which the limit was crossed; 0 for the size of the
    /// whole text.
    pub document: usize,
    /// Where the limit was crossed; `None` for the size of the whole text.
    pub location: Option<Location>,
    /// Which limit, in words.
    pub message: String,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.location {
            Some(at) => write!(f, "line {} column {}: {}", at.line, at.column, self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for LimitError {}

/// Checks `text` against the [default limits](Limits::default).
///
/// ```
/// let text = "x".repeat(cosi_core::yaml::MAX_BYTES + 1);
/// let err = cosi_core::yaml::check(&text).unwrap_err();
/// assert_eq!(err.to_string(), "the YAML text is 1048577 bytes, more than the 1048576 accepted");
/// ```
pub fn check(text: &str) -> Result<(), LimitError> {
    Limits::default().check(text)
}

impl Limits {
    /// Refuses `text` if it is longer, deeper or (with aliases expanded) larger than these
    /// limits; see the [module docs](self) for how. Text that is not valid YAML passes: its
    /// decoder reports the syntax error.
    ///
    /// ```
    /// use cosi_core::yaml::Limits;
    /// let shallow = Limits { max_depth: 2, ..Limits::default() };
    /// assert!(shallow.check("a: {b: 1}").is_ok());
    /// let err = shallow.check("a:\n  b:\n    c: [1]\n").unwrap_err();
    /// assert_eq!(err.to_string(), "line 3 column 5: more than 2 levels of nesting");
    /// ```
    pub fn check(&self, text: &str) -> Result<(), LimitError> {
        self.scan(text).map(drop)
    }

    /// The check, and the first document the library cannot read at all (if any), with where
    /// and why.
    fn scan(&self, text: &str) -> Result<Option<Unreadable>, LimitError> {
        if text.len() > self.max_bytes {
            return Err(LimitError {
                document: 0,
                location: None,
                message: format!(
                    "the YAML text is {} bytes, more than the {} accepted",
                    text.len(),
                    self.max_bytes
                ),
            });
        }
        self.check_written_nesting(text)?;
        self.walk_values(text)
    }

    fn too_deep(&self) -> String {
        format!("more than {} levels of nesting", self.max_depth)
    }

    fn check_written_nesting(&self, text: &str) -> Result<(), LimitError> {
        let mut exceeded = None;
        scanner::scan(text, |change| {
            if change.level + change.blocks <= self.max_depth {
                return true;
            }
            exceeded = Some(LimitError {
                document: change.document,
                location: Some(Location {
                    line: change.line + 1,
                    column: change.column + 1,
                }),
                message: self.too_deep(),
            });
            false
        });
        exceeded.map_or(Ok(()), Err)
    }

    fn walk_values(&self, text: &str) -> Result<Option<Unreadable>, LimitError> {
        let budget = Budget {
            limits: *self,
            nodes_left: Cell::new(self.max_nodes),
            scalar_bytes_left: Cell::new(self.max_scalar_bytes),
            exceeded: Cell::new(None),
        };
        // The library goes on yielding documents after an error: stop at the first.
        for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let walk = Walk {
                budget: &budget,
                depth: 0,
            };
            if let Err(error) = walk.deserialize(document) {
                let location = error.location().map(|at| Location {
                    line: at.line(),
                    column: at.column(),
                });
                return match budget.exceeded.take() {
                    Some(Exceeded::Depth(message)) => Err(LimitError {
                        document: index,
                        location,
                        message,
                    }),
                    Some(Exceeded::Nodes(message)) => Err(LimitError {
                        document: index,
                        location,
                        message: with_path(message, &error.to_string()),
                    }),
                    // The library's own bound on aliases: a limit, not a syntax error.
                    None if error.to_string() == REPETITION_LIMIT => Err(LimitError {
                        document: index,
                        location,
                        message: "aliases are expanded more than 100 times as often as the \
                                  document has values (the YAML library's limit)"
                            .into(),
                    }),
                    None => Ok(Some(Unreadable {
                        document: index,
                        location,
                        message: error.to_string(),
                    })),
                };
            }
        }
        Ok(None)
    }
}

/// `message` with the path the library put in front of it in `full` (`b[1][2]: message at
/// line…`): inside an alias the location is the aliased value's, the path says where the walk
/// was.
fn with_path(message: String, full: &str) -> String {
    match full.split_once(&format!(": {message}")) {
        Some((path, _)) if !path.is_empty() => {
            format!("{message}, reached at {}", crate::text::clipped(path))
        }
        _ => message,
    }
}

/// A document the library cannot read as any value: a syntax error, an unknown alias.
struct Unreadable {
    document: usize,
    location: Option<Location>,
    message: String,
}

/// The library's message when aliases are expanded more than 100 times per event of the
/// document.
const REPETITION_LIMIT: &str = "repetition limit exceeded";

/// What the walk of one text may still spend.
struct Budget {
    limits: Limits,
    nodes_left: Cell<usize>,
    scalar_bytes_left: Cell<usize>,
    /// Set when a limit stops the walk (the library's error then carries the location).
    exceeded: Cell<Option<Exceeded>>,
}

/// Which limit stopped the walk, in words.
enum Exceeded {
    Depth(String),
    Nodes(String),
}

/// Visits one value and everything in it, counting against the budget.
#[derive(Clone, Copy)]
struct Walk<'b> {
    budget: &'b Budget,
    depth: usize,
}

impl Walk<'_> {
    fn count<E: de::Error>(self) -> Result<(), E> {
        let left = self.budget.nodes_left.get();
        if left == 0 {
            return Err(self.stop(Exceeded::Nodes(format!(
                "more than {} values once aliases are expanded (an alias counts as all it \
                 stands for)",
                self.budget.limits.max_nodes
            ))));
        }
        self.budget.nodes_left.set(left - 1);
        Ok(())
    }

    /// Counts a string of `bytes` bytes: one value, and its text.
    fn count_text<E: de::Error>(self, bytes: usize) -> Result<(), E> {
        self.count()?;
        let left = self.budget.scalar_bytes_left.get();
        if bytes > left {
            return Err(self.stop(Exceeded::Nodes(format!(
                "more than {} bytes of strings once aliases are expanded (an alias counts as \
                 all it stands for)",
                self.budget.limits.max_scalar_bytes
            ))));
        }
        self.budget.scalar_bytes_left.set(left - bytes);
        Ok(())
    }

    /// The walk one level down, or the error if that is too deep.
    fn nested<E: de::Error>(self) -> Result<Self, E> {
        self.count()?;
        if self.depth >= self.budget.limits.max_depth {
            return Err(self.stop(Exceeded::Depth(self.budget.limits.too_deep())));
        }
        Ok(Walk {
            depth: self.depth + 1,
            ..self
        })
    }

    fn stop<E: de::Error>(self, exceeded: Exceeded) -> E {
        let (Exceeded::Depth(message) | Exceeded::Nodes(message)) = &exceeded;
        let error = E::custom(message);
        self.budget.exceeded.set(Some(exceeded));
        error
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.count()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.count()
    }
    fn visit_i128<E: de::Error>(self, _: i128) -> Result<(), E> {
        self.count()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.count()
    }
    fn visit_u128<E: de::Error>(self, _: u128) -> Result<(), E> {
        self.count()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.count()
    }
    fn visit_str<E: de::Error>(self, text: &str) -> Result<(), E> {
        self.count_text(text.len())
    }
    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<(), E> {
        self.count_text(bytes.len())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.count()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.count()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_newtype_struct<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.nested()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.nested()?;
        while map.next_key_seed(inner)?.is_some() {
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
    /// A value with a custom tag (`!thing value`): the tag names a variant, the value follows.
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use de::VariantAccess;
        self.count()?;
        let (de::IgnoredAny, variant) = data.variant()?;
        variant.newtype_variant_seed(self)
    }
}

/// Why [`read_documents`] stopped.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum ReadError {
    /// The text is over a limit.
    Limit(LimitError),
    /// Document `document` (counted from 0) is not readable YAML at all (a syntax error, an
    /// unknown alias), whatever it was to be decoded into.
    Unreadable {
        document: usize,
        location: Option<Location>,
        message: String,
    },
    /// Document `document` is YAML but not the value wanted.
    Value {
        document: usize,
        /// The path of the offending value as `serde_path_to_error` writes it (`.` for the
        /// root, with a `?` where it could not name a step).
        path: String,
        location: Option<Location>,
        /// The library's message, without its own path prefix.
        message: String,
    },
}

/// Decodes the documents of `text` in turn, after checking it against `limits`, handing each
/// (`None` for an empty document) with its index to `each`. The first error ends it: a limit
/// or an unreadable document (reported by position, before anything of that document is
/// decoded), a document that does not decode, or an error `each` returns.
pub(crate) fn read_documents<T, E>(
    text: &str,
    limits: &Limits,
    mut each: impl FnMut(usize, Result<Option<T>, ReadError>) -> Result<(), E>,
) -> Result<(), E>
where
    T: de::DeserializeOwned,
{
    let unreadable = match limits.scan(text) {
        Ok(unreadable) => unreadable,
        Err(limit) => return each(limit.document, Err(ReadError::Limit(limit))),
    };
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        if let Some(bad) = unreadable.as_ref().filter(|bad| bad.document == index) {
            let error = ReadError::Unreadable {
                document: index,
                location: bad.location,
                message: bad.message.clone(),
            };
            return each(index, Err(error));
        }
        let read = serde_path_to_error::deserialize::<_, Option<T>>(document).map_err(|err| {
            let path = err.path().to_string();
            let inner = err.into_inner();
            let location = inner.location().map(|at| Location {
                line: at.line(),
                column: at.column(),
            });
            let message = without_path_prefix(&path, inner.to_string());
            ReadError::Value {
                document: index,
                path,
                location,
                message,
            }
        });
        let failed = read.is_err();
        each(index, read)?;
        if failed {
            break;
        }
    }
    Ok(())
}

/// `value` as one YAML document (no leading `---`).
pub(crate) fn to_string<T: Serialize>(value: &T) -> Result<String, String> {
    serde_yaml::to_string(value).map_err(|e| e.to_string())
}

/// The library starts its messages with its own idea of the path (`metadata.version: ...`);
/// the error's field says where, so that prefix goes.
fn without_path_prefix(path: &str, message: String) -> String {
    let Some((prefix, rest)) = message.split_once(": ") else {
        return message;
    };
    let is_path_prefix = path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|tail| tail.starts_with(['.', '[']));
    if is_path_prefix {
        rest.to_string()
    } else {
        message
    }
}

#[cfg(test)]
mod tests;
