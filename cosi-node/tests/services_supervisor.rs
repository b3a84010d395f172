//! The supervisor with real processes: start order, stops, crash loops, signals, operator
//! requests, spec changes. Every wait is on an event (a service event, a log line, a process
//! being reaped), bounded by a timeout that only fails the test.

mod services_support;

use std::time::Duration;

use cosi_node::services::{
    HealthCheck, ImageResolver, Probe, RestartPolicy, ServiceError, ServiceSpec, ServiceState,
    Supervisor, SupervisorOptions,
};
use services_support::*;

fn sleeper() -> ServiceSpec {
    ServiceSpec::command("/bin/sleep").with_args(["600"])
}

/// `sh -c script` that ignores nothing and prints `ready` once set up.
fn shell(script: &str) -> ServiceSpec {
    ServiceSpec::command("/bin/sh").with_args(["-c", script])
}

/// A probe that passes once `path` exists.
fn file_probe(path: &std::path::Path) -> HealthCheck {
    HealthCheck {
        probe: Probe::Exec {
            command: "/bin/test".into(),
            args: vec!["-e".into(), path.display().to_string()],
        },
        initial_delay: Duration::ZERO,
        period: Duration::from_millis(20),
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_starts_only_after_its_dependency_is_running_and_healthy() {
    // Given db, healthy only once a file exists, and app depending on it
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("db-ready");
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("db", sleeper().with_health(file_probe(&flag)))
        .unwrap();
    supervisor
        .apply("app", sleeper().with_depends_on(["db"]))
        .unwrap();

    // When db runs but fails its health check
    wait_message(
        &mut events,
        "db",
        "Health check failed: /bin/test exited with code 1",
    )
    .await;

    // Then app waits, saying for what
    let app = supervisor.get("app").unwrap();
    assert_eq!(app.state, ServiceState::Waiting);
    assert_eq!(
        app.last_event().unwrap().message,
        "Waiting for service \"db\" to be up"
    );
    assert_eq!(app.pid, None);

    // And when db turns healthy, app starts
    std::fs::write(&flag, b"").unwrap();
    wait_message(&mut events, "db", "Health check successful").await;
    let running = wait_state(&mut events, "app", ServiceState::Running).await;
    assert!(running
        .event
        .message
        .starts_with("Process /bin/sleep started with PID "));
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_description_drops_each_condition_once_it_is_met() {
    // Given app depending on an unregistered db and a running cache that is not up yet
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("app", sleeper().with_depends_on(["db", "cache"]))
        .unwrap();
    wait_message(
        &mut events,
        "app",
        "Waiting for service \"db\" to be registered, service \"cache\" to be registered",
    )
    .await;

    // When db is registered, then when it runs
    supervisor.apply("db", sleeper()).unwrap();
    wait_state(&mut events, "db", ServiceState::Running).await;
    wait_message(
        &mut events,
        "app",
        "Waiting for service \"cache\" to be registered",
    )
    .await;

    // Then the last condition met starts app
    supervisor.apply("cache", sleeper()).unwrap();
    wait_state(&mut events, "app", ServiceState::Running).await;
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_dependency_stops_its_dependents_first_and_they_wait_for_it() {
    // Given app running on db
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("db", sleeper()).unwrap();
    supervisor
        .apply("app", sleeper().with_depends_on(["db"]))
        .unwrap();
    wait_state(&mut events, "app", ServiceState::Running).await;
    let app_pid = supervisor.get("app").unwrap().pid.unwrap();
    let mut app_events = supervisor.events(0);

    // When db is stopped
    supervisor.stop("db").unwrap();

    // Then app is stopped before db gets its SIGTERM
    let lines = collect_until(&mut events, |r| {
        r.service == "db" && r.event.state == ServiceState::Finished
    })
    .await;
    let at = |line: &str| {
        lines
            .iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line:?} not in {lines:#?}"))
    };
    let db_waits = at("db: [Stopping] Stopping service: waiting for service \"app\" to stop");
    let app_finished = at("app: [Finished] Service stopped");
    let db_pid = lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("db: [Stopping] Stopping service: sending SIGTERM to process group ")
        })
        .unwrap_or_else(|| panic!("no SIGTERM for db in {lines:#?}"))
        .to_string();
    let db_term = at(&format!(
        "db: [Stopping] Stopping service: sending SIGTERM to process group {db_pid}"
    ));
    assert!(
        db_waits < app_finished && app_finished < db_term,
        "{lines:#?}"
    );
    assert!(!running(app_pid));

    // And app waits for db to be up again, then runs again when db is started
    wait_message(
        &mut app_events,
        "app",
        "Waiting for service \"db\" to be up",
    )
    .await;
    supervisor.start("db").unwrap();
    wait_state(&mut app_events, "app", ServiceState::Running).await;
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_dependents_before_their_dependencies() {
    // Given a chain web -> app -> db, all running
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("db", sleeper()).unwrap();
    supervisor
        .apply("app", sleeper().with_depends_on(["db"]))
        .unwrap();
    supervisor
        .apply("web", sleeper().with_depends_on(["app"]))
        .unwrap();
    wait_state(&mut events, "web", ServiceState::Running).await;

    // When the supervisor shuts down
    supervisor.shutdown().await;

    // Then each service got its SIGTERM only after its dependents had stopped
    let mut order = Vec::new();
    while order.len() < 3 {
        let record = next_event(&mut events).await;
        if record.event.state == ServiceState::Finished {
            order.push(record.service);
        }
    }
    assert_eq!(order, ["web", "app", "db"]);
    assert!(supervisor.list().is_empty());
    assert!(matches!(
        supervisor.apply("late", sleeper()),
        Err(ServiceError::Closed)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_backs_off_longer_each_time_and_its_last_event_names_the_exit_reason() {
    // Given the kubelet-like workload given a flag it does not know (backoff 50 ms doubling)
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply(
            "kubelet",
            ServiceSpec::command(DEMO_KUBELET).with_args(["--healthz-port=0", "--bogus=1"]),
        )
        .unwrap();

    // When it crash-loops five times
    let mut failures = Vec::new();
    let mut starts = Vec::new();
    while failures.len() < 5 {
        let record = next_event(&mut events).await;
        if record.service != "kubelet" {
            continue;
        }
        match record.event.state {
            ServiceState::Failed => failures.push(record.event),
            ServiceState::Starting => starts.push(record.event),
            _ => {}
        }
    }

    // Then every failure names the process's own last error line
    for failure in &failures {
        assert_eq!(
            failure.message,
            "Process exited with code 1: unknown flag: --bogus"
        );
    }
    // And the delay before each restart is at least the doubling backoff, capped at 400 ms
    let expected = [50u64, 100, 200, 400];
    for (i, want) in expected.iter().enumerate() {
        let gap = starts[i + 1].time.duration_since(failures[i].time).unwrap();
        assert!(
            gap >= Duration::from_millis(*want),
            "restart {} came after {gap:?}, before its {want} ms backoff",
            i + 1
        );
    }
    // And while it waits, the newest event is the failure, with the restarts counted
    let info = supervisor.get("kubelet").unwrap();
    assert!(info.restarts >= 5, "{}", info.restarts);
    let tail: Vec<String> = supervisor
        .tail("kubelet", 1)
        .unwrap()
        .iter()
        .map(|l| l.text.clone())
        .collect();
    assert_eq!(tail, ["unknown flag: --bogus"]);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_ignores_sigterm_is_killed_after_the_stop_timeout() {
    // Given a service that ignores SIGTERM, with a 300 ms stop timeout
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let spec = shell("trap '' TERM; echo ready; exec sleep 600")
        .with_stop_timeout(Duration::from_millis(300));
    supervisor.apply("stubborn", spec).unwrap();
    let mut logs = supervisor.logs("stubborn", 10, true).unwrap();
    wait_line(&mut logs, "ready").await;
    let pid = supervisor.get("stubborn").unwrap().pid.unwrap();

    // When it is stopped
    supervisor.stop("stubborn").unwrap();

    // Then SIGTERM is sent, then SIGKILL once the timeout passed
    let lines = collect_until(&mut events, |r| r.event.state == ServiceState::Finished).await;
    let tail: Vec<&str> = lines
        .iter()
        .rev()
        .take(3)
        .rev()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tail,
        [
            format!(
                "stubborn: [Stopping] Stopping service: sending SIGTERM to process group {pid}"
            )
            .as_str(),
            "stubborn: [Stopping] Process did not exit within 300ms of SIGTERM: sending SIGKILL",
            "stubborn: [Finished] Service stopped: killed with SIGKILL after the stop timeout",
        ]
    );
    assert!(gone(pid), "the killed process was reaped");
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_the_whole_process_group_and_leaves_no_zombie() {
    // Given a service whose main process forked a child
    let supervisor = reaping_supervisor();
    let spec = shell("sleep 600 & echo child $!; wait");
    supervisor.apply("forks", spec).unwrap();
    let mut logs = supervisor.logs("forks", 10, true).unwrap();
    let child: u32 = wait_line_prefix(&mut logs, "child ").await.parse().unwrap();
    let leader = supervisor.get("forks").unwrap().pid.unwrap();
    assert!(running(child));

    // When the service is stopped
    let mut events = supervisor.events(0);
    supervisor.stop("forks").unwrap();
    wait_message(&mut events, "forks", "Service stopped").await;

    // Then its child is dead and reaped too (re-parented to this process, the subreaper)
    assert_reaped(child).await;
    assert!(gone(leader));
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_requests_for_an_unknown_service_are_refused_by_name() {
    let supervisor = supervisor();
    let unknown = "service \"ghost\" is not known on this node";
    assert_eq!(supervisor.start("ghost").unwrap_err().to_string(), unknown);
    assert_eq!(supervisor.stop("ghost").unwrap_err().to_string(), unknown);
    assert_eq!(
        supervisor.restart("ghost").unwrap_err().to_string(),
        unknown
    );
    assert_eq!(supervisor.get("ghost").unwrap_err().to_string(), unknown);
    assert_eq!(
        supervisor.logs("ghost", 10, true).unwrap_err().to_string(),
        unknown
    );
    assert_eq!(
        supervisor
            .apply("../etc", sleeper())
            .unwrap_err()
            .to_string(),
        "service id \"../etc\" is invalid: only letters, digits, '.', '_' and '-' are allowed"
    );
    assert!(supervisor.list().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_stop_holds_until_an_operator_start() {
    // Given a running service
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("web", sleeper()).unwrap();
    wait_state(&mut events, "web", ServiceState::Running).await;

    // When an operator stops it and its spec is applied again (as the controller does)
    supervisor.stop("web").unwrap();
    wait_message(&mut events, "web", "Service stopped").await;
    supervisor.apply("web", sleeper()).unwrap();
    let info = supervisor.get("web").unwrap();
    assert_eq!(
        (info.state, info.pid, info.enabled_by_operator),
        (ServiceState::Finished, None, false)
    );

    // Then only a start runs it again
    supervisor.start("web").unwrap();
    wait_state(&mut events, "web", ServiceState::Running).await;
    assert!(supervisor.get("web").unwrap().enabled_by_operator);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_replaces_the_process() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("web", sleeper()).unwrap();
    let first = pid_in(
        &wait_state(&mut events, "web", ServiceState::Running)
            .await
            .event
            .message,
    );

    supervisor.restart("web").unwrap();

    wait_message(&mut events, "web", "Service stopped").await;
    let second = pid_in(
        &wait_state(&mut events, "web", ServiceState::Running)
            .await
            .event
            .message,
    );
    assert_ne!(first, second);
    assert!(gone(first));
    assert_eq!(
        supervisor.get("web").unwrap().restarts,
        0,
        "an operator restart is not a crash"
    );
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_spec_restarts_that_service_and_its_dependents_only() {
    // Given db, app on db, and an unrelated cache
    let supervisor = supervisor();
    supervisor.apply("db", sleeper()).unwrap();
    supervisor
        .apply("app", sleeper().with_depends_on(["db"]))
        .unwrap();
    supervisor.apply("cache", sleeper()).unwrap();
    wait_running(&supervisor, &["db", "app", "cache"]).await;
    let mut events = supervisor.events(0);
    let before = |id: &str| supervisor.get(id).unwrap().pid.unwrap();
    let (db, app, cache) = (before("db"), before("app"), before("cache"));

    // When db's arguments change
    supervisor
        .apply("db", ServiceSpec::command("/bin/sleep").with_args(["601"]))
        .unwrap();

    // Then db and app run new processes, cache keeps its own
    let lines = collect_until(&mut events, |r| {
        r.service == "app" && r.event.state == ServiceState::Running
    })
    .await;
    assert!(
        lines.contains(&"app: [Finished] Service stopped".to_string()),
        "{lines:#?}"
    );
    assert!(
        lines.contains(&format!(
            "db: [Stopping] Spec changed: sending SIGTERM to process group {db}"
        )),
        "{lines:#?}"
    );
    assert!(lines.iter().all(|l| !l.starts_with("cache:")), "{lines:#?}");
    assert_ne!(supervisor.get("db").unwrap().pid.unwrap(), db);
    assert_ne!(supervisor.get("app").unwrap().pid.unwrap(), app);
    assert_eq!(supervisor.get("cache").unwrap().pid.unwrap(), cache);
    assert_eq!(supervisor.get("db").unwrap().spec.args, ["601"]);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_policy_or_timeout_applies_to_the_running_process_in_place() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("web", sleeper()).unwrap();
    let pid = pid_in(
        &wait_state(&mut events, "web", ServiceState::Running)
            .await
            .event
            .message,
    );

    let changed = sleeper()
        .with_restart(RestartPolicy::Never)
        .with_stop_timeout(Duration::from_secs(1));
    supervisor.apply("web", changed.clone()).unwrap();

    // The spec is taken without a new event or process; a later stop uses its timeout.
    let mut watch = supervisor.subscribe();
    while supervisor.get("web").unwrap().spec != changed {
        tokio::time::timeout(PATIENCE, watch.changed())
            .await
            .unwrap()
            .unwrap();
    }
    let info = supervisor.get("web").unwrap();
    assert_eq!((info.pid, info.state), (Some(pid), ServiceState::Running));
    assert_eq!(
        info.last_event().unwrap().message,
        format!("Process /bin/sleep started with PID {pid}")
    );
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_service_stops_it_and_forgets_it() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("web", sleeper()).unwrap();
    let pid = pid_in(
        &wait_state(&mut events, "web", ServiceState::Running)
            .await
            .event
            .message,
    );

    supervisor.remove("web").unwrap();

    wait_event(&mut events, "web", "its SIGTERM", |r| {
        r.event.message == format!("Service removed: sending SIGTERM to process group {pid}")
    })
    .await;
    let mut watch = supervisor.subscribe();
    while !supervisor.list().is_empty() {
        tokio::time::timeout(PATIENCE, watch.changed())
            .await
            .unwrap()
            .unwrap();
    }
    assert!(gone(pid));
    assert!(matches!(
        supervisor.get("web"),
        Err(ServiceError::Unknown(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_service_is_skipped_and_counts_as_up_for_its_dependents() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let mut disabled = sleeper();
    disabled.enabled = false;
    supervisor.apply("db", disabled).unwrap();
    supervisor
        .apply("app", sleeper().with_depends_on(["db"]))
        .unwrap();

    let skipped = wait_state(&mut events, "db", ServiceState::Skipped).await;
    assert_eq!(
        skipped.event.message,
        "Service skipped: disabled in its spec"
    );
    wait_state(&mut events, "app", ServiceState::Running).await;
    assert_eq!(supervisor.get("db").unwrap().pid, None);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_policies_decide_on_the_exit() {
    // on-failure: a clean exit is final, a failure is restarted; never: nothing is.
    let supervisor = supervisor();
    let cases = [
        (
            "clean-on-failure",
            "exit 0",
            RestartPolicy::OnFailure,
            ServiceState::Finished,
            0,
        ),
        (
            "failed-on-failure",
            "exit 2",
            RestartPolicy::OnFailure,
            ServiceState::Failed,
            1,
        ),
        (
            "failed-never",
            "exit 2",
            RestartPolicy::Never,
            ServiceState::Failed,
            0,
        ),
        (
            "clean-always",
            "exit 0",
            RestartPolicy::Always,
            ServiceState::Finished,
            1,
        ),
    ];
    let mut readers = Vec::new();
    for (id, script, policy, _, _) in cases {
        readers.push(supervisor.events(0));
        supervisor
            .apply(id, shell(script).with_restart(policy))
            .unwrap();
    }
    for ((id, _, _, state, restarts), mut events) in cases.into_iter().zip(readers) {
        let exit = wait_event(&mut events, id, "its first exit", |r| {
            matches!(r.event.state, ServiceState::Finished | ServiceState::Failed)
        })
        .await;
        assert_eq!(exit.event.state, state, "{id}");
        // The verdict is counted with the exit event itself.
        assert!(supervisor.get(id).unwrap().restarts >= restarts, "{id}");
        if restarts == 0 {
            assert_eq!(supervisor.get(id).unwrap().restarts, 0, "{id}");
        }
    }
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_runs_the_program_the_node_maps_it_to() {
    let port = free_port();
    let supervisor = Supervisor::new(SupervisorOptions {
        resolver: ImageResolver::new().with_image(
            "ghcr.io/siderolabs/kubelet",
            DEMO_KUBELET,
            [format!("--healthz-port={port}")],
        ),
        ..options()
    })
    .unwrap();
    let mut events = supervisor.events(0);
    let spec = ServiceSpec::new(cosi_node::services::Program::Image(
        "ghcr.io/siderolabs/kubelet:v1.31.0".into(),
    ))
    .with_args(["--hostname-override=node-1"]);
    supervisor.apply("kubelet", spec).unwrap();

    let preparing = wait_state(&mut events, "kubelet", ServiceState::Preparing).await;
    assert_eq!(
        preparing.event.message,
        format!("Resolved image \"ghcr.io/siderolabs/kubelet:v1.31.0\" to {DEMO_KUBELET}")
    );
    let mut logs = supervisor.logs("kubelet", 10, true).unwrap();
    wait_line(
        &mut logs,
        &format!("demo-kubelet: node node-1: serving healthz on 127.0.0.1:{port}"),
    )
    .await;
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_with_no_program_fails_once_and_waits_for_a_new_spec() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let image =
        |reference: &str| ServiceSpec::new(cosi_node::services::Program::Image(reference.into()));
    supervisor
        .apply("kubelet", image("example.dev/kubelet:v1"))
        .unwrap();

    let failed = wait_state(&mut events, "kubelet", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "image \"example.dev/kubelet:v1\" has no program on this node (repository \"example.dev/kubelet\" is not mapped)"
    );
    assert_eq!(supervisor.get("kubelet").unwrap().restarts, 0);

    // A new spec is tried at once.
    supervisor
        .apply("kubelet", image("example.dev/kubelet:v2"))
        .unwrap();
    let again = wait_state(&mut events, "kubelet", ServiceState::Failed).await;
    assert!(
        again.event.message.contains("kubelet:v2"),
        "{}",
        again.event.message
    );
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_cannot_start_fails_with_the_reason_and_is_retried() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("missing", ServiceSpec::command("/nonexistent/program"))
        .unwrap();
    for _ in 0..2 {
        let failed = wait_state(&mut events, "missing", ServiceState::Failed).await;
        assert_eq!(
            failed.event.message,
            "Failed to start /nonexistent/program: No such file or directory"
        );
    }
    assert!(supervisor.get("missing").unwrap().restarts >= 2);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_longer_than_the_kernel_takes_fail_the_service_and_are_not_retried() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    // Linux takes at most 32 pages (128 KiB) in one argument, whatever the stack limit.
    let long = "x".repeat(256 * 1024);
    supervisor
        .apply("long", ServiceSpec::command("/bin/echo").with_args([long]))
        .unwrap();

    let failed = wait_state(&mut events, "long", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "Failed to start /bin/echo: Argument list too long: its arguments and environment are \
         more than the kernel takes (at most 128 KiB in one string, a quarter of the stack size \
         limit in all); change the spec"
    );
    assert_eq!(supervisor.get("long").unwrap().restarts, 0);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_byte_in_an_argument_fails_the_service_naming_the_argument_and_is_not_retried() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply(
            "nul",
            ServiceSpec::command("/bin/echo").with_args(["ok", "a\0b"]),
        )
        .unwrap();

    let failed = wait_state(&mut events, "nul", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "Invalid spec: args[1] contains a NUL byte, which a process cannot be given"
    );
    assert_eq!(supervisor.get("nul").unwrap().restarts, 0);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_environment_name_with_an_equals_sign_fails_the_service_naming_it_and_is_not_retried() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("env", sleeper().with_env("MODE=fast", "1"))
        .unwrap();

    let failed = wait_state(&mut events, "env", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "Invalid spec: environment name \"MODE=fast\" contains '=', which ends a variable's name"
    );
    assert_eq!(supervisor.get("env").unwrap().restarts, 0);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_working_directory_is_named_in_the_failure() {
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let mut spec = sleeper();
    spec.working_dir = Some("/nonexistent/dir".into());
    supervisor.apply("wd", spec).unwrap();

    let failed = wait_state(&mut events, "wd", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "Failed to start /bin/sleep: workingDir \"/nonexistent/dir\": No such file or directory"
    );
    supervisor.shutdown().await;
}
