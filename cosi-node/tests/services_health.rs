//! Health checks against real endpoints: a TCP listener the test opens and closes, the
//! kubelet-like workload's HTTP endpoint, a server that never answers. Flips are events; the
//! status follows.

mod services_support;

use std::time::Duration;

use cosi_node::services::{read_stat, Health, HealthCheck, Probe, ServiceSpec, ServiceState};
use services_support::*;

/// A service that sleeps for ten minutes, checked by `health`.
fn sleeper_checked_by(health: HealthCheck) -> ServiceSpec {
    ServiceSpec::command("/bin/sleep")
        .with_args(["600"])
        .with_health(health)
}

fn check(probe: Probe) -> HealthCheck {
    HealthCheck {
        probe,
        initial_delay: Duration::ZERO,
        period: Duration::from_millis(20),
        timeout: Duration::from_secs(2),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_flips_are_events_and_the_status_follows() {
    // Given a service whose health is a TCP port this test listens on
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let spec = sleeper_checked_by(check(Probe::Tcp {
        address: address.to_string(),
    }));
    supervisor.apply("db", spec).unwrap();

    // Then it turns healthy
    let ok = wait_state(&mut events, "db", ServiceState::Running).await;
    assert_eq!(ok.event.health, Health::Unknown);
    let ok = wait_message(&mut events, "db", "Health check successful").await;
    assert_eq!(ok.event.health, Health::Ok);
    assert_eq!(supervisor.get("db").unwrap().health, Health::Ok);

    // When the port closes, it turns unhealthy, saying why
    drop(listener);
    let failed = wait_message(&mut events, "db", "Health check failed: connection refused").await;
    assert_eq!(
        (failed.event.state, failed.event.health),
        (ServiceState::Running, Health::Failed)
    );
    let info = supervisor.get("db").unwrap();
    assert_eq!(info.health, Health::Failed);
    assert_eq!(info.health_message.as_deref(), Some("connection refused"));

    // And healthy again when it reopens
    let _listener = std::net::TcpListener::bind(address).unwrap();
    wait_message(&mut events, "db", "Health check successful").await;

    // And once stopped, its health is failed: not running
    supervisor.stop("db").unwrap();
    let stopped = wait_message(&mut events, "db", "Service stopped").await;
    assert_eq!(stopped.event.health, Health::Failed);
    assert_eq!(
        supervisor.get("db").unwrap().health_message.as_deref(),
        Some("service not running")
    );
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_workload_is_healthy_over_http_and_a_wrong_path_is_not() {
    let port = free_port();
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let kubelet = |path: &str| {
        ServiceSpec::command(DEMO_KUBELET)
            .with_args([format!("--healthz-port={port}")])
            .with_health(check(Probe::Http {
                url: format!("http://127.0.0.1:{port}{path}"),
            }))
    };
    supervisor.apply("kubelet", kubelet("/healthz")).unwrap();
    wait_message(&mut events, "kubelet", "Health check successful").await;

    // A health check change applies in place, to the same process.
    let pid = supervisor.get("kubelet").unwrap().pid;
    supervisor.apply("kubelet", kubelet("/nope")).unwrap();
    wait_message(
        &mut events,
        "kubelet",
        &format!("Health check failed: HTTP 404 from GET http://127.0.0.1:{port}/nope"),
    )
    .await;
    assert_eq!(supervisor.get("kubelet").unwrap().pid, pid);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_gets_no_answer_fails_after_its_timeout() {
    // A server that accepts and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let mut health = check(Probe::Http {
        url: format!("http://{address}/healthz"),
    });
    health.timeout = Duration::from_millis(100);
    supervisor
        .apply("hung", sleeper_checked_by(health))
        .unwrap();
    wait_message(
        &mut events,
        "hung",
        &format!("Health check failed: GET http://{address}/healthz timed out after 100ms"),
    )
    .await;
    supervisor.shutdown().await;
    silent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_check_that_hangs_is_killed_at_its_timeout() {
    let supervisor = reaping_supervisor();
    let mut events = supervisor.events(0);
    let mut health = check(Probe::Exec {
        command: "/bin/sleep".into(),
        args: vec!["600".into()],
    });
    health.timeout = Duration::from_millis(100);
    supervisor
        .apply("slowcheck", sleeper_checked_by(health))
        .unwrap();
    wait_message(
        &mut events,
        "slowcheck",
        "Health check failed: /bin/sleep timed out after 100ms",
    )
    .await;
    supervisor.shutdown().await;
}

/// An exec check that tells its pid through a FIFO the test reads, then runs for ten
/// minutes (well within its timeout): a probe still running when its service stops.
fn pid_telling_check(fifo: &std::path::Path) -> HealthCheck {
    let mut health = check(Probe::Exec {
        command: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            format!("echo $$ > '{}'; exec sleep 600", fifo.display()),
        ],
    });
    health.period = Duration::from_secs(3600);
    health.timeout = Duration::from_secs(3600);
    health
}

/// Blocks (off the runtime) until a writer opens `fifo`, and returns the pid it wrote.
async fn pid_from_fifo(fifo: &std::path::Path) -> u32 {
    let fifo = fifo.to_path_buf();
    let text = tokio::time::timeout(
        PATIENCE,
        tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo)),
    )
    .await
    .expect("the probe writes its pid")
    .unwrap()
    .unwrap();
    text.trim().parse().expect("a pid")
}

