//! Bad files and bad conditions: each gives a clear error, at open or on the write, leaves the
//! previous state intact and never panics.
//!
//! The full-disk and read-only tests mount a small tmpfs, which needs root (CAP_SYS_ADMIN), as
//! on the CI machine. Without it they fail loudly rather than skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use cosi_core::{
    CreateOptions, Error, ListOptions, Resource, ResourceSpec, State, StateExt, UpdateOptions,
};
use cosi_state::{DiskOptions, DiskState};
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Blob {
    data: String,
}
impl ResourceSpec for Blob {
    const TYPE: &'static str = "Blobs.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// A spec whose `Serialize` has a bug: it panics on negative values.
#[derive(Clone, PartialEq, Debug, Deserialize)]
struct Fragile {
    value: i64,
}
impl Serialize for Fragile {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Plain {
            value: i64,
        }
        assert!(self.value >= 0, "negative values are a bug");
        Plain { value: self.value }.serialize(serializer)
    }
}
impl ResourceSpec for Fragile {
    const TYPE: &'static str = "Fragiles.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

fn types() -> std::sync::Arc<cosi_core::Registry> {
    std::sync::Arc::new(
        cosi_core::Registry::new()
            .with::<Blob>()
            .unwrap()
            .with::<Fragile>()
            .unwrap(),
    )
}

async fn open(path: &Path) -> Result<DiskState, Error> {
    DiskState::open(path, DiskOptions::default(), types()).await
}

async fn create(state: &DiskState, id: &str, size: usize) -> Result<(), Error> {
    let blob = Resource::new(
        id,
        Blob {
            data: "x".repeat(size),
        },
    );
    state
        .create(blob.into_shared(), CreateOptions::default())
        .await
        .map(|_| ())
}

/// A store with three small resources, closed.
async fn populated_store(dir: &Path) -> PathBuf {
    let path = dir.join("store.redb");
    let state = open(&path).await.unwrap();
    for id in ["a", "b", "c"] {
        create(&state, id, 100).await.unwrap();
    }
    state.close().await;
    path
}

async fn ids(state: &DiskState) -> Vec<String> {
    state
        .list(&Blob::kind(), &ListOptions::default())
        .await
        .unwrap()
        .iter()
        .map(|r| r.metadata().id().to_string())
        .collect()
}

fn backend_message(err: &Error) -> &str {
    match err {
        Error::Backend { message, .. } => message,
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_corrupted_file_fails_to_open_and_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = populated_store(dir.path()).await;
    let mut bytes = std::fs::read(&path).unwrap();
    // Overwrite everything after the first bytes of the header with garbage.
    for (i, b) in bytes.iter_mut().enumerate().skip(16) {
        *b = (i as u8).wrapping_mul(31) ^ 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();

    let err = open(&path).await.unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(backend_message(&err).contains("corrupt"), "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a failed open must not touch the file"
    );
}

#[tokio::test]
async fn a_file_damaged_anywhere_in_its_first_pages_fails_to_open_as_damaged_never_as_a_panic() {
    // redb panics on some damaged pages (while it opens the file, or as the store loads what it
    // holds) instead of returning an error.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let state = open(&path).await.unwrap();
    for i in 0..200 {
        create(&state, &format!("r{i}"), 300).await.unwrap();
    }
    state.close().await;
    let intact = std::fs::read(&path).unwrap();
    for offset in (1024..64 * 1024).step_by(1024) {
        let mut bytes = intact.clone();
        bytes[offset..offset + 2000].fill(0xab);
        std::fs::write(&path, &bytes).unwrap();
        match open(&path).await {
            Ok(state) => state.close().await,
            Err(err) => {
                assert!(!err.is_retryable(), "offset {offset}: {err}");
                let message = backend_message(&err);
                assert!(!message.contains("panicked"), "offset {offset}: {err}");
                if message.contains("damaged") {
                    assert!(
                        message.ends_with(
                            "; restore it from a copy, or move it aside to start with an empty \
                             store"
                        ),
                        "offset {offset}: {err}"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn a_truncated_file_fails_to_open_and_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = populated_store(dir.path()).await;
    let bytes = std::fs::read(&path).unwrap();
    let truncated = &bytes[..bytes.len() / 3];
    std::fs::write(&path, truncated).unwrap();

    let err = open(&path).await.unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    // redb 4 detects the truncation itself and names it.
    let message = backend_message(&err);
    assert!(
        message.contains("corrupt") && message.contains("truncated"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), truncated);
}

#[tokio::test]
async fn an_empty_file_is_not_taken_for_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    std::fs::write(&path, b"").unwrap();

    let err = open(&path).await.unwrap_err();
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert!(backend_message(&err).contains("empty"), "{err}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
}

#[tokio::test]
async fn a_file_from_a_newer_store_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = populated_store(dir.path()).await;
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&str, u64>::new("cosi.meta"))
            .unwrap()
            .insert("format", 99)
            .unwrap();
        txn.commit().unwrap();
    }

    let err = open(&path).await.unwrap_err();
    let Error::Unsupported { subject, message } = &err else {
        panic!("expected unsupported, got {err:?}");
    };
    assert_eq!(subject, &path.display().to_string());
    assert!(
        message.contains("store format 99") && message.contains("newer"),
        "{message}"
    );
}

#[tokio::test]
async fn a_redb_file_that_is_not_a_cosi_store_is_refused_and_left_as_it_was() {
    // Given another program's redb database where the store was expected,
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<&str, u64>::new("app.settings"))
            .unwrap()
            .insert("answer", 42)
            .unwrap();
        txn.commit().unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();

    // when a store opens it,
    let err = open(&path).await.unwrap_err();

    // it is refused, naming the file and why,
    let Error::Backend {
        subject,
        message,
        retryable,
        ..
    } = &err
    else {
        panic!("expected a backend error, got {err:?}");
    };
    assert_eq!(subject, &path.display().to_string());
    assert_eq!(
        message,
        "not a cosi store: the file is a redb database without the cosi.meta table"
    );
    assert!(!retryable);
    // and not a byte of it is written.
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "a failed open must not touch the file"
    );
}

#[tokio::test]
async fn a_file_of_a_newer_redb_file_format_is_refused_as_newer_not_as_corrupt() {
    // Given a store whose redb file format is newer than this build's redb reads (as a newer
    // build on a newer redb would leave it: redb keeps the version in the first byte of both
    // commit slots of its header, at offsets 64 and 192),
    let dir = tempfile::tempdir().unwrap();
    let path = populated_store(dir.path()).await;
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!((bytes[64], bytes[192]), (3, 3), "redb file format 3");
    bytes[64] = 4;
    bytes[192] = 4;
    std::fs::write(&path, &bytes).unwrap();

    // when this build opens it,
    let err = open(&path).await.unwrap_err();

    // it says the file is newer (an operator must not take it for damage and remove it),
    let Error::Unsupported { subject, message } = &err else {
        panic!("expected unsupported, got {err:?}");
    };
    assert_eq!(subject, &path.display().to_string());
    assert_eq!(
        message,
        "the file uses redb file format 4, newer than the 3 this build reads: it was written by \
         a newer version (of cosi-rs, or of another program on redb), unless that header byte \
         is damaged; its data is left unchanged: open it with that version"
    );
    // and leaves it as it was.
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "a failed open must not touch the file"
    );
}

#[tokio::test]
async fn a_record_with_a_newer_encoding_is_refused_naming_the_resource() {
    let dir = tempfile::tempdir().unwrap();
    let path = populated_store(dir.path()).await;
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<(&str, &str, &str), &[u8]>::new(
            "cosi.resources",
        ))
        .unwrap()
        .insert(("test", Blob::TYPE, "b"), [2u8, b'{', b'}'].as_slice())
        .unwrap();
        txn.commit().unwrap();
    }

