//! # benches
//!
//! The benchmark workloads of `benches/WORKLOADS.md`, one binary per workload
//! (`src/bin/w1.rs`, ...), and the conventions they share, kept in this library so every
//! workload reports the same way:
//!
//! - [`report`]: figures collected over several runs and printed as medians, one
//!   `name value unit` line each (lines starting with `#` are commentary);
//! - [`peak_rss`]: peak resident memory (`VmHWM` from `/proc/self/status`);
//! - [`cpu`]: CPU time used by the process (user + system, all threads);
//! - [`plot`]: the W4 per-item cost plot (PNG);
//! - [`args`]: the command line every workload accepts (`--runs N`, `--n N`);
//! - [`rmw`]: read-modify-write, how every workload updates;
//! - [`check`]: result checks that fail the workload loudly — a fast wrong answer is a failure;
//! - [`item`]: the benchmark resource, spec `{ value: i64, label: String }`;
//! - [`backend`]: the state backends the workloads run against;
//! - [`machine`]: the machine description printed at the top of every workload's output;
//! - [`output`]: a workload's printed figures read back (by the suite and by W6);
//! - [`suite`]: the plan of the `suite` binary (every workload, quick or full) and W4's
//!   per-item costs;
//! - [`side_by_side`]: the suite's side-by-side mode (`suite --peer PATH`): interleaved pairs
//!   of fresh processes, this project against the reference binary, and their statistics.
//!
//! See `benches/README.md` for how to run the workloads and how to add one.

/// With the `mimalloc` feature, every benchmark binary allocates through mimalloc: the
/// allocator is the application's choice (the project's libraries make none), and this is how
/// the workloads measure what that choice changes ([`machine::allocator`] says which is in use).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod args;
pub mod backend;
pub mod check;
pub mod cpu;
pub mod item;
pub mod machine;
pub mod output;
pub mod peak_rss;
pub mod plot;
pub mod report;
pub mod rmw;
pub mod side_by_side;
pub mod suite;
