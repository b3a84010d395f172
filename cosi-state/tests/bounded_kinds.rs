//! Kinds named from outside (a remote caller, a file) cannot grow memory without bound: a million
//! made-up type names, each refused by the registry and each read and watched through the public
//! State API of the in-memory store, leave the process's memory flat.
//!
//! Alone in its test binary, so the resident set it measures is its own.

use cosi_core::{
    DestroyOptions, Error, Kind, ListOptions, Registry, ResourceSpec, State, WatchKindOptions,
};
use cosi_state::MemoryState;
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Known {
    value: u32,
}

impl ResourceSpec for Known {
    const TYPE: &'static str = "Knowns.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// The resident set size of this process, in KiB (`VmRSS` of `/proc/self/status`).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs is mounted");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// One made-up type name through everything a caller can do with it.
async fn name_it(registry: &Registry, state: &MemoryState, i: usize) {
    let name = format!("Unknown{i}.test.cosi.dev");
    let err = registry.require(&name).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { subject, field, .. } if *subject == name && field == "type"),
        "{err}"
    );
    let kind = Kind::new("test", &name);
    let pointer = kind.pointer("x");
    assert!(state.get(&pointer).await.unwrap_err().is_not_found());
    assert!(state
        .list(&kind, &ListOptions::default())
        .await
        .unwrap()
        .is_empty());
    assert!(state
        .destroy(&pointer, DestroyOptions::default())
        .await
        .unwrap_err()
        .is_not_found());
    let watch = state
        .watch_kind(&kind, WatchKindOptions::default())
        .await
        .unwrap();
    drop(watch);
}

#[tokio::test]
async fn a_million_unknown_type_names_leave_memory_flat() {
    let registry = Registry::new().with::<Known>().unwrap();
    let state = MemoryState::default();
    // Warm up: allocator arenas, tables at their working size.
    for i in 0..20_000 {
        name_it(&registry, &state, i).await;
    }
    let before = rss_kib();

    for i in 20_000..1_020_000 {
        name_it(&registry, &state, i).await;
    }

    let grown = rss_kib().saturating_sub(before);
    // A leak of even 64 bytes a name would be 61 MiB.
    assert!(
        grown < 16 * 1024,
        "memory grew by {grown} KiB over a million names"
    );
}