fn make_fifo(dir: &std::path::Path) -> std::path::PathBuf {
    let fifo = dir.join("probe.pid");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    fifo
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_service_ends_its_running_exec_check() {
    // Given a service whose exec check is running (and would for ten minutes)
    let dir = tempfile::tempdir().unwrap();
    let fifo = make_fifo(dir.path());
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("checked", sleeper_checked_by(pid_telling_check(&fifo)))
        .unwrap();
    let probe = pid_from_fifo(&fifo).await;
    assert!(running(probe));

    // When the service is stopped
    supervisor.stop("checked").unwrap();
    wait_message(&mut events, "checked", "Service stopped").await;

    // Then the check's process is gone too (killed and reaped), not left running
    assert!(gone(probe), "probe {probe}: {:?}", read_stat(probe));
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_changed_in_place_ends_the_running_exec_check_of_the_old_one() {
    // Given a service whose exec check is running (and would for ten minutes)
    let dir = tempfile::tempdir().unwrap();
    let fifo = make_fifo(dir.path());
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    let spec = sleeper_checked_by(pid_telling_check(&fifo));
    supervisor.apply("checked", spec.clone()).unwrap();
    let probe = pid_from_fifo(&fifo).await;

    // When its health check is replaced (in place: the process keeps running)
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    supervisor
        .apply("checked", spec.with_health(check(Probe::Tcp { address })))
        .unwrap();
    wait_message(&mut events, "checked", "Health check successful").await;

    // Then the old check's process is gone (killed and reaped)
    assert!(gone(probe), "probe {probe}: {:?}", read_stat(probe));
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_check_that_writes_much_to_stderr_is_judged_by_its_exit_quoting_its_last_line() {
    // Given a check that writes 200 kB to stderr (more than a pipe holds), then its reason
    let mut health = check(Probe::Exec {
        command: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            "head -c 200000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'disk full' >&2; exit 1"
                .into(),
        ],
    });
    health.timeout = Duration::from_secs(3600);
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("chatty", sleeper_checked_by(health))
        .unwrap();

    // Then the check fails on its exit, quoting its last line (it does not stall on the pipe)
    wait_message(
        &mut events,
        "chatty",
        "Health check failed: /bin/sh exited with code 1: disk full",
    )
    .await;
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_with_a_zero_period_fails_the_service_naming_the_field() {
    // A zero period would probe in a busy loop (an exec probe: a fork storm).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut health = check(Probe::Tcp {
        address: listener.local_addr().unwrap().to_string(),
    });
    health.period = Duration::ZERO;
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("busy", sleeper_checked_by(health))
        .unwrap();

    let failed = wait_state(&mut events, "busy", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "Invalid spec: health.period must be longer than zero"
    );
    assert_eq!(supervisor.get("busy").unwrap().restarts, 0);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_changed_in_place_to_a_zero_period_fails_the_service_naming_the_field() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let health = check(Probe::Tcp {
        address: listener.local_addr().unwrap().to_string(),
    });
    let spec = sleeper_checked_by(health.clone());
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor.apply("busy", spec.clone()).unwrap();
    wait_message(&mut events, "busy", "Health check successful").await;

    let mut busy = health;
    busy.period = Duration::ZERO;
    supervisor.apply("busy", spec.with_health(busy)).unwrap();

    let failed = wait_state(&mut events, "busy", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "Invalid spec: health.period must be longer than zero"
    );
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_failed_for_its_health_check_runs_once_the_check_is_fixed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let health = check(Probe::Tcp {
        address: listener.local_addr().unwrap().to_string(),
    });
    let mut busy = health.clone();
    busy.period = Duration::ZERO;
    let spec = ServiceSpec::command("/bin/sleep").with_args(["600"]);
    let supervisor = supervisor();
    let mut events = supervisor.events(0);
    supervisor
        .apply("fixed", spec.clone().with_health(busy))
        .unwrap();
    wait_state(&mut events, "fixed", ServiceState::Failed).await;

    // A health check is otherwise changed in place; here it must start the service.
    supervisor.apply("fixed", spec.with_health(health)).unwrap();
    wait_message(&mut events, "fixed", "Health check successful").await;
    supervisor.shutdown().await;
}
