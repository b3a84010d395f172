//! The controllers between `ServiceSpec`s, the supervisor and the status resources: on the
//! harness's paused clock where only timers matter (a program that cannot start, a disabled
//! service), with a real engine and real processes where a process must run.

mod services_support;

use std::sync::Arc;
use std::time::Duration;

use cosi_controllers::testing::Harness;
use cosi_controllers::Engine;
use cosi_core::{
    downcast, table, CreateOptions, Resource, ResourceSpec, State, StateExt, UpdateOptions,
};
use cosi_node::services::{
    Health, Service, ServiceSpec, ServiceSpecController, ServiceState, ServiceStatus,
    ServiceStatusController, Supervisor, SupervisorOptions,
};
use cosi_state::{MemoryOptions, MemoryState};
use services_support::*;

async fn harness(options: SupervisorOptions) -> (Harness, Supervisor) {
    let harness = Harness::new();
    let supervisor = Supervisor::new(options).unwrap();
    harness
        .register(ServiceSpecController::new(supervisor.clone()))
        .unwrap();
    harness
        .register(ServiceStatusController::new(supervisor.clone()))
        .unwrap();
    harness.start().await;
    (harness, supervisor)
}

async fn put(state: &Arc<dyn State>, id: &str, spec: ServiceSpec) {
    let resource = Resource::new(id, spec).into_shared();
    match state.get(resource.metadata().pointer()).await {
        Ok(current) => {
            let mut next = Resource::new(
                id,
                downcast::<ServiceSpec>(current.clone())
                    .unwrap()
                    .spec
                    .clone(),
            );
            next.metadata = current.metadata().clone();
            next.spec = downcast::<ServiceSpec>(resource).unwrap().spec.clone();
            state
                .update(next.into_shared(), UpdateOptions::default())
                .await
                .unwrap();
        }
        Err(_) => {
            state
                .create(resource, CreateOptions::default())
                .await
                .unwrap();
        }
    }
}

fn count(supervisor: &Supervisor, id: &str, state: ServiceState) -> usize {
    supervisor
        .get(id)
        .map_or(0, |i| i.events.iter().filter(|e| e.state == state).count())
}

fn starts(supervisor: &Supervisor, id: &str) -> usize {
    count(supervisor, id, ServiceState::Starting)
}

/// Waits for the `n`th failure of `id`, then settles. A start runs fork/exec in a blocking
/// task, which the paused clock waits for (it does not auto-advance meanwhile), so the backoff
/// that follows starts at the same virtual instant as the attempt.
async fn failures(harness: &Harness, supervisor: &Supervisor, id: &str, n: usize) {
    let mut changes = supervisor.subscribe();
    while count(supervisor, id, ServiceState::Failed) < n {
        changes.changed().await.unwrap();
    }
    harness.settle().await;
}

