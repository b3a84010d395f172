//! The one place that talks to etcd for reads and writes: every call is bounded by the request
//! timeout, and every etcd failure becomes a [`cosi_core::Error::Backend`] that says whether a
//! retry can help.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cosi_core::{Error, Kind, Pointer, Registry, Result, SharedResource};
use etcd_client::{Client, GetOptions, KeyValue, KvClient, Txn, TxnResponse, WatchClient};

use super::keys;
use super::record;

/// Keys asked for per range request at first. A page of large values that would not fit in a
/// reply ([`MAX_REPLY_BYTES`]) is asked for again with a tenth of the keys, down to one.
const PAGE: i64 = 1000;

/// The largest reply this backend decodes from etcd (tonic's default is 4 MiB, which six
/// resources of a megabyte already pass). One value is at most etcd's request limit
/// (`--max-request-bytes`, 1.5 MiB by default) and a watch event carries two (the old and the
/// new); watches ask etcd to split larger replies (`fragment`), and range reads shrink their
/// pages, so every reply fits as long as that limit is under 32 MiB.
pub(super) const MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;

/// A client bound to one key prefix, with the registry this process decodes with.
pub(super) struct Connection {
    client: Client,
    prefix: Vec<u8>,
    request_timeout: Duration,
    registry: Arc<Registry>,
}

impl Connection {
    pub fn new(
        client: Client,
        prefix: Vec<u8>,
        request_timeout: Duration,
        registry: Arc<Registry>,
    ) -> Self {
        Connection {
            client,
            prefix,
            request_timeout,
            registry,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A key-value client that decodes replies up to [`MAX_REPLY_BYTES`].
    fn kv(&self) -> KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(MAX_REPLY_BYTES)
    }

    /// A watch client that decodes replies up to [`MAX_REPLY_BYTES`]; open its watches with
    /// `fragment` set, so that etcd splits a reply of many events.
    pub fn watch_client(&self) -> WatchClient {
        self.client
            .watch_client()
            .max_decoding_message_size(MAX_REPLY_BYTES)
    }

    /// Decodes the value stored under `pointer`'s key.
    pub fn decode_value(&self, pointer: &Pointer, bytes: &[u8]) -> Result<SharedResource> {
        record::decode(&self.registry, pointer, bytes)
    }

    pub fn kind_prefix(&self, kind: &Kind) -> Vec<u8> {
        keys::kind_prefix(&self.prefix, kind)
    }

    pub fn key(&self, pointer: &Pointer) -> Vec<u8> {
        keys::resource_key(&self.prefix, pointer)
    }

    /// Runs one etcd call under the request timeout.
    pub async fn call<T>(
        &self,
        subject: &(dyn Display + Sync),
        operation: &str,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.request_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(etcd_error(subject, operation, e)),
            Err(_) => Err(Error::Backend {
                subject: subject.to_string(),
                message: format!(
                    "etcd {operation} got no answer within {:?}{}",
                    self.request_timeout,
                    if operation == "txn" {
                        " (the write may or may not have been applied)"
                    } else {
                        ""
                    }
                ),
                retryable: true,
                source: None,
            }),
        }
    }

    /// The stored key-value of one resource, and the revision of the read.
    pub async fn get(&self, pointer: &Pointer) -> Result<(Option<KeyValue>, i64)> {
        let mut kv = self.kv();
        let mut response = self
            .call(pointer, "get", kv.get(self.key(pointer), None))
            .await?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok((response.take_kvs().into_iter().next(), revision))
    }

    /// Runs a transaction on one resource's key.
    pub async fn txn(&self, pointer: &Pointer, txn: Txn) -> Result<TxnResponse> {
        let mut kv = self.kv();
        self.call(pointer, "txn", kv.txn(txn)).await
    }

    /// The current revision of the store (the position of a read made now).
    pub async fn revision(&self, kind: &Kind) -> Result<i64> {
        let mut kv = self.kv();
        let options = GetOptions::new().with_prefix().with_count_only();
        let response = self
            .call(kind, "get", kv.get(self.kind_prefix(kind), Some(options)))
            .await?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }

    /// Every key-value of a kind, in key (= id) order, read at one revision, which is returned.
    /// Fetched in pages so that large kinds stay within gRPC's message size limit.
    pub async fn range(&self, kind: &Kind) -> Result<(i64, Vec<KeyValue>)> {
        let prefix = self.kind_prefix(kind);
        let end = range_end(&prefix);
        let mut kv = self.kv();
        let mut attempts = 0;
        let mut limit = PAGE;
        'read: loop {
            attempts += 1;
            let mut revision = 0;
            let mut from = prefix.clone();
            let mut kvs = Vec::new();
            loop {
                let mut options = GetOptions::new().with_range(end.clone()).with_limit(limit);
                if revision != 0 {
                    options = options.with_revision(revision);
                }
                let result = self
                    .call(kind, "range", kv.get(from.clone(), Some(options)))
                    .await;
                let mut response = match result {
                    Ok(response) => response,
                    // The revision of the first page was compacted while paging: start over.
                    Err(e) if is_compacted(&e) && attempts < 3 => continue 'read,
                    // Large values: the same page again, in fewer keys.
                    Err(e) if is_too_large(&e) && limit > 1 => {
                        limit = (limit / 10).max(1);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if revision == 0 {
                    revision = response.header().map_or(0, |h| h.revision());
                }
                let more = response.more();
                let page = response.take_kvs();
                let next = next_page(kind, &from, page.iter().map(KeyValue::key), more)?;
                kvs.extend(page);
                match next {
                    Some(next) => from = next,
                    None => return Ok((revision, kvs)),
                }
            }
        }
    }

    /// Decodes a stored key-value of `kind`. `None` when the key does not belong to the kind.
    pub fn decode(
        &self,
        kind: &Kind,
        prefix: &[u8],
        kv: &KeyValue,
    ) -> Option<Result<SharedResource>> {
        let id = keys::id_of(prefix, kv.key())?;
        let pointer = kind.pointer(id);
        Some(self.decode_value(&pointer, kv.value()))
    }
}

/// Where a paged read goes on after a page of `keys` asked for from `from`: `None` when the
/// server said there is no more, else the key just after the page's last. A page that would not
/// move the read forward — `more` with no keys, or keys not in ascending order from `from` — is
/// an error, not a reason to ask again: a server that does not follow etcd's paging would
/// otherwise keep the read asking for ever.
fn next_page<'k>(
    kind: &Kind,
    from: &[u8],
    keys: impl Iterator<Item = &'k [u8]>,
    more: bool,
) -> Result<Option<Vec<u8>>> {
    let mut last: Option<&[u8]> = None;
    for key in keys {
        if key < last.unwrap_or(from) || last == Some(key) {
            return Err(paging_error(
                kind,
                "keys out of order or before the page's start",
            ));
        }
        last = Some(key);
    }
    match (more, last) {
        (false, _) => Ok(None),
        (true, None) => Err(paging_error(kind, "more keys announced, but none sent")),
        (true, Some(last)) => {
            let mut next = last.to_vec();
            next.push(0);
            Ok(Some(next))
        }
    }
}

