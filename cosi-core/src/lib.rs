//! # cosi-core
//!
//! The resource model of a COSI-style runtime: typed, versioned resources identified by
//! `(namespace, type, id)`, the [`State`] trait that every backend implements, the helpers derived
//! from it ([`StateExt`]), label and id queries, resource definitions and their [`Registry`], the
//! `{metadata, spec}` YAML and JSON form tools work on, the limits YAML from outside is held to,
//! and the error type.
//!
//! # Strict input, tolerant read-back
//!
//! A spec field its type does not have is an error where the spec is *outside input* — a
//! user's YAML or JSON document ([`dynamic`]), a remote caller's Create or Update (the API
//! server in `cosi-api`), a dynamic resource a writer hands to a store that converts it to its
//! typed form — and the error names the resource and the field's path
//! (`config/Machines.config.cosi.dev/m1: invalid spec.kubelet.extraArgz: unknown field: …`).
//! Where the spec is *read back* from what this project wrote — a disk or etcd record loaded
//! by a backend, a reply a client gets from this project's server — the field is skipped, so a
//! store or node written by a newer version still works with an older one. Each caller of
//! [`Registry::decode_spec`] states which it is ([`spec_decode::Origin`]); a type that takes
//! extra fields on purpose sets [`ResourceSpec::UNKNOWN_FIELDS`]. The rules and their reasons
//! are in [`spec_decode`].
//!
//! This crate knows no backend and no runtime: backends live in `cosi-state`, controllers in
//! `cosi-controllers`.
//!
//! A tour:
//! - [`Pointer`] and [`Kind`] name resources; [`Metadata`] carries version, owner, phase,
//!   finalizers, labels and annotations.
//! - [`ResourceSpec`] turns a serde type into a resource type; [`Resource<S>`] pairs it with
//!   metadata; stores keep [`SharedResource`]s (`Arc<dyn AnyResource>`) and [`downcast`] gets
//!   the typed value back, checked.
//! - [`State`] is the store API; [`Event`]s and [`Watch`] carry changes to watchers.
//! - [`selector`] reads and writes label queries as text (`app=web,mem<1gi | !legacy`);
//!   [`validate_label_key`] and [`validate_label_value`] check Kubernetes label syntax.
//! - [`Registry`] knows the resource types by name and alias; [`dynamic`] writes any resource as
//!   `{metadata, spec}` YAML or JSON and decodes such documents back into typed resources;
//!   [`yaml`] holds YAML from outside to size, nesting and alias-expansion limits (every YAML
//!   entry point of the workspace checks with it); [`json`] checks JSON text for what
//!   serde_json would read other than as written (integers beyond 64 bits);
//!   [`Columns`] turns a resource into the cells of its definition's print columns, and (with
//!   the `table` feature) `table` prints resources as a text table.
//! - [`spec_encode`] refuses a spec that its stored forms cannot carry exactly (a NaN or
//!   infinite float, an integer beyond 64 bits), naming the field, on every write to every
//!   store, instead of storing a `null` that no longer decodes.
//! - [`spec_decode`] draws the line between outside input, where an unknown spec field is an
//!   error naming its path, and what this project's own stores and servers wrote, which is read
//!   tolerantly so an older reader keeps working with a newer writer.

mod bookmark;
mod call;
mod columns;
mod definition;
pub mod dynamic;
mod error;
mod event;
pub mod id_query;
pub mod json;
mod label_query;
mod label_syntax;
mod metadata;
mod pointer;
pub mod registry;
mod resource;
pub mod selector;
pub mod spec_decode;
pub mod spec_encode;
mod state;
mod state_ext;
#[cfg(feature = "table")]
pub mod table;
pub mod text;
pub mod yaml;

pub use bookmark::Bookmark;
pub use call::Call;
pub use columns::Columns;
pub use definition::{PrintColumn, ResourceDefinition, Sensitivity, META_NAMESPACE};
pub use error::{Error, Result, Source};
pub use event::{Event, EventBatch, EventSource, Watch};
pub use id_query::IdQuery;
pub use label_query::{parse_quantity, LabelOp, LabelQueries, LabelQuery, LabelTerm};
pub use label_syntax::{validate_label_key, validate_label_value, LabelSyntaxError};
pub use metadata::{Annotations, Finalizers, Labels, Metadata, Phase, Version};
pub use pointer::{Kind, Pointer};
pub use registry::Registry;
pub use resource::{
    downcast, downcast_ref, make_mut, same_content, AnyResource, DynamicResource, Resource,
    ResourceSpec, SharedResource, UnknownFields,
};
pub use state::{
    CreateOptions, DestroyOptions, ListOptions, State, UpdateOptions, WatchKindOptions,
    WatchOptions,
};
pub use state_ext::StateExt;
