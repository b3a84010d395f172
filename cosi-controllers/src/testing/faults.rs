//! [`FaultyState`]: a [`State`] wrapper that fails chosen calls, to test how controllers handle
//! store failures.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cosi_core::{
    Call, CreateOptions, DestroyOptions, Error, Kind, ListOptions, Pointer, Result, SharedResource,
    State, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};

#[derive(Debug)]
enum Fault {
    NthWrite {
        resource_type: String,
        remaining: u64,
    },
    Reads {
        kind: Kind,
    },
    Watches {
        kind: Kind,
    },
    Holds {
        kind: Kind,
    },
}

/// Wraps a [`State`] and fails chosen calls with a retryable [`Error::Backend`] whose message
/// starts with `injected fault`. A failed call never reaches the wrapped store.
///
/// ```
/// use std::sync::Arc;
/// use cosi_controllers::testing::FaultyState;
/// use cosi_core::{CreateOptions, Resource, ResourceSpec, State};
/// use cosi_state::{MemoryOptions, MemoryState};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct Thing { n: u32 }
/// # impl ResourceSpec for Thing { const TYPE: &'static str = "Things.test.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "test"; }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let state = FaultyState::new(Arc::new(MemoryState::new(MemoryOptions::default())));
/// state.fail_nth_write(Thing::TYPE, 2);
/// let create = |id: &str| state.create(Resource::new(id.to_string(), Thing::default()).into_shared(), CreateOptions::default());
/// assert!(create("a").await.is_ok());
/// assert!(create("b").await.unwrap_err().to_string().contains("injected fault"));
/// assert!(create("c").await.is_ok());
/// assert_eq!(state.injected(), 1);
/// # });
/// ```
pub struct FaultyState {
    inner: Arc<dyn State>,
    faults: Mutex<Vec<Fault>>,
    injected: AtomicU64,
    /// Rung when holds are lifted.
    released: tokio::sync::Notify,
    /// Kind watches waiting for a hold to be lifted.
    held: AtomicUsize,
}

impl std::fmt::Debug for FaultyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyState")
            .field("faults", &*self.lock())
            .field("injected", &self.injected())
            .field("held", &self.held_watches())
            .finish_non_exhaustive()
    }
}

impl FaultyState {
    /// Wraps `inner` with no faults armed.
    pub fn new(inner: Arc<dyn State>) -> Self {
        FaultyState {
            inner,
            faults: Mutex::new(Vec::new()),
            injected: AtomicU64::new(0),
            released: tokio::sync::Notify::new(),
            held: AtomicUsize::new(0),
        }
    }

    /// The wrapped store (calls on it bypass the faults).
    pub fn inner(&self) -> &Arc<dyn State> {
        &self.inner
    }

    /// Fails the `n`-th write (create, update or destroy; 1 = the next one) of `resource_type`
    /// counted from now, once.
    pub fn fail_nth_write(&self, resource_type: &str, n: u64) {
        self.lock().push(Fault::NthWrite {
            resource_type: resource_type.to_string(),
            remaining: n.max(1),
        });
    }

    /// Fails every read (`get`, `list`, `watch`, `watch_kind`) of `kind` until [`Self::clear`].
    pub fn fail_reads(&self, kind: Kind) {
        self.lock().push(Fault::Reads { kind });
    }

    /// Fails every watch (`watch`, `watch_kind`) of `kind` until [`Self::clear`]; `get` and
    /// `list` still work, and watches already established keep running. This is how a test
    /// makes a controller's change of inputs fail while its reconcile can still read.
    pub fn fail_watches(&self, kind: Kind) {
        self.lock().push(Fault::Watches { kind });
    }

    /// Holds every `watch_kind` of `kind` made from now on until [`Self::release_watches`] (or
    /// [`Self::clear`]): the call waits, then proceeds as the faults armed by then say. This is
    /// how a test stops a controller in the middle of watching its inputs, to order that
    /// against something else ([`Self::held_watches`] tells when a call is waiting).
    pub fn hold_watches(&self, kind: Kind) {
        self.lock().push(Fault::Holds { kind });
    }

