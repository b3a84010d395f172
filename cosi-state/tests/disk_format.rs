//! Files laid out by hand as `docs/disk-format.md` describes them open as it says: a format 3
//! file whose change log is ahead of its checkpoint, which the open replays; and files of the
//! formats written through redb 2 (1 and 2) are refused with an error that says why — among
//! them a real format 2 file written by the last build on redb 2
//! (`tests/fixtures/format2-redb2.redb`). These pin the on-disk contract independently of the
//! code that writes it. A format 3 file written through `DiskState` by an earlier build
//! (`tests/fixtures/format3-before-single-encoding.redb`) must keep reading the same.

mod disk_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cosi_core::{
    Bookmark, Error, Event, ListOptions, ResourceSpec, State, StateExt, WatchKindOptions,
};
use cosi_state::origin::kind_origin;
use cosi_state::{DiskOptions, DiskState};
use disk_common::{temp_store, Widget};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

const META: TableDefinition<&str, u64> = TableDefinition::new("cosi.meta");
const RESOURCES: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("cosi.resources");
const CHANGES: TableDefinition<(&str, &str, u64), &[u8]> = TableDefinition::new("cosi.changes");
const KINDS: TableDefinition<(&str, &str), u64> = TableDefinition::new("cosi.kinds");

/// The body of a widget record at `version` with spec `{"size": size}`.
fn body(version: u64, size: u32) -> String {
    format!(
        r#"{{"version":{version},"created":1000,"updated":{version}000,"spec":{{"size":{size}}}}}"#
    )
}

/// Record bytes: the tag byte, then the JSON body.
fn record(version: u64, size: u32) -> Vec<u8> {
    let mut bytes = vec![1u8];
    bytes.extend_from_slice(body(version, size).as_bytes());
    bytes
}

