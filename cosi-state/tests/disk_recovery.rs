//! What a disk store keeps across a restart: resources (typed when registered, kept as-is when
//! not), the change log that lets watches resume after a bookmark, and old records read by newer
//! spec versions.

mod disk_common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    downcast_ref, AnyResource, CreateOptions, DynamicResource, Event, Kind, ListOptions, Resource,
    ResourceSpec, State, StateExt, UpdateOptions, Version, Watch, WatchKindOptions,
};
use cosi_state::{DiskOptions, DiskState};
use disk_common::{temp_store, Widget};
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Gadget {
    name: String,
}
impl ResourceSpec for Gadget {
    const TYPE: &'static str = "Gadgets.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// A later version of `Widget`: same type name, one more field with a serde default.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct WidgetV2 {
    size: u32,
    #[serde(default = "default_color")]
    color: String,
}
fn default_color() -> String {
    "grey".into()
}
impl ResourceSpec for WidgetV2 {
    const TYPE: &'static str = "Widgets.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

async fn open(
    path: &Path,
    options: DiskOptions,
    types: std::sync::Arc<cosi_core::Registry>,
) -> DiskState {
    DiskState::open(path, options, types)
        .await
        .expect("open the store")
}

async fn create<S: ResourceSpec>(state: &DiskState, id: &str, spec: S) -> Arc<dyn AnyResource> {
    state
        .create(
            Resource::new(id, spec).into_shared(),
            CreateOptions::default(),
        )
        .await
        .expect("create")
}

/// Opens with default options, with only [`Widget`] registered.
async fn open_knowing_widgets(path: &Path) -> DiskState {
    open(
        path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new().with::<Widget>().unwrap()),
    )
    .await
}

/// Creates widgets `w0..w{count}`, each sized by its index.
async fn create_widgets(state: &DiskState, count: u32) {
    for i in 0..count {
        create(state, &format!("w{i}"), Widget { size: i }).await;
    }
}

async fn destroy_widget(state: &DiskState, id: &str) {
    state
        .destroy(&Widget::kind().pointer(id), Default::default())
        .await
        .unwrap();
}

async fn watch_widgets(state: &DiskState, options: WatchKindOptions) -> Watch {
    state.watch_kind(&Widget::kind(), options).await.unwrap()
}

/// How many resources of `kind` the store lists.
async fn count(state: &DiskState, kind: &Kind) -> usize {
    state
        .list(kind, &ListOptions::default())
        .await
        .unwrap()
        .len()
}

async fn next(watch: &mut Watch) -> Event {
    tokio::time::timeout(Duration::from_secs(10), watch.recv())
        .await
        .expect("an event within the guard")
        .expect("the watch is live")
}

fn summary(event: &Event) -> (String, Option<String>, Option<u64>, u64) {
    // A disk bookmark displays as its sequence number.
    let bookmark = event
        .bookmark()
        .map_or(0, |b| b.to_string().parse().expect("a sequence number"));
    let resource = event.resource();
    (
        event.type_name().to_string(),
        resource.map(|r| r.metadata().id().to_string()),
        resource.map(|r| r.metadata().version().get()),
        bookmark,
    )
}

fn ev(
    kind: &str,
    id: &str,
    version: u64,
    bookmark: u64,
) -> (String, Option<String>, Option<u64>, u64) {
    (kind.into(), Some(id.into()), Some(version), bookmark)
}