    /// Lifts every hold of [`Self::hold_watches`]; the waiting calls proceed.
    pub fn release_watches(&self) {
        self.lock().retain(|f| !matches!(f, Fault::Holds { .. }));
        self.released.notify_waiters();
    }

    /// How many `watch_kind` calls are waiting for a hold to be lifted.
    pub fn held_watches(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Disarms every fault (and lifts every hold).
    pub fn clear(&self) {
        self.lock().clear();
        self.released.notify_waiters();
    }

    /// How many calls were failed so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Fault>> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fault(&self, subject: &dyn std::fmt::Display, what: &str) -> Error {
        self.injected.fetch_add(1, Ordering::SeqCst);
        Error::Backend {
            subject: subject.to_string(),
            message: format!("injected fault: {what}"),
            retryable: true,
            source: None,
        }
    }

    fn check_write(&self, pointer: &Pointer) -> Result<()> {
        let mut faults = self.lock();
        let mut fire = None;
        for (i, fault) in faults.iter_mut().enumerate() {
            if let Fault::NthWrite {
                resource_type,
                remaining,
            } = fault
            {
                if resource_type == pointer.resource_type() {
                    *remaining -= 1;
                    if *remaining == 0 && fire.is_none() {
                        fire = Some(i);
                    }
                }
            }
        }
        if let Some(i) = fire {
            faults.remove(i);
            drop(faults);
            return Err(self.fault(pointer, "write failed"));
        }
        Ok(())
    }

    fn check_read(&self, kind: &Kind, subject: &dyn std::fmt::Display) -> Result<()> {
        let failing = self
            .lock()
            .iter()
            .any(|f| matches!(f, Fault::Reads { kind: k } if k == kind));
        if failing {
            return Err(self.fault(subject, "read failed"));
        }
        Ok(())
    }

    fn is_held(&self, kind: &Kind) -> bool {
        self.lock()
            .iter()
            .any(|f| matches!(f, Fault::Holds { kind: k } if k == kind))
    }

    /// Waits until `kind` is held no more.
    async fn until_released(&self, kind: &Kind) {
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        // Counted down however the wait ends (a caller may drop the call).
        let _waiting = Waiting(&self.held);
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before looking, so a release in between is not missed.
            released.as_mut().enable();
            if !self.is_held(kind) {
                break;
            }
            released.await;
        }
    }

    fn check_watch(&self, kind: &Kind, subject: &dyn std::fmt::Display) -> Result<()> {
        self.check_read(kind, subject)?;
        let failing = self
            .lock()
            .iter()
            .any(|f| matches!(f, Fault::Watches { kind: k } if k == kind));
        if failing {
            return Err(self.fault(subject, "watch failed"));
        }
        Ok(())
    }
}

impl State for FaultyState {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        Call::after(self.check_read(pointer.kind(), pointer), |()| {
            self.inner.get(pointer)
        })
    }

    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        Call::after(self.check_read(kind, kind), |()| {
            self.inner.list(kind, options)
        })
    }

    fn create(&self, resource: SharedResource, options: CreateOptions) -> Call<'_, SharedResource> {
        Call::after(self.check_write(resource.metadata().pointer()), |()| {
            self.inner.create(resource, options)
        })
    }

    fn update(&self, resource: SharedResource, options: UpdateOptions) -> Call<'_, SharedResource> {
        Call::after(self.check_write(resource.metadata().pointer()), |()| {
            self.inner.update(resource, options)
        })
    }

    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
        Call::after(self.check_write(pointer), |()| {
            self.inner.destroy(pointer, options)
        })
    }

    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
        Call::after(self.check_watch(pointer.kind(), pointer), |()| {
            self.inner.watch(pointer, options)
        })
    }

    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch> {
        if self.is_held(kind) {
            return Call::pending(async move {
                self.until_released(kind).await;
                self.check_watch(kind, kind)?;
                self.inner.watch_kind(kind, options).await
            });
        }
        Call::after(self.check_watch(kind, kind), |()| {
            self.inner.watch_kind(kind, options)
        })
    }
}
