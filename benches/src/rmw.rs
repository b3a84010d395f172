//! Read-modify-write: how every update in every workload is made (`benches/WORKLOADS.md`), the
//! way a real caller updates and the way the reference's workloads do — get the stored value,
//! change a copy, skip the write when the copy equals what was read, update with the version
//! read, and start over on a version conflict.

use std::sync::Arc;

use cosi_core::{downcast, Pointer, Resource, ResourceSpec, State, UpdateOptions};

use crate::check::WorkloadError;

/// Conflicts in a row after which an update gives up: far more than any workload's writers
/// can cause, so reaching it means something is wrong, and the workload fails instead of
/// spinning.
const MAX_CONFLICTS: usize = 10_000;

/// What one read-modify-write did.
#[derive(Debug)]
pub struct Written<S> {
    /// The value the successful attempt read.
    pub read: Arc<Resource<S>>,
    /// The value now stored (the one read, when the change left it equal).
    pub stored: Arc<Resource<S>>,
    /// Version conflicts before it succeeded.
    pub conflicts: usize,
}

/// Reads `pointer`, applies `change` to a copy of its spec and writes the copy back with the
/// version read, retrying from the read on a version conflict. Writes nothing when the copy
/// equals what was read.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use benches::item::{new_item, BenchItem};
/// use benches::rmw::read_modify_write;
/// use cosi_core::{CreateOptions, State, Version};
/// let state = benches::backend::memory_state();
/// let created = state
///     .create(new_item(0, 1).into_shared(), CreateOptions::default())
///     .await
///     .unwrap();
/// let pointer = created.metadata().pointer().clone();
///
/// let written = read_modify_write::<BenchItem>(&*state, &pointer, |spec| spec.value += 1)
///     .await
///     .unwrap();
/// assert_eq!((written.read.spec.value, written.stored.spec.value), (1, 2));
/// assert_eq!(written.stored.metadata.version(), Version::new(2));
///
/// // A change that changes nothing writes nothing.
/// let unchanged = read_modify_write::<BenchItem>(&*state, &pointer, |_| {}).await.unwrap();
/// assert_eq!(unchanged.stored.metadata.version(), Version::new(2));
/// # });
/// ```
pub async fn read_modify_write<S: ResourceSpec>(
    state: &dyn State,
    pointer: &Pointer,
    mut change: impl FnMut(&mut S),
) -> Result<Written<S>, WorkloadError> {
    let mut conflicts = 0;
    loop {
        let read = downcast::<S>(state.get(pointer).await?)?;
        let mut next = Resource::clone(&read);
        change(&mut next.spec);
        if next == *read {
            return Ok(Written {
                stored: Arc::clone(&read),
                read,
                conflicts,
            });
        }
        match state
            .update(next.into_shared(), UpdateOptions::default())
            .await
        {
            Ok(stored) => {
                return Ok(Written {
                    read,
                    stored: downcast::<S>(stored)?,
                    conflicts,
                })
            }
            Err(error) if error.is_version_conflict() && conflicts < MAX_CONFLICTS => {
                conflicts += 1;
                // Let the writer that won run on: on a single worker it could not otherwise.
                tokio::task::yield_now().await;
            }
            Err(error) => {
                return Err(WorkloadError::new(format!(
                    "update of {pointer} after {conflicts} version conflicts: {error}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use cosi_core::{
        Call, CreateOptions, DestroyOptions, Kind, ListOptions, SharedResource, Version, Watch,
        WatchKindOptions, WatchOptions,
    };

    use super::*;
    use crate::item::{new_item, BenchItem};

    /// A state where another writer changes the resource between a caller's get and its
    /// update, the first `interferences` times.
    struct Interfering {
        inner: Arc<dyn State>,
        interferences: AtomicUsize,
    }

    impl State for Interfering {
        fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
            self.inner.get(pointer)
        }
        fn list<'a>(
            &'a self,
            kind: &'a Kind,
            options: &'a ListOptions,
        ) -> Call<'a, Vec<SharedResource>> {
            self.inner.list(kind, options)
        }
        fn create<'a>(
            &'a self,
            resource: SharedResource,
            options: CreateOptions,
        ) -> Call<'a, SharedResource> {
            self.inner.create(resource, options)
        }
        fn update<'a>(
            &'a self,
            resource: SharedResource,
            options: UpdateOptions,
        ) -> Call<'a, SharedResource> {
            Call::pending(async move {
                let left = self.interferences.load(Ordering::SeqCst);
                if left > 0 {
                    self.interferences.store(left - 1, Ordering::SeqCst);
                    // The other writer adds 100 to the stored value.
                    let pointer = resource.metadata().pointer();
                    let stored = downcast::<BenchItem>(self.inner.get(pointer).await?)?;
                    let mut other = Resource::clone(&stored);
                    other.spec.value += 100;
                    self.inner
                        .update(other.into_shared(), UpdateOptions::default())
                        .await?;
                }
                self.inner.update(resource, options).await
            })
        }
        fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
            self.inner.destroy(pointer, options)
        }
        fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
            self.inner.watch(pointer, options)
        }
        fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch> {
            self.inner.watch_kind(kind, options)
        }
    }

    async fn interfering(times: usize) -> (Interfering, Pointer) {
        let inner = crate::backend::memory_state();
        let created = inner
            .create(new_item(0, 1).into_shared(), CreateOptions::default())
            .await
            .unwrap();
        let pointer = created.metadata().pointer().clone();
        let state = Interfering {
            inner,
            interferences: AtomicUsize::new(times),
        };
        (state, pointer)
    }

    #[tokio::test]
    async fn a_conflicting_write_is_retried_from_a_fresh_read() {
        // Given another writer that changes the item between our get and our update, twice,
        let (state, pointer) = interfering(2).await;
        // when we add one with a read-modify-write,
        let written = read_modify_write::<BenchItem>(&state, &pointer, |spec| spec.value += 1)
            .await
            .unwrap();
        // then both of the other writer's changes survive, ours is applied on top of them, and
        // the conflicts are counted.
        assert_eq!(written.conflicts, 2);
        assert_eq!(written.read.spec.value, 201);
        assert_eq!(written.stored.spec.value, 202);
        assert_eq!(written.stored.metadata.version(), Version::new(4));
    }

    #[tokio::test]
    async fn an_update_that_keeps_conflicting_fails_naming_the_resource() {
        let (state, pointer) = interfering(MAX_CONFLICTS + 1).await;
        let error = read_modify_write::<BenchItem>(&state, &pointer, |spec| spec.value += 1)
            .await
            .unwrap_err();
        assert!(
            error.to_string().starts_with(&format!(
                "update of {pointer} after {MAX_CONFLICTS} version conflicts: "
            )),
            "{error}"
        );
    }
}
