//! The node's life in one process (`cosi_node::node`): a restart in place starts a new
//! runtime over the same store, the event log goes on across it, and a shutdown stops every
//! service. Real processes (`/bin/sleep`), a disk store in a temporary directory; every wait
//! is on an event.

use std::sync::Arc;
use std::time::Duration;

use cosi_core::{downcast_ref, AnyResource, Registry, ResourceSpec, State, StateExt};
use cosi_node::cluster::{Identity, LOCAL};
use cosi_node::config::{ApplyMode, ApplyRequest};
use cosi_node::network::{Cmdline, MemoryBackend};
use cosi_node::node::{
    register_types, MachineStage, MachineStatus, Node, NodeEventItem, NodeEventKind,
    NodeEventReader, NodeOptions, NodeParts, NodeStore,
};
use cosi_node::services::{read_stat, ServiceState, ServiceStatus, SupervisorOptions};

const PATIENCE: Duration = Duration::from_secs(60);

const CONFIG: &str = "version: v1alpha1
machine: {type: worker, token: t0k3n}
cluster: {name: demo, controlPlane: {endpoint: 'https://192.0.2.1:6443'}}
---
apiVersion: v1alpha1
kind: ServiceConfig
name: sleeper
command: /bin/sleep
args: ['600']
";

struct Fixture {
    _dir: tempfile::TempDir,
    store: NodeStore,
    node: Node,
}

async fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = Registry::new();
    register_types(&mut registry).unwrap();
    let registry = Arc::new(registry);
    let store = NodeStore::open(dir.path(), registry.clone()).await.unwrap();
    let options = NodeOptions {
        parts: NodeParts {
            network: Arc::new(MemoryBackend::with_links(["lo", "eth0"])),
            cmdline: Cmdline::default(),
            registries: Vec::new(),
            default_hostname: Some("node-1".into()),
        },
        supervisor: SupervisorOptions {
            state_dir: Some(dir.path().join("services")),
            ..SupervisorOptions::default()
        },
    };
    let node = Node::start(store.state(), &registry, options)
        .await
        .unwrap();
    node.handle()
        .runtime()
        .unwrap()
        .applier()
        .apply(ApplyRequest::config(CONFIG, ApplyMode::Auto, "admin"))
        .await
        .unwrap();
    Fixture {
        _dir: dir,
        store,
        node,
    }
}

/// Waits until `id` of type `S` satisfies `condition`.
async fn wait_for<S: ResourceSpec>(
    state: &dyn State,
    id: &str,
    condition: impl Fn(&S) -> bool + Send + Sync,
) -> Arc<cosi_core::Resource<S>> {
    let pointer = S::kind().pointer(id);
    let found = tokio::time::timeout(
        PATIENCE,
        state.watch_for(&pointer, |r: Option<&dyn AnyResource>| {
            r.and_then(|r| downcast_ref::<S>(r).ok())
                .is_some_and(|r| condition(&r.spec))
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {pointer}"))
    .unwrap()
    .unwrap();
    cosi_core::downcast::<S>(found).unwrap()
}

async fn sleeper_pid(state: &dyn State, not: Option<u32>) -> u32 {
    let status = wait_for::<ServiceStatus>(state, "sleeper", |s| {
        s.state == ServiceState::Running && s.pid.is_some() && s.pid != not
    })
    .await;
    status.spec.pid.unwrap()
}

/// Reads the log until a service event of `service` in `state`.
async fn service_event(events: &mut NodeEventReader, service: &str, state: ServiceState) {
    tokio::time::timeout(PATIENCE, async {
        while let Some(item) = events.next().await {
            if let NodeEventItem::Event(event) = item {
                if let NodeEventKind::Service {
                    service: s,
                    state: st,
                    ..
                } = &event.kind
                {
                    if s == service && *st == state {
                        return;
                    }
                }
            }
        }
        panic!("the event log ended");
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {service} {state}"));
}

fn dead(pid: u32) -> bool {
    read_stat(pid).unwrap().is_none_or(|s| s.state == 'Z')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_place_starts_a_new_runtime_over_the_same_store() {
    let Fixture {
        _dir,
        store,
        mut node,
    } = start().await;
    let state = store.state();
    let first = sleeper_pid(&*state, None).await;
    let identity = wait_for::<Identity>(&*state, LOCAL, |_| true).await;

    node.restart().await.unwrap();

    let runtime = node.handle().runtime().unwrap();
    assert_eq!((node.boots(), runtime.boot()), (2, 2));
    let status = wait_for::<MachineStatus>(&*state, MachineStatus::ID, |s| s.boot == 2).await;
    assert_eq!(status.spec.stage, MachineStage::Running);
    assert!(dead(first), "the first run's service {first} was stopped");
    sleeper_pid(&*state, Some(first)).await;
    let kept = wait_for::<Identity>(&*state, LOCAL, |_| true).await;
    assert_eq!(kept.spec, identity.spec);

    drop(runtime);
    node.shutdown().await;
    drop(state);
    assert!(store.close().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_log_goes_on_across_a_restart_in_place() {
    let Fixture {
        _dir,
        store,
        mut node,
    } = start().await;
    let state = store.state();
    sleeper_pid(&*state, None).await;
    let mut events = node.handle().events(0);

    node.restart().await.unwrap();

    // The old runtime's service stops, the new one's starts, on the reader opened before
    service_event(&mut events, "sleeper", ServiceState::Finished).await;
    service_event(&mut events, "sleeper", ServiceState::Running).await;

    node.shutdown().await;
    drop(state);
    assert!(store.close().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_every_service_and_leaves_no_runtime() {
    let Fixture { _dir, store, node } = start().await;
    let state = store.state();
    let pid = sleeper_pid(&*state, None).await;
    let handle = node.handle();

    node.shutdown().await;

    assert!(dead(pid), "the service {pid} was stopped");
    assert!(handle.runtime().is_none());
    drop(state);
    assert!(store.close().await);
}
