//! Helpers derived from the [`State`] trait, so every backend gets them for free: typed reads,
//! `modify` (create-or-update with the no-op rule), teardown and finalizer handling, and waiting
//! for a condition.

use std::future::Future;
use std::sync::Arc;

use crate::{
    downcast, make_mut, same_content, AnyResource, CreateOptions, DestroyOptions, Error, Event,
    Kind, ListOptions, Phase, Pointer, Resource, ResourceSpec, Result, SharedResource, State,
    UpdateOptions, WatchOptions,
};

/// Derived operations available on every [`State`].
///
/// ```
/// # use cosi_core::*;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct Counter { n: u32 }
/// # impl ResourceSpec for Counter {
/// #     const TYPE: &'static str = "Counters.test.cosi.dev";
/// #     const DEFAULT_NAMESPACE: &'static str = "default";
/// # }
/// async fn bump(state: &dyn State) -> Result<u32> {
///     let stored = state
///         .modify(Resource::new("c", Counter::default()), UpdateOptions::default(), |r| {
///             r.spec.n += 1;
///             Ok(())
///         })
///         .await?;
///     Ok(stored.spec.n)
/// }
/// ```
pub trait StateExt: State {
    /// Reads one resource as type `S`.
    fn get_typed<'a, S: ResourceSpec>(
        &'a self,
        pointer: &'a Pointer,
    ) -> impl Future<Output = Result<Arc<Resource<S>>>> + Send + 'a {
        async move { downcast::<S>(self.get(pointer).await?) }
    }

    /// Lists a kind as type `S`.
    fn list_typed<'a, S: ResourceSpec>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> impl Future<Output = Result<Vec<Arc<Resource<S>>>>> + Send + 'a {
        async move {
            self.list(kind, options)
                .await?
                .into_iter()
                .map(downcast::<S>)
                .collect()
        }
    }

    /// Creates `template` changed by `change` if it does not exist, otherwise applies `change` to
    /// a copy of the stored value and updates it. When the result equals what is stored (metadata
    /// ignoring timestamps, and spec) nothing is written: no version bump, no event — the rule
    /// that stops controller feedback loops. Version conflicts are retried, and a resource
    /// destroyed between the read and the update is created again.
    fn modify<'a, S, F>(
        &'a self,
        template: Resource<S>,
        options: UpdateOptions,
        mut change: F,
    ) -> impl Future<Output = Result<Arc<Resource<S>>>> + Send + 'a
    where
        S: ResourceSpec,
        F: FnMut(&mut Resource<S>) -> Result<()> + Send + 'a,
    {
        async move {
            let pointer = template.metadata.pointer().clone();
            loop {
                let stored = match self.get(&pointer).await {
                    Ok(stored) => stored,
                    Err(e) if e.is_not_found() => {
                        let mut fresh = template.clone();
                        change(&mut fresh)?;
                        let create = CreateOptions {
                            owner: options.owner.clone(),
                        };
                        match self.create(fresh.into_shared(), create).await {
                            Ok(created) => return downcast::<S>(created),
                            Err(e) if e.is_already_exists() => continue,
                            Err(e) => return Err(e),
                        }
                    }
                    Err(e) => return Err(e),
                };
                let stored = downcast::<S>(stored)?;
                let mut next = (*stored).clone();
                change(&mut next)?;
                if same_content(&*stored, &next) {
                    return Ok(stored);
                }
                match self.update(next.into_shared(), options.clone()).await {
                    Ok(updated) => return downcast::<S>(updated),
                    // Destroyed since it was read: what is left to do is the create.
                    Err(e) if e.is_version_conflict() || e.is_not_found() => yield_now().await,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Reads, changes and updates an existing resource, retrying version conflicts. Unlike
    /// [`StateExt::modify`] it fails with `NotFound` when the resource is absent and always writes.
    fn update_with_conflicts<'a, S, F>(
        &'a self,
        pointer: &'a Pointer,
        options: UpdateOptions,
        mut change: F,
    ) -> impl Future<Output = Result<Arc<Resource<S>>>> + Send + 'a
    where
        S: ResourceSpec,
        F: FnMut(&mut Resource<S>) -> Result<()> + Send + 'a,
    {
        async move {
            loop {
                let stored = downcast::<S>(self.get(pointer).await?)?;
                let mut next = (*stored).clone();
                change(&mut next)?;
                match self.update(next.into_shared(), options.clone()).await {
                    Ok(updated) => return downcast::<S>(updated),
                    Err(e) if e.is_version_conflict() => yield_now().await,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Moves a resource to the tearing-down phase (idempotent). Returns whether it has no
    /// finalizers left, i.e. whether it can be destroyed now.
    fn teardown<'a>(
        &'a self,
        pointer: &'a Pointer,
        owner: Option<&'a str>,
    ) -> impl Future<Output = Result<bool>> + Send + 'a {
        async move {
            loop {
                let stored = self.get(pointer).await?;
                check_owner(&*stored, owner)?;
                if stored.metadata().phase() == Phase::TearingDown {
                    return Ok(stored.metadata().finalizers().is_empty());
                }
                let mut next = stored.clone();
                make_mut(&mut next)
                    .metadata_mut()
                    .set_phase(Phase::TearingDown);
                match self.update(next, UpdateOptions::owned_by(owner)).await {
                    Ok(updated) => return Ok(updated.metadata().finalizers().is_empty()),
                    Err(e)
                        if e.is_version_conflict() || matches!(e, Error::PhaseConflict { .. }) =>
                    {
                        yield_now().await
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Adds finalizers (any owner, any phase). Returns the stored value.
    fn add_finalizer<'a>(
        &'a self,
        pointer: &'a Pointer,
        finalizers: &'a [&str],
    ) -> impl Future<Output = Result<SharedResource>> + Send + 'a {
        async move { change_finalizers(self, pointer, finalizers, true).await }
    }

    /// Removes finalizers (any owner, any phase). Returns the stored value.
    fn remove_finalizer<'a>(
        &'a self,
        pointer: &'a Pointer,
        finalizers: &'a [&str],
    ) -> impl Future<Output = Result<SharedResource>> + Send + 'a {
        async move { change_finalizers(self, pointer, finalizers, false).await }
    }

    /// Tears a resource down, waits until its finalizers are gone, and destroys it. Succeeds if
    /// the resource is already gone or someone else destroys it meanwhile (and then leaves
    /// alone one created again under the same id, which was never torn down).
    fn teardown_and_destroy<'a>(
        &'a self,
        pointer: &'a Pointer,
        owner: Option<&'a str>,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        async move {
            loop {
                match self.teardown(pointer, owner).await {
                    Err(e) if e.is_not_found() => return Ok(()),
                    Err(e) => return Err(e),
                    Ok(true) => {}
                    Ok(false) => {
                        // Running again means a new resource under the same id: the one torn
                        // down was destroyed meanwhile (a watch that lagged sees the two as
                        // one update, without the destroy between them).
                        let ours_gone =
                            |r: &dyn AnyResource| r.metadata().phase() == Phase::Running;
                        let ready = |r: Option<&dyn AnyResource>| {
                            r.is_none_or(|r| ours_gone(r) || r.metadata().finalizers().is_empty())
                        };
                        match self.watch_for(pointer, ready).await? {
                            None => return Ok(()),
                            Some(r) if ours_gone(&*r) => return Ok(()),
                            Some(_) => {}
                        }
                    }
                }
                let options = DestroyOptions {
                    owner: owner.map(Arc::from),
                };
                match self.destroy(pointer, options).await {
                    Ok(()) => return Ok(()),
                    Err(e) if e.is_not_found() => return Ok(()),
                    // A finalizer was added between our check and the destroy: wait again.
                    Err(Error::PendingFinalizers { .. }) => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Watches a resource until `condition` holds for its state (`None` = absent) and returns
    /// that state.
    fn watch_for<'a, F>(
        &'a self,
        pointer: &'a Pointer,
        condition: F,
    ) -> impl Future<Output = Result<Option<SharedResource>>> + Send + 'a
    where
        F: Fn(Option<&dyn AnyResource>) -> bool + Send + Sync + 'a,
    {
        async move {
            let mut watch = self.watch(pointer, WatchOptions::default()).await?;
            // A pointer watch says absent with a `Destroyed`, in a resync too (a tombstone
            // before its `Bootstrapped`), so the events of the resource are all it reads.
            while let Some(event) = watch.recv().await {
                match event {
                    Event::Created { resource, .. } | Event::Updated { resource, .. }
                        if condition(Some(&*resource)) =>
                    {
                        return Ok(Some(resource));
                    }
                    Event::Destroyed { .. } if condition(None) => return Ok(None),
                    Event::Errored { error } => return Err(error),
                    _ => {}
                }
            }
            Err(Error::Backend {
                subject: pointer.to_string(),
                message: "watch ended before the condition held".into(),
                retryable: true,
                source: None,
            })
        }
    }
}

impl<T: State + ?Sized> StateExt for T {}

fn check_owner(stored: &dyn AnyResource, owner: Option<&str>) -> Result<()> {
    if stored.metadata().owner() == owner {
        Ok(())
    } else {
        Err(Error::OwnerConflict {
            pointer: stored.metadata().pointer().clone(),
            owner: stored.metadata().owner().map(str::to_string),
            writer: owner.map(str::to_string),
        })
    }
}

async fn change_finalizers<T: State + ?Sized>(
    state: &T,
    pointer: &Pointer,
    finalizers: &[&str],
    add: bool,
) -> Result<SharedResource> {
    loop {
        let stored = state.get(pointer).await?;
        let present = stored.metadata().finalizers();
        if finalizers.iter().all(|f| present.contains(*f) == add) {
            return Ok(stored);
        }
        let mut next = stored.clone();
        let metadata = make_mut(&mut next).metadata_mut();
        for f in finalizers {
            if add {
                metadata.finalizers_mut().insert(f.to_string());
            } else {
                metadata.finalizers_mut().remove(*f);
            }
        }
        // Finalizers are not the owner's business: write as whoever owns it, in any phase.
        let options = UpdateOptions {
            owner: stored.metadata().shared_owner().cloned(),
            expected_phase: None,
        };
        match state.update(next, options).await {
            Ok(updated) => return Ok(updated),
            Err(e) if e.is_version_conflict() => yield_now().await,
            Err(e) => return Err(e),
        }
    }
}

/// Lets other tasks run before a retry, on any async runtime: the first poll wakes itself and
/// returns pending, so the executor schedules its other ready tasks first (the writer that won
/// the conflict gets to finish its turn).
fn yield_now() -> impl std::future::Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
}
