//! The controller engine's behaviours over the network.
//!
//! `cosi_controllers::testing::Harness` runs the engine on a paused clock and decides "settled"
//! by scheduler quiescence; neither survives real sockets (time must pass for I/O, and a socket
//! read is not a runnable task). So this suite runs the engine on a real clock and waits for
//! outcomes — "every C equals its A + 2", "no B is left" — through a kind watch of the store,
//! bounded by a timeout. Each behaviour is one function over any `State`, run twice: directly on
//! the in-memory store (the reference), and with the engine on a `RemoteState` talking to a
//! server on the same kind of store over loopback gRPC. A behaviour that passes in process and
//! fails over the network is a bug in the API.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cosi_api::codec::Codec;
use cosi_api::server::ServerHandle;
use cosi_controllers::{
    Backoff, Controller, ControllerState, ControllerStatus, Engine, EngineOptions, Input, Output,
    Reconciled, Transform,
};
use cosi_core::{
    downcast_ref, CreateOptions, Error, Event, Registry, Resource, ResourceSpec, Result,
    SharedResource, State, StateExt, UpdateOptions, WatchKindOptions,
};
use cosi_state::MemoryState;
use serde::{Deserialize, Serialize};

const TIMEOUT: Duration = Duration::from_secs(60);
const ITEMS: i64 = 100;

macro_rules! spec {
    ($name:ident, $type:literal) => {
        #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
        struct $name {
            value: i64,
        }
        impl ResourceSpec for $name {
            const TYPE: &'static str = $type;
            const DEFAULT_NAMESPACE: &'static str = "chain";
        }
    };
}

spec!(A, "As.chain.cosi.dev");
spec!(B, "Bs.chain.cosi.dev");
spec!(C, "Cs.chain.cosi.dev");

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register::<A>().unwrap();
    registry.register::<B>().unwrap();
    registry.register::<C>().unwrap();
    registry.register::<ControllerStatus>().unwrap();
    registry
}

/// Where the engine runs: on the store itself, or on a client of a server over the store.
enum Place {
    InProcess,
    OverTheNetwork,
}

/// The store, the state the engine uses, and the server in between (if any).
struct Setup {
    store: Arc<MemoryState>,
    engine_state: Arc<dyn State>,
    server: Option<ServerHandle>,
    codec: Codec,
}

async fn setup(place: Place) -> Setup {
    let store = Arc::new(MemoryState::default());
    let codec = Codec::new(Arc::new(registry()));
    match place {
        Place::InProcess => Setup {
            engine_state: store.clone(),
            store,
            server: None,
            codec,
        },
        Place::OverTheNetwork => {
            let server =
                support::plaintext_server(store.clone(), codec.clone(), support::any_port()).await;
            let client = support::plaintext_client(server.local_addr(), codec.clone());
            Setup {
                engine_state: Arc::new(client),
                store,
                server: Some(server),
                codec,
            }
        }
    }
}

fn fast_restarts() -> EngineOptions {
    EngineOptions {
        restart_backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(100)),
        ..EngineOptions::default()
    }
}

/// A → B (B = A + 1, level-triggered) and B → C (C = B + 1, per item, holding a finalizer on
/// each B).
fn chain(engine: &Engine) {
    engine
        .register(Transform::<A, B>::same_id("AtoB", |a: &A| {
            Some(B { value: a.value + 1 })
        }))
        .unwrap();
    engine
        .register_queue(
            Transform::<B, C>::same_id("BtoC", |b: &B| Some(C { value: b.value + 1 }))
                .with_finalizers()
                .into_queue(4),
        )
        .unwrap();
}

