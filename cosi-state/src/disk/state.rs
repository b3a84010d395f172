//! [`DiskState`]: the [`State`] implementation of the disk backend. Reads and watches go to the
//! in-memory collections; writes go to the committer and return once it acknowledges them. A
//! watch resuming from before the in-memory window is first given the changes it missed from the
//! durable log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use cosi_core::{
    Call, CreateOptions, DestroyOptions, Error, Kind, ListOptions, Pointer, Registry, Result,
    SharedResource, State, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};
use tokio::sync::{mpsc, oneshot};

use super::commit_log::{Committer, WriteOp, WriteRequest};
use super::file::{self, Handle, LoadedChange, StoreFile};
use super::record::ChangeOp;
use super::recovery;
use super::DiskOptions;
use crate::memory::{self, Collections};

/// A [`State`] kept in a redb file and served from memory.
///
/// Every write returns only once it is durable (see [`super::DiskDurability`]); concurrent writes
/// share commits. Resources of types not registered in the [`Registry`] given at open load as
/// [`cosi_core::DynamicResource`] and are kept as they are.
///
/// ```
/// use std::sync::Arc;
/// use cosi_core::{CreateOptions, Registry, Resource, ResourceSpec, State, StateExt};
/// use cosi_state::{DiskOptions, DiskState};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct Hostname { name: String }
/// # impl ResourceSpec for Hostname {
/// #     const TYPE: &'static str = "Hostnames.net.cosi.dev";
/// #     const DEFAULT_NAMESPACE: &'static str = "network";
/// # }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("state.redb");
/// let registry = Arc::new(Registry::new().with::<Hostname>().unwrap());
///
/// let state = DiskState::open(&path, DiskOptions::default(), registry.clone()).await.unwrap();
/// let hostname = Resource::new("hostname", Hostname { name: "node-1".into() });
/// state.create(hostname.into_shared(), CreateOptions::default()).await.unwrap();
/// state.close().await;
///
/// // The file is the source of truth: a reopened store has the resource, typed.
/// let state = DiskState::open(&path, DiskOptions::default(), registry).await.unwrap();
/// let pointer = Hostname::kind().pointer("hostname");
/// assert_eq!(state.get_typed::<Hostname>(&pointer).await.unwrap().spec.name, "node-1");
/// # });
/// ```
#[derive(Debug)]
pub struct DiskState {
    path: PathBuf,
    collections: Arc<Collections>,
    /// Where writes go; `None` once [`DiskState::close`] began (the committer ends when the
    /// last sender is gone, so a writer holds a clone only while it hands its write over).
    queue: RwLock<Option<mpsc::Sender<WriteRequest>>>,
    /// Resolves (with an error: its sender is dropped, never used) once the committer thread
    /// has finished the accepted writes and released the file.
    committer_done: Mutex<Option<oneshot::Receiver<()>>>,
    /// [`DiskOptions::paused_clock`].
    paused_clock: bool,
    /// The file, for reading back the change log.
    log: Handle,
    registry: Arc<Registry>,
}