/// Change-log entry bytes; `old` is `(version, size)` of the previous state of an update.
fn change(op: &str, id: &str, (version, size): (u64, u32), old: Option<(u64, u32)>) -> Vec<u8> {
    let old = old.map_or(String::new(), |(v, s)| format!(r#","old":{}"#, body(v, s)));
    let json = format!(
        r#"{{"op":"{op}","id":"{id}","resource":{}{old}}}"#,
        body(version, size)
    );
    let mut bytes = vec![1u8];
    bytes.extend_from_slice(json.as_bytes());
    bytes
}

/// What one hand-made file holds: its format, the resources table, the change log and the
/// kinds table (all of the `Widget` kind).
struct Layout {
    format: u64,
    resources: Vec<(&'static str, Vec<u8>)>,
    changes: Vec<(u64, Vec<u8>)>,
    checkpoint: Option<u64>,
}

fn write_file(path: &Path, layout: &Layout) {
    let db = redb::Database::builder().create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        txn.open_table(META)
            .unwrap()
            .insert("format", layout.format)
            .unwrap();
        let mut resources = txn.open_table(RESOURCES).unwrap();
        for (id, bytes) in &layout.resources {
            resources
                .insert(
                    (Widget::DEFAULT_NAMESPACE, Widget::TYPE, *id),
                    bytes.as_slice(),
                )
                .unwrap();
        }
        let mut changes = txn.open_table(CHANGES).unwrap();
        for (seq, bytes) in &layout.changes {
            changes
                .insert(
                    (Widget::DEFAULT_NAMESPACE, Widget::TYPE, *seq),
                    bytes.as_slice(),
                )
                .unwrap();
        }
        let mut kinds = txn.open_table(KINDS).unwrap();
        if let Some(checkpoint) = layout.checkpoint {
            kinds
                .insert((Widget::DEFAULT_NAMESPACE, Widget::TYPE), checkpoint)
                .unwrap();
        }
    }
    txn.commit().unwrap();
}

async fn open(path: &Path) -> cosi_core::Result<DiskState> {
    DiskState::open(
        path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new().with::<Widget>().unwrap()),
    )
    .await
}

/// `(id, version, size)` of every widget the store lists.
async fn widgets(state: &DiskState) -> Vec<(String, u64, u32)> {
    state
        .list_typed::<Widget>(&Widget::kind(), &ListOptions::default())
        .await
        .unwrap()
        .iter()
        .map(|w| {
            (
                w.metadata.id().to_string(),
                w.metadata.version().get(),
                w.spec.size,
            )
        })
        .collect()
}

/// A log ahead of its checkpoint: `a` is in the resources table as of sequence 1; the log
/// then creates `b`, updates `a` and destroys `b`.
fn log_ahead_of_checkpoint() -> Layout {
    Layout {
        format: 3,
        resources: vec![("a", record(1, 10))],
        changes: vec![
            (1, change("created", "a", (1, 10), None)),
            (2, change("created", "b", (1, 20), None)),
            (3, change("updated", "a", (2, 11), Some((1, 10)))),
            (4, change("destroyed", "b", (1, 20), None)),
        ],
        checkpoint: Some(1),
    }
}

/// The refusal of a file of an older format, as `open` returns it.
fn refused_as_older(error: &Error, format: u64) {
    let Error::Unsupported { message, .. } = error else {
        panic!("an unsupported-format error, got {error:?}");
    };
    assert_eq!(
        *message,
        format!(
            "store format {format} was written by an older version of cosi-rs through redb 2, \
             whose key encoding this build (format 3, redb 4) cannot read; its data is left \
             unchanged: open it with that version to export what it holds, or start with a new \
             store"
        )
    );
}

#[tokio::test]
async fn files_of_the_formats_written_through_redb_2_are_refused_unchanged() {
    for format in [1, 2] {
        let (_dir, path) = temp_store();
        let mut layout = log_ahead_of_checkpoint();
        layout.format = format;
        write_file(&path, &layout);
        let before = std::fs::read(&path).unwrap();

        let error = open(&path).await.unwrap_err();

        refused_as_older(&error, format);
        assert!(
            std::fs::read(&path).unwrap() == before,
            "format {format}: the file changed"
        );
    }
}

/// A file written by redb 2 needs redb 4 to repair its allocator state before anything can be
/// read from it (a read-only open is refused with `RepairAborted`), so this refusal comes after
/// that repair; the store's own tables are untouched and it is refused the same way every time.
#[tokio::test]
async fn a_real_format_2_file_written_through_redb_2_is_refused_every_time() {
    let (_dir, path) = temp_store();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format2-redb2.redb");
    std::fs::copy(&fixture, &path).unwrap();

    refused_as_older(&open(&path).await.unwrap_err(), 2);
    refused_as_older(&open(&path).await.unwrap_err(), 2);

    let db = redb::Database::open(&path).unwrap();
    let read = db.begin_read().unwrap();
    let format = read
        .open_table(META)
        .unwrap()
        .get("format")
        .unwrap()
        .unwrap()
        .value();
    assert_eq!(format, 2, "the store format mark is untouched");
}

#[tokio::test]
async fn changes_logged_after_the_checkpoint_are_replayed_at_open() {
    let (_dir, path) = temp_store();
    write_file(&path, &log_ahead_of_checkpoint());

    let state = open(&path).await.unwrap();

    assert_eq!(widgets(&state).await, [("a".to_string(), 2, 11)]);
}

#[tokio::test]
async fn a_watch_resumes_exactly_across_replayed_changes() {
    let (_dir, path) = temp_store();
    write_file(&path, &log_ahead_of_checkpoint());
    let state = open(&path).await.unwrap();

    let options = WatchKindOptions {
        // A file written before store origins existed has origin 0, mixed with each kind.
        since: Some(Bookmark::at(kind_origin(0, &Widget::kind()), 1)),
        ..WatchKindOptions::default()
    };
    let mut watch = state.watch_kind(&Widget::kind(), options).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = tokio::time::timeout(Duration::from_secs(10), watch.recv())
            .await
            .expect("an event within the guard")
            .expect("the watch is live");
        let resource = event.resource().unwrap();
        seen.push((
            event.type_name().to_string(),
            resource.metadata().id().to_string(),
            event
                .bookmark()
                .unwrap()
                .position_in(kind_origin(0, &Widget::kind()))
                .unwrap(),
            matches!(event, Event::Updated { old: Some(_), .. }),
        ));
    }

    assert_eq!(
        seen,
        [
            ("created".to_string(), "b".to_string(), 2, false),
            ("updated".to_string(), "a".to_string(), 3, true),
            ("destroyed".to_string(), "b".to_string(), 4, false),
        ]
    );
}

