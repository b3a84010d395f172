//! Shared by the service test files: a supervisor with fast backoff, waiting on events (never
//! on time), and facts about processes read from `/proc`.
#![allow(dead_code)]

use std::time::Duration;

use std::sync::Arc;

use cosi_controllers::Backoff;
use cosi_core::{ResourceSpec, State, StateExt};
use cosi_node::services::{
    read_stat, EventItem, EventReader, LogItem, LogReader, ServiceEventRecord, ServiceState,
    ServiceStatus, Supervisor, SupervisorOptions,
};

/// The generous bound on any wait: it only fails a test, it never paces one.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The workload program.
pub const DEMO_KUBELET: &str = env!("CARGO_BIN_EXE_demo-kubelet");
/// The daemon-like host of the supervisor.
pub const SUPERVISE: &str = env!("CARGO_BIN_EXE_cosi-supervise");

/// Options for tests: backoff 50 ms doubling up to 400 ms, short dependents timeout.
pub fn options() -> SupervisorOptions {
    SupervisorOptions {
        restart_backoff: Backoff::new(Duration::from_millis(50), Duration::from_millis(400)),
        ..SupervisorOptions::default()
    }
}

pub fn supervisor() -> Supervisor {
    Supervisor::new(options()).expect("a supervisor")
}

/// Waits for the next event of `service` that `matches`, returning it. Panics (naming what it
/// waited for) after [`PATIENCE`].
pub async fn wait_event(
    events: &mut EventReader,
    service: &str,
    what: &str,
    matches: impl Fn(&ServiceEventRecord) -> bool,
) -> ServiceEventRecord {
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(item) = events.next().await {
            if let EventItem::Event(record) = item {
                if record.service == service && matches(&record) {
                    return Some(record);
                }
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(record)) => record,
        Ok(None) => panic!("the event stream ended while waiting for {service}: {what}"),
        Err(_) => panic!("timed out waiting for {service}: {what}"),
    }
}

/// Waits for `service` to enter `state`.
pub async fn wait_state(
    events: &mut EventReader,
    service: &str,
    state: ServiceState,
) -> ServiceEventRecord {
    wait_event(events, service, state.as_str(), |r| r.event.state == state).await
}

/// Waits for an event of `service` whose message is exactly `message`.
pub async fn wait_message(
    events: &mut EventReader,
    service: &str,
    message: &str,
) -> ServiceEventRecord {
    wait_event(events, service, message, |r| r.event.message == message).await
}

/// Whether a process with this pid runs (a zombie does not count).
pub fn running(pid: u32) -> bool {
    matches!(read_stat(pid), Ok(Some(stat)) if !stat.is_zombie())
}

/// Whether the process is gone entirely (not even a zombie).
pub fn gone(pid: u32) -> bool {
    matches!(read_stat(pid), Ok(None))
}

/// The pid in a `Process ... started with PID N` message.
pub fn pid_in(message: &str) -> u32 {
    message
        .rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {message:?}"))
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The next event of any service.
pub async fn next_event(events: &mut EventReader) -> ServiceEventRecord {
    let next = tokio::time::timeout(PATIENCE, async {
        loop {
            match events.next().await {
                Some(EventItem::Event(record)) => return Some(record),
                Some(EventItem::Missed(_)) => continue,
                None => return None,
            }
        }
    })
    .await;
    match next {
        Ok(Some(record)) => record,
        Ok(None) => panic!("the event stream ended"),
        Err(_) => panic!("timed out waiting for any event"),
    }
}

/// Collects events (of any service) until `done` says so; returns them as
/// `service: [State] message` lines.
pub async fn collect_until(
    events: &mut EventReader,
    done: impl Fn(&ServiceEventRecord) -> bool,
) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let record = next_event(events).await;
        lines.push(format!(
            "{}: [{}] {}",
            record.service, record.event.state, record.event.message
        ));
        if done(&record) {
            return lines;
        }
    }
}

/// A supervisor that makes this test process the subreaper of its services' orphans.
pub fn reaping_supervisor() -> Supervisor {
    Supervisor::new(SupervisorOptions {
        reap_orphans: true,
        ..options()
    })
    .expect("a supervisor")
}

/// Reads log items until a line equal to `text`.
pub async fn wait_line(logs: &mut LogReader, text: &str) {
    wait_line_where(logs, text, |line| line == text).await;
}

/// Reads log items until a line starting with `prefix`; returns the rest of it.
pub async fn wait_line_prefix(logs: &mut LogReader, prefix: &str) -> String {
    let line = wait_line_where(logs, prefix, |line| line.starts_with(prefix)).await;
    line[prefix.len()..].to_string()
}

pub async fn wait_line_where(
    logs: &mut LogReader,
    what: &str,
    matches: impl Fn(&str) -> bool,
) -> String {
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(item) = logs.next().await {
            if let LogItem::Line(line) = item {
                if matches(&line.text) {
                    return Some(line.text.clone());
                }
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(line)) => line,
        Ok(None) => panic!("the log ended before a line like {what:?}"),
        Err(_) => panic!("timed out waiting for a log line like {what:?}"),
    }
}

/// Waits until `pid`, an orphan re-parented to this process (the subreaper), has exited and
/// been reaped — by this call or by the supervisor's reaper, whichever comes first.
pub async fn assert_reaped(pid: u32) {
    use nix::sys::wait::waitpid;
    use nix::unistd::Pid;
    let reaped = tokio::time::timeout(
        PATIENCE,
        tokio::task::spawn_blocking(move || waitpid(Pid::from_raw(pid as i32), None)),
    )
    .await
    .expect("the orphan exits")
    .expect("the wait runs");
    match reaped {
        Ok(_) | Err(nix::errno::Errno::ECHILD) => {}
        Err(e) => panic!("waiting for {pid}: {e}"),
    }
    assert!(
        gone(pid),
        "process {pid} is still there: {:?}",
        read_stat(pid)
    );
}

/// Waits until `condition` holds of the supervisor, re-checking on every change.
pub async fn wait_until(
    supervisor: &Supervisor,
    what: &str,
    condition: impl Fn(&Supervisor) -> bool,
) {
    let mut changes = supervisor.subscribe();
    let waited = tokio::time::timeout(PATIENCE, async {
        while !condition(supervisor) {
            if changes.changed().await.is_err() {
                return false;
            }
        }
        true
    })
    .await;
    assert!(matches!(waited, Ok(true)), "timed out waiting until {what}");
}

/// Waits until every service in `ids` is running.
pub async fn wait_running(supervisor: &Supervisor, ids: &[&str]) {
    wait_until(supervisor, &format!("{ids:?} run"), |s| {
        ids.iter()
            .all(|id| s.get(id).is_ok_and(|i| i.state == ServiceState::Running))
    })
    .await;
}

/// Waits for the `ServiceStatus` of `id` to meet `condition` (`what` names it in the panic),
/// and returns it.
pub async fn status_where(
    state: &Arc<dyn State>,
    id: &str,
    what: &str,
    condition: impl Fn(&ServiceStatus) -> bool + Send + Sync,
) -> ServiceStatus {
    let found = tokio::time::timeout(
        PATIENCE,
        state.watch_for(&ServiceStatus::kind().pointer(id), |r| {
            r.and_then(|r| r.spec_any().downcast_ref::<ServiceStatus>())
                .is_some_and(&condition)
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {id}: {what}"))
    .unwrap()
    .unwrap();
    found
        .spec_any()
        .downcast_ref::<ServiceStatus>()
        .unwrap()
        .clone()
}