impl DiskState {
    /// Opens the store at `path`, creating it if it does not exist, and loads it into memory.
    ///
    /// Fails with a clear error, changing nothing, when the file is corrupt or truncated, was
    /// written by a newer format version ([`Error::Unsupported`]), is locked by another open
    /// store (a retryable [`Error::Backend`]), or cannot be created or read. Must be called
    /// within a tokio runtime (the file is loaded on a blocking task of it).
    ///
    /// Writes are committed on a thread of the store's own (`cosi-disk-committer`); a writer
    /// awaits its commit (in a blocking task with [`DiskOptions::paused_clock`], for tests on a
    /// paused tokio clock).
    pub async fn open(
        path: impl AsRef<Path>,
        options: DiskOptions,
        registry: Arc<Registry>,
    ) -> Result<DiskState> {
        let path = path.as_ref().to_path_buf();
        let (file, loaded) = {
            let (at, options, registry) = (path.clone(), options.clone(), registry.clone());
            // redb panics on some damaged pages instead of returning an error, while it opens
            // the file or as the store loads its contents: either way the file is damaged.
            tokio::task::spawn_blocking(move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    StoreFile::open(&at, &options, &registry)
                }))
                .unwrap_or_else(|panic| {
                    Err(super::file::damaged(
                        &at,
                        &super::panic_message(&*panic).unwrap_or_else(|| "redb rejected it".into()),
                    ))
                })
            })
            .await
            .map_err(|e| Error::Backend {
                subject: path.display().to_string(),
                message: format!("opening the store failed: {e}"),
                retryable: false,
                source: None,
            })??
        };
        // Shared by readers, watchers and the committer (their only writer).
        let collections = Arc::new(Collections::new(options.memory.clone(), file.origin()));
        for (kind, contents) in loaded {
            let collection =
                recovery::restore(kind.clone(), contents, &options.memory, file.origin());
            collections.insert(kind, collection);
        }
        let (queue, requests) = mpsc::channel(options.queue_capacity.max(1));
        let paused_clock = options.paused_clock;
        let log = file.handle();
        let committer = Committer {
            file,
            path: path.clone(),
            collections: collections.clone(),
            options,
            registry: registry.clone(),
        };
        let (done, committer_done) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("cosi-disk-committer".into())
            .spawn(move || {
                committer.run(requests);
                drop(done);
            })
            .map_err(|e| {
                Error::backend(
                    path.display().to_string(),
                    format!("opening the store: cannot start the committer thread: {e}"),
                    true,
                    e,
                )
            })?;
        Ok(DiskState {
            path,
            collections,
            queue: RwLock::new(Some(queue)),
            committer_done: Mutex::new(Some(committer_done)),
            paused_clock,
            log,
            registry,
        })
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Finishes the writes already accepted, then releases the file (and its lock), so that it
    /// can be reopened in this process. Later writes fail with a non-retryable
    /// [`Error::Backend`] saying the store is closed; reads and watches still see the contents.
    ///
    /// It takes `&self`, so a store shared with an engine or a server is closed through any of
    /// its handles once they stop writing; a second call returns at once. Dropping the last
    /// handle releases the file too, but without waiting for it.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use cosi_core::{CreateOptions, DynamicResource, Metadata, Pointer, Registry, State};
    /// use cosi_state::{DiskOptions, DiskState};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("state.redb");
    /// let registry = Arc::new(Registry::new());
    /// let state = Arc::new(DiskState::open(&path, DiskOptions::default(), registry.clone()).await.unwrap());
    /// let shared: Arc<dyn State> = state.clone();
    /// state.close().await;
    ///
    /// let note = DynamicResource {
    ///     metadata: Metadata::new(Pointer::new("ns", "Notes.test.cosi.dev", "n")),
    ///     spec: serde_json::json!("hi"),
    /// };
    /// let err = shared.create(std::sync::Arc::new(note), CreateOptions::default()).await.unwrap_err();
    /// assert!(err.to_string().ends_with("is closed"), "{err}");
    /// // The file is free again while the old handles live on.
    /// let reopened = DiskState::open(&path, DiskOptions::default(), registry).await.unwrap();
    /// reopened.close().await;
    /// # });
    /// ```
    pub async fn close(&self) {
        drop(
            self.queue
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let done = self
            .committer_done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(done) = done {
            // Resolves when the thread ends, also by a panic (which unwinds and drops the file).
            let _ = wait_for_committer(done, self.paused_clock).await;
        }
    }

    async fn submit(&self, op: WriteOp, subject: impl Fn() -> String) -> Result<SharedResource> {
        let (reply, outcome) = oneshot::channel();
        let closed = || Error::Backend {
            subject: subject(),
            message: format!("the store {} is closed", self.path.display()),
            retryable: false,
            source: None,
        };
        let queue = self
            .queue
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(closed)?;
        queue
            .send(WriteRequest { op, reply })
            .await
            .map_err(|_| closed())?;
        drop(queue);
        wait_for_committer(outcome, self.paused_clock)
            .await
            .map_err(|_| closed())?
    }
}

