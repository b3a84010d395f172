//! The store file: redb tables, the store format version, opening (creating, checking, loading,
//! replaying the log past the checkpoint) and the one write path, [`StoreFile::commit`], that
//! turns a batch of changes into one transaction, folding the log into the resources table
//! every `checkpoint_interval` changes.
//!
//! This module owns every byte on disk and every redb call. It does not decide what to write
//! (validation lives in the commit log) nor serve reads (memory does), except one: the changes
//! of a kind that a watch resuming from before the in-memory window needs, read back from the
//! durable log ([`read_changes`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use cosi_core::{Error, Kind, Pointer, Result, SharedResource};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::record::{self, ChangeOp};
use super::{DiskDurability, DiskOptions};
use cosi_core::Registry;

/// The store format this build writes and the newest it reads. Bump it when the meaning of a
/// table or of a record changes in a way an older build must not misread.
///
/// Format 3 has the tables of format 2 with redb 4's encoding of tuple keys (redb 3 changed
/// how variable-width tuples are laid out, and redb 4 no longer reads the old layout), so files
/// of formats 1 and 2, written through redb 2, cannot be read by this build and are refused
/// with an error that says so (see `docs/disk-format.md`, *Versioning*).
pub(crate) const STORE_FORMAT: u64 = 3;
/// The newest format written through redb 2: its tuple keys are unreadable here.
const LAST_REDB2_FORMAT: u64 = 2;

/// `"format"` → [`STORE_FORMAT`] of the file.
const META: TableDefinition<&str, u64> = TableDefinition::new("cosi.meta");
/// `(namespace, type, id)` → record bytes: the kind's resources as of its checkpoint.
const RESOURCES: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("cosi.resources");
/// `(namespace, type, sequence)` → change entry bytes: every change after the kind's checkpoint,
/// and at least the last `retained_changes` per kind.
const CHANGES: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("cosi.changes");
/// `(namespace, type)` → the kind's checkpoint: the last change sequence folded into
/// `cosi.resources` (absent: 0, nothing folded yet).
const KINDS: TableDefinition<(&str, &str), u64> = TableDefinition::new("cosi.kinds");

const FORMAT_KEY: &str = "format";
/// `"origin"` → the store's origin, the number its bookmarks carry (absent in files created
/// before origins existed: their origin is 0).
const ORIGIN_KEY: &str = "origin";

/// One change, ready to be written: the event it becomes and its encoded forms.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// The kind's change sequence of this change (the watchers' bookmark).
    pub(crate) seq: u64,
    pub(crate) op: ChangeOp,
    /// The new state, or the last state for a destroy.
    pub(crate) resource: SharedResource,
    /// Record bytes of `resource` (not stored for a destroy); [`StoreFile::commit`] moves them out
    /// into its checkpoint bookkeeping.
    pub(crate) record: Vec<u8>,
    /// Change-log entry bytes.
    pub(crate) entry: Vec<u8>,
}

impl Change {
    pub(crate) fn pointer(&self) -> &Pointer {
        self.resource.metadata().pointer()
    }
}

/// One change read back from the log at open.
#[derive(Debug, Clone)]
pub(crate) struct LoadedChange {
    pub(crate) seq: u64,
    pub(crate) op: ChangeOp,
    pub(crate) resource: SharedResource,
    pub(crate) old: Option<SharedResource>,
}

/// Everything the file holds for one kind.
#[derive(Debug, Default)]
pub(crate) struct LoadedKind {
    /// The live resources, sorted by id.
    pub(crate) resources: Vec<SharedResource>,
    /// The kind's last change sequence.
    pub(crate) last_seq: u64,
    /// The retained change log, oldest first.
    pub(crate) changes: Vec<LoadedChange>,
}

/// The open database, shared by the committer (which opens, reopens and closes it) with the
/// readers of the change log; `None` while closed, and after a failed write until the next
/// write reopens it.
#[derive(Clone, Default)]
pub(crate) struct Handle(Arc<Mutex<Option<Arc<Database>>>>);

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.get().is_some() {
            "Handle(open)"
        } else {
            "Handle(closed)"
        })
    }
}

impl Handle {
    fn get(&self) -> Option<Arc<Database>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, db: Option<Arc<Database>>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = db;
    }
}

