//! Watches on etcd revisions: first events, live order, filters, bookmarks that resume in a
//! new state instance, slow watchers replaying from etcd, and compacted bookmarks resyncing.
#![cfg(feature = "etcd")]

mod etcd_common;

use std::collections::BTreeMap;

use cosi_core::{
    Bookmark, CreateOptions, Event, LabelOp, LabelQuery, LabelTerm, Resource, ResourceSpec, State,
    UpdateOptions, WatchKindOptions, WatchOptions,
};
use cosi_state::etcd::EtcdOptions;
use etcd_common::{
    assert_watch_ends, bump, connect, counter, create_counter, destroy, ev, kind, next_change,
    next_event, next_summaries, next_summary, options, start_server, state, summary, value_of,
    watch_every, Counter,
};

#[tokio::test]
async fn pointer_watch_starts_with_a_tombstone_then_sees_every_change() {
    let state = state("pointer").await;
    let pointer = kind().pointer("a");
    let mut watch = state
        .watch(&pointer, WatchOptions::default())
        .await
        .unwrap();
    let first = next_event(&mut watch).await;
    assert!(matches!(first, Event::Destroyed { .. }), "{first:?}");
    create_counter(&state, "b", 9).await;
    create_counter(&state, "a", 1).await;
    bump(&state, "a", 2).await;
    destroy(&state, "a").await;
    let seen = next_summaries(&mut watch, 3).await;
    assert_eq!(
        seen,
        [
            ev("created", "a", 1),
            ev("updated", "a", 2),
            ev("destroyed", "a", 2)
        ]
    );
}

#[tokio::test]
async fn bootstrap_delivers_contents_in_id_order_then_live_events() {
    let state = state("bootstrap").await;
    for id in ["b", "a"] {
        create_counter(&state, id, 0).await;
    }
    let options = WatchKindOptions {
        bootstrap: true,
        ..Default::default()
    };
    let mut watch = state.watch_kind(&kind(), options).await.unwrap();
    assert_eq!(next_summary(&mut watch).await, ev("created", "a", 0));
    assert_eq!(next_summary(&mut watch).await, ev("created", "b", 0));
    assert!(matches!(
        next_event(&mut watch).await,
        Event::Bootstrapped { .. }
    ));
    bump(&state, "b", 1).await;
    let updated = next_event(&mut watch).await;
    assert_eq!(summary(&updated), ev("updated", "b", 1));
    let Event::Updated { old: Some(old), .. } = updated else {
        panic!("an update with old")
    };
    assert_eq!(value_of(&old), 0);
}

#[tokio::test]
async fn live_watch_sees_only_later_changes_with_increasing_revision_bookmarks() {
    let state = state("live").await;
    create_counter(&state, "before", 0).await;
    let mut watch = watch_every(&state).await;
    for i in 0..5 {
        create_counter(&state, &format!("r{i}"), i).await;
    }
    let mut last: Option<Bookmark> = None;
    for i in 0..5 {
        let event = next_event(&mut watch).await;
        assert_eq!(summary(&event), ev("created", &format!("r{i}"), i));
        let bookmark = event.bookmark().unwrap().clone();
        assert!(Some(&bookmark) > last.as_ref(), "{bookmark} after {last:?}");
        last = Some(bookmark);
    }
}

