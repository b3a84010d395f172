//! The write rules of [`cosi_core::State`], as pure functions of the stored value and the write.
//!
//! Every backend in this crate calls them: the in-memory collection checks and stamps under its
//! per-kind lock; the disk backend checks before it persists and then publishes the stamped value.
//! They own the meaning of `create`/`update`/`destroy` (which fields the store sets, which
//! conflicts are reported, with which `expected`/`actual`), and nothing about storage or events.
//! The etcd backend applies them to the value it read and writes only if etcd still holds that
//! value.

use std::sync::Arc;
use std::time::SystemTime;

use cosi_core::{
    make_mut, AnyResource, DestroyOptions, Error, Pointer, Result, SharedResource, UpdateOptions,
    Version,
};

/// Checks the identity of a resource about to be created and stamps what the store owns:
/// version 1, the owner from the create options, `created` = `updated` = `now`.
///
/// The incoming value is copied only if someone else still holds it ([`make_mut`]).
pub(crate) fn prepare_create(
    resource: &mut SharedResource,
    owner: Option<Arc<str>>,
    now: SystemTime,
) -> Result<()> {
    check_identity(resource.metadata().pointer())?;
    let metadata = make_mut(resource).metadata_mut();
    metadata.set_version(Version::FIRST);
    metadata.set_owner(owner);
    metadata.set_timestamps(now, now);
    Ok(())
}

/// Checks an update of `stored` by `incoming`: the carried version must be the stored one, the
/// writer must be the stored owner, and the stored phase must be the expected one (if any).
/// The version is checked first: a writer that read a stale value learns that before anything
/// else, and re-reading fixes it.
pub(crate) fn check_update(
    stored: &dyn AnyResource,
    incoming: &dyn AnyResource,
    options: &UpdateOptions,
) -> Result<()> {
    let stored_md = stored.metadata();
    let carried = incoming.metadata().version();
    if carried != stored_md.version() {
        return Err(Error::VersionConflict {
            pointer: stored_md.pointer().clone(),
            expected: carried,
            actual: stored_md.version(),
        });
    }
    if stored_md.version() == Version::LAST {
        // Only a record written outside this store (another etcd writer, a tampered file) can
        // get here: the store never counts that far.
        return Err(Error::invalid(
            stored_md.pointer().to_string(),
            "metadata.version",
            format!(
                "the stored version {} is the last a resource can have: it cannot change \
                 again; destroy and create it",
                Version::LAST
            ),
        ));
    }
    check_owner(stored, options.owner.as_ref())?;
    if let Some(expected) = options.expected_phase {
        if stored_md.phase() != expected {
            return Err(Error::PhaseConflict {
                pointer: stored_md.pointer().clone(),
                expected,
                actual: stored_md.phase(),
            });
        }
    }
    Ok(())
}

/// Stamps an update that passed [`check_update`]: version = stored + 1, the stored owner and
/// `created` are kept, `updated` = `now`.
pub(crate) fn stamp_update(
    stored: &dyn AnyResource,
    resource: &mut SharedResource,
    now: SystemTime,
) {
    let stored_md = stored.metadata();
    let metadata = make_mut(resource).metadata_mut();
    metadata.set_version(stored_md.version().next());
    // A value read from the store already carries its owner: only a differing one costs a copy.
    if !metadata.has_owner(stored_md.shared_owner()) {
        metadata.set_owner(stored_md.shared_owner().cloned());
    }
    metadata.set_updated_after(stored_md, now);
}

/// Checks a destroy of `stored`: the writer must be the owner and no finalizer may be left.
/// The phase does not matter: destroying does not require tearing down first.
pub(crate) fn check_destroy(stored: &dyn AnyResource, options: &DestroyOptions) -> Result<()> {
    check_owner(stored, options.owner.as_ref())?;
    let finalizers = stored.metadata().finalizers();
    if !finalizers.is_empty() {
        return Err(Error::PendingFinalizers {
            pointer: stored.metadata().pointer().clone(),
            finalizers: finalizers.clone(),
        });
    }
    Ok(())
}

fn check_owner(stored: &dyn AnyResource, writer: Option<&Arc<str>>) -> Result<()> {
    let metadata = stored.metadata();
    if !metadata.has_owner(writer) {
        return Err(Error::OwnerConflict {
            pointer: metadata.pointer().clone(),
            owner: metadata.owner().map(str::to_string),
            writer: writer.map(|w| w.to_string()),
        });
    }
    Ok(())
}

/// Namespace, type and id must be non-empty: an empty one cannot be listed, routed or watched.
fn check_identity(pointer: &Pointer) -> Result<()> {
    let parts = [
        ("metadata.namespace", pointer.namespace()),
        ("metadata.type", pointer.resource_type()),
        ("metadata.id", pointer.id()),
    ];
    for (field, value) in parts {
        if value.is_empty() {
            return Err(Error::invalid(
                pointer.to_string(),
                field,
                "must not be empty",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::{DynamicResource, Metadata};

    fn resource_at(version: Version) -> SharedResource {
        let mut metadata = Metadata::new(Pointer::new("ns", "Things.test.cosi.dev", "a"));
        metadata.set_version(version);
        Arc::new(DynamicResource {
            metadata,
            spec: serde_json::Value::Null,
        })
    }

    #[test]
    fn a_resource_stored_at_the_last_version_cannot_be_updated() {
        let stored = resource_at(Version::LAST);
        let error = check_update(&*stored, &*stored, &UpdateOptions::default()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "ns/Things.test.cosi.dev/a: invalid metadata.version: the stored version {} is \
                 the last a resource can have: it cannot change again; destroy and create it",
                u64::MAX
            )
        );
    }
}
