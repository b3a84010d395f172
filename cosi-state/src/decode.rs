//! How backends that store resources as data (disk, etcd) turn a stored spec back into a
//! resource, with the one [`Registry`] of the process.
//!
//! A record whose type is registered becomes a typed [`cosi_core::Resource`]; any other record
//! becomes a [`DynamicResource`] and is kept exactly as stored: listed, watched, rewritten only
//! when someone writes it. The backends differ only in what a registered type's undecodable
//! spec becomes: the disk keeps it in dynamic form ([`lenient`]), etcd refuses the record
//! ([`exact`]).
//!
//! A record is read back ([`Origin::ReadBack`]): a field its type does not have was written by a
//! newer version of the program and is skipped, so a downgrade does not lose the store. A
//! dynamic resource handed to a write ([`normalize`]) is input ([`Origin::Input`]): a field its
//! registered type does not have is an error naming it, not silently dropped.

use std::sync::Arc;

use cosi_core::spec_decode::Origin;
use cosi_core::{DynamicResource, Metadata, Registry, Result, SharedResource};

/// Builds a resource from stored parts. A spec that the registered type cannot decode (an
/// incompatible change to the type) is kept in dynamic form rather than dropped.
pub(crate) fn lenient(
    registry: &Registry,
    metadata: Metadata,
    spec: serde_json::Value,
) -> SharedResource {
    if registry.contains(metadata.resource_type()) {
        match registry.decode_spec(metadata.clone(), spec.clone(), Origin::ReadBack) {
            Ok(resource) => return resource,
            Err(error) => tracing::warn!(
                resource = %metadata.pointer(),
                %error,
                "stored spec does not decode as its registered type; kept in dynamic form"
            ),
        }
    }
    Arc::new(DynamicResource { metadata, spec })
}

/// Builds a resource from stored parts. A spec that the registered type cannot decode is the
/// registry's [`cosi_core::Error::InvalidArgument`] with the path into the spec.
#[cfg(feature = "etcd")]
pub(crate) fn exact(
    registry: &Registry,
    metadata: Metadata,
    spec: serde_json::Value,
) -> Result<SharedResource> {
    if registry.contains(metadata.resource_type()) {
        return registry.decode_spec(metadata, spec, Origin::ReadBack);
    }
    Ok(Arc::new(DynamicResource { metadata, spec }))
}

/// Turns a dynamic resource of a registered type into its typed form, so that what a reader
/// gets does not depend on whether the value came from a writer or from the file. The writer's
/// spec is input: a field the type does not have is an error, not silently dropped.
pub(crate) fn normalize(registry: &Registry, resource: SharedResource) -> Result<SharedResource> {
    let Some(dynamic) = resource.as_any().downcast_ref::<DynamicResource>() else {
        return Ok(resource);
    };
    if !registry.contains(dynamic.metadata.resource_type()) {
        return Ok(resource);
    }
    registry.decode_spec(
        dynamic.metadata.clone(),
        dynamic.spec.clone(),
        Origin::Input,
    )
}
