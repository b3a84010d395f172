//! # examples
//!
//! Runnable programs that show the runtime in use. Each is a binary under `examples/src/bin/`
//! (run one with `cargo run -p examples --bin NAME`):
//!
//! - `node`: the reference node daemon — every family of `cosi-node` on the disk backend,
//!   served over the API with mutual TLS, maintenance mode, restarts in place and clean
//!   shutdown. Its docs (`src/bin/node.rs`) record every decision a daemon author copying it
//!   should know; `cargo run -p examples --bin node -- --help` lists its flags.
//! - `node-kubelet`: the workload the daemon runs for the config's kubelet image.
//! - `demo`: the README's first command — two `node` daemons and a narrated operator's session
//!   through `cosictl`'s code (services, members, addresses, config changes tried, refused,
//!   rolled back, a crash-looping kubelet diagnosed and fixed, the history).
//! - `store`: the store alone — watches a kind, creates, updates and destroys resources, then
//!   prints what the watcher saw, the resources as a table and one as YAML, on the disk store.
//! - `controllers STATE_DIR`: a transform and a queue controller under the `Engine` on the
//!   disk store, until Ctrl-C or SIGTERM; then a graceful shutdown and the store closed
//!   (`DiskState::close`), so the next start finds what this one derived.
//!
//! The library holds what the demo and its story test share ([`starter`]), and what joins `cosi-node` to `cosi-api`, for the daemon and its tests:
//! [`machine::NodeMachine`], the node behind the API's machine service, and
//! [`maintenance::MaintenanceMachine`], the gate in front of it while the node has no config.
//!
//! The rest of this page is the project's README; its tour is compiled and run as a doc test of
//! this crate, so it cannot drift from the API.
//!
#![doc = include_str!("../../README.md")]

pub mod machine;
pub mod maintenance;
pub mod starter;
