//! [`Collection`]: one kind's contents behind its own lock, plus the wake-up of its watchers.
//!
//! This is the synchronous, reusable heart of the in-memory backend. The async `State` wrapper
//! only finds the collection of a kind and calls into it; the disk backend keeps the same
//! collections in memory and publishes into them after it has persisted a write.
//!
//! The lock is a std `RwLock` held only for the synchronous part of a call (never across an
//! `.await`). Writers append to the window and wake the watchers that are waiting; they never
//! wait for a watcher.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::SystemTime;

use cosi_core::{
    make_mut, CreateOptions, DestroyOptions, DynamicResource, Error, Kind, Metadata, Pointer,
    Result, SharedResource, UpdateOptions, WatchKindOptions,
};
use tokio::sync::Notify;

use super::contents::KindContents;
use super::shared_batches::SharedBatches;
use super::write_rules;
use super::MemoryOptions;

/// Wakes the watchers of one kind that wait for a change.
#[derive(Debug, Default)]
pub(crate) struct WatchWake {
    notify: Notify,
    /// How many watchers are between "checked for news" and "woken": a writer with no one
    /// waiting skips the notification entirely.
    waiting: AtomicUsize,
    /// Set when the store is gone: no change can come any more, so watches end.
    closed: AtomicBool,
}

impl WatchWake {
    /// Wakes every waiting watcher.
    pub(crate) fn wake(&self) {
        // Pairs with the `fetch_add` in `WaitingGuard::new`: either the writer sees the watcher
        // registered, or the watcher's check (under the kind lock, after registering) sees the
        // change the writer made before this load.
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// Ends the watches: after delivering what they already have, they return `None`.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether [`WatchWake::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

/// Counts a watcher as waiting while alive (also when its future is cancelled).
pub(crate) struct WaitingGuard<'a>(&'a WatchWake);

impl<'a> WaitingGuard<'a> {
    pub(crate) fn new(wake: &'a WatchWake) -> Self {
        wake.waiting.fetch_add(1, Ordering::SeqCst);
        WaitingGuard(wake)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One kind: its contents and its watchers' wake-up.
#[derive(Debug)]
pub(crate) struct Collection {
    kind: Kind,
    contents: RwLock<KindContents>,
    wake: WatchWake,
    /// Events built once for the kind's unfiltered watchers.
    shared: SharedBatches,
}

impl Collection {
    /// An empty collection whose first change gets sequence 1, in the store named `origin`
    /// (its bookmarks carry [`crate::origin::kind_origin`]).
    pub(crate) fn new(kind: Kind, options: &MemoryOptions, origin: u64) -> Self {
        Self::resumed_at(kind, options, origin, 0)
    }

    /// An empty collection whose first change gets `head + 1`: a durable backend resumes the
    /// sequence it persisted, so bookmarks stay meaningful across restarts. Watchers resuming
    /// before `head` get a resync (nothing older is known).
    pub(crate) fn resumed_at(kind: Kind, options: &MemoryOptions, origin: u64, head: u64) -> Self {
        // Positions count per kind: its bookmarks name the kind as well as the store.
        let origin = crate::origin::kind_origin(origin, &kind);
        Collection {
            kind,
            contents: RwLock::new(KindContents::new(options, head).with_origin(origin)),
            wake: WatchWake::default(),
            shared: SharedBatches::default(),
        }
    }

    /// The kind.
    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// Shared access to the contents (for reads and for checking a write before persisting it).
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, KindContents> {
        // A panic while holding the lock cannot leave the contents half-changed: every apply
        // step checks before it mutates, so a poisoned lock still guards consistent contents.
        self.contents.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Exclusive access to the contents. Whoever changes them must call [`Collection::wake`]
    /// after dropping the guard.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, KindContents> {
        self.contents
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the watchers after a change.
    pub(crate) fn wake(&self) {
        self.wake.wake();
    }

    /// Ends every watch of this collection once it has delivered what is already stored in its
    /// window (called when the owning store is dropped: no change can follow).
    pub(crate) fn close(&self) {
        self.wake.close();
    }

    /// The events shared by the kind's unfiltered watchers.
    pub(crate) fn shared_batches(&self) -> &SharedBatches {
        &self.shared
    }

    pub(crate) fn watch_wake(&self) -> &WatchWake {
        &self.wake
    }

    /// The stored value of `pointer`.
    pub(crate) fn get(&self, pointer: &Pointer) -> Result<SharedResource> {
        self.read()
            .get_pointer(pointer)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                pointer: pointer.clone(),
            })
    }

    /// Checks, stamps and stores a new resource.
    pub(crate) fn create(
        &self,
        mut resource: SharedResource,
        options: CreateOptions,
    ) -> Result<SharedResource> {
        self.check_kind(&resource)?;
        write_rules::prepare_create(&mut resource, options.owner, SystemTime::now())?;
        self.write().apply_create(resource.clone())?;
        self.wake();
        Ok(resource)
    }

    /// Checks, stamps and stores an update.
    pub(crate) fn update(
        &self,
        mut resource: SharedResource,
        options: UpdateOptions,
    ) -> Result<SharedResource> {
        self.check_kind(&resource)?;
        let now = SystemTime::now();
        // Copy a shared value before taking the lock, so stamping under it never deep-copies.
        make_mut(&mut resource);
        self.write()
            .check_and_update(&mut resource, &options, now)?;
        self.wake();
        Ok(resource)
    }

    /// Checks and removes a resource.
    pub(crate) fn destroy(&self, pointer: &Pointer, options: &DestroyOptions) -> Result<()> {
        self.write().check_and_destroy(pointer, options)?;
        self.wake();
        Ok(())
    }

    fn check_kind(&self, resource: &SharedResource) -> Result<()> {
        let kind = resource.metadata().kind();
        if *kind != self.kind {
            return Err(Error::invalid(
                resource.metadata().pointer().to_string(),
                "metadata.type",
                format!(
                    "resource of kind {kind} written to collection {}",
                    self.kind
                ),
            ));
        }
        Ok(())
    }
}

/// The value a pointer watch reports for an absent resource.
pub(crate) fn tombstone(pointer: &Pointer) -> SharedResource {
    Arc::new(DynamicResource {
        metadata: Metadata::new(pointer.clone()),
        spec: serde_json::Value::Null,
    })
}

/// Checks the option combinations of a kind watch that every backend rejects: `bootstrap` with
/// `tail` or `since`, and `tail` with `since`.
pub(crate) fn check_watch_options(kind: &Kind, options: &WatchKindOptions) -> Result<()> {
    if options.bootstrap && (options.tail.is_some() || options.since.is_some()) {
        let field = if options.tail.is_some() {
            "tail"
        } else {
            "since"
        };
        return Err(Error::invalid(
            kind.to_string(),
            field,
            "cannot be combined with bootstrap (a bootstrap already delivers the contents)",
        ));
    }
    if options.tail.is_some() && options.since.is_some() {
        return Err(Error::invalid(
            kind.to_string(),
            "since",
            "cannot be combined with tail (both choose where the watch starts)",
        ));
    }
    Ok(())
}