#[tokio::test]
async fn closing_folds_the_replayed_changes_into_the_resources_table() {
    let (_dir, path) = temp_store();
    write_file(&path, &log_ahead_of_checkpoint());
    let state = open(&path).await.unwrap();
    state.close().await;

    let db = redb::Database::open(&path).unwrap();
    let read = db.begin_read().unwrap();
    let resources: Vec<(String, serde_json::Value)> = read
        .open_table(RESOURCES)
        .unwrap()
        .iter()
        .unwrap()
        .map(|row| {
            let (key, value) = row.unwrap();
            let bytes = value.value();
            assert_eq!(bytes[0], 1, "the JSON tag");
            let json = serde_json::from_slice(&bytes[1..]).unwrap();
            (key.value().2.to_string(), json)
        })
        .collect();
    let checkpoint = read
        .open_table(KINDS)
        .unwrap()
        .get((Widget::DEFAULT_NAMESPACE, Widget::TYPE))
        .unwrap()
        .map(|v| v.value());
    assert_eq!(resources.len(), 1, "only a is left: {resources:?}");
    assert_eq!(resources[0].0, "a");
    assert_eq!(resources[0].1["version"], 2);
    assert_eq!(resources[0].1["spec"], serde_json::json!({"size": 11}));
    assert_eq!(checkpoint, Some(4));
}

#[tokio::test]
async fn a_log_with_a_gap_after_the_checkpoint_is_refused_at_open() {
    let (_dir, path) = temp_store();
    write_file(
        &path,
        &Layout {
            format: 3,
            resources: vec![],
            changes: vec![
                (1, change("created", "a", (1, 10), None)),
                (3, change("created", "b", (1, 20), None)),
            ],
            checkpoint: None,
        },
    );

    let error = open(&path).await.unwrap_err();

    let Error::Backend { message, .. } = &error else {
        panic!("a backend error, got {error:?}");
    };
    assert_eq!(
        message,
        "the change log of test/Widgets.test.cosi.dev jumps from sequence 1 to 3: changes are missing"
    );
}

#[tokio::test]
async fn a_checkpoint_past_any_reachable_sequence_is_refused_at_open() {
    // Counting on from it would overflow at the next write: only damage writes such a number.
    let (_dir, path) = temp_store();
    write_file(
        &path,
        &Layout {
            format: 3,
            resources: vec![("a", record(1, 10))],
            changes: vec![],
            checkpoint: Some(u64::MAX),
        },
    );

    let error = open(&path).await.unwrap_err();

    let Error::Backend { message, .. } = &error else {
        panic!("a backend error, got {error:?}");
    };
    assert_eq!(
        message,
        &format!(
            "test/Widgets.test.cosi.dev is at change sequence {}, past the {} a store can \
             reach: the file is damaged",
            u64::MAX,
            u64::MAX / 2
        )
    );
}

/// A store written through `DiskState` by the build before change-log entries reused the
/// record bytes (`tests/fixtures/format3-before-single-encoding.redb`, made by
/// [`a_store_written_by_this_build_reads_as_the_fixture_does`] on commit e8fa87b): `a` created with a label, an annotation
/// and a finalizer, `b` created, `a` updated, `b` destroyed, then closed (so the resources table
/// holds the checkpoint and the log every change).
const FORMAT_3_FIXTURE: &str = "tests/fixtures/format3-before-single-encoding.redb";