/// Waits until `done` holds for the kind's contents (id → value), reading a kind watch of the
/// store; panics naming `what` after the timeout.
async fn wait_for_contents<S: ResourceSpec>(
    store: &dyn State,
    what: &str,
    done: impl Fn(&BTreeMap<String, SharedResource>) -> bool,
) {
    let options = WatchKindOptions {
        bootstrap: true,
        ..Default::default()
    };
    let mut watch = store.watch_kind(&S::kind(), options).await.unwrap();
    let mut contents = BTreeMap::new();
    let mut bootstrapped = false;
    let outcome = tokio::time::timeout(TIMEOUT, async {
        loop {
            match watch.recv().await {
                Some(Event::Created { resource, .. }) | Some(Event::Updated { resource, .. }) => {
                    contents.insert(resource.metadata().id().to_string(), resource);
                }
                Some(Event::Destroyed { resource, .. }) => {
                    contents.remove(resource.metadata().id());
                }
                Some(Event::Bootstrapped { .. }) => bootstrapped = true,
                Some(Event::Resync { .. }) => {
                    contents.clear();
                    bootstrapped = false;
                }
                Some(Event::Errored { error }) => panic!("{what}: watch failed: {error}"),
                Some(_) => {}
                None => panic!("{what}: watch ended"),
            }
            if bootstrapped && done(&contents) {
                return;
            }
        }
    })
    .await;
    if outcome.is_err() {
        panic!(
            "{what}: not reached within {TIMEOUT:?}; {} resources",
            contents.len()
        );
    }
}

fn value<S: ResourceSpec + HasValue>(r: &SharedResource) -> i64 {
    downcast_ref::<S>(&**r).unwrap().spec.value()
}

trait HasValue {
    fn value(&self) -> i64;
}
impl HasValue for A {
    fn value(&self) -> i64 {
        self.value
    }
}
impl HasValue for B {
    fn value(&self) -> i64 {
        self.value
    }
}
impl HasValue for C {
    fn value(&self) -> i64 {
        self.value
    }
}

fn all_equal(contents: &BTreeMap<String, SharedResource>, offset: i64) -> bool {
    contents.len() == ITEMS as usize
        && contents
            .iter()
            .all(|(id, r)| value::<C>(r) == id[2..].parse::<i64>().unwrap() + offset)
}

/// Behaviour 1: a two-step chain converges on create, follows updates, and tears everything
/// down (finalizers respected) when the inputs go.
async fn chain_converges_follows_updates_and_tears_down(place: Place) {
    let s = setup(place).await;
    let engine = Engine::with_options(s.engine_state.clone(), fast_restarts());
    chain(&engine);
    engine.start();
    for i in 0..ITEMS {
        s.store
            .create(
                Resource::new(format!("a-{i}"), A { value: i }).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    wait_for_contents::<C>(&*s.store, "every C = A + 2", |c| all_equal(c, 2)).await;

    for i in 0..ITEMS {
        s.store
            .update_with_conflicts::<A, _>(
                &A::kind().pointer(format!("a-{i}")),
                UpdateOptions::default(),
                |r| {
                    r.spec.value += 1000;
                    Ok(())
                },
            )
            .await
            .unwrap();
    }
    wait_for_contents::<C>(&*s.store, "every C = A + 1002", |c| all_equal(c, 1002)).await;

    // B carries BtoC's finalizer: destroying the A's must take B and C down in order.
    for i in 0..ITEMS {
        s.store
            .teardown_and_destroy(&A::kind().pointer(format!("a-{i}")), None)
            .await
            .unwrap();
    }
    wait_for_contents::<B>(&*s.store, "no B left", |b| b.is_empty()).await;
    wait_for_contents::<C>(&*s.store, "no C left", |c| c.is_empty()).await;
    let report = engine.shutdown().await;
    assert_eq!(report.aborted, 0);
    drop(s.server);
}

/// A controller whose first reconciles fail: the engine restarts it with backoff and it
/// converges; its status counts the errors.
struct Flaky {
    failures_left: Arc<AtomicU32>,
}

#[async_trait]
impl Controller for Flaky {
    fn name(&self) -> &str {
        "Flaky"
    }
    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<A>()]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<B>()]
    }
    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        if self
            .failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Error::Backend {
                subject: "Flaky".into(),
                message: "injected failure".into(),
                retryable: true,
                source: None,
            });
        }
        let total: i64 = state
            .list_typed::<A>(&A::kind(), &Default::default())
            .await?
            .iter()
            .map(|a| a.spec.value)
            .sum();
        state
            .modify_output(Resource::new("sum", B::default()), |r| {
                r.spec.value = total;
                Ok(())
            })
            .await?;
        Ok(Reconciled::Done)
    }
}