/// Awaits what the committer thread sends on `reply`; `Err` if it dropped the sender. With
/// [`DiskOptions::paused_clock`] the wait happens in a blocking task, so that a paused tokio
/// clock does not advance meanwhile.
async fn wait_for_committer<T: Send + 'static>(
    reply: oneshot::Receiver<T>,
    paused_clock: bool,
) -> Result<T, ()> {
    if paused_clock {
        match tokio::task::spawn_blocking(move || reply.blocking_recv()).await {
            Ok(Ok(value)) => Ok(value),
            _ => Err(()),
        }
    } else {
        reply.await.map_err(|_| ())
    }
}

impl State for DiskState {
    fn get<'a>(&'a self, pointer: &'a Pointer) -> Call<'a, SharedResource> {
        // Reads are served from memory at once: cooperative like the in-memory store's.
        self.collections.get_call(pointer)
    }

    fn list<'a>(
        &'a self,
        kind: &'a Kind,
        options: &'a ListOptions,
    ) -> Call<'a, Vec<SharedResource>> {
        self.collections.list_call(kind, options)
    }

    fn create(&self, resource: SharedResource, options: CreateOptions) -> Call<'_, SharedResource> {
        Call::pending(async move {
            let pointer = resource.metadata().pointer().clone();
            self.submit(WriteOp::Create(resource, options), || pointer.to_string())
                .await
        })
    }

    fn update(&self, resource: SharedResource, options: UpdateOptions) -> Call<'_, SharedResource> {
        Call::pending(async move {
            let pointer = resource.metadata().pointer().clone();
            self.submit(WriteOp::Update(resource, options), || pointer.to_string())
                .await
        })
    }

    fn destroy<'a>(&'a self, pointer: &'a Pointer, options: DestroyOptions) -> Call<'a, ()> {
        Call::pending(async move {
            self.submit(WriteOp::Destroy(pointer.clone(), options), || {
                pointer.to_string()
            })
            .await
            .map(|_| ())
        })
    }

    fn watch<'a>(&'a self, pointer: &'a Pointer, options: WatchOptions) -> Call<'a, Watch> {
        Call::done(Ok(self.collections.watch(pointer, options)))
    }

    fn watch_kind<'a>(&'a self, kind: &'a Kind, options: WatchKindOptions) -> Call<'a, Watch> {
        Call::pending(self.watch_kind_from_log(kind, options))
    }
}

impl DiskState {
    /// [`State::watch_kind`]: from memory, with what a resumed watch missed read back from the
    /// durable log.
    async fn watch_kind_from_log(&self, kind: &Kind, options: WatchKindOptions) -> Result<Watch> {
        let (mut watcher, gap) = self.collections.watch_kind_with_gap(kind, options)?;
        if let Some(gap) = gap {
            // The in-memory window keeps only what live watchers need; a watch resuming from
            // further back (a bookmark from before a restart, or from a watch that has ended)
            // gets the exact changes from the durable log while it still holds them.
            let (log, path, kind) = (self.log.clone(), self.path.clone(), kind.clone());
            let registry = self.registry.clone();
            let (after, upto, up_to) = (gap.after, gap.upto, gap.up_to);
            let read = tokio::task::spawn_blocking(move || {
                file::read_changes(&log, &path, &kind, after, upto, up_to, &registry)
            })
            .await;
            match read {
                Ok(Ok(Some(changes))) => {
                    let changes: Vec<memory::Change> = changes.into_iter().map(change).collect();
                    watcher.fill_gap(gap, &changes);
                }
                // Trimmed by a checkpoint meanwhile, or the store closed: the watcher catches
                // up from memory instead.
                Ok(Ok(None)) => {}
                Ok(Err(error)) => {
                    tracing::warn!(path = %self.path.display(), %error, "reading the change log for a resumed watch failed; it catches up instead");
                }
                Err(error) => {
                    tracing::warn!(path = %self.path.display(), %error, "reading the change log for a resumed watch failed; it catches up instead");
                }
            }
        }
        Ok(Watch::new(watcher))
    }
}

/// A logged change as the in-memory machinery describes it.
fn change(logged: LoadedChange) -> memory::Change {
    memory::Change {
        seq: logged.seq,
        op: match logged.op {
            ChangeOp::Created => memory::ChangeOp::Created,
            ChangeOp::Updated => memory::ChangeOp::Updated,
            ChangeOp::Destroyed => memory::ChangeOp::Destroyed,
        },
        resource: logged.resource,
        old: logged.old,
    }
}
