//! Model test of watches that start anywhere: at the head, after a bootstrap, after a bookmark
//! (inside or behind the window), with a tail, or on one resource, under id and label filters,
//! read one event, one batch or one shared batch at a time, while writes go on. Each watcher
//! keeps a view built only from its events; every event must be relative to that view, every
//! exact event must leave it equal to the store's (filtered) contents at the event's bookmark,
//! every catch-up or bootstrap equal to the contents at the head it carries, and in the end
//! every view equals the store. (`PROPTEST_CASES` sets how many runs; 256 by default.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    CreateOptions, DestroyOptions, Event, IdQuery, LabelQueries, ListOptions, Pointer, Resource,
    SharedResource, State, UpdateOptions, Watch, WatchKindOptions, WatchOptions,
};
use proptest::prelude::*;

use super::{MemoryOptions, MemoryState};

use super::tests::{kind, Counter};

fn pointer(id: u8) -> Pointer {
    kind().pointer(format!("r{id}"))
}

fn labelled(id: u8, value: i64, web: bool) -> SharedResource {
    let mut r = Resource::new(format!("r{id}"), Counter { value });
    if web {
        r.metadata.labels_mut().insert("app".into(), "web".into());
    }
    r.into_shared()
}

#[derive(Clone, Copy, Debug)]
enum Start {
    Head,
    Bootstrap,
    /// After the bookmark this many changes before the head.
    Since(u64),
    Tail(usize),
    Pointer(u8),
}

#[derive(Clone, Copy, Debug)]
enum Read {
    Next,
    Batch(usize),
    Shared(usize),
}

#[derive(Clone, Copy, Debug)]
struct Filter {
    web: bool,
    ids: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Create(u8, bool),
    Update(u8, bool),
    Destroy(u8),
    Drain,
    Start(Start, Filter, Read),
    /// Creates (or destroys) `x{from}`..`x{from + count}`, in descending order when `reverse`.
    Bulk(bool, u8, u8, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let start = prop_oneof![
        Just(Start::Head),
        Just(Start::Bootstrap),
        (0u64..12).prop_map(Start::Since),
        (0usize..12).prop_map(Start::Tail),
        (0u8..5).prop_map(Start::Pointer),
    ];
    let filter = (any::<bool>(), any::<bool>()).prop_map(|(web, ids)| Filter { web, ids });
    let read = prop_oneof![
        Just(Read::Next),
        (1usize..5).prop_map(Read::Batch),
        (1usize..5).prop_map(Read::Shared),
    ];
    prop_oneof![
        3 => (0u8..5, any::<bool>()).prop_map(|(id, web)| Op::Create(id, web)),
        4 => (0u8..5, any::<bool>()).prop_map(|(id, web)| Op::Update(id, web)),
        2 => (0u8..5).prop_map(Op::Destroy),
        2 => Just(Op::Drain),
        1 => (start, filter, read).prop_map(|(s, f, r)| Op::Start(s, f, r)),
        1 => (any::<bool>(), 0u8..100, 0u8..80, any::<bool>()).prop_map(|(c, f, n, r)| Op::Bulk(c, f, n, r)),
    ]
}

type Contents = BTreeMap<String, SharedResource>;

struct Watcher {
    description: String,
    watch: Watch,
    read: Read,
    web: bool,
    /// Only ids r0..r2.
    ids: bool,
    /// A pointer watch of this id.
    only: Option<String>,
    view: Contents,
    in_bootstrap: bool,
    /// The first event of a pointer watch is still to come.
    first: bool,
    /// A catch-up at this head is being applied.
    compacted_at: Option<u64>,
    last_seq: u64,
}

impl Watcher {
    fn passes(&self, r: &SharedResource) -> bool {
        let id = r.metadata().id();
        if let Some(only) = &self.only {
            return id == only;
        }
        (!self.ids || ["r0", "r1", "r2"].contains(&id))
            && (!self.web || r.metadata().labels().get("app").map(String::as_str) == Some("web"))
    }

