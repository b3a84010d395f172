//! Where resources live in etcd's key space.
//!
//! A resource is stored under `{prefix}{namespace}/{type}/{id}`. `/` and `%` inside the namespace
//! and the type are percent-escaped, so every kind owns exactly the keys that start with its own
//! prefix and one kind's keys never fall inside another's range. The id is the key's tail as is:
//! etcd orders keys bytewise, which is the order of ids as strings.

use cosi_core::{Kind, Pointer};

fn escape(part: &str, out: &mut Vec<u8>) {
    for b in part.bytes() {
        match b {
            b'%' => out.extend_from_slice(b"%25"),
            b'/' => out.extend_from_slice(b"%2F"),
            _ => out.push(b),
        }
    }
}

/// The key prefix shared by every resource of `kind`.
pub fn kind_prefix(prefix: &[u8], kind: &Kind) -> Vec<u8> {
    let mut key = prefix.to_vec();
    escape(kind.namespace(), &mut key);
    key.push(b'/');
    escape(kind.resource_type(), &mut key);
    key.push(b'/');
    key
}

/// The key of one resource.
pub fn resource_key(prefix: &[u8], pointer: &Pointer) -> Vec<u8> {
    let mut key = kind_prefix(prefix, pointer.kind());
    key.extend_from_slice(pointer.id().as_bytes());
    key
}

/// The id stored under `key`, if `key` belongs to the kind with prefix `kind_prefix` and its
/// tail is UTF-8.
pub fn id_of<'k>(kind_prefix: &[u8], key: &'k [u8]) -> Option<&'k str> {
    key.strip_prefix(kind_prefix)
        .and_then(|id| std::str::from_utf8(id).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slashes_in_namespace_and_type_cannot_make_kinds_overlap() {
        let a = kind_prefix(b"/p/", &Kind::new("a/b", "T"));
        let b = kind_prefix(b"/p/", &Kind::new("a", "b/T"));
        assert_eq!(a, b"/p/a%2Fb/T/".to_vec());
        assert_eq!(b, b"/p/a/b%2FT/".to_vec());
        assert!(!a.starts_with(&b) && !b.starts_with(&a));
    }

    #[test]
    fn id_is_the_tail_of_the_key() {
        let p = Pointer::new("ns", "T.x.dev", "eth0/1");
        let key = resource_key(b"pre/", &p);
        assert_eq!(key, b"pre/ns/T.x.dev/eth0/1".to_vec());
        assert_eq!(id_of(&kind_prefix(b"pre/", p.kind()), &key), Some("eth0/1"));
        assert_eq!(id_of(b"other/", &key), None);
    }
}