    let err = open(&path).await.unwrap_err();
    assert!(
        err.to_string().contains("test/Blobs.test.cosi.dev/b"),
        "{err}"
    );
    assert!(err.to_string().contains("encoding tag 2"), "{err}");
}

#[tokio::test]
async fn a_store_open_elsewhere_is_locked_and_keeps_working_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = populated_store(dir.path()).await;
    let first = open(&path).await.unwrap();

    let err = open(&path).await.unwrap_err();
    assert!(backend_message(&err).contains("locked"), "{err}");
    assert!(err.is_retryable(), "a lock may be released: {err}");

    create(&first, "d", 10).await.unwrap();
    assert_eq!(ids(&first).await, ["a", "b", "c", "d"]);
    first.close().await;
    let reopened = open(&path).await.unwrap();
    assert_eq!(ids(&reopened).await, ["a", "b", "c", "d"]);
}

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount(8)");
        assert!(
            status.success(),
            "mounting a tmpfs failed ({status}): this test needs root (CAP_SYS_ADMIN) to create a small file system"
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(self.dir.path())
            .status()
            .expect("run mount(8)");
        assert!(status.success(), "remount {options} failed ({status})");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_write_and_changes_nothing() {
    let fs = Tmpfs::mount("2m");
    let path = fs.path().join("store.redb");
    let state = open(&path).await.unwrap();

    // When writes fill the file system,
    let mut stored = Vec::new();
    let err = loop {
        let id = format!("blob-{:03}", stored.len());
        match create(&state, &id, 64 * 1024).await {
            Ok(()) => stored.push(id),
            Err(err) => break err,
        }
        assert!(stored.len() < 1000, "a 2 MiB file system never filled up");
    };
    // then the write fails with a clear error naming the file and the cause,
    let message = backend_message(&err);
    assert!(
        message.contains("committing writes") && message.contains("No space left"),
        "{err}"
    );
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    // nothing of it is visible, everything before it is,
    let failed = format!("blob-{:03}", stored.len());
    assert!(state
        .get(&Blob::kind().pointer(failed.as_str()))
        .await
        .unwrap_err()
        .is_not_found());
    assert_eq!(ids(&state).await, stored);

    // Concurrent writers sharing the failing commits all get the error, and none is visible.
    let state = Arc::new(state);
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let state = state.clone();
            tokio::spawn(async move { create(&state, &format!("late-{w}"), 64 * 1024).await })
        })
        .collect();
    for writer in writers {
        let err = writer.await.unwrap().unwrap_err();
        assert!(backend_message(&err).contains("No space left"), "{err}");
    }
    assert_eq!(ids(&state).await, stored);
    let state = Arc::try_unwrap(state).expect("the writers are done");

    // and once space is available again the store keeps working, from where it was.
    fs.remount("size=64m");
    create(&state, &failed, 10).await.unwrap();
    stored.push(failed);
    let first = state
        .get_typed::<Blob>(&Blob::kind().pointer("blob-000"))
        .await
        .unwrap();
    let updated = state
        .update((*first).clone().into_shared(), UpdateOptions::default())
        .await
        .unwrap();
    assert_eq!(updated.metadata().version().get(), 2);
    state.close().await;
    let reopened = open(&path).await.unwrap();
    assert_eq!(ids(&reopened).await, stored);
    reopened.close().await;
}