    fn filtered(&self, contents: &Contents) -> Contents {
        contents
            .iter()
            .filter(|(_, r)| self.passes(r))
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect()
    }

    fn check_view(&self, at: u64, snapshots: &[Contents], what: &str) {
        let expected = self.filtered(&snapshots[at as usize]);
        let ids = |c: &Contents| c.keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            ids(&self.view),
            ids(&expected),
            "{}: view after {what} at {at}",
            self.description
        );
        for (id, r) in &self.view {
            assert!(
                Arc::ptr_eq(r, &expected[id]),
                "{}: {id} stale after {what} at {at}",
                self.description
            );
        }
    }

    fn apply(&mut self, event: Event, origin: u64, snapshots: &[Contents]) {
        let seq = event
            .bookmark()
            .and_then(|b| b.position_in(origin))
            .unwrap_or_else(|| {
                panic!("{}: event without our bookmark {event:?}", self.description)
            });
        assert!(
            seq >= self.last_seq,
            "{}: bookmark {seq} after {}",
            self.description,
            self.last_seq
        );
        if let Some(head) = self.compacted_at {
            if !(event.is_compacted() && seq == head) {
                self.check_view(head, snapshots, "a catch-up");
                self.compacted_at = None;
            }
        }
        self.last_seq = seq;
        if self.first {
            self.first = false;
            match &event {
                Event::Created { resource, .. } => {
                    self.view
                        .insert(resource.metadata().id().to_string(), resource.clone());
                }
                Event::Destroyed { .. } => {}
                other => panic!("{}: first event {other:?}", self.description),
            }
            self.check_view(seq, snapshots, "the first event");
            return;
        }
        let compacted = event.is_compacted();
        if compacted {
            self.compacted_at = Some(seq);
        }
        match event {
            Event::Resync { .. } => {
                assert!(
                    !self.in_bootstrap,
                    "{}: resync in bootstrap",
                    self.description
                );
                self.view.clear();
                self.in_bootstrap = true;
            }
            Event::Bootstrapped { .. } => {
                assert!(self.in_bootstrap, "{}: bootstrapped", self.description);
                self.in_bootstrap = false;
                self.check_view(seq, snapshots, "a bootstrap");
            }
            // Skipped changes moved the position: the view is already what matches there.
            Event::Noop { .. } => {
                assert!(
                    !self.in_bootstrap,
                    "{}: noop in a bootstrap",
                    self.description
                );
                self.check_view(seq, snapshots, "a noop");
            }
            Event::Created { resource, .. } => {
                let id = resource.metadata().id().to_string();
                assert!(
                    self.passes(&resource),
                    "{}: created {id} fails the filter",
                    self.description
                );
                let previous = self.view.insert(id.clone(), resource);
                assert!(
                    previous.is_none(),
                    "{}: created {id}, held",
                    self.description
                );
            }
            Event::Updated { old, resource, .. } => {
                let id = resource.metadata().id().to_string();
                let previous = self.view.insert(id.clone(), resource);
                let previous = previous
                    .unwrap_or_else(|| panic!("{}: updated {id}, not held", self.description));
                if !compacted {
                    let old = old.expect("exact update has old");
                    assert!(
                        Arc::ptr_eq(&old, &previous),
                        "{}: old of {id}",
                        self.description
                    );
                }
            }
            // A pointer watch's resync says its resource is absent with a tombstone, as its
            // first event does.
            Event::Destroyed { resource, .. }
                if self.in_bootstrap && self.only.as_deref() == Some(resource.metadata().id()) =>
            {
                assert!(
                    self.view.is_empty() && !compacted,
                    "{}: tombstone in a resync",
                    self.description
                );
            }
            Event::Destroyed { resource, .. } => {
                let id = resource.metadata().id();
                assert!(
                    self.view.remove(id).is_some(),
                    "{}: destroyed {id}, not held",
                    self.description
                );
            }
            other => panic!("{}: unexpected {other:?}", self.description),
        }
        if !compacted && !self.in_bootstrap {
            self.check_view(seq, snapshots, "an exact event");
        }
    }