#[tokio::test(start_paused = true)]
async fn the_restart_backoff_doubles_after_each_failure() {
    // Given the default backoff (500 ms doubling up to 30 s) and a program that cannot start
    let (harness, supervisor) = harness(SupervisorOptions::default()).await;
    put(
        &harness.state(),
        "missing",
        ServiceSpec::command("/nonexistent/program"),
    )
    .await;
    harness.settle().await;
    failures(&harness, &supervisor, "missing", 1).await;

    // Then the failure is the status's last event, with the restart counted
    let status = harness.expect::<ServiceStatus>("missing").await;
    assert_eq!(status.spec.state, ServiceState::Failed);
    assert_eq!(
        status.spec.last_event.as_deref(),
        Some("Failed to start /nonexistent/program: No such file or directory")
    );
    assert_eq!(status.spec.restarts, 1);
    assert_eq!(starts(&supervisor, "missing"), 1);

    // And each restart comes exactly one doubled delay after the previous failure
    for (attempt, delay_ms) in [(2, 500), (3, 1000), (4, 2000), (5, 4000), (6, 8000)] {
        harness.advance(Duration::from_millis(delay_ms - 1)).await;
        assert_eq!(
            starts(&supervisor, "missing"),
            attempt - 1,
            "before {delay_ms} ms"
        );
        harness.advance(Duration::from_millis(1)).await;
        assert_eq!(starts(&supervisor, "missing"), attempt, "at {delay_ms} ms");
        failures(&harness, &supervisor, "missing", attempt).await;
    }
    assert_eq!(
        harness
            .expect::<ServiceStatus>("missing")
            .await
            .spec
            .restarts,
        6
    );
    supervisor.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_run_that_counts_as_stable_resets_the_backoff() {
    // Given every run counting as stable (stable_after = 0)
    let (harness, supervisor) = harness(SupervisorOptions {
        stable_after: Duration::ZERO,
        ..SupervisorOptions::default()
    })
    .await;
    put(
        &harness.state(),
        "missing",
        ServiceSpec::command("/nonexistent/program"),
    )
    .await;
    harness.settle().await;
    failures(&harness, &supervisor, "missing", 1).await;

    // Then every restart waits the initial delay
    for attempt in 2..6 {
        harness.advance(Duration::from_millis(499)).await;
        assert_eq!(starts(&supervisor, "missing"), attempt - 1);
        harness.advance(Duration::from_millis(1)).await;
        assert_eq!(starts(&supervisor, "missing"), attempt);
        failures(&harness, &supervisor, "missing", attempt).await;
    }
    supervisor.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_spec_change_cuts_the_backoff_short() {
    let (harness, supervisor) = harness(SupervisorOptions::default()).await;
    put(
        &harness.state(),
        "svc",
        ServiceSpec::command("/nonexistent/one"),
    )
    .await;
    harness.settle().await;
    failures(&harness, &supervisor, "svc", 1).await;
    harness.advance(Duration::from_millis(500)).await;
    failures(&harness, &supervisor, "svc", 2).await;
    harness.advance(Duration::from_millis(1000)).await;
    failures(&harness, &supervisor, "svc", 3).await;
    assert_eq!(starts(&supervisor, "svc"), 3);

    // Waiting 2 s now; a new spec is tried at once.
    put(
        &harness.state(),
        "svc",
        ServiceSpec::command("/nonexistent/two"),
    )
    .await;
    harness.settle().await;
    failures(&harness, &supervisor, "svc", 4).await;
    assert_eq!(starts(&supervisor, "svc"), 4);
    assert_eq!(
        harness
            .expect::<ServiceStatus>("svc")
            .await
            .spec
            .last_event
            .as_deref(),
        Some("Failed to start /nonexistent/two: No such file or directory")
    );
    supervisor.shutdown().await;
    harness.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_disabled_spec_is_skipped_and_a_removed_one_leaves_no_status() {
    let (harness, supervisor) = harness(SupervisorOptions::default()).await;
    let mut spec = ServiceSpec::command("/bin/sleep");
    spec.enabled = false;
    put(&harness.state(), "off", spec).await;
    harness.settle().await;

    let status = harness.expect::<ServiceStatus>("off").await;
    assert_eq!(status.spec.state, ServiceState::Skipped);
    assert_eq!(status.spec.health, Health::Unknown);
    assert_eq!(
        status.spec.last_event.as_deref(),
        Some("Service skipped: disabled in its spec")
    );
    assert_eq!(status.metadata.owner(), Some(ServiceStatusController::NAME));
    harness.expect_absent::<Service>("off").await;

    harness
        .state()
        .destroy(&ServiceSpec::kind().pointer("off"), Default::default())
        .await
        .unwrap();
    harness.settle().await;
    harness.expect_absent::<ServiceStatus>("off").await;
    assert!(supervisor.ids().is_empty());
    supervisor.shutdown().await;
    harness.shutdown().await;
}

/// A real engine on a real clock, for tests where a process runs.
async fn engine() -> (Engine, Arc<dyn State>, Supervisor) {
    let state: Arc<dyn State> = Arc::new(MemoryState::new(MemoryOptions::default()));
    let engine = Engine::new(state.clone());
    let supervisor = supervisor();
    engine
        .register(ServiceSpecController::new(supervisor.clone()))
        .unwrap();
    engine
        .register(ServiceStatusController::new(supervisor.clone()))
        .unwrap();
    engine.start();
    (engine, state, supervisor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_resource_exists_only_while_the_service_runs() {
    let (engine, state, supervisor) = engine().await;
    put(
        &state,
        "web",
        ServiceSpec::command("/bin/sleep").with_args(["600"]),
    )
    .await;

    // Running: both resources
    let status = status_where(&state, "web", "Running", |s| {
        s.state == ServiceState::Running
    })
    .await;
    let pid = status.pid.unwrap();
    assert!(running(pid));
    let service = tokio::time::timeout(
        PATIENCE,
        state.watch_for(&Service::kind().pointer("web"), |r| r.is_some()),
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    assert_eq!(
        service.spec_any().downcast_ref::<Service>(),
        Some(&Service {
            running: true,
            healthy: false,
            unknown: true
        })
    );

    // Stopped by an operator: the status says so, the Service is gone
    supervisor.stop("web").unwrap();
    let status = status_where(&state, "web", "stopped", |s| {
        s.state == ServiceState::Finished
    })
    .await;
    assert_eq!(status.last_event.as_deref(), Some("Service stopped"));
    assert!(status.stopped_by_operator);
    assert_eq!(status.pid, None);
    tokio::time::timeout(
        PATIENCE,
        state.watch_for(&Service::kind().pointer("web"), |r| r.is_none()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!running(pid));

    supervisor.shutdown().await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_spec_resource_restarts_the_service_and_a_removed_one_stops_it() {
    let (engine, state, supervisor) = engine().await;
    put(
        &state,
        "web",
        ServiceSpec::command("/bin/sleep").with_args(["600"]),
    )
    .await;
    let first = status_where(&state, "web", "Running", |s| {
        s.state == ServiceState::Running
    })
    .await
    .pid
    .unwrap();

    put(
        &state,
        "web",
        ServiceSpec::command("/bin/sleep").with_args(["601"]),
    )
    .await;
    let second = status_where(&state, "web", "a new process", |s| {
        s.state == ServiceState::Running && s.pid != Some(first)
    })
    .await
    .pid
    .unwrap();
    assert!(!running(first));

    state
        .destroy(&ServiceSpec::kind().pointer("web"), Default::default())
        .await
        .unwrap();
    tokio::time::timeout(
        PATIENCE,
        state.watch_for(&ServiceStatus::kind().pointer("web"), |r| r.is_none()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!running(second));
    assert!(supervisor.ids().is_empty());
    supervisor.shutdown().await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_table_shows_state_health_pid_restarts_last_change_and_last_event() {
    let (engine, state, supervisor) = engine().await;
    put(
        &state,
        "kubelet",
        ServiceSpec::command(DEMO_KUBELET).with_args(["--bogus"]),
    )
    .await;
    let status = status_where(&state, "kubelet", "its failure", |s| {
        s.state == ServiceState::Failed
    })
    .await;
    let resource = Resource::new("kubelet", status.clone());
    let text = table::render(&ServiceStatus::definition(), [resource.into_shared()]).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap()
        .split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "TYPE",
            "ID",
            "VERSION",
            "State",
            "Health",
            "PID",
            "Restarts",
            "Last Change",
            "Last Event"
        ]
    );
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("runtime     ServiceStatus   kubelet"),
        "{row}"
    );
    assert!(row.contains("   Failed   unknown   "), "{row}");
    assert!(
        row.ends_with("Process exited with code 1: unknown flag: --bogus"),
        "{row}"
    );
    assert!(humantime::parse_rfc3339(status.last_change.as_deref().unwrap()).is_ok());
    supervisor.shutdown().await;
    engine.shutdown().await;
}