async fn failing_controller_is_restarted_and_converges(place: Place) {
    let s = setup(place).await;
    let engine = Engine::with_options(s.engine_state.clone(), fast_restarts());
    engine
        .register(Flaky {
            failures_left: Arc::new(AtomicU32::new(3)),
        })
        .unwrap();
    engine.start();
    for i in 1..=4 {
        s.store
            .create(
                Resource::new(format!("a-{i}"), A { value: i }).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    wait_for_contents::<B>(&*s.store, "the sum", |b| {
        b.get("sum").is_some_and(|r| value::<B>(r) == 10)
    })
    .await;
    wait_for_contents::<ControllerStatus>(&*s.store, "the status counts 3 errors", |st| {
        st.get("Flaky")
            .is_some_and(|r| downcast_ref::<ControllerStatus>(&**r).unwrap().spec.errors == 3)
    })
    .await;
    engine.shutdown().await;
    drop(s.server);
}

/// Output ownership is enforced by the store through the API: the user cannot overwrite a
/// controller's output, and the controller's own writes (owner = its name) go through.
async fn outputs_are_owned_by_their_controller(place: Place) {
    let s = setup(place).await;
    let engine = Engine::with_options(s.engine_state.clone(), fast_restarts());
    chain(&engine);
    engine.start();
    s.store
        .create(
            Resource::new("a-0", A { value: 5 }).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    // Once C exists, BtoC has put its finalizer on B: B no longer changes.
    wait_for_contents::<C>(&*s.store, "C exists", |c| c.contains_key("a-0")).await;
    let b = s.engine_state.get(&B::kind().pointer("a-0")).await.unwrap();
    assert!(!b.metadata().finalizers().is_empty(), "BtoC holds B");
    assert_eq!(b.metadata().owner(), Some("AtoB"));
    let err = s
        .engine_state
        .update(b, UpdateOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OwnerConflict { .. }), "{err:?}");
    engine.shutdown().await;
    drop(s.server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_converges_follows_updates_and_tears_down_in_process() {
    chain_converges_follows_updates_and_tears_down(Place::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_converges_follows_updates_and_tears_down_over_the_network() {
    chain_converges_follows_updates_and_tears_down(Place::OverTheNetwork).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_controller_is_restarted_and_converges_in_process() {
    failing_controller_is_restarted_and_converges(Place::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_controller_is_restarted_and_converges_over_the_network() {
    failing_controller_is_restarted_and_converges(Place::OverTheNetwork).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_are_owned_by_their_controller_in_process() {
    outputs_are_owned_by_their_controller(Place::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_are_owned_by_their_controller_over_the_network() {
    outputs_are_owned_by_their_controller(Place::OverTheNetwork).await;
}

/// Only over the network: the engine's shared kind watches survive a server restart, and new
/// inputs after it are reconciled (the analogue of the original's runtime-restart test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_over_the_network_survives_a_server_restart() {
    let mut s = setup(Place::OverTheNetwork).await;
    let engine = Engine::with_options(s.engine_state.clone(), fast_restarts());
    chain(&engine);
    engine.start();
    for i in 0..ITEMS / 2 {
        s.store
            .create(
                Resource::new(format!("a-{i}"), A { value: i }).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    wait_for_contents::<C>(&*s.store, "first half", |c| c.len() == (ITEMS / 2) as usize).await;
    let server = s.server.take().unwrap();
    let address = server.local_addr();
    server.abort().await;
    // Inputs written while the node's API is down, and after it is back.
    for i in ITEMS / 2..ITEMS * 3 / 4 {
        s.store
            .create(
                Resource::new(format!("a-{i}"), A { value: i }).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    s.server = Some(support::plaintext_server(s.store.clone(), s.codec.clone(), address).await);
    for i in ITEMS * 3 / 4..ITEMS {
        s.store
            .create(
                Resource::new(format!("a-{i}"), A { value: i }).into_shared(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
    }
    wait_for_contents::<C>(&*s.store, "every C = A + 2 after the restart", |c| {
        all_equal(c, 2)
    })
    .await;
    assert_eq!(engine.shutdown().await.aborted, 0);
}