#[tokio::test]
async fn label_filter_turns_entering_into_created_and_leaving_into_destroyed() {
    let state = state("labels").await;
    let options = WatchKindOptions {
        labels: LabelQuery::new()
            .with(LabelTerm::new("app", LabelOp::Equal("web".into())))
            .into(),
        ..Default::default()
    };
    let mut watch = state.watch_kind(&kind(), options).await.unwrap();
    let created = create_counter(&state, "a", 0).await;
    let mut web = cosi_core::downcast_ref::<Counter>(&*created)
        .unwrap()
        .clone();
    web.metadata.labels_mut().insert("app".into(), "web".into());
    let web = state
        .update(web.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
    let mut db = cosi_core::downcast_ref::<Counter>(&*web).unwrap().clone();
    db.metadata.labels_mut().insert("app".into(), "db".into());
    state
        .update(db.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
    // The create of `a`, not `app=web`, is skipped (at most a Noop moves the bookmark).
    let entered = next_change(&mut watch).await;
    assert_eq!(summary(&entered), ev("created", "a", 0));
    assert_eq!(entered.resource().unwrap().metadata().version().get(), 2);
    let left = next_change(&mut watch).await;
    assert_eq!(summary(&left), ev("destroyed", "a", 0));
    assert_eq!(left.resource().unwrap().metadata().labels()["app"], "db");
}

#[tokio::test]
async fn bookmark_resumes_in_a_new_state_instance() {
    let options = options("resume");
    let first = connect(options.clone()).await;
    let mut watch = watch_every(&first).await;
    create_counter(&first, "a", 1).await;
    let bookmark = next_event(&mut watch).await.bookmark().unwrap().clone();
    create_counter(&first, "b", 2).await;
    bump(&first, "a", 3).await;
    drop(watch);
    drop(first);

    // A new instance (as after a process restart) resumes after the bookmark.
    let second = connect(options).await;
    let since = WatchKindOptions {
        since: Some(bookmark),
        ..Default::default()
    };
    let mut watch = second.watch_kind(&kind(), since).await.unwrap();
    create_counter(&second, "c", 4).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = next_event(&mut watch).await;
        assert!(!event.is_compacted());
        seen.push(summary(&event));
    }
    assert_eq!(
        seen,
        [
            ev("created", "b", 2),
            ev("updated", "a", 3),
            ev("created", "c", 4)
        ]
    );
}

#[tokio::test]
async fn bookmark_in_the_future_is_invalid() {
    let state = state("future").await;
    // A real bookmark of this state, its position moved far ahead (the last 8 bytes are the
    // big-endian revision).
    let mut watch = watch_every(&state).await;
    create_counter(&state, "a", 1).await;
    let mut bytes = next_event(&mut watch).await.bookmark().unwrap().to_bytes();
    let at = bytes.len() - 8;
    bytes[at..].copy_from_slice(&(u64::MAX / 2).to_be_bytes());
    let since = WatchKindOptions {
        since: Some(Bookmark::from_bytes(&bytes)),
        ..Default::default()
    };
    let err = state.watch_kind(&kind(), since).await.unwrap_err();
    assert!(
        matches!(&err, cosi_core::Error::InvalidArgument { field, .. } if field == "since"),
        "{err}"
    );
}

#[tokio::test]
async fn a_pointer_watch_that_resyncs_after_its_resource_was_destroyed_gets_a_tombstone() {
    // Given a pointer watch of `a` whose consumer stopped reading, with a buffer of one event
    // and a window of four (compaction is server-wide: this test gets a server of its own)
    let server = start_server();
    let options = EtcdOptions::new([server.endpoint()])
        .with_prefix("/pointer-resync/")
        .with_history_window(4)
        .with_watch_buffer(1);
    let state = connect(options).await;
    create_counter(&state, "a", 1).await;
    let mut watch = state
        .watch(&kind().pointer("a"), WatchOptions::default())
        .await
        .unwrap();
    // (its buffer holds the first event; the update's waits in the watch's task)
    bump(&state, "a", 2).await;
    // When `a` is destroyed, more changes than the window go by, and etcd compacts its
    // history, so the watch cannot replay what it missed
    destroy(&state, "a").await;
    for i in 0..8 {
        create_counter(&state, &format!("o{i}"), i).await;
    }
    let head = state
        .client()
        .kv_client()
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    state
        .client()
        .kv_client()
        .compact(head, None)
        .await
        .unwrap();

    // Then the watch resyncs, and says `a` is absent with a tombstone, as its first event
    // would have (before: the resync and its bootstrapped alone). The update arrives first
    // only if the watch's task took it from the kind's shared feed before it fell behind that
    // feed; once behind, it reads from etcd at its position, which the compaction removed (a
    // race the test cannot order; both ways end in the resync).
    assert_eq!(next_summary(&mut watch).await, ev("created", "a", 1));
    let mut after = next_event(&mut watch).await;
    if !matches!(after, Event::Resync { .. }) {
        assert_eq!(summary(&after), ev("updated", "a", 2));
        after = next_event(&mut watch).await;
    }
    assert!(matches!(after, Event::Resync { .. }), "{after:?}");
    let absent = next_event(&mut watch).await;
    assert!(
        matches!(&absent, Event::Destroyed { resource, compacted: false, .. }
            if resource.metadata().pointer() == &kind().pointer("a")),
        "{absent:?}"
    );
    assert!(matches!(
        next_event(&mut watch).await,
        Event::Bootstrapped { .. }
    ));
    create_counter(&state, "a", 3).await;
    assert_eq!(next_summary(&mut watch).await, ev("created", "a", 3));
}

#[tokio::test]
async fn compacted_bookmark_gets_resync_and_a_full_bootstrap() {
    // Compaction is server-wide: this test gets a server of its own.
    let server = start_server();
    let state = connect(EtcdOptions::new([server.endpoint()]).with_prefix("/compacted/")).await;
    let mut watch = watch_every(&state).await;
    create_counter(&state, "a", 1).await;
    let bookmark = next_event(&mut watch).await.bookmark().unwrap().clone();
    create_counter(&state, "b", 2).await;
    destroy(&state, "a").await;
    // Compact etcd's history up to now: the bookmark's successors are gone.
    let head = state
        .client()
        .kv_client()
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    state
        .client()
        .kv_client()
        .compact(head, None)
        .await
        .unwrap();

    let since = WatchKindOptions {
        since: Some(bookmark),
        ..Default::default()
    };
    let mut resumed = state.watch_kind(&kind(), since).await.unwrap();
    assert!(matches!(
        next_event(&mut resumed).await,
        Event::Resync { .. }
    ));
    assert_eq!(next_summary(&mut resumed).await, ev("created", "b", 2));
    assert!(matches!(
        next_event(&mut resumed).await,
        Event::Bootstrapped { .. }
    ));
    create_counter(&state, "c", 3).await;
    assert_eq!(next_summary(&mut resumed).await, ev("created", "c", 3));
}

#[tokio::test]
async fn slow_watcher_gets_a_compacted_catch_up_relative_to_what_it_saw() {
    // A window of 2 changes and a buffer of 1 event: the watcher falls far behind.
    let state = connect(options("slow").with_history_window(2).with_watch_buffer(1)).await;
    for id in ["a", "b", "c"] {
        create_counter(&state, id, 0).await;
    }
    let mut slow = watch_every(&state).await;
    for value in 1..=20 {
        bump(&state, "a", value).await;
    }
    destroy(&state, "b").await;
    create_counter(&state, "d", 0).await;
    create_counter(&state, "sentinel", 0).await;

    // The watcher's view, built only from its events, ends equal to the store.
    let mut view: BTreeMap<String, i64> = [("a", 0), ("b", 0), ("c", 0)]
        .into_iter()
        .map(|(id, v)| (id.to_string(), v))
        .collect();
    let mut compacted = Vec::new();
    loop {
        let event = next_event(&mut slow).await;
        let (kind, id, value) = summary(&event);
        if event.is_compacted() {
            compacted.push((event.bookmark().cloned(), id.clone()));
        }
        match kind.as_str() {
            "created" | "updated" => view.insert(id.clone(), value.unwrap()),
            "destroyed" => view.remove(&id),
            other => panic!("unexpected {other} event"),
        };
        if id == "sentinel" {
            break;
        }
    }
    assert!(!compacted.is_empty(), "the watcher fell behind the window");
    // The watcher may fall behind more than once (how far it lags depends on scheduling); every
    // catch-up carries one bookmark and holds one event per resource.
    let unique: std::collections::BTreeSet<_> = compacted.iter().collect();
    assert_eq!(
        unique.len(),
        compacted.len(),
        "one event per resource in each catch-up: {compacted:?}"
    );
    let stored: BTreeMap<String, i64> = state
        .list(&kind(), &Default::default())
        .await
        .unwrap()
        .iter()
        .map(|r| (r.metadata().id().to_string(), value_of(r)))
        .collect();
    assert_eq!(view, stored);
}

#[tokio::test]
async fn strict_watcher_that_falls_behind_ends_with_an_overrun_at_its_last_bookmark() {
    let state = connect(
        options("strict")
            .with_history_window(2)
            .with_watch_buffer(1),
    )
    .await;
    // Filtered: changes of "skip-*" move the watch's position but deliver nothing.
    let strict = WatchKindOptions {
        strict: true,
        ids: Some(cosi_core::IdQuery::new("^r").unwrap()),
        ..Default::default()
    };
    let mut slow = state.watch_kind(&kind(), strict).await.unwrap();
    for i in 0..20 {
        create_counter(&state, &format!("r{i:02}"), i).await;
        state
            .create(
                counter(&format!("skip-{i:02}"), i),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    let mut last = None;
    let error = loop {
        match next_event(&mut slow).await {
            Event::Errored { error } => break error,
            event => last = event.bookmark().cloned().or(last),
        }
    };
    match error {
        cosi_core::Error::WatchOverrun { position, .. } => match last {
            Some(last) => assert_eq!(position, last),
            None => assert_eq!(position.to_string(), "0"),
        },
        other => panic!("expected an overrun, got {other}"),
    }
    assert_watch_ends(&mut slow).await;
}

#[tokio::test]
async fn tail_delivers_the_last_changes_then_live_ones() {
    let state = state("tail").await;
    // The kind's window starts with this process's first watch of the kind.
    let _first = watch_every(&state).await;
    for i in 0..4 {
        create_counter(&state, &format!("r{i}"), i).await;
    }
    let tail = WatchKindOptions {
        tail: Some(2),
        ..Default::default()
    };
    let mut watch = state.watch_kind(&kind(), tail).await.unwrap();
    create_counter(&state, "r4", 4).await;
    let seen = next_summaries(&mut watch, 3).await;
    assert_eq!(
        seen,
        [
            ev("created", "r2", 2),
            ev("created", "r3", 3),
            ev("created", "r4", 4)
        ]
    );
}

#[tokio::test]
async fn watchers_of_other_kinds_and_prefixes_see_nothing() {
    #[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
    struct Other {}
    impl ResourceSpec for Other {
        const TYPE: &'static str = "Others.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }
    let state = state("kinds").await;
    let mut watch = watch_every(&state).await;
    state
        .create(
            Resource::new("x", Other {}).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    create_counter(&state, "mine", 1).await;
    assert_eq!(next_summary(&mut watch).await, ev("created", "mine", 1));
}

/// A gauge from etcd's `/metrics` page.
fn etcd_gauge(endpoint: &str, name: &str) -> u64 {
    use std::io::{Read, Write};
    let address = endpoint.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("etcd serves metrics");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut page = String::new();
    stream.read_to_string(&mut page).unwrap();
    let prefix = format!("{name} ");
    page.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("etcd reports {name}")) as u64
}

#[tokio::test]
async fn all_local_watchers_of_a_kind_share_one_etcd_watch() {
    #[derive(Clone, PartialEq, Debug, serde::Serialize, serde::Deserialize)]
    struct Other {}
    impl ResourceSpec for Other {
        const TYPE: &'static str = "Others.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }
    // Watcher counts are server-wide: this test gets a server of its own.
    let server = start_server();
    let state = connect(EtcdOptions::new([server.endpoint()]).with_prefix("/shared/")).await;
    let mut watches = Vec::new();
    for _ in 0..5 {
        watches.push(watch_every(&state).await);
    }
    watches.push(
        state
            .watch(&kind().pointer("a"), WatchOptions::default())
            .await
            .unwrap(),
    );
    next_event(watches.last_mut().unwrap()).await; // the pointer watch's tombstone
    create_counter(&state, "a", 1).await;
    for watch in &mut watches {
        assert_eq!(next_summary(watch).await, ev("created", "a", 1));
    }
    assert_eq!(
        etcd_gauge(&server.endpoint(), "etcd_debugging_mvcc_watcher_total"),
        1
    );

    // Another kind gets its own.
    let mut other = state
        .watch_kind(&Other::kind(), WatchKindOptions::default())
        .await
        .unwrap();
    state
        .create(
            Resource::new("x", Other {}).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    next_event(&mut other).await;
    assert_eq!(
        etcd_gauge(&server.endpoint(), "etcd_debugging_mvcc_watcher_total"),
        2
    );
}

#[tokio::test]
async fn dropping_the_state_ends_its_watches() {
    let state = state("drop").await;
    let mut watch = watch_every(&state).await;
    drop(state);
    assert_watch_ends(&mut watch).await;
}

/// A spec as large as etcd takes in one request (1.5 MiB by default), less room for the record.
#[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Blob {
    data: String,
}

impl ResourceSpec for Blob {
    const TYPE: &'static str = "Blobs.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

fn blob_registry() -> cosi_core::Registry {
    cosi_core::Registry::new().with::<Blob>().unwrap()
}

fn blob(fill: char) -> Blob {
    Blob {
        data: std::iter::repeat_n(fill, 1_000_000).collect(),
    }
}

#[tokio::test]
async fn a_resume_over_more_changes_than_one_grpc_message_holds_delivers_every_one() {
    // The backend's warnings, shown if the test fails.
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let options = options("large-resume");
    let first = etcd_common::connect_with(options.clone(), blob_registry()).await;
    let blob_kind = Blob::kind();
    let mut watch = first
        .watch_kind(&blob_kind, WatchKindOptions::default())
        .await
        .unwrap();
    first
        .create(
            Resource::new("a", blob('0')).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    let bookmark = next_event(&mut watch).await.bookmark().unwrap().clone();
    // 36 changes of 1 MB, each event carrying the old value too: 72 MB after the bookmark,
    // more than one reply may hold (64 MiB) unless etcd splits it.
    let fills: Vec<char> = ('A'..='Z').chain('0'..='9').collect();
    for &fill in &fills {
        let stored = first.get(&blob_kind.pointer("a")).await.unwrap();
        let mut next = cosi_core::downcast_ref::<Blob>(&*stored).unwrap().clone();
        next.spec = blob(fill);
        first
            .update(next.into_shared(), UpdateOptions::default())
            .await
            .unwrap();
    }
    drop(watch);
    drop(first);

    let second = etcd_common::connect_with(options, blob_registry()).await;
    let since = WatchKindOptions {
        since: Some(bookmark),
        ..Default::default()
    };
    let mut watch = second.watch_kind(&blob_kind, since).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..fills.len() {
        let event = next_event(&mut watch).await;
        let resource = event.resource();
        let spec = &cosi_core::downcast_ref::<Blob>(&**resource.unwrap())
            .unwrap()
            .spec;
        seen.push(spec.data.chars().next().unwrap());
    }
    assert_eq!(seen, fills);
}

#[tokio::test]
async fn a_list_of_more_resources_than_one_grpc_message_holds_has_every_one() {
    // 70 resources of 1 MB: more than one reply may hold (64 MiB is 67.1 MB), so the read
    // must shrink its pages.
    let state = etcd_common::connect_with(options("large-list"), blob_registry()).await;
    let fills: Vec<(String, char)> = ('A'..='Z')
        .chain('a'..='z')
        .chain('0'..='9')
        .cycle()
        .take(70)
        .enumerate()
        .map(|(i, fill)| (format!("b{i:02}"), fill))
        .collect();
    for (id, fill) in &fills {
        state
            .create(
                Resource::new(id.as_str(), blob(*fill)).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    let listed = state
        .list(&Blob::kind(), &Default::default())
        .await
        .unwrap();
    let listed: Vec<(String, char)> = listed
        .iter()
        .map(|r| {
            let blob = cosi_core::downcast_ref::<Blob>(&**r).unwrap();
            let fill = blob.spec.data.chars().next().unwrap();
            (r.metadata().id().to_string(), fill)
        })
        .collect();
    assert_eq!(listed, fills);
}