/// The open file.
pub(crate) struct StoreFile {
    path: PathBuf,
    db: Handle,
    /// The origin its bookmarks carry.
    origin: u64,
    /// The changes in the log that the resources table does not reflect yet.
    unfolded: Unfolded,
}

/// The changes committed to the log since the last checkpoint, folded into `cosi.resources`
/// once there are `checkpoint_interval` of them.
///
/// Writing the resources table on every commit would double the pages a one-write commit
/// touches (measured: a second table costs ~25 % of a durable one-insert commit); appending to
/// the log alone and folding in bulk keeps the per-write cost near raw redb's.
#[derive(Debug, Default)]
struct Unfolded {
    /// The latest record of every resource changed since the checkpoint; `None`: destroyed.
    records: BTreeMap<Pointer, Option<Vec<u8>>>,
    /// The last sequence per kind changed since the checkpoint.
    heads: BTreeMap<Kind, u64>,
    /// How many changes, not resources, since the checkpoint.
    changes: usize,
}

impl Unfolded {
    fn add(&mut self, pointer: &Pointer, seq: u64, record: Option<Vec<u8>>) {
        self.records.insert(pointer.clone(), record);
        self.heads.insert(pointer.kind().clone(), seq);
        self.changes += 1;
    }
}

/// The highest change sequence a file may hold: half the range, so that counting on from it
/// can never overflow. No store gets there (a billion changes a second for 292 years); a file
/// that says so is damaged, and refusing it is better than a store whose next write overflows.
const MAX_SEQUENCE: u64 = u64::MAX / 2;

fn plausible_sequence(seq: u64, kind: &Kind, path: &Path) -> Result<u64> {
    if seq > MAX_SEQUENCE {
        return Err(Error::Backend {
            subject: display(path),
            message: format!(
                "{kind} is at change sequence {seq}, past the {MAX_SEQUENCE} a store can reach: \
                 the file is damaged"
            ),
            retryable: false,
            source: None,
        });
    }
    Ok(seq)
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Maps a redb error to a store error about `path`.
fn storage_error(path: &Path, doing: &str, error: impl Into<redb::Error>) -> Error {
    let error: redb::Error = error.into();
    let retryable = matches!(error, redb::Error::DatabaseAlreadyOpen);
    let message = match &error {
        redb::Error::DatabaseAlreadyOpen => {
            format!("{doing}: the file is locked: another process (or another store in this process) has it open")
        }
        redb::Error::Corrupted(m) => format!("{doing}: the file is corrupt: {m}"),
        redb::Error::UpgradeRequired(v) => {
            format!("{doing}: the file uses redb file format {v}, which this build cannot open")
        }
        redb::Error::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            format!("{doing}: the file is truncated ({e})")
        }
        other => format!("{doing}: {other}"),
    };
    match error {
        redb::Error::Io(io) => Error::backend(display(path), message, retryable, io),
        _ => Error::Backend {
            subject: display(path),
            message,
            retryable,
            source: None,
        },
    }
}

impl StoreFile {
    /// Opens the store at `path`, creating it if absent, and loads its contents.
    pub(crate) fn open(
        path: &Path,
        options: &DiskOptions,
        registry: &Registry,
    ) -> Result<(StoreFile, BTreeMap<Kind, LoadedKind>)> {
        let db = if path.exists() {
            check_format_read_only(path, options)?;
            let db = open_existing(path, options)?;
            finish_interrupted_creation(path);
            db
        } else {
            create_new(path, options)?
        };
        let handle = Handle::default();
        handle.set(Some(Arc::new(db)));
        let mut file = StoreFile {
            path: path.to_path_buf(),
            db: handle,
            origin: 0,
            unfolded: Unfolded::default(),
        };
        let loaded = file.load(options, registry)?;
        Ok((file, loaded))
    }

    /// The origin the store's bookmarks carry.
    pub(crate) fn origin(&self) -> u64 {
        self.origin
    }

    /// The handle readers of the change log share.
    pub(crate) fn handle(&self) -> Handle {
        self.db.clone()
    }

    /// The database, reopening it if a failed write closed it.
    pub(crate) fn database(&mut self, options: &DiskOptions) -> Result<Arc<Database>> {
        if let Some(db) = self.db.get() {
            return Ok(db);
        }
        let db = Arc::new(open_existing(&self.path, options)?);
        self.db.set(Some(db.clone()));
        Ok(db)
    }

