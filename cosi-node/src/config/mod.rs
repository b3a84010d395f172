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
//!   [`KubeletSpec`]) and the [`ConfigHistory`].
//!
//! It must not touch other families' resources: services, addresses and members read the
//! typed config or the fan-out resources and derive their own.

mod cidr;
pub mod document;
mod error;
pub mod resources;
pub mod schema;
mod tree;
mod yaml;

pub use cidr::Cidr;
pub use error::{ConfigErrors, FieldError};
pub use resources::{
    register_known_types, register_types, ConfigHistory, Hostname, KubeletSpec, MachineConfig,
    MachineType, NodeLabels, ACTIVE, PERSISTED,
};
pub use schema::{Config, MachineRole};

/// The subject named by errors about the machine config.
pub const MACHINE_CONFIG_SUBJECT: &str = "MachineConfig";

/// How many [`ConfigHistory`] entries are kept (older ones are destroyed as new ones arrive).
pub const HISTORY_LIMIT: usize = 32;
