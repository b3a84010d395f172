//! # cosi-node
//!
//! The node built on the runtime: the resource families an API-managed node OS keeps its state
//! in, each split into plain resource types and the controllers that derive them.
//!
//! Every type name uses the project's one domain, `cosi.dev`, and lives in one of the
//! [`namespaces`] below. The families are one module each: the machine config ([`config`]),
//! services and their process supervisor ([`services`]), network addresses ([`network`]), and
//! cluster members ([`cluster`]); [`node`] composes them into the node a daemon runs.

pub mod cluster;
pub mod config;
pub mod namespaces;
pub mod network;
pub mod node;
pub mod services;