#[tokio::test]
async fn a_store_cannot_be_created_in_a_read_only_directory() {
    let fs = Tmpfs::mount("1m");
    fs.remount("ro");
    let path = fs.path().join("store.redb");

    let err = open(&path).await.unwrap_err();
    assert!(
        backend_message(&err).contains("Read-only file system"),
        "{err}"
    );
    assert!(!path.exists());
}

#[tokio::test]
async fn a_store_on_a_read_only_file_system_fails_to_open_and_is_left_as_it_was() {
    let fs = Tmpfs::mount("4m");
    let path = populated_store(fs.path()).await;
    let bytes = std::fs::read(&path).unwrap();
    fs.remount("ro");

    let err = open(&path).await.unwrap_err();
    assert!(
        backend_message(&err).contains("Read-only file system"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);

    fs.remount("rw");
    let state = open(&path).await.unwrap();
    assert_eq!(ids(&state).await, ["a", "b", "c"]);
    state.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_racing_to_create_one_file_leave_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { open(&path).await })
        })
        .collect();
    let mut opened = Vec::new();
    for racer in racers {
        match racer.await.unwrap() {
            Ok(state) => opened.push(state),
            Err(err) => {
                assert!(backend_message(&err).contains("locked"), "{err}");
                assert!(err.is_retryable(), "{err}");
            }
        }
    }
    assert_eq!(opened.len(), 1, "exactly one store holds the file");
    let state = opened.pop().unwrap();
    create(&state, "a", 10).await.unwrap();
    state.close().await;
    let reopened = open(&path).await.unwrap();
    assert_eq!(ids(&reopened).await, ["a"]);
    assert!(!dir.path().join("store.redb.creating").exists());
}

#[tokio::test]
async fn a_store_removed_after_an_interrupted_creation_is_not_resurrected() {
    // Given a store whose creation crashed between linking it into place and removing its
    // temporary name (what is on disk then: two names of one file),
    let dir = tempfile::tempdir().unwrap();
    let path = populated_store(dir.path()).await;
    let creating = dir.path().join("store.redb.creating");
    std::fs::hard_link(&path, &creating).unwrap();
    // which was opened and used since,
    let state = open(&path).await.unwrap();
    create(&state, "d", 10).await.unwrap();
    state.close().await;

    // when the operator removes the store to start afresh,
    std::fs::remove_file(&path).unwrap();
    let state = open(&path).await.unwrap();

    // the new store is empty: the old contents do not come back through the temporary name.
    assert_eq!(ids(&state).await, Vec::<String>::new());
    state.close().await;
    assert!(!creating.exists());
}

#[tokio::test]
async fn a_spec_that_panics_while_encoded_fails_its_write_and_the_store_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let state = open(&path).await.unwrap();
    let fragile = |id: &str, value: i64| Resource::new(id, Fragile { value }).into_shared();

    // When a write's spec panics in its serde implementation (on the store's committer),
    let err = state
        .create(fragile("bad", -1), CreateOptions::default())
        .await
        .unwrap_err();

    // that write fails, saying so,
    let Error::Backend {
        subject,
        message,
        retryable,
        ..
    } = &err
    else {
        panic!("expected a backend error, got {err:?}");
    };
    assert_eq!(subject, "test/Fragiles.test.cosi.dev/bad");
    assert_eq!(
        message,
        "checking and encoding the write panicked: negative values are a bug"
    );
    assert!(!retryable);
    // and the store keeps working for every other write.
    state
        .create(fragile("good", 1), CreateOptions::default())
        .await
        .unwrap();
    let kind = Fragile::kind();
    let listed: Vec<_> = state
        .list(&kind, &ListOptions::default())
        .await
        .unwrap()
        .iter()
        .map(|r| r.metadata().id().to_string())
        .collect();
    assert_eq!(listed, ["good"]);
    state.close().await;
}
