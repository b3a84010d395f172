//! [`KnownTypes`]: the spec types a backend that stores resources as bytes (disk, etcd) decodes
//! into typed resources.
//!
//! Records hold specs as JSON. A record whose type is registered here becomes a typed
//! [`cosi_core::Resource`]; any other record becomes a [`cosi_core::DynamicResource`] and is kept
//! exactly as stored: listed, watched, rewritten only when someone writes it. The backends differ
//! only in what a registered type's undecodable spec becomes: the disk keeps it in dynamic form
//! ([`KnownTypes::decode`]), etcd refuses the record ([`KnownTypes::decode_exact`]).

use std::collections::HashMap;
use std::fmt;

use cosi_core::{DynamicResource, Error, Metadata, Resource, ResourceSpec, Result, SharedResource};

type Decoder = fn(Metadata, serde_json::Value) -> serde_json::Result<SharedResource>;

fn decode_typed<S: ResourceSpec>(
    metadata: Metadata,
    spec: serde_json::Value,
) -> serde_json::Result<SharedResource> {
    let spec: S = serde_json::from_value(spec)?;
    Ok(Resource::with_metadata(metadata, spec).into_shared())
}

/// The registered spec types, by type name.
///
/// ```
/// use cosi_core::ResourceSpec;
/// use cosi_state::KnownTypes;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
/// # struct Hostname { name: String }
/// # impl ResourceSpec for Hostname {
/// #     const TYPE: &'static str = "Hostnames.net.cosi.dev";
/// #     const DEFAULT_NAMESPACE: &'static str = "network";
/// # }
/// let types = KnownTypes::new().with::<Hostname>();
/// assert!(types.contains("Hostnames.net.cosi.dev"));
/// assert!(!types.contains("Routes.net.cosi.dev"));
/// ```
#[derive(Clone, Default)]
pub struct KnownTypes {
    decoders: HashMap<String, Decoder>,
}

impl KnownTypes {
    /// No registered types: every record loads as a [`DynamicResource`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `S` (builder form).
    pub fn with<S: ResourceSpec>(mut self) -> Self {
        self.register::<S>();
        self
    }

    /// Registers `S`. Registering a type twice is harmless.
    pub fn register<S: ResourceSpec>(&mut self) {
        self.decoders
            .insert(S::TYPE.to_string(), decode_typed::<S> as Decoder);
    }

    /// Whether `resource_type` is registered.
    pub fn contains(&self, resource_type: &str) -> bool {
        self.decoders.contains_key(resource_type)
    }

    /// Builds a resource from stored parts. A spec that the registered type cannot decode (an
    /// incompatible change to the type) is kept in dynamic form rather than dropped.
    pub(crate) fn decode(&self, metadata: Metadata, spec: serde_json::Value) -> SharedResource {
        if let Some(decoder) = self.decoders.get(metadata.resource_type()) {
            match decoder(metadata.clone(), spec.clone()) {
                Ok(resource) => return resource,
                Err(error) => tracing::warn!(
                    resource = %metadata.pointer(),
                    %error,
                    "stored spec does not decode as its registered type; kept in dynamic form"
                ),
            }
        }
        std::sync::Arc::new(DynamicResource { metadata, spec })
    }

    /// Builds a resource from stored parts. A spec that the registered type cannot decode is an
    /// [`Error::InvalidArgument`] on the resource's `spec`. Used by the etcd backend, which
    /// refuses such records where the disk backend keeps them in dynamic form.
    #[cfg(feature = "etcd")]
    pub(crate) fn decode_exact(
        &self,
        metadata: Metadata,
        spec: serde_json::Value,
    ) -> Result<SharedResource> {
        let Some(decoder) = self.decoders.get(metadata.resource_type()) else {
            return Ok(std::sync::Arc::new(DynamicResource { metadata, spec }));
        };
        let pointer = metadata.pointer().clone();
        decoder(metadata, spec).map_err(|e| {
            Error::invalid(
                pointer.to_string(),
                "spec",
                format!(
                    "stored spec does not decode as {}: {e}",
                    pointer.resource_type()
                ),
            )
        })
    }

    /// Turns a dynamic resource of a registered type into its typed form, so that what a reader
    /// gets does not depend on whether the value came from a writer or from the file.
    pub(crate) fn normalize(&self, resource: SharedResource) -> Result<SharedResource> {
        let Some(dynamic) = resource.as_any().downcast_ref::<DynamicResource>() else {
            return Ok(resource);
        };
        let Some(decoder) = self.decoders.get(dynamic.metadata.resource_type()) else {
            return Ok(resource);
        };
        decoder(dynamic.metadata.clone(), dynamic.spec.clone()).map_err(|e| {
            Error::invalid(
                dynamic.metadata.pointer().to_string(),
                "spec",
                e.to_string(),
            )
        })
    }
}

impl fmt::Debug for KnownTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.decoders.keys().collect();
        names.sort();
        f.debug_set().entries(names).finish()
    }
}
