//! [`Bookmark`]: an opaque position in a kind's order of changes, which a watch can resume
//! after — also in another process, after it travelled as bytes.
//!
//! Each store decides what a position is: the in-memory and disk backends count a kind's
//! changes, etcd uses its revision, a remote server sends bytes of its own. A bookmark issued
//! by this project's stores is a *position in an origin*: the origin names the store instance
//! (so a bookmark handed to a store that did not issue it is refused instead of misread), the
//! position is the store's own counter. Any other bytes (a bookmark from a foreign server) are
//! carried exactly as received, so a client can hand them back to the server that issued them.

use std::fmt;
use std::sync::Arc;

/// The first byte of an encoded position; foreign bookmarks rarely start with it and, when
/// they do, have another length.
const POSITION_TAG: u8 = 0xc0;
/// Tag, origin and position, both big-endian.
const POSITION_LEN: usize = 17;

/// A position in a kind's total order of changes. Watches resume after a bookmark
/// ([`crate::WatchKindOptions::since`]); bookmarks of one store order the way its changes do.
///
/// Opaque on purpose: a bookmark is made by the store that issued it, travels as bytes
/// ([`Bookmark::to_bytes`], [`Bookmark::from_bytes`]) and means something only to that store.
///
/// ```
/// use cosi_core::Bookmark;
/// let bookmark = Bookmark::at(7, 42);
/// let bytes = bookmark.to_bytes();
/// assert_eq!(Bookmark::from_bytes(&bytes), bookmark);
/// assert_eq!(bookmark.position_in(7), Some(42));
/// assert_eq!(bookmark.position_in(8), None, "issued by another store");
///
/// // Bytes this project did not issue travel unchanged.
/// let foreign = Bookmark::from_bytes(b"\x01\x02\x03");
/// assert_eq!(foreign.to_bytes(), b"\x01\x02\x03");
/// assert_eq!(foreign.position_in(7), None);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bookmark(Repr);

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Repr {
    /// Issued by a store of this project: `origin` names the store, `position` counts in it.
    Position { origin: u64, position: u64 },
    /// Anything else, kept as received.
    Foreign(Arc<[u8]>),
}

impl Bookmark {
    /// The bookmark of `position` in the store named `origin`. For store implementations.
    pub const fn at(origin: u64, position: u64) -> Self {
        Bookmark(Repr::Position { origin, position })
    }

    /// The position, if this bookmark was issued by the store named `origin`.
    pub fn position_in(&self, origin: u64) -> Option<u64> {
        match self.0 {
            Repr::Position {
                origin: issued_by,
                position,
            } if issued_by == origin => Some(position),
            _ => None,
        }
    }

    /// The bookmark as bytes, to send elsewhere; [`Bookmark::from_bytes`] reads them back.
    pub fn to_bytes(&self) -> Vec<u8> {
        match &self.0 {
            Repr::Position { origin, position } => {
                let mut bytes = Vec::with_capacity(POSITION_LEN);
                bytes.push(POSITION_TAG);
                bytes.extend_from_slice(&origin.to_be_bytes());
                bytes.extend_from_slice(&position.to_be_bytes());
                bytes
            }
            Repr::Foreign(bytes) => bytes.to_vec(),
        }
    }

    /// A bookmark from bytes. Never fails: bytes this project's stores did not write are kept
    /// as they are, and a store that did not issue them refuses them when asked to resume.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        if bytes.len() == POSITION_LEN && bytes[0] == POSITION_TAG {
            let word = |at: usize| {
                let mut word = [0u8; 8];
                word.copy_from_slice(&bytes[at..at + 8]);
                u64::from_be_bytes(word)
            };
            return Bookmark::at(word(1), word(9));
        }
        Bookmark(Repr::Foreign(bytes.into()))
    }
}

impl fmt::Display for Bookmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Position { position, .. } => position.fmt(f),
            Repr::Foreign(bytes) => {
                f.write_str("0x")?;
                bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

impl fmt::Debug for Bookmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Position { origin, position } => {
                write!(f, "Bookmark({position} in {origin:016x})")
            }
            Repr::Foreign(_) => write!(f, "Bookmark({self})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_one_origin_order_like_the_positions() {
        assert!(Bookmark::at(3, 1) < Bookmark::at(3, 2));
        assert!(Bookmark::at(3, 9) < Bookmark::at(3, 10));
    }

    #[test]
    fn foreign_bytes_of_position_length_with_another_tag_stay_foreign() {
        let mut bytes = Bookmark::at(1, 2).to_bytes();
        bytes[0] = 0;
        let bookmark = Bookmark::from_bytes(&bytes);
        assert_eq!(bookmark.position_in(1), None);
        assert_eq!(bookmark.to_bytes(), bytes);
    }

    #[test]
    fn foreign_bookmarks_order_as_their_bytes() {
        // The Go runtime's in-memory bookmarks are a cookie and a big-endian position.
        let a = Bookmark::from_bytes(&[9, 9, 0, 1]);
        let b = Bookmark::from_bytes(&[9, 9, 0, 2]);
        assert!(a < b);
    }

    #[test]
    fn the_empty_foreign_bookmark_round_trips() {
        assert_eq!(Bookmark::from_bytes(&[]).to_bytes(), Vec::<u8>::new());
    }
}
