//! The benchmark resource: one type in one namespace, spec `{ value: i64, label: String }`
//! (`benches/WORKLOADS.md`), and the ids workloads give it.
//!
//! The contract puts id generation before the clock and label formatting inside it, so a
//! timed loop takes its ids from [`item_ids`] (built beforehand) and builds each resource with
//! [`item_with_id`], which formats the label.

use std::sync::Arc;

use cosi_core::{Kind, Metadata, Resource, ResourceSpec};
use serde::{Deserialize, Serialize};

/// The spec every workload stores.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct BenchItem {
    /// The value workloads change and check.
    pub value: i64,
    /// A short label, so the resource carries a heap-allocated string like real specs do.
    pub label: String,
}

impl ResourceSpec for BenchItem {
    const TYPE: &'static str = "BenchItems.bench.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "bench";
}

/// The id of item `index`: zero-padded, so id order (what `list` sorts by) is index order.
///
/// ```
/// assert_eq!(benches::item::item_id(42), "item-0000042");
/// ```
pub fn item_id(index: usize) -> String {
    format!("item-{index:07}")
}

/// The index back from an id made by [`item_id`].
///
/// ```
/// use benches::item::item_index;
/// assert_eq!(item_index("item-0000042"), Some(42));
/// assert_eq!(item_index("other"), None);
/// assert_eq!(item_index("item-"), None);
/// assert_eq!(item_index("item-12a"), None);
/// assert_eq!(item_index("item-+12"), None);
/// assert_eq!(item_index("item-99999999999999999999999"), None);
/// ```
pub fn item_index(id: &str) -> Option<usize> {
    // Every watcher of W2 and W3 parses the id of every event: a digit fold costs about a
    // third of `str::parse`, which also accepts a sign.
    let digits = id.strip_prefix("item-")?;
    if digits.is_empty() {
        return None;
    }
    digits.bytes().try_fold(0usize, |index, byte| {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        index.checked_mul(10)?.checked_add(usize::from(digit))
    })
}

/// The ids of items `0..n`, built before a timed loop starts (ids are generated before the
/// clock; the stored resources share these `Arc`s).
///
/// ```
/// let ids = benches::item::item_ids(3);
/// assert_eq!(ids.iter().map(|id| &**id).collect::<Vec<_>>(), ["item-0000000", "item-0000001", "item-0000002"]);
/// ```
pub fn item_ids(n: usize) -> Vec<Arc<str>> {
    (0..n).map(|i| Arc::from(item_id(i))).collect()
}

/// The label of item `index`, formatted inside the timed loops.
///
/// ```
/// assert_eq!(benches::item::label(7), "item 7");
/// ```
pub fn label(index: usize) -> String {
    format!("item {index}")
}

/// A fresh (unstored) resource of kind `kind` with an id made beforehand, `value` and the
/// label `item <index>` (formatted here, inside the caller's clock).
///
/// ```
/// use benches::item::{item_ids, item_with_id, BenchItem};
/// use cosi_core::ResourceSpec;
/// let ids = item_ids(2);
/// let make = |value, label| BenchItem { value, label };
/// let item = item_with_id(&BenchItem::kind(), &ids[1], 1, 5, make);
/// assert_eq!((item.metadata.id(), item.spec.value, item.spec.label.as_str()), ("item-0000001", 5, "item 1"));
/// ```
pub fn item_with_id<S: ResourceSpec>(
    kind: &Kind,
    id: &Arc<str>,
    index: usize,
    value: i64,
    spec: impl FnOnce(i64, String) -> S,
) -> Resource<S> {
    Resource::with_metadata(
        Metadata::new(kind.pointer(Arc::clone(id))),
        spec(value, label(index)),
    )
}

/// A fresh (unstored) item with `value` and the label `item <index>`.
pub fn new_item(index: usize, value: i64) -> Resource<BenchItem> {
    Resource::new(
        item_id(index),
        BenchItem {
            value,
            label: label(index),
        },
    )
}
