//! The `State` rules on a real etcd server: versions and conflicts as etcd transactions, lists
//! sorted and filtered, typed and dynamic decoding.
#![cfg(feature = "etcd")]

mod etcd_common;

use cosi_core::{
    make_mut, CreateOptions, DestroyOptions, DynamicResource, Error, IdQuery, LabelOp, LabelQuery,
    LabelTerm, ListOptions, Phase, Resource, ResourceSpec, State, UpdateOptions, Version,
};
use etcd_common::{
    connect, connect_with, counter, create_counter, create_owned, options, state, value_of, Counter,
};

#[tokio::test]
async fn create_stores_version_one_and_get_returns_it() {
    let state = state("create").await;
    let created = create_owned(&state, "a", 7, "ctrl").await;
    assert_eq!(created.metadata().version(), Version::FIRST);
    let stored = state.get(created.metadata().pointer()).await.unwrap();
    assert_eq!(stored.metadata(), created.metadata());
    assert_eq!(stored.metadata().owner(), Some("ctrl"));
    assert_eq!(value_of(&stored), 7);
}

#[tokio::test]
async fn create_of_an_existing_id_fails_with_already_exists() {
    let state = state("exists").await;
    create_counter(&state, "a", 1).await;
    let err = state
        .create(counter("a", 2), CreateOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert_eq!(
        value_of(&state.get(&Counter::kind().pointer("a")).await.unwrap()),
        1
    );
}

#[tokio::test]
async fn create_with_an_empty_id_is_invalid_and_writes_nothing() {
    let state = state("empty-id").await;
    let err = state
        .create(counter("", 1), CreateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { field, .. } if field == "metadata.id"),
        "{err}"
    );
    assert!(state
        .list(&Counter::kind(), &ListOptions::default())
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn update_with_the_stored_version_bumps_it_and_keeps_created() {
    let state = state("update").await;
    let created = create_counter(&state, "a", 1).await;
    let mut changed = cosi_core::downcast_ref::<Counter>(&*created)
        .unwrap()
        .clone();
    changed.spec.value = 2;
    let next = changed.into_shared();
    let updated = state.update(next, UpdateOptions::default()).await.unwrap();
    assert_eq!(updated.metadata().version(), Version::new(2));
    assert_eq!(updated.metadata().created(), created.metadata().created());
    let stored = state.get(created.metadata().pointer()).await.unwrap();
    assert_eq!(stored.metadata().version(), Version::new(2));
    assert_eq!(value_of(&stored), 2);
}

#[tokio::test]
async fn update_with_stale_version_conflicts() {
    let state = state("stale").await;
    let created = create_counter(&state, "a", 1).await;
    state
        .update(created.clone(), UpdateOptions::default())
        .await
        .unwrap();
    let err = state
        .update(created, UpdateOptions::default())
        .await
        .unwrap_err();
    match err {
        Error::VersionConflict {
            expected, actual, ..
        } => {
            assert_eq!((expected, actual), (Version::new(1), Version::new(2)))
        }
        other => panic!("expected a version conflict, got {other}"),
    }
}

#[tokio::test]
async fn update_by_another_owner_conflicts_and_changes_nothing() {
    let state = state("owner").await;
    let created = create_owned(&state, "a", 1, "ctrl").await;
    let err = state
        .update(created.clone(), UpdateOptions::owned_by(Some("intruder")))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OwnerConflict { .. }), "{err}");
    let stored = state.get(created.metadata().pointer()).await.unwrap();
    assert_eq!(stored.metadata().version(), Version::FIRST);
}