    /// Forgets the database after an I/O failure: redb refuses every later write on that handle,
    /// so the next batch reopens the file (which is exactly as the last good commit left it).
    pub(crate) fn reset(&mut self) {
        self.db.set(None);
    }

    /// Releases the file (and its lock) once every in-flight write or log read holding it is
    /// done.
    pub(crate) fn close(&mut self) {
        self.db.set(None);
    }

    fn load(
        &mut self,
        options: &DiskOptions,
        registry: &Registry,
    ) -> Result<BTreeMap<Kind, LoadedKind>> {
        let path = self.path.clone();
        let db = self.database(options)?;
        let read = db
            .begin_read()
            .map_err(|e| storage_error(&path, "reading the store", e))?;
        let meta = read.open_table(META).map_err(|e| match e {
            redb::TableError::TableDoesNotExist(_) => not_a_store(&path),
            other => storage_error(&path, "reading the store format", other),
        })?;
        let format = meta
            .get(FORMAT_KEY)
            .map_err(|e| storage_error(&path, "reading the store format", e))?
            .map(|v| v.value());
        self.origin = meta
            .get(ORIGIN_KEY)
            .map_err(|e| storage_error(&path, "reading the store origin", e))?
            .map_or(0, |v| v.value());
        check_format(&path, format)?;

        // Per kind: the resources by id as of the checkpoint, brought up to date by the log.
        let mut current: BTreeMap<Kind, BTreeMap<Pointer, SharedResource>> = BTreeMap::new();
        let mut kinds: BTreeMap<Kind, LoadedKind> = BTreeMap::new();
        let read_err = |e: redb::StorageError| storage_error(&path, "loading resources", e);
        let resources = open_read_table(&read, RESOURCES, &path)?;
        if let Some(table) = resources {
            for row in table.iter().map_err(read_err)? {
                let (key, value) = row.map_err(read_err)?;
                let (namespace, resource_type, id) = key.value();
                let pointer = Pointer::new(namespace, resource_type, id);
                let resource = record::decode_resource(value.value(), pointer.clone(), registry)?;
                kinds.entry(pointer.kind().clone()).or_default();
                current
                    .entry(pointer.kind().clone())
                    .or_default()
                    .insert(pointer, resource);
            }
        }
        let checkpoints = open_read_table(&read, KINDS, &path)?;
        if let Some(table) = checkpoints {
            for row in table.iter().map_err(read_err)? {
                let (key, value) = row.map_err(read_err)?;
                let (namespace, resource_type) = key.value();
                let kind = Kind::new(namespace, resource_type);
                let seq = plausible_sequence(value.value(), &kind, &path)?;
                kinds.entry(kind).or_default().last_seq = seq;
            }
        }
        let changes = open_read_table(&read, CHANGES, &path)?;
        if let Some(table) = changes {
            for row in table.iter().map_err(read_err)? {
                let (key, value) = row.map_err(read_err)?;
                let (namespace, resource_type, seq) = key.value();
                let kind = Kind::new(namespace, resource_type);
                let seq = plausible_sequence(seq, &kind, &path)?;
                let subject = format!("{kind} change {seq}");
                let entry = record::decode_change(value.value(), &subject)?;
                let loaded = kinds.entry(kind.clone()).or_default();
                let pointer = kind.pointer(entry.id.as_str());
                let replayed = seq > loaded.last_seq;
                // Up to `last_seq` the log is history the resources already reflect; beyond it
                // every change must follow the one before, and is replayed onto them.
                if replayed && seq != loaded.last_seq + 1 {
                    return Err(Error::Backend {
                        subject: display(&path),
                        message: format!(
                            "the change log of {kind} jumps from sequence {} to {seq}: changes are missing",
                            loaded.last_seq
                        ),
                        retryable: false,
                        source: None,
                    });
                }
                // The record is refolded from the logged body as it is, never re-encoded
                // through the type: a resource no one wrote stays byte for byte.
                let record = match entry.op {
                    ChangeOp::Created | ChangeOp::Updated if replayed => {
                        Some(record::encode_body(&entry.resource, &pointer)?)
                    }
                    _ => None,
                };
                let resource = entry.resource.into_resource(pointer.clone(), registry);
                if replayed {
                    loaded.last_seq = seq;
                    let resources = current.entry(kind.clone()).or_default();
                    match entry.op {
                        ChangeOp::Destroyed => resources.remove(&pointer),
                        ChangeOp::Created | ChangeOp::Updated => {
                            resources.insert(pointer.clone(), resource.clone())
                        }
                    };
                    self.unfolded.add(&pointer, seq, record);
                }
                loaded.changes.push(LoadedChange {
                    seq,
                    op: entry.op,
                    resource,
                    old: entry.old.map(|old| old.into_resource(pointer, registry)),
                });
            }
        }
        for (kind, loaded) in kinds.iter_mut() {
            loaded.resources = current
                .remove(kind)
                .unwrap_or_default()
                .into_values()
                .collect();
            // Keys are ordered by (namespace, type, id): resources sorted by id, the log by
            // sequence. A log longer than the (possibly lowered) retention keeps its newest part.
            let excess = loaded
                .changes
                .len()
                .saturating_sub(options.retained_changes);
            loaded.changes.drain(..excess);
        }
        Ok(kinds)
    }
}