    async fn take_all(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let wait = Duration::from_secs(1);
        loop {
            let batch = match self.read {
                Read::Next => tokio::time::timeout(wait, self.watch.recv())
                    .await
                    .map(|e| e.map(|e| vec![e])),
                Read::Batch(max) => tokio::time::timeout(wait, self.watch.recv_batch(max)).await,
                Read::Shared(max) => tokio::time::timeout(wait, self.watch.recv_shared(max))
                    .await
                    .map(|batch| batch.map(|batch| batch.to_vec())),
            };
            match batch {
                Ok(batch) => events.extend(batch.expect("the watch stays open")),
                Err(_) => return events,
            }
        }
    }

    async fn drain(&mut self, origin: u64, snapshots: &[Contents]) {
        for event in self.take_all().await {
            self.apply(event, origin, snapshots);
        }
        if let Some(head) = self.compacted_at.take() {
            self.check_view(head, snapshots, "a catch-up");
        }
    }
}

async fn snapshot(state: &MemoryState) -> Contents {
    state
        .list(&kind(), &ListOptions::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.metadata().id().to_string(), r))
        .collect()
}

async fn run(options: MemoryOptions, ops: Vec<Op>) {
    let state = MemoryState::new(options);
    let origin = crate::origin::kind_origin(state.collections.origin(), &kind());
    let mut snapshots = vec![Contents::new()];
    let mut watchers: Vec<Watcher> = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        if let Op::Bulk(create, from, count, reverse) = *op {
            let mut range: Vec<u16> =
                (u16::from(from)..u16::from(from) + u16::from(count)).collect();
            if reverse {
                range.reverse();
            }
            for k in range {
                let id = format!("x{k:03}");
                let done = if create {
                    let mut r = Resource::new(id, Counter { value: n as i64 });
                    if k % 3 == 0 {
                        r.metadata.labels_mut().insert("app".into(), "web".into());
                    }
                    state
                        .create(r.into_shared(), CreateOptions::default())
                        .await
                        .is_ok()
                } else {
                    state
                        .destroy(&kind().pointer(id), DestroyOptions::default())
                        .await
                        .is_ok()
                };
                if done {
                    snapshots.push(snapshot(&state).await);
                }
            }
            continue;
        }
        let written = match *op {
            Op::Create(id, web) => state
                .create(labelled(id, n as i64, web), CreateOptions::default())
                .await
                .is_ok(),
            Op::Update(id, web) => match state.get(&pointer(id)).await {
                Ok(stored) => {
                    let mut copy = cosi_core::downcast_ref::<Counter>(&*stored)
                        .unwrap()
                        .clone();
                    copy.spec.value = n as i64;
                    copy.metadata.labels_mut().clear();
                    if web {
                        copy.metadata
                            .labels_mut()
                            .insert("app".into(), "web".into());
                    }
                    state
                        .update(copy.into_shared(), UpdateOptions::default())
                        .await
                        .unwrap();
                    true
                }
                Err(_) => false,
            },
            Op::Destroy(id) => state
                .destroy(&pointer(id), DestroyOptions::default())
                .await
                .is_ok(),
            Op::Drain => {
                for w in &mut watchers {
                    w.drain(origin, &snapshots).await;
                }
                false
            }
            Op::Bulk(..) => unreachable!(),
            Op::Start(start, filter, read) => {
                let head = snapshots.len() as u64 - 1;
                let labels: LabelQueries = if filter.web {
                    cosi_core::LabelQuery::new()
                        .with(cosi_core::LabelTerm::new(
                            "app",
                            cosi_core::LabelOp::Equal("web".into()),
                        ))
                        .into()
                } else {
                    LabelQueries::default()
                };
                let ids = filter.ids.then(|| IdQuery::new("^r[0-2]$").unwrap());
                let mut options = WatchKindOptions {
                    labels,
                    ids,
                    ..Default::default()
                };
                let mut only = None;
                let mut first = false;
                let mut in_bootstrap = false;
                let window_len = state.collections.get_or_create(&kind()).read().window_len();
                let position = match start {
                    Start::Head => head,
                    Start::Bootstrap => {
                        options.bootstrap = true;
                        in_bootstrap = true;
                        head
                    }
                    Start::Since(back) => {
                        let at = head.saturating_sub(back);
                        options.since = Some(cosi_core::Bookmark::at(origin, at));
                        at
                    }
                    Start::Tail(tail) => {
                        options.tail = Some(tail);
                        head - tail.min(window_len) as u64
                    }
                    Start::Pointer(id) => {
                        only = Some(format!("r{id}"));
                        first = true;
                        head
                    }
                };
                let watch = match start {
                    Start::Pointer(id) => state
                        .watch(&pointer(id), WatchOptions::default())
                        .await
                        .unwrap(),
                    _ => state.watch_kind(&kind(), options.clone()).await.unwrap(),
                };
                let mut watcher = Watcher {
                    description: format!("#{n} {start:?} {filter:?} {read:?} at {position}"),
                    watch,
                    read,
                    web: filter.web && only.is_none(),
                    ids: filter.ids && only.is_none(),
                    only,
                    view: Contents::new(),
                    in_bootstrap,
                    first,
                    compacted_at: None,
                    last_seq: 0,
                };
                if !in_bootstrap && !first {
                    watcher.view = watcher.filtered(&snapshots[position as usize]);
                }
                watchers.push(watcher);
                false
            }
        };
        if written {
            snapshots.push(snapshot(&state).await);
        }
    }
    let now = snapshots.len() as u64 - 1;
    for w in &mut watchers {
        w.drain(origin, &snapshots).await;
        assert!(!w.in_bootstrap, "{}: bootstrap unfinished", w.description);
        w.check_view(now, &snapshots, "the end");
    }
}