#[tokio::test]
async fn update_in_an_unexpected_phase_conflicts() {
    let state = state("phase").await;
    let created = create_counter(&state, "a", 1).await;
    let mut tearing = created.clone();
    make_mut(&mut tearing)
        .metadata_mut()
        .set_phase(Phase::TearingDown);
    let tearing = state
        .update(tearing, UpdateOptions::default())
        .await
        .unwrap();
    let err = state
        .update(tearing, UpdateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PhaseConflict {
                expected: Phase::Running,
                actual: Phase::TearingDown,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn destroy_with_pending_finalizers_fails_and_keeps_the_resource() {
    let state = state("finalizers").await;
    let mut r = Resource::new("a", Counter { value: 1 });
    r.metadata.finalizers_mut().insert("keep".into());
    let created = state
        .create(r.into_shared(), CreateOptions::default())
        .await
        .unwrap();
    let pointer = created.metadata().pointer().clone();
    let err = state
        .destroy(&pointer, DestroyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PendingFinalizers { .. }), "{err}");
    assert!(state.get(&pointer).await.is_ok());
}

#[tokio::test]
async fn destroy_removes_the_resource_and_a_second_destroy_is_not_found() {
    let state = state("destroy").await;
    let created = create_counter(&state, "a", 1).await;
    let pointer = created.metadata().pointer().clone();
    state
        .destroy(&pointer, DestroyOptions::default())
        .await
        .unwrap();
    assert!(state.get(&pointer).await.unwrap_err().is_not_found());
    assert!(state
        .destroy(&pointer, DestroyOptions::default())
        .await
        .unwrap_err()
        .is_not_found());
}

#[tokio::test]
async fn destroy_by_another_owner_conflicts() {
    let state = state("destroy-owner").await;
    let created = create_owned(&state, "a", 1, "ctrl").await;
    let err = state
        .destroy(created.metadata().pointer(), DestroyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OwnerConflict { .. }), "{err}");
}

#[tokio::test]
async fn list_is_sorted_by_id_and_filtered_by_labels_and_ids() {
    let state = state("list").await;
    for (id, app) in [("c", "web"), ("a", "web"), ("b", "db"), ("a2", "web")] {
        let mut r = Resource::new(id, Counter { value: 0 });
        r.metadata.labels_mut().insert("app".into(), app.into());
        state
            .create(r.into_shared(), CreateOptions::default())
            .await
            .unwrap();
    }
    let ids = |list: Vec<cosi_core::SharedResource>| {
        list.iter()
            .map(|r| r.metadata().id().to_string())
            .collect::<Vec<_>>()
    };
    let all = state
        .list(&Counter::kind(), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(ids(all), ["a", "a2", "b", "c"]);
    let web = ListOptions {
        labels: LabelQuery::new()
            .with(LabelTerm::new("app", LabelOp::Equal("web".into())))
            .into(),
        ids: Some(IdQuery::new("^a").unwrap()),
    };
    assert_eq!(
        ids(state.list(&Counter::kind(), &web).await.unwrap()),
        ["a", "a2"]
    );
}

#[tokio::test]
async fn a_list_longer_than_one_page_has_every_resource_once_in_id_order() {
    // etcd is read 1,000 keys a page: 2,345 resources take three pages.
    let state = state("pages").await;
    let ids: Vec<String> = (0..2_345).map(|i| format!("r{i:05}")).collect();
    for chunk in ids.chunks(100) {
        let creates = chunk
            .iter()
            .map(|id| state.create(counter(id, 1), CreateOptions::default()));
        for created in futures::future::join_all(creates).await {
            created.unwrap();
        }
    }
    let listed = state
        .list(&Counter::kind(), &ListOptions::default())
        .await
        .unwrap();
    let listed: Vec<&str> = listed.iter().map(|r| r.metadata().id()).collect();
    assert_eq!(listed.len(), ids.len());
    assert_eq!(listed, ids);
}

#[tokio::test]
async fn unregistered_types_load_as_dynamic_resources() {
    #[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
    struct Other {
        name: String,
    }
    impl ResourceSpec for Other {
        const TYPE: &'static str = "Others.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }
    let options = options("dynamic");
    let state = connect(options.clone()).await;
    let r = Resource::new("x", Other { name: "n".into() }).into_shared();
    state.create(r, CreateOptions::default()).await.unwrap();
    let stored = state.get(&Other::kind().pointer("x")).await.unwrap();
    let dynamic = stored
        .as_any()
        .downcast_ref::<DynamicResource>()
        .expect("dynamic");
    assert_eq!(dynamic.spec, serde_json::json!({"name": "n"}));
    // A process that registers the type reads the same record typed.
    let registry = cosi_core::Registry::new().with::<Other>().unwrap();
    let knowing = connect_with(options, registry).await;
    let typed = knowing.get(&Other::kind().pointer("x")).await.unwrap();
    assert_eq!(
        cosi_core::downcast_ref::<Other>(&*typed).unwrap().spec.name,
        "n"
    );
}

#[tokio::test]
async fn states_with_different_prefixes_do_not_see_each_other() {
    let a = state("isolated").await;
    let b = state("isolated").await;
    create_counter(&a, "x", 1).await;
    assert!(b
        .list(&Counter::kind(), &ListOptions::default())
        .await
        .unwrap()
        .is_empty());
}
