//! Shared fixtures of the disk tests that reopen stores: the `Widget` type they store and a
//! fresh store path per test.
#![allow(dead_code)] // Each test binary uses a different part of it.

use std::path::PathBuf;

use cosi_core::ResourceSpec;
use serde::{Deserialize, Serialize};

/// The spec the recovery and format tests store.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Widget {
    pub size: u32,
}
impl ResourceSpec for Widget {
    const TYPE: &'static str = "Widgets.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// A fresh directory (deleted when the guard drops) and the store file path inside it.
pub fn temp_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    (dir, path)
}