proptest! {
    #[test]
    fn every_watch_start_builds_an_exact_view_of_the_store(
        history in 1usize..8,
        history_min in 1usize..8,
        markers in 0usize..8,
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let options = MemoryOptions { history, history_min, max_destroy_markers: markers };
        runtime.block_on(run(options, ops));
    }
}

/// Bootstrapped watches started on a multi-threaded runtime while three tasks write: each
/// event relative to the view, each exact update one version on, and every view equal to the
/// store once a last write has reached it.
mod stress {
    use super::*;

    /// Checks relativity and builds the view; returns when the sentinel is held.
    async fn follow(mut watch: Watch, bootstrap: bool, initial: Contents, read: Read) -> Contents {
        let mut view = initial;
        let mut in_bootstrap = bootstrap;
        loop {
            let events = match read {
                Read::Next => watch.recv().await.map(|e| vec![e]),
                Read::Batch(max) => watch.recv_batch(max).await,
                Read::Shared(max) => watch.recv_shared(max).await.map(|b| b.to_vec()),
            }
            .expect("open");
            for event in events {
                let compacted = event.is_compacted();
                match event {
                    Event::Resync { .. } => {
                        view.clear();
                        in_bootstrap = true;
                    }
                    Event::Bootstrapped { .. } => {
                        assert!(in_bootstrap);
                        in_bootstrap = false;
                    }
                    Event::Created { resource, .. } => {
                        let id = resource.metadata().id().to_string();
                        assert!(
                            view.insert(id.clone(), resource).is_none(),
                            "created {id} held"
                        );
                    }
                    Event::Updated { old, resource, .. } => {
                        let id = resource.metadata().id().to_string();
                        let previous = view.insert(id.clone(), resource.clone());
                        let previous = previous.unwrap_or_else(|| panic!("updated {id} not held"));
                        if !compacted {
                            assert!(Arc::ptr_eq(&old.unwrap(), &previous), "old of {id}");
                        }
                        if !compacted {
                            assert_eq!(
                                resource.metadata().version(),
                                previous.metadata().version().next()
                            );
                        }
                    }
                    Event::Destroyed { resource, .. } => {
                        let id = resource.metadata().id();
                        assert!(view.remove(id).is_some(), "destroyed {id} not held");
                    }
                    Event::Noop { .. } => assert!(!in_bootstrap, "noop in a bootstrap"),
                    other => panic!("{other:?}"),
                }
            }
            if !in_bootstrap && view.contains_key("zz-end") {
                return view;
            }
        }
    }