fn paging_error(kind: &Kind, what: &str) -> Error {
    Error::Backend {
        subject: kind.to_string(),
        message: format!(
            "etcd range read: the server answered a page with {what}; it does not follow etcd's \
             paging (use etcd itself, or a server that pages as etcd does)"
        ),
        retryable: false,
        source: None,
    }
}

/// The first key after every key starting with `prefix`: the `range_end` that, with `prefix`
/// as the key, asks etcd for exactly the keys under the prefix (a paged read moves its key
/// forward and keeps this end).
///
/// ```
/// use cosi_state::etcd::range_end;
/// assert_eq!(range_end(b"/cosi/a/"), b"/cosi/a0".to_vec());
/// assert_eq!(range_end(b"a\xff"), b"b".to_vec());
/// ```
pub fn range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // An empty or all-0xff prefix: "\0" asks etcd for every key from the prefix on.
    vec![0]
}

fn is_compacted(e: &Error) -> bool {
    matches!(e, Error::Backend { message, .. } if message.contains("compacted"))
}

/// Whether a reply was refused for its size (tonic: "decoded message length too large").
fn is_too_large(e: &Error) -> bool {
    matches!(e, Error::Backend { message, .. } if message.contains("message length too large"))
}

/// Turns an etcd client error into a backend error; transport problems and unavailability are
/// retryable, rejected requests are not.
pub(super) fn etcd_error(
    subject: &(dyn Display + Sync),
    operation: &str,
    e: etcd_client::Error,
) -> Error {
    let retryable = match &e {
        // gRPC codes: 1 cancelled, 2 unknown (broken connections surface so), 4 deadline
        // exceeded, 8 resource exhausted, 10 aborted, 14 unavailable.
        etcd_client::Error::GRpcStatus(status) => match status.code() as i32 {
            // Resource exhausted is also how etcd's gRPC server refuses a message over its size
            // limit ("received message larger than max"): that request never fits, however
            // often it is sent. Otherwise (etcd's space quota, too many requests) it may pass
            // later.
            8 => !status.message().contains("larger than max"),
            code => matches!(code, 1 | 2 | 4 | 10 | 14),
        },
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::WatchError(_)
        | etcd_client::Error::EndpointError(_) => true,
        _ => false,
    };
    Error::backend(
        subject.to_string(),
        format!("etcd {operation} failed: {e}"),
        retryable,
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind() -> Kind {
        Kind::new("ns", "Things.test.dev")
    }

    fn next(from: &[u8], keys: &[&[u8]], more: bool) -> Result<Option<Vec<u8>>> {
        next_page(&kind(), from, keys.iter().copied(), more)
    }

    #[test]
    fn a_paged_read_goes_on_just_after_the_last_key_while_more_is_announced() {
        assert_eq!(
            next(b"/p/", &[b"/p/a", b"/p/b"], true).unwrap(),
            Some(b"/p/b\0".to_vec())
        );
        assert_eq!(next(b"/p/b\0", &[b"/p/c"], false).unwrap(), None);
        assert_eq!(next(b"/p/", &[], false).unwrap(), None);
    }

    #[test]
    fn a_page_announcing_more_without_keys_fails_the_read_instead_of_asking_again() {
        let error = next(b"/p/", &[], true).unwrap_err();
        assert_eq!(
            error.to_string(),
            "ns/Things.test.dev: backend failure: etcd range read: the server answered a page with more keys \
             announced, but none sent; it does not follow etcd's paging (use etcd itself, or a \
             server that pages as etcd does)"
        );
        assert!(!error.is_retryable());
    }

    #[test]
    fn a_page_whose_keys_do_not_move_forward_fails_the_read() {
        let cases: [&[&[u8]]; 3] = [&[b"/p/a"], &[b"/p/c", b"/p/c"], &[b"/p/c", b"/p/b\xff"]];
        for keys in cases {
            let error = next(b"/p/b", keys, true).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("keys out of order or before the page's start"),
                "{keys:?}: {error}"
            );
        }
        assert!(next(b"/p/b", &[b"/p/b"], true).is_ok());
    }

    #[test]
    fn range_end_is_the_next_prefix() {
        assert_eq!(range_end(b"/a/b/"), b"/a/b0".to_vec());
        assert_eq!(range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(range_end(b"\xff"), vec![0]);
    }
}