/// Writes the fixture's history through `DiskState` into a new store at `path`: `a` created
/// with a label, an annotation and a finalizer, `b` created, `a` updated, `b` destroyed, closed.
async fn write_format_3_history(path: &Path) {
    let state = open(path).await.unwrap();
    let mut a = cosi_core::Resource::new("a", Widget { size: 1 });
    a.metadata.labels_mut().insert("app".into(), "web".into());
    a.metadata
        .annotations_mut()
        .insert("note".into(), "quote \" and \\ and é".into());
    a.metadata.finalizers_mut().insert("keep".into());
    let a = state
        .create(std::sync::Arc::new(a), Default::default())
        .await
        .unwrap();
    let b = cosi_core::Resource::new("b", Widget { size: 2 });
    state
        .create(std::sync::Arc::new(b), Default::default())
        .await
        .unwrap();
    let mut a = cosi_core::downcast_ref::<Widget>(&*a).unwrap().clone();
    a.spec.size = 3;
    state
        .update(std::sync::Arc::new(a), Default::default())
        .await
        .unwrap();
    state
        .destroy(&Widget::kind().pointer("b"), Default::default())
        .await
        .unwrap();
    state.close().await;
}

#[tokio::test]
async fn a_store_written_before_entries_reused_the_record_bytes_reads_the_same() {
    let (_dir, path) = temp_store();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(FORMAT_3_FIXTURE),
        &path,
    )
    .unwrap();
    reads_as_the_format_3_history(&path).await;
}

/// The same history written by this build reads the same as the fixture. With
/// `COSI_WRITE_FIXTURE` naming a new file, the store is written there instead of a temporary
/// directory: how the fixture was made (on commit e8fa87b), and how a later format's is made.
#[tokio::test]
async fn a_store_written_by_this_build_reads_as_the_fixture_does() {
    let (_dir, temporary) = temp_store();
    let path = std::env::var_os("COSI_WRITE_FIXTURE").map_or(temporary, PathBuf::from);
    write_format_3_history(&path).await;
    reads_as_the_format_3_history(&path).await;
}

/// Checks that the store at `path` holds the fixture's history: its resources, and every
/// change replayed from the log with its old state.
async fn reads_as_the_format_3_history(path: &Path) {
    let origin = {
        let db = redb::Database::open(path).unwrap();
        let read = db.begin_read().unwrap();
        let meta = read.open_table(META).unwrap();
        let origin = meta.get("origin").unwrap().unwrap().value();
        kind_origin(origin, &Widget::kind())
    };
    let state = open(path).await.unwrap();

    let a = state
        .get_typed::<Widget>(&Widget::kind().pointer("a"))
        .await
        .unwrap();
    assert_eq!((a.metadata.version().get(), a.spec.size), (2, 3));
    assert_eq!(
        a.metadata.labels().get("app").map(String::as_str),
        Some("web")
    );
    assert_eq!(
        a.metadata.annotations().get("note").map(String::as_str),
        Some("quote \" and \\ and é")
    );
    assert!(a.metadata.finalizers().contains("keep"));
    assert_eq!(widgets(&state).await, [("a".to_string(), 2, 3)]);

    let options = WatchKindOptions {
        since: Some(Bookmark::at(origin, 0)),
        ..WatchKindOptions::default()
    };
    let mut watch = state.watch_kind(&Widget::kind(), options).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let event = tokio::time::timeout(Duration::from_secs(10), watch.recv())
            .await
            .expect("an event within the guard")
            .expect("the watch is live");
        let size = |r: &cosi_core::SharedResource| {
            let w = cosi_core::downcast_ref::<Widget>(&**r).unwrap();
            (w.metadata.version().get(), w.spec.size)
        };
        let old = match &event {
            Event::Updated { old, .. } => old.as_ref().map(size),
            _ => None,
        };
        seen.push((
            event.type_name(),
            event.resource().unwrap().metadata().id().to_string(),
            event.bookmark().unwrap().position_in(origin).unwrap(),
            size(event.resource().unwrap()),
            old,
        ));
    }
    assert_eq!(
        seen,
        [
            ("created", "a".to_string(), 1, (1, 1), None),
            ("created", "b".to_string(), 2, (1, 2), None),
            ("updated", "a".to_string(), 3, (2, 3), Some((1, 1))),
            ("destroyed", "b".to_string(), 4, (1, 2), None),
        ]
    );
}
