//! # examples
//!
//! Runnable programs that show the runtime in use. Each program is a binary under
//! `examples/src/bin/` (run one with `cargo run -p examples --bin NAME`); this library holds
//! nothing but these docs.
