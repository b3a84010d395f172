//! # examples
//!
//! Runnable programs that show the runtime in use. Each is a binary under `examples/src/bin/`
//! (run one with `cargo run -p examples --bin NAME`):
//!
//! - `demo`: watches a kind, creates, updates and destroys resources, then prints what the
//!   watcher saw, the resources as a table and one as YAML, on the in-memory state.
//!
//! The rest of this page is the project's README; its tour is compiled and run as a doc test of
//! this crate, so it cannot drift from the API.
//!
#![doc = include_str!("../../README.md")]