/// The logged changes of `kind` with sequence numbers in `(after, upto]`, oldest first, decoded
/// with `registry` — or `None` when the log no longer holds every one of them (a checkpoint
/// trimmed it) or the file is closed. With `up_to` (a `tail`), the newest of them the log still
/// holds, without a gap up to `upto`, are enough. Only changes already published to memory are asked for,
/// so they are all committed.
pub(crate) fn read_changes(
    handle: &Handle,
    path: &Path,
    kind: &Kind,
    after: u64,
    upto: u64,
    up_to: bool,
    registry: &Registry,
) -> Result<Option<Vec<LoadedChange>>> {
    let Some(db) = handle.get() else {
        return Ok(None);
    };
    if upto <= after {
        return Ok(Some(Vec::new()));
    }
    let read_err = |e: redb::StorageError| storage_error(path, "reading the change log", e);
    let read = db
        .begin_read()
        .map_err(|e| storage_error(path, "reading the change log", e))?;
    let Some(table) = open_read_table(&read, CHANGES, path)? else {
        return Ok(None);
    };
    let (namespace, resource_type) = (kind.namespace(), kind.resource_type());
    let range = table
        .range((namespace, resource_type, after + 1)..=(namespace, resource_type, upto))
        .map_err(read_err)?;
    let mut changes = Vec::with_capacity((upto - after).min(1 << 16) as usize);
    // With `up_to`, the changes may start where the log begins, if that is after `after`.
    let mut expected = (!up_to).then_some(after + 1);
    for row in range {
        let (key, value) = row.map_err(read_err)?;
        let seq = key.value().2;
        if seq != *expected.get_or_insert(seq) {
            return Ok(None);
        }
        expected = Some(seq + 1);
        let entry = record::decode_change(value.value(), &format!("{kind} change {seq}"))?;
        let pointer = kind.pointer(entry.id.as_str());
        changes.push(LoadedChange {
            seq,
            op: entry.op,
            resource: entry.resource.into_resource(pointer.clone(), registry),
            old: entry.old.map(|old| old.into_resource(pointer, registry)),
        });
    }
    // Every change up to `upto`, without a gap from the first one read.
    let complete = changes
        .first()
        .is_some_and(|first| changes.len() as u64 == upto - first.seq + 1)
        && (up_to || changes.len() as u64 == upto - after);
    Ok(complete.then_some(changes))
}

fn open_read_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    read: &redb::ReadTransaction,
    table: TableDefinition<K, V>,
    path: &Path,
) -> Result<Option<redb::ReadOnlyTable<K, V>>> {
    match read.open_table(table) {
        Ok(t) => Ok(Some(t)),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(storage_error(path, "opening a table", e)),
    }
}

/// Refuses, with the error `docs/disk-format.md` promises, a file whose store format this build
/// does not read.
fn check_format(path: &Path, format: Option<u64>) -> Result<()> {
    let refused = |message: String| Error::Unsupported {
        subject: display(path),
        message,
    };
    match format {
        Some(STORE_FORMAT) => Ok(()),
        Some(old @ 1..=LAST_REDB2_FORMAT) => Err(refused(format!(
            "store format {old} was written by an older version of cosi-rs through redb 2, whose \
             key encoding this build (format {STORE_FORMAT}, redb 4) cannot read; its data is left \
             unchanged: open it with that version to export what it holds, or start with a new \
             store"
        ))),
        Some(newer) if newer > STORE_FORMAT => Err(refused(format!(
            "store format {newer} was written by a newer version; this build reads up to format \
             {STORE_FORMAT}"
        ))),
        other => Err(Error::Backend {
            subject: display(path),
            message: format!("not a cosi store: unknown store format {other:?}"),
            retryable: false,
            source: None,
        }),
    }
}

