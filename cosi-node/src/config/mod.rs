//! The machine config family: one versioned, validated node config, the only way the node is
//! changed.
//!
//! What it owns, one module per concept:
//! - [`schema`]: the typed config ([`Config`]: the main `v1alpha1` document and the named
//!   `ServiceConfig` documents), plain serde types;
//! - [`document`]: text ↔ typed config, strict (unknown fields, duplicate documents and bad
//!   shapes are errors with their field path), and the canonical encoding;
//! - [`resources`]: the resource types, all in namespace `config`: [`MachineConfig`] (ids
//!   `active` and `persisted`), the fan-out ([`MachineType`], [`Hostname`], [`NodeLabels`],
//!   [`KubeletSpec`]) and the [`ConfigHistory`];
//! - [`validate`]: semantic rules, all errors at once, warnings apart;
//! - [`patch`]: strategic-merge and RFC 6902 patches, on multi-document configs too;
//! - [`diff`]: unified diffs and changed field paths;
//! - [`restart`]: which fields need a restart, and the hook the node runtime implements;
//! - [`apply`]: the one entry point that changes the config (modes, dry run, try rollback,
//!   history), and the node's start;
//! - [`transforms`]: the controllers that fan the active config out.
//!
//! It must not touch other families' resources: services, addresses and members read the
//! typed config or the fan-out resources and derive their own.

pub mod apply;
mod cidr;
pub mod diff;
pub mod document;
mod error;
mod history;
pub mod patch;
pub mod resources;
pub mod restart;
pub mod schema;
pub mod transforms;
pub mod tree;
pub mod validate;
mod yaml;

pub use apply::{
    load_at_start, ApplyError, ApplyInput, ApplyMode, ApplyOutcome, ApplyRequest, ConfigApplier,
};
pub use cidr::Cidr;
pub use diff::ConfigDiff;
pub use error::{ConfigErrors, FieldError};
pub use history::history_id;
pub use resources::{
    register_types, ConfigHistory, Hostname, KubeletSpec, MachineConfig, MachineType, NodeLabels,
    ACTIVE, PERSISTED,
};
pub use schema::{Config, MachineRole};

/// The subject named by errors about the machine config.
pub const MACHINE_CONFIG_SUBJECT: &str = "MachineConfig";

/// How many [`ConfigHistory`] entries are kept (older ones are destroyed as new ones arrive).
pub const HISTORY_LIMIT: usize = 32;
