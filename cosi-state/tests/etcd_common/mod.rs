//! Shared setup of the etcd tests: one private etcd server per test binary (started on first
//! use, killed with its data when the binary exits) and a unique key prefix per test, so tests
//! sharing the server never see each other's keys.
#![allow(dead_code)] // Each test binary uses a different part of it.

use std::time::Duration;

use cosi_core::{
    CreateOptions, DestroyOptions, Event, Kind, Resource, ResourceSpec, SharedResource, State,
    UpdateOptions, Watch, WatchKindOptions,
};
use cosi_state::etcd::{EtcdOptions, EtcdState};
use serde::{Deserialize, Serialize};

/// The spec every etcd test stores.
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
pub struct Counter {
    pub value: i64,
}

impl ResourceSpec for Counter {
    const TYPE: &'static str = "Counters.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// How long a test waits for an event before failing (a guard, never a sleep).
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

#[allow(unused_imports)] // Each test binary uses a different part.
pub use cosi_test_support::etcd::{shared_server, start_server, unique_prefix};

/// Options for the shared server under a fresh prefix.
pub fn options(test: &str) -> EtcdOptions {
    EtcdOptions::new([shared_server().endpoint()]).with_prefix(unique_prefix(test))
}

/// A state on the shared server under a fresh prefix, with [`Counter`] registered.
pub async fn state(test: &str) -> EtcdState {
    connect(options(test)).await
}

/// A state with these options and [`Counter`] registered.
pub async fn connect(options: EtcdOptions) -> EtcdState {
    let registry = cosi_core::Registry::new()
        .with::<Counter>()
        .expect("Counter registers");
    connect_with(options, registry).await
}

/// A state with these options and this registry.
pub async fn connect_with(options: EtcdOptions, registry: cosi_core::Registry) -> EtcdState {
    EtcdState::connect(options, std::sync::Arc::new(registry))
        .await
        .expect("etcd options are valid")
}

/// A counter resource ready to be created.
pub fn counter(id: &str, value: i64) -> SharedResource {
    Resource::new(id, Counter { value }).into_shared()
}

/// The counter value of a stored resource.
pub fn value_of(resource: &SharedResource) -> i64 {
    cosi_core::downcast_ref::<Counter>(&**resource)
        .expect("a Counter")
        .spec
        .value
}

/// The next event, failing the test if none arrives in time.
pub async fn next_event(watch: &mut Watch) -> Event {
    tokio::time::timeout(EVENT_TIMEOUT, watch.recv())
        .await
        .expect("an event within the timeout")
        .expect("the watch is still open")
}

/// The next event that is not a `Noop` (a filtered watch is handed one when changes it skips
/// move its bookmark).
pub async fn next_change(watch: &mut Watch) -> Event {
    loop {
        match next_event(watch).await {
            Event::Noop { .. } => continue,
            event => return event,
        }
    }
}

/// `(type, id, value)` of an event, for exact comparisons.
pub fn summary(event: &Event) -> (String, String, Option<i64>) {
    let resource = event.resource();
    (
        event.type_name().to_string(),
        resource.map_or(String::new(), |r| r.metadata().id().to_string()),
        resource.and_then(|r| {
            cosi_core::downcast_ref::<Counter>(&**r)
                .ok()
                .map(|c| c.spec.value)
        }),
    )
}

/// `(type, id, value)` shorthand for expectations.
pub fn ev(kind: &str, id: &str, value: i64) -> (String, String, Option<i64>) {
    (kind.to_string(), id.to_string(), Some(value))
}

/// The kind of [`Counter`].
pub fn kind() -> Kind {
    Counter::kind()
}

/// Creates counter `id` holding `value`, without an owner.
pub async fn create_counter(state: &impl State, id: &str, value: i64) -> SharedResource {
    state
        .create(counter(id, value), CreateOptions::default())
        .await
        .unwrap()
}

/// Creates counter `id` holding `value`, owned by `owner`.
pub async fn create_owned(state: &impl State, id: &str, value: i64, owner: &str) -> SharedResource {
    let options = CreateOptions {
        owner: Some(owner.into()),
    };
    state.create(counter(id, value), options).await.unwrap()
}

/// Reads counter `id`, sets its value and writes it back.
pub async fn bump(state: &impl State, id: &str, value: i64) {
    let stored = state.get(&kind().pointer(id)).await.unwrap();
    let mut next = cosi_core::downcast_ref::<Counter>(&*stored)
        .unwrap()
        .clone();
    next.spec.value = value;
    state
        .update(next.into_shared(), UpdateOptions::default())
        .await
        .unwrap();
}

/// Destroys counter `id`, which must exist.
pub async fn destroy(state: &impl State, id: &str) {
    state
        .destroy(&kind().pointer(id), DestroyOptions::default())
        .await
        .unwrap();
}

/// A watch of every counter, from now on.
pub async fn watch_every(state: &impl State) -> Watch {
    state
        .watch_kind(&kind(), WatchKindOptions::default())
        .await
        .unwrap()
}

/// The [`summary`] of the next event.
pub async fn next_summary(watch: &mut Watch) -> (String, String, Option<i64>) {
    summary(&next_event(watch).await)
}

/// The [`summary`] of each of the next `count` events.
pub async fn next_summaries(watch: &mut Watch, count: usize) -> Vec<(String, String, Option<i64>)> {
    let mut seen = Vec::with_capacity(count);
    for _ in 0..count {
        seen.push(next_summary(watch).await);
    }
    seen
}

/// Asserts that the watch ends (yields `None`) within the timeout.
pub async fn assert_watch_ends(watch: &mut Watch) {
    let end = tokio::time::timeout(EVENT_TIMEOUT, watch.recv()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}