/// The error for a redb file without `cosi.meta`: some other program's database.
fn not_a_store(path: &Path) -> Error {
    Error::Backend {
        subject: display(path),
        message: "not a cosi store: the file is a redb database without the cosi.meta table".into(),
        retryable: false,
        source: None,
    }
}

/// Checks the store format of an existing file through a read-only open, so that a file this
/// build refuses — another format, or no cosi store at all — is not even opened for writing
/// (which would touch its header). A file the read-only open cannot read (it needs a repair,
/// or another store holds it) is left to the writable open, which repairs it or reports the
/// lock; the format is checked again at load.
fn check_format_read_only(path: &Path, options: &DiskOptions) -> Result<()> {
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        builder(options).open_read_only(path)
    }));
    let Ok(Ok(db)) = opened else {
        return Ok(());
    };
    let Ok(read) = db.begin_read() else {
        return Ok(());
    };
    let meta = match read.open_table(META) {
        Ok(meta) => meta,
        // Every store has it from its first commit, before it is linked into place.
        Err(redb::TableError::TableDoesNotExist(_)) => return Err(not_a_store(path)),
        Err(_) => return Ok(()),
    };
    match meta.get(FORMAT_KEY) {
        Ok(format) => check_format(path, format.map(|v| v.value())),
        Err(_) => Ok(()),
    }
}

fn builder(options: &DiskOptions) -> redb::Builder {
    let mut builder = Database::builder();
    builder.set_cache_size(options.cache_size);
    builder
}

/// The error for a store file that cannot be read as one: `what` says how it is damaged, and
/// the message what an operator can do (the store cannot repair it).
pub(crate) fn damaged(path: &Path, what: &str) -> Error {
    Error::Backend {
        subject: display(path),
        message: format!(
            "opening the store: the file is damaged (truncated or corrupt): {what}; restore it \
             from a copy, or move it aside to start with an empty store"
        ),
        retryable: false,
        source: None,
    }
}

fn open_existing(path: &Path, options: &DiskOptions) -> Result<Database> {
    let damaged = |what: String| damaged(path, &what);
    match std::fs::metadata(path) {
        // redb would initialize an empty file; here it can only be a store that lost its data.
        Ok(m) if m.len() == 0 => return Err(damaged("it is empty".into())),
        Ok(_) => {}
        Err(e) => {
            return Err(Error::backend(
                display(path),
                format!("opening the store: {e}"),
                false,
                e,
            ))
        }
    }
    // redb asserts on some damaged headers (e.g. a file shorter than its header says) instead
    // of returning an error; contain that here so that a bad file is an error, never a crash.
    let opened =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder(options).open(path)));
    match opened {
        Ok(result) => result.map_err(|e| {
            newer_redb_format(path, &e)
                .unwrap_or_else(|| storage_error(path, "opening the store", e))
        }),
        Err(panic) => Err(damaged(
            super::panic_message(&*panic).unwrap_or_else(|| "redb rejected it".into()),
        )),
    }
}

/// The error for a file in a redb file format newer than this build's redb reads, which redb
/// reports as corrupt ("Expected file format version <= 3, found 4"): such a file is most
/// likely not damaged but newer, and an operator told it is corrupt might remove it. (The
/// message is redb's; `a_file_of_a_newer_redb_file_format_is_refused_as_newer_not_as_corrupt`
/// catches a change to it.)
fn newer_redb_format(path: &Path, error: &redb::DatabaseError) -> Option<Error> {
    let redb::DatabaseError::Storage(redb::StorageError::Corrupted(message)) = error else {
        return None;
    };
    let (reads, found) = message
        .strip_prefix("Expected file format version <= ")?
        .split_once(", found ")?;
    let (reads, found): (u8, u8) = (reads.parse().ok()?, found.parse().ok()?);
    (found > reads).then(|| Error::Unsupported {
        subject: display(path),
        message: format!(
            "the file uses redb file format {found}, newer than the {reads} this build reads: it \
             was written by a newer version (of cosi-rs, or of another program on redb), unless \
             that header byte is damaged; its data is left unchanged: open it with that version"
        ),
    })
}

