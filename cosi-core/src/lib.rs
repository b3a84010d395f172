//! # cosi-core
//!
//! The resource model of a COSI-style runtime: typed, versioned resources identified by
//! `(namespace, type, id)`, the [`State`] trait that every backend implements, the helpers derived
//! from it ([`StateExt`]), label and id queries, resource definitions and their [`Registry`], the
//! `{metadata, spec}` YAML and JSON form tools work on, the limits YAML from outside is held to,
//! and the error type.
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
//!   entry point of the workspace checks with it);
//!   [`Columns`] turns a resource into the cells of its definition's print columns, and (with
//!   the `table` feature) `table` prints resources as a text table.

mod bookmark;
mod columns;
mod definition;
pub mod dynamic;
mod error;
mod event;
mod id_query;
mod label_query;
mod label_syntax;
mod metadata;
mod pointer;
pub mod registry;
mod resource;
pub mod selector;
mod state;
mod state_ext;
#[cfg(feature = "table")]
pub mod table;
pub mod yaml;

pub use bookmark::Bookmark;
pub use columns::Columns;
pub use definition::{PrintColumn, ResourceDefinition, Sensitivity, META_NAMESPACE};
pub use error::{Error, Result, Source};
pub use event::{Event, EventSource, Watch};
pub use id_query::IdQuery;
pub use label_query::{parse_quantity, LabelOp, LabelQueries, LabelQuery, LabelTerm};
pub use label_syntax::{validate_label_key, validate_label_value, LabelSyntaxError};
pub use metadata::{Annotations, Finalizers, Labels, Metadata, Phase, Version};
pub use pointer::{Kind, Pointer};
pub use registry::Registry;
pub use resource::{
    downcast, downcast_ref, make_mut, same_content, AnyResource, DynamicResource, Resource,
    ResourceSpec, SharedResource,
};
pub use state::{
    CreateOptions, DestroyOptions, ListOptions, State, UpdateOptions, WatchKindOptions,
    WatchOptions,
};
pub use state_ext::StateExt;