#[tokio::test]
async fn resources_survive_a_restart_typed_when_their_type_is_registered() {
    let (_dir, path) = temp_store();
    let types = std::sync::Arc::new(cosi_core::Registry::new().with::<Widget>().unwrap());
    let state = open(&path, DiskOptions::default(), types.clone()).await;
    let stored = create(&state, "w", Widget { size: 3 }).await;
    let mut next_value = (*downcast_ref::<Widget>(&*stored).unwrap()).clone();
    next_value.spec.size = 4;
    next_value
        .metadata
        .labels_mut()
        .insert("app".into(), "web".into());
    let updated = state
        .update(next_value.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
    state.close().await;

    let state = open(&path, DiskOptions::default(), types).await;
    let reloaded = state
        .get_typed::<Widget>(&Widget::kind().pointer("w"))
        .await
        .unwrap();
    assert_eq!(*reloaded, *downcast_ref::<Widget>(&*updated).unwrap());
    assert_eq!(reloaded.metadata.version(), Version::new(2));
}

#[tokio::test]
async fn a_watch_resumes_after_a_bookmark_taken_before_a_restart() {
    let (_dir, path) = temp_store();
    let state = open(
        &path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    let a = create(&state, "a", Widget { size: 1 }).await;
    let mut watch = watch_widgets(&state, WatchKindOptions::default()).await;
    create(&state, "b", Widget { size: 2 }).await;
    let seen = next(&mut watch).await;
    assert_eq!(summary(&seen), ev("created", "b", 1, 2));
    let bookmark = seen.bookmark().unwrap().clone();
    state.update(a, UpdateOptions::default()).await.unwrap();
    destroy_widget(&state, "b").await;
    drop(watch);
    state.close().await;

    let state = open(
        &path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    let options = WatchKindOptions {
        since: Some(bookmark),
        ..WatchKindOptions::default()
    };
    let mut watch = watch_widgets(&state, options).await;
    let updated = next(&mut watch).await;
    assert_eq!(summary(&updated), ev("updated", "a", 2, 3));
    let Event::Updated {
        old: Some(old),
        compacted: false,
        ..
    } = &updated
    else {
        panic!("an exact update with its old value, got {updated:?}");
    };
    assert_eq!(old.metadata().version(), Version::new(1));
    assert_eq!(summary(&next(&mut watch).await), ev("destroyed", "b", 1, 4));
    // Live events continue the sequence persisted before the restart.
    create(&state, "c", Widget { size: 3 }).await;
    assert_eq!(summary(&next(&mut watch).await), ev("created", "c", 1, 5));
}

#[tokio::test]
async fn a_bookmark_older_than_the_retained_log_gets_a_resync_after_a_restart() {
    let (_dir, path) = temp_store();
    let options = DiskOptions {
        retained_changes: 2,
        ..DiskOptions::default()
    };
    let state = open(
        &path,
        options.clone(),
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    let mut recorder = watch_widgets(&state, WatchKindOptions::default()).await;
    for id in ["a", "b", "c", "d"] {
        create(&state, id, Widget { size: 0 }).await;
    }
    destroy_widget(&state, "a").await;
    // The bookmarks of the five changes, in order.
    let mut bookmarks = Vec::new();
    for _ in 0..5 {
        bookmarks.push(next(&mut recorder).await.bookmark().unwrap().clone());
    }
    drop(recorder);
    state.close().await;

    let state = open(
        &path,
        options,
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    let since = WatchKindOptions {
        since: Some(bookmarks[0].clone()),
        ..WatchKindOptions::default()
    };
    let mut watch = watch_widgets(&state, since).await;
    let first = next(&mut watch).await;
    assert!(
        matches!(&first, Event::Resync { bookmark } if *bookmark == bookmarks[4]),
        "{first:?}"
    );
    let mut contents = Vec::new();
    loop {
        match next(&mut watch).await {
            Event::Bootstrapped { bookmark } => {
                assert_eq!(bookmark, bookmarks[4]);
                break;
            }
            Event::Created { resource, .. } => contents.push(resource.metadata().id().to_string()),
            other => panic!("unexpected event in a resync: {other:?}"),
        }
    }
    assert_eq!(contents, ["b", "c", "d"]);

    // Within the retained log the same store resumes exactly.
    let within = WatchKindOptions {
        since: Some(bookmarks[3].clone()),
        ..WatchKindOptions::default()
    };
    let mut watch = watch_widgets(&state, within).await;
    assert_eq!(summary(&next(&mut watch).await), ev("destroyed", "a", 1, 5));
}

#[tokio::test]
async fn a_resource_of_an_unregistered_type_is_kept_as_is() {
    let (_dir, path) = temp_store();
    let both = std::sync::Arc::new(
        cosi_core::Registry::new()
            .with::<Widget>()
            .unwrap()
            .with::<Gadget>()
            .unwrap(),
    );
    let state = open(&path, DiskOptions::default(), both.clone()).await;
    let gadget = create(
        &state,
        "g",
        Gadget {
            name: "knob".into(),
        },
    )
    .await;
    create(&state, "w", Widget { size: 1 }).await;
    state.close().await;

    // Given a process that does not know Gadget, when it opens the store and writes to it,
    let state = open_knowing_widgets(&path).await;
    let listed = state
        .list(&Gadget::kind(), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let dynamic = listed[0]
        .as_any()
        .downcast_ref::<DynamicResource>()
        .unwrap();
    assert_eq!(dynamic.metadata, *gadget.metadata());
    assert_eq!(dynamic.spec, serde_json::json!({"name": "knob"}));
    // A typed read says why it is not typed, and what to do.
    let err = state
        .get_typed::<Gadget>(&Gadget::kind().pointer("g"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("loaded as a dynamic resource: register Gadgets.test.cosi.dev"),
        "{err}"
    );
    create(&state, "w2", Widget { size: 2 }).await;
    state.close().await;

    // then the gadget is still there, unchanged, and typed again for a process that knows it.
    let state = open(&path, DiskOptions::default(), both).await;
    let reloaded = state
        .get_typed::<Gadget>(&Gadget::kind().pointer("g"))
        .await
        .unwrap();
    assert_eq!(*reloaded, *downcast_ref::<Gadget>(&*gadget).unwrap());
    let kind = Kind::new("test", Widget::TYPE);
    assert_eq!(count(&state, &kind).await, 2);
}

#[tokio::test]
async fn a_spec_field_added_later_decodes_from_old_records_with_its_default() {
    let (_dir, path) = temp_store();
    let state = open_knowing_widgets(&path).await;
    create(&state, "w", Widget { size: 7 }).await;
    state.close().await;

    let state = open(
        &path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new().with::<WidgetV2>().unwrap()),
    )
    .await;
    let upgraded = state
        .get_typed::<WidgetV2>(&WidgetV2::kind().pointer("w"))
        .await
        .unwrap();
    assert_eq!(
        upgraded.spec,
        WidgetV2 {
            size: 7,
            color: "grey".into()
        }
    );
    assert_eq!(upgraded.metadata.version(), Version::FIRST);
}

#[tokio::test]
async fn a_dynamic_write_of_a_registered_type_is_stored_typed() {
    let (_dir, path) = temp_store();
    let state = open_knowing_widgets(&path).await;
    let dynamic = Arc::new(DynamicResource {
        metadata: cosi_core::Metadata::new(Widget::kind().pointer("w")),
        spec: serde_json::json!({"size": 9}),
    });
    state
        .create(dynamic, CreateOptions::default())
        .await
        .unwrap();
    let typed = state
        .get_typed::<Widget>(&Widget::kind().pointer("w"))
        .await
        .unwrap();
    assert_eq!(typed.spec, Widget { size: 9 });

    let bad = Arc::new(DynamicResource {
        metadata: cosi_core::Metadata::new(Widget::kind().pointer("bad")),
        spec: serde_json::json!({"size": "large"}),
    });
    let err = state
        .create(bad, CreateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, cosi_core::Error::InvalidArgument { field, .. } if field == "spec.size"),
        "{err}"
    );
    assert!(state
        .get(&Widget::kind().pointer("bad"))
        .await
        .unwrap_err()
        .is_not_found());
}

#[tokio::test]
async fn a_dynamic_write_with_a_field_its_type_lacks_is_refused_naming_it() {
    let (_dir, path) = temp_store();
    let state = open_knowing_widgets(&path).await;
    let typo = Arc::new(DynamicResource {
        metadata: cosi_core::Metadata::new(Widget::kind().pointer("w")),
        spec: serde_json::json!({"size": 9, "colour": "red"}),
    });

    let err = state
        .create(typo, CreateOptions::default())
        .await
        .unwrap_err();

    assert_eq!(
        err.to_string(),
        "test/Widgets.test.cosi.dev/w: invalid spec.colour: unknown field: \
         Widgets.test.cosi.dev has no such field (check its spelling)"
    );
    assert!(state
        .get(&Widget::kind().pointer("w"))
        .await
        .unwrap_err()
        .is_not_found());
}

#[tokio::test]
async fn a_field_a_later_version_stored_is_skipped_by_an_earlier_reader() {
    let (_dir, path) = temp_store();
    let v2 = std::sync::Arc::new(cosi_core::Registry::new().with::<WidgetV2>().unwrap());
    let state = open(&path, DiskOptions::default(), v2).await;
    let later = WidgetV2 {
        size: 7,
        color: "red".into(),
    };
    create(&state, "w", later).await;
    state.close().await;

    let state = open_knowing_widgets(&path).await;
    let earlier = state
        .get_typed::<Widget>(&Widget::kind().pointer("w"))
        .await
        .unwrap();

    assert_eq!(earlier.spec, Widget { size: 7 });
}

#[tokio::test]
async fn the_durable_change_log_keeps_only_the_retained_changes_per_kind() {
    let (_dir, path) = temp_store();
    let options = DiskOptions {
        retained_changes: 3,
        ..DiskOptions::default()
    };
    let state = open(
        &path,
        options,
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    create_widgets(&state, 10).await;
    create(
        &state,
        "g",
        Gadget {
            name: "only".into(),
        },
    )
    .await;
    state.close().await;

    let db = redb::Database::open(&path).unwrap();
    let read = redb::ReadableDatabase::begin_read(&db).unwrap();
    let log = read
        .open_table(redb::TableDefinition::<(&str, &str, u64), &[u8]>::new(
            "cosi.changes",
        ))
        .unwrap();
    let keys: Vec<(String, u64)> = redb::ReadableTable::iter(&log)
        .unwrap()
        .map(|row| {
            let (key, _) = row.unwrap();
            let (_, resource_type, seq) = key.value();
            (resource_type.to_string(), seq)
        })
        .collect();
    let gadgets = Gadget::TYPE.to_string();
    let widgets = Widget::TYPE.to_string();
    assert_eq!(
        keys,
        [
            (gadgets, 1),
            (widgets.clone(), 8),
            (widgets.clone(), 9),
            (widgets, 10)
        ]
    );
}

#[tokio::test]
async fn writes_with_eventual_durability_are_in_the_file_after_a_clean_close() {
    let (_dir, path) = temp_store();
    let relaxed = DiskOptions {
        durability: cosi_state::DiskDurability::Eventual,
        ..DiskOptions::default()
    };
    let state = open(
        &path,
        relaxed,
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    create_widgets(&state, 5).await;
    state.close().await;

    let state = open(
        &path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    let kind = Widget::kind();
    assert_eq!(count(&state, &kind).await, 5);
}

#[tokio::test]
async fn watches_end_when_the_store_is_dropped() {
    // Given a store with a live kind watch
    let dir = tempfile::tempdir().unwrap();
    let state = open(
        &dir.path().join("s.redb"),
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await;
    let mut watch = watch_widgets(&state, WatchKindOptions::default()).await;

    // When the store is dropped without closing it
    drop(state);

    // Then the watch ends instead of waiting for changes that can no longer come
    let end = tokio::time::timeout(Duration::from_secs(10), watch.recv())
        .await
        .expect("the watch ends");
    assert!(end.is_none(), "no event after the store is gone: {end:?}");
}