/// Creates a store under a temporary name and links it into place once its format is
/// committed, so that a file at `path` is always a complete store: an empty or partial file
/// there is damage to report, never a store to start afresh in.
///
/// Two processes creating the same store at once cannot both win: the temporary file is locked
/// by redb while it is being prepared, and it is linked to `path` with `hard_link`, which never
/// replaces an existing file. The loser opens (or finds locked) the winner's store.
fn create_new(path: &Path, options: &DiskOptions) -> Result<Database> {
    let creating = creating_path(path);
    let io_error = |doing: &str, e: std::io::Error| {
        Error::backend(display(path), format!("{doing}: {e}"), false, e)
    };
    let remove_partial = || match std::fs::remove_file(&creating) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("creating the store (removing a partial one)", e)),
    };
    let db = match builder(options).create(&creating) {
        Ok(db) => db,
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
            return Err(storage_error(
                path,
                "creating the store",
                redb::DatabaseError::DatabaseAlreadyOpen,
            ))
        }
        // Unlocked and unreadable: what a creation that crashed early leaves. Start over.
        Err(_) => {
            remove_partial()?;
            builder(options)
                .create(&creating)
                .map_err(|e| storage_error(path, "creating the store", e))?
        }
    };
    // redb::Error is large, but it is built at most once per failed call.
    #[allow(clippy::result_large_err)]
    let init = || -> std::result::Result<(), redb::Error> {
        let mut txn = db.begin_write()?;
        txn.set_durability(redb::Durability::Immediate)?;
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(FORMAT_KEY, STORE_FORMAT)?;
            meta.insert(ORIGIN_KEY, crate::origin::fresh_origin())?;
            drop(meta);
            txn.open_table(RESOURCES)?;
            txn.open_table(CHANGES)?;
            txn.open_table(KINDS)?;
        }
        txn.commit()?;
        Ok(())
    };
    init().map_err(|e| storage_error(path, "initializing the store", e))?;
    match std::fs::hard_link(&creating, path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another process created the store first: use (or be refused) theirs.
            drop(db);
            remove_partial()?;
            return open_existing(path, options);
        }
        Err(e) => return Err(io_error("moving the new store into place", e)),
    }
    remove_partial()?;
    sync_directory(path).map_err(|e| io_error("syncing the store directory", e))?;
    Ok(db)
}

/// The name a store is prepared under before it is linked to `path`.
fn creating_path(path: &Path) -> PathBuf {
    let mut creating = path.as_os_str().to_owned();
    creating.push(".creating");
    PathBuf::from(creating)
}

/// Makes the directory entries of `path`'s directory durable (the current directory for a
/// bare file name).
fn sync_directory(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => dir,
        None => Path::new("."),
    };
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

/// Removes the temporary name of a creation that crashed after linking the store to `path`
/// but before unlinking that name. Left there, it would be a second name of the live store: once
/// the store at `path` is removed (to start afresh), the next open would take that name for a
/// creation leftover and bring the old contents back. Called with the store's lock held, so no
/// creation of this store can be under way; a temporary file that is not this store is left to
/// the creation that owns it.
fn finish_interrupted_creation(path: &Path) {
    let creating = creating_path(path);
    match (std::fs::metadata(path), std::fs::metadata(&creating)) {
        (Ok(store), Ok(temporary)) if same_file(&store, &temporary) => {}
        _ => return,
    }
    if let Err(error) = std::fs::remove_file(&creating).and_then(|()| sync_directory(path)) {
        tracing::warn!(path = %creating.display(), %error, "cannot remove the second name an interrupted creation left to the store; remove it before removing the store");
    }
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// Without inode numbers a second name cannot be told from another file: it is left alone.
#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata) -> bool {
    false
}

