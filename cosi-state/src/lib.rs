//! # cosi-state
//!
//! Implementations of [`cosi_core::State`]: in memory, on disk (redb), a namespaced router that
//! sends each namespace to its own backend, and (behind the `etcd` feature) a distributed backend;
//! and (behind the `conformance` feature) the conformance suite and model test every backend
//! passes.

#[cfg(feature = "conformance")]
pub mod conformance;
mod cooperate;
mod decode;
mod disk;
mod memory;
pub mod origin;
mod record;
mod router;

#[cfg(feature = "etcd")]
pub mod etcd;

pub use cooperate::{at_once, cooperate, CALLS_PER_UNIT};
pub use disk::{DiskDurability, DiskOptions, DiskState};
#[cfg(feature = "etcd")]
pub use etcd::{EtcdOptions, EtcdState};
pub use memory::{MemoryOptions, MemoryState};
pub use router::NamespaceRouter;
