//! The benchmark resource: one type in one namespace, spec `{ value: i64, label: String }`
//! (BENCHMARKS.md), and the ids workloads give it.

use cosi_core::{Resource, ResourceSpec};
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
/// assert_eq!(benches::item::item_index("item-0000042"), Some(42));
/// assert_eq!(benches::item::item_index("other"), None);
/// ```
pub fn item_index(id: &str) -> Option<usize> {
    id.strip_prefix("item-")?.parse().ok()
}

/// A fresh (unstored) item with `value` and the label `item <index>`.
pub fn new_item(index: usize, value: i64) -> Resource<BenchItem> {
    Resource::new(
        item_id(index),
        BenchItem {
            value,
            label: format!("item {index}"),
        },
    )
}