impl StoreFile {
    /// Writes a batch of changes as one transaction: all of it is durable when this returns
    /// `Ok`, none of it is in the file when it returns `Err`. The changes go to the log; once
    /// `checkpoint_interval` changes are waiting, the same transaction folds them into the
    /// resources table and trims the log to its retained length. The changes' record bytes are
    /// moved into the store's bookkeeping (publication needs only the resources).
    pub(crate) fn commit(&mut self, changes: &mut [Change], options: &DiskOptions) -> Result<()> {
        let db = self.database(options)?;
        let fold = self.unfolded.changes + changes.len() >= options.checkpoint_interval.max(1);
        self.write(&db, changes, fold, options)
            .map_err(|e| storage_error(&self.path, "committing writes", e))
    }

    /// Folds what the log holds beyond the checkpoint into the resources table in a transaction
    /// of its own; called when the store closes, so that the next open replays nothing.
    pub(crate) fn checkpoint(&mut self, options: &DiskOptions) -> Result<()> {
        if self.unfolded.changes == 0 {
            return Ok(());
        }
        let db = self.database(options)?;
        self.write(&db, &mut [], true, options)
            .map_err(|e| storage_error(&self.path, "writing a checkpoint", e))
    }

    /// One transaction: `changes` appended to the log, the format mark if the file still has
    /// an older one, and with `fold` the checkpoint. Memory-side bookkeeping changes only once
    /// the transaction is committed.
    // redb::Error is large, but it is built at most once per failed commit.
    #[allow(clippy::result_large_err)]
    fn write(
        &mut self,
        db: &Database,
        changes: &mut [Change],
        fold: bool,
        options: &DiskOptions,
    ) -> std::result::Result<(), redb::Error> {
        let mut txn = db.begin_write()?;
        // A checkpoint is always durable: it is what a relaxed store falls back to after a crash.
        let durability = if fold {
            redb::Durability::Immediate
        } else {
            redb_durability(options.durability)
        };
        txn.set_durability(durability)?;
        {
            let mut log = txn.open_table(CHANGES)?;
            for change in changes.iter() {
                let pointer = change.pointer();
                log.insert(
                    (pointer.namespace(), pointer.resource_type(), change.seq),
                    change.entry.as_slice(),
                )?;
            }
            if fold {
                self.write_checkpoint(&txn, &mut log, changes, options.retained_changes)?;
            }
        }
        txn.commit()?;
        if fold {
            self.unfolded = Unfolded::default();
        } else {
            for change in changes {
                let record =
                    (change.op != ChangeOp::Destroyed).then(|| std::mem::take(&mut change.record));
                self.unfolded.add(change.pointer(), change.seq, record);
            }
        }
        Ok(())
    }

    /// Applies the unfolded changes, then `batch`, to the resources table, moves each changed
    /// kind's checkpoint to its last sequence and trims its log to `retained` entries.
    #[allow(clippy::result_large_err)]
    fn write_checkpoint(
        &self,
        txn: &redb::WriteTransaction,
        log: &mut redb::Table<(&str, &str, u64), &[u8]>,
        batch: &[Change],
        retained: usize,
    ) -> std::result::Result<(), redb::Error> {
        let mut resources = txn.open_table(RESOURCES)?;
        let mut kinds = txn.open_table(KINDS)?;
        let mut put = |pointer: &Pointer, record: Option<&[u8]>| {
            let key = (pointer.namespace(), pointer.resource_type(), pointer.id());
            match record {
                Some(record) => resources.insert(key, record).map(|_| ()),
                None => resources.remove(key).map(|_| ()),
            }
        };
        for (pointer, record) in &self.unfolded.records {
            put(pointer, record.as_deref())?;
        }
        let mut heads = self.unfolded.heads.clone();
        for change in batch {
            let record = (change.op != ChangeOp::Destroyed).then_some(change.record.as_slice());
            put(change.pointer(), record)?;
            heads.insert(change.pointer().kind().clone(), change.seq);
        }
        for (kind, head) in heads {
            let (namespace, resource_type) = (kind.namespace(), kind.resource_type());
            kinds.insert((namespace, resource_type), head)?;
            if let Some(cut) = head.checked_sub(retained as u64) {
                log.retain_in(
                    (namespace, resource_type, 0)..=(namespace, resource_type, cut),
                    |_, _| false,
                )?;
            }
        }
        Ok(())
    }
}

fn redb_durability(durability: DiskDurability) -> redb::Durability {
    match durability {
        DiskDurability::Immediate => redb::Durability::Immediate,
        DiskDurability::Eventual => redb::Durability::None,
    }
}
