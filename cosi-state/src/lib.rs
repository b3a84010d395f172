//! # cosi-state
//!
//! Implementations of [`cosi_core::State`]: in memory, on disk (redb), a namespaced router that
//! sends each namespace to its own backend, and (behind the `etcd` feature) a distributed backend.

#[cfg(feature = "conformance")]
pub mod conformance;
mod memory;
mod router;

pub use memory::{MemoryOptions, MemoryState};
pub use router::NamespaceRouter;