    async fn writer(state: Arc<MemoryState>, seed: u64) {
        let mut x = seed;
        for n in 0..1500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = (x % 12) as u8;
            match (x >> 8) % 4 {
                0 => {
                    let _ = state
                        .create(labelled(id, n, x & 1 == 0), CreateOptions::default())
                        .await;
                }
                1 | 2 => {
                    if let Ok(stored) = state.get(&pointer(id)).await {
                        let mut copy = cosi_core::downcast_ref::<Counter>(&*stored)
                            .unwrap()
                            .clone();
                        copy.spec.value = n;
                        let _ = state
                            .update(copy.into_shared(), UpdateOptions::default())
                            .await;
                    }
                }
                _ => {
                    let _ = state.destroy(&pointer(id), DestroyOptions::default()).await;
                }
            }
            if n % 64 == 0 {
                tokio::task::yield_now().await;
            }
        }
    }

    #[test]
    fn watches_started_during_concurrent_writes_converge_to_the_store() {
        for round in 0..20u64 {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .build()
                .unwrap();
            runtime.block_on(async {
                let state = Arc::new(MemoryState::new(MemoryOptions {
                    history: 1 + (round as usize % 5) * 7,
                    history_min: 1,
                    max_destroy_markers: round as usize % 9,
                }));
                let writers: Vec<_> = (0..3)
                    .map(|w| tokio::spawn(writer(state.clone(), 0x9e37_79b9 + w * 7919 + round)))
                    .collect();
                let mut followers = Vec::new();
                for w in 0..8u64 {
                    tokio::task::yield_now().await;
                    let web = w % 3 == 0;
                    let labels: LabelQueries = if web {
                        cosi_core::LabelQuery::new()
                            .with(cosi_core::LabelTerm::new("app", cosi_core::LabelOp::Exists))
                            .into()
                    } else {
                        LabelQueries::default()
                    };
                    let read = [Read::Next, Read::Batch(3), Read::Shared(5)][w as usize % 3];
                    let bootstrap = w % 2 == 0;
                    let watch = state
                        .watch_kind(
                            &kind(),
                            WatchKindOptions {
                                bootstrap,
                                labels,
                                ..Default::default()
                            },
                        )
                        .await
                        .unwrap();
                    // Only bootstrapped watches: what one from the head holds is not known here.
                    if bootstrap {
                        followers.push((
                            web,
                            tokio::spawn(follow(watch, true, Contents::new(), read)),
                        ));
                    }
                }
                for w in writers {
                    w.await.unwrap();
                }
                let mut end = Resource::new("zz-end", Counter { value: 0 });
                end.metadata.labels_mut().insert("app".into(), "x".into());
                state
                    .create(end.into_shared(), CreateOptions::default())
                    .await
                    .unwrap();
                let listed = snapshot(&state).await;
                for (web, follower) in followers {
                    let view = follower.await.unwrap();
                    let expected: Vec<&String> = listed
                        .iter()
                        .filter(|(_, r)| !web || r.metadata().labels().contains_key("app"))
                        .map(|(id, _)| id)
                        .collect();
                    assert_eq!(view.keys().collect::<Vec<_>>(), expected, "web: {web}");
                    for (id, r) in &view {
                        assert!(Arc::ptr_eq(r, &listed[id]), "{id} stale");
                    }
                }
            });
        }
    }
}
