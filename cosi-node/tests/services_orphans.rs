//! No orphan survives a killed daemon: `cosi-supervise` (the supervisor as the daemon runs
//! it) is SIGKILLed with services running, its processes are checked by pid to be alive and
//! orphaned, and the next `cosi-supervise` on the same state directory must kill them before
//! it reports ready. This test process is the subreaper of both daemons, so the orphans are
//! re-parented to it and it can tell, by reaping them, that they died of SIGKILL.

mod services_support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use cosi_node::services::ledger::{GroupRecord, Ledger, Leftover, GROUP_TOKEN_VAR};
use cosi_node::services::{
    read_stat, HealthCheck, Probe, RestartPolicy, ServiceSpec, ServiceState, Supervisor,
    SupervisorOptions,
};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use services_support::*;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// Waits until the daemon's ledger (`<state>/groups/<token>.json`) holds the complete record of
/// the group led by `pid`: woken by inotify on each file created or renamed there, never by a
/// timer.
async fn recorded(state: &Path, pid: u32) {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let groups = state.join("groups");
    let wait = tokio::task::spawn_blocking(move || {
        let inotify = Inotify::init(InitFlags::empty()).unwrap();
        inotify
            .add_watch(
                &groups,
                AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
            )
            .unwrap();
        // Records appear whole, by rename; one may be released between listing and reading.
        let present = || {
            std::fs::read_dir(&groups).unwrap().flatten().any(|entry| {
                entry.path().extension().is_some_and(|e| e == "json")
                    && std::fs::read(entry.path())
                        .ok()
                        .and_then(|b| serde_json::from_slice::<GroupRecord>(&b).ok())
                        .is_some_and(|record| record.pgid == Some(pid))
            })
        };
        while !present() {
            inotify.read_events().unwrap();
        }
    });
    tokio::time::timeout(PATIENCE, wait)
        .await
        .expect("the daemon records the group")
        .unwrap();
}

struct Daemon {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Daemon {
    async fn start(state: &Path, services: &str) -> Daemon {
        let file = state.join("services.yaml");
        std::fs::write(&file, services).unwrap();
        let mut child = Command::new(SUPERVISE)
            .arg("--state-dir")
            .arg(state)
            .arg("--services")
            .arg(&file)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Daemon { child, lines }
    }

    /// The lines it prints before `ready` (its sweep's `leftover` reports).
    async fn lines_until_ready(&mut self, seen: &mut Vec<String>) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let line = self.line("", seen).await;
            if line == "ready" {
                return lines;
            }
            lines.push(line);
        }
    }

    /// Reads lines until one starts with `prefix`; returns the rest. Collects every line
    /// read into `seen`.
    async fn line(&mut self, prefix: &str, seen: &mut Vec<String>) -> String {
        let read = tokio::time::timeout(PATIENCE, async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                seen.push(line.clone());
                if let Some(rest) = line.strip_prefix(prefix) {
                    return Some(rest.to_string());
                }
            }
            None
        })
        .await;
        match read {
            Ok(Some(rest)) => rest,
            Ok(None) => panic!("the daemon exited before {prefix:?}; it said {seen:#?}"),
            Err(_) => panic!("timed out waiting for {prefix:?}; the daemon said {seen:#?}"),
        }
    }
}

/// Reaps `pid` (a child of this process by now) and returns how it ended.
async fn reap(pid: u32) -> WaitStatus {
    tokio::time::timeout(
        PATIENCE,
        tokio::task::spawn_blocking(move || waitpid(Pid::from_raw(pid as i32), None)),
    )
    .await
    .expect("the process exits")
    .unwrap()
    .unwrap_or_else(|e| panic!("waiting for {pid}: {e}"))
}

const SERVICES: &str = "
forks:
  program: {command: /bin/sh}
  args: [-c, 'sleep 600 & echo child $!; wait']
plain:
  program: {command: /bin/sleep}
  args: ['600']
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_leaves_no_orphan_after_its_next_start() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let state = tempfile::tempdir().unwrap();
    let me = std::process::id();

    // Given a daemon running two services, one of which forked a child
    let mut seen = Vec::new();
    let mut first = Daemon::start(state.path(), SERVICES).await;
    let (mut forks, mut plain, mut child) = (None, None, None);
    while forks.is_none() || plain.is_none() || child.is_none() {
        let line = first.line("", &mut seen).await;
        if let Some(rest) = line.strip_prefix("event forks Running ") {
            forks = Some(pid_in(rest));
        } else if let Some(rest) = line.strip_prefix("event plain Running ") {
            plain = Some(pid_in(rest));
        } else if let Some(rest) = line.strip_prefix("log forks child ") {
            child = Some(rest.parse::<u32>().unwrap());
        }
    }
    let (forks, plain, child) = (forks.unwrap(), plain.unwrap(), child.unwrap());

    // When the daemon is SIGKILLed
    first.child.start_kill().unwrap();
    let status = first.child.wait().await.unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );

    // Then its services live on as orphans (re-parented to this process, the subreaper)
    for pid in [forks, plain] {
        let stat = read_stat(pid).unwrap().unwrap();
        assert!(!stat.is_zombie(), "{pid} still runs");
        assert_eq!(stat.ppid, me, "{pid} is an orphan now");
    }
    assert!(running(child));

    // When the next daemon starts on the same state directory
    let mut second = Daemon::start(state.path(), "{}").await;
    let mut leftovers = second.lines_until_ready(&mut seen).await;

    // Then it killed every process of both groups before it was ready
    leftovers.sort();
    assert_eq!(
        leftovers,
        [
            format!("leftover forks {forks} {}", sorted(&[forks, child])),
            format!("leftover plain {plain} {plain}"),
        ]
    );
    for pid in [forks, child, plain] {
        assert_eq!(
            reap(pid).await,
            WaitStatus::Signaled(Pid::from_raw(pid as i32), Signal::SIGKILL, false),
            "{pid} was killed by the sweep"
        );
        assert!(gone(pid));
    }
    // And no record is left for a third start
    let groups: Vec<_> = std::fs::read_dir(state.path().join("groups"))
        .unwrap()
        .collect();
    assert!(groups.is_empty(), "{groups:?}");

    kill(
        Pid::from_raw(second.child.id().unwrap() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    second.line("stopped", &mut seen).await;
    assert!(second.child.wait().await.unwrap().success());
}

fn sorted(pids: &[u32]) -> String {
    let mut pids = pids.to_vec();
    pids.sort_unstable();
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_daemon_stop_leaves_nothing_to_sweep() {
    let state = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    let mut daemon = Daemon::start(state.path(), SERVICES).await;
    let (mut plain, mut child) = (None, None);
    while plain.is_none() || child.is_none() {
        let line = daemon.line("", &mut seen).await;
        if let Some(rest) = line.strip_prefix("event plain Running ") {
            plain = Some(pid_in(rest));
        } else if let Some(rest) = line.strip_prefix("log forks child ") {
            child = Some(rest.parse::<u32>().unwrap());
        }
    }
    let (plain, child) = (plain.unwrap(), child.unwrap());

    kill(
        Pid::from_raw(daemon.child.id().unwrap() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    daemon.line("stopped", &mut seen).await;
    assert!(daemon.child.wait().await.unwrap().success());
    assert!(!running(plain));
    assert!(!running(child));

    let mut next = Daemon::start(state.path(), "{}").await;
    assert_eq!(
        next.line("", &mut seen).await,
        "ready",
        "no leftover reported"
    );
    next.child.start_kill().unwrap();
    let _ = next.child.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_whose_pid_was_reused_kills_nothing() {
    // Given a record naming a live process of someone else: same pid, another start time,
    // and none of our token in its environment
    let dir = tempfile::tempdir().unwrap();
    let mut bystander = std::process::Command::new("/bin/sleep")
        .arg("600")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = bystander.id();
    let stat = read_stat(pid).unwrap().unwrap();
    let record = GroupRecord {
        service: "old".into(),
        pgid: Some(pid),
        start_time: stat.start_time - 1,
        boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
            .to_string(),
        token: "an.earlier.daemon".into(),
    };
    std::fs::write(
        dir.path().join(format!("{pid}-{}.json", record.start_time)),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();

    // When a ledger sweeps the directory
    let ledger = Ledger::open(Some(dir.path())).unwrap();
    let leftovers = ledger.sweep().unwrap();

    // Then the bystander lives, and the record is gone
    assert_eq!(leftovers.len(), 1);
    assert!(leftovers[0].killed.is_empty());
    assert!(running(pid));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

#[test]
fn a_record_of_another_boot_is_dropped_unread() {
    let dir = tempfile::tempdir().unwrap();
    let record = GroupRecord {
        service: "old".into(),
        pgid: Some(1),
        start_time: 1,
        boot_id: "another-boot".into(),
        token: "t".into(),
    };
    std::fs::write(
        dir.path().join("1-1.json"),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("broken.json"), b"{not json").unwrap();
    let leftovers = Ledger::open(Some(dir.path())).unwrap().sweep().unwrap();
    assert!(leftovers.is_empty());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_leaves_no_running_health_check_after_its_next_start() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let state = tempfile::tempdir().unwrap();
    let fifo = state.path().join("probe.pid");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Given a daemon whose service's exec check runs (and would for ten minutes)
    let services = format!(
        "
checked:
  program: {{command: /bin/sleep}}
  args: ['600']
  health:
    probe:
      exec:
        command: /bin/sh
        args: [-c, \"echo $$ > '{}'; exec sleep 600\"]
    initialDelay: 0s
    timeout: 1h
",
        fifo.display()
    );
    let mut seen = Vec::new();
    let mut first = Daemon::start(state.path(), &services).await;
    let reader = fifo.clone();
    let probe: u32 = tokio::time::timeout(
        PATIENCE,
        tokio::task::spawn_blocking(move || std::fs::read_to_string(reader)),
    )
    .await
    .expect("the check tells its pid")
    .unwrap()
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    // The probe tells its pid as it starts, a moment before the daemon completes its group's
    // record: wait for it, so the sweep meets a complete record (a daemon killed in that
    // moment leaves the intent, which the intent tests below cover).
    recorded(state.path(), probe).await;

    // When the daemon is SIGKILLed
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    assert!(running(probe));

    // Then the next daemon on the same state directory kills the check before it is ready
    let mut second = Daemon::start(state.path(), "{}").await;
    let leftovers = second.lines_until_ready(&mut seen).await;
    assert!(
        leftovers.contains(&format!("leftover checked/health {probe} {probe}")),
        "{leftovers:?}"
    );
    assert_eq!(
        reap(probe).await,
        WaitStatus::Signaled(Pid::from_raw(probe as i32), Signal::SIGKILL, false),
        "{probe} was killed by the sweep"
    );
    second.child.start_kill().unwrap();
    let _ = second.child.wait().await;
}

/// The records in a ledger directory.
fn records_in(dir: &Path) -> Vec<GroupRecord> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            serde_json::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_started_under_an_intent_is_killed_by_the_next_sweep() {
    // Given a ledger that recorded the intent to start a group, whose leader then started
    // with the token, and the ledger gone before it completed the record (a daemon killed
    // in between)
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(Some(dir.path())).unwrap();
    let token = ledger.token("window");
    ledger.intend("window", &token).unwrap();
    let mut leader = Command::new("/bin/sleep")
        .arg("1000")
        .env(GROUP_TOKEN_VAR, &token)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = leader.id().unwrap();
    drop(ledger);

    // When the next ledger sweeps the directory
    let leftovers = Ledger::open(Some(dir.path())).unwrap().sweep().unwrap();

    // Then the leader was killed and reported with its group, and the intent is gone
    assert_eq!(
        leftovers,
        [Leftover {
            service: "window".into(),
            pgid: pid,
            killed: vec![pid],
        }]
    );
    let status = tokio::time::timeout(PATIENCE, leader.wait())
        .await
        .expect("the leader exits")
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert_eq!(records_in(dir.path()), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_sweep_kills_what_the_leader_forked_even_outside_its_group() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    // Given an intent, and its group's leader that forked a child into a session of its own
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(Some(dir.path())).unwrap();
    let token = ledger.token("forks");
    ledger.intend("forks", &token).unwrap();
    let mut leader = Command::new("/bin/sh")
        .args(["-c", "setsid sh -c 'echo $$; exec sleep 1000' & wait"])
        .env(GROUP_TOKEN_VAR, &token)
        .process_group(0)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = leader.id().unwrap();
    // The child tells its pid once it is in its own session.
    let mut lines = BufReader::new(leader.stdout.take().unwrap()).lines();
    let child: u32 = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("the child tells its pid")
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    let cleanup = KillOnDrop(child);
    assert_eq!(read_stat(child).unwrap().unwrap().pgrp, child);
    drop(ledger);

    // When the next ledger sweeps the directory
    let leftovers = Ledger::open(Some(dir.path())).unwrap().sweep().unwrap();

    // Then both were killed, and the group reported is the leader's
    assert_eq!(
        leftovers,
        [Leftover {
            service: "forks".into(),
            pgid: pid,
            killed: sorted_pids(&[pid, child]),
        }]
    );
    let status = tokio::time::timeout(PATIENCE, leader.wait())
        .await
        .expect("the leader exits")
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert_eq!(
        reap(child).await,
        WaitStatus::Signaled(Pid::from_raw(child as i32), Signal::SIGKILL, false),
        "the child (an orphan of this process, the subreaper) was killed by the sweep"
    );
    // Reaped: its pid may be someone else's by now.
    std::mem::forget(cleanup);
}

/// SIGKILLs a process the test did not start itself (so no `kill_on_drop`) if the test ends
/// before the sweep killed it: a failed test leaves no process holding its output open.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0 as i32), Signal::SIGKILL);
    }
}

fn sorted_pids(pids: &[u32]) -> Vec<u32> {
    let mut pids = pids.to_vec();
    pids.sort_unstable();
    pids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_of_another_boot_is_dropped_without_killing() {
    // Given an intent of another boot, and a live process that carries its token
    let dir = tempfile::tempdir().unwrap();
    let token = "an.earlier.boot";
    let record = GroupRecord {
        service: "old".into(),
        pgid: None,
        start_time: 0,
        boot_id: "another-boot".into(),
        token: token.into(),
    };
    std::fs::write(
        dir.path().join("an.earlier.boot.json"),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
    let mut bystander = Command::new("/bin/sleep")
        .arg("1000")
        .env(GROUP_TOKEN_VAR, token)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = bystander.id().unwrap();

    // When a ledger sweeps the directory
    let leftovers = Ledger::open(Some(dir.path())).unwrap().sweep().unwrap();

    // Then nothing is reported, the process lives, and the intent is gone
    assert_eq!(leftovers, []);
    assert!(running(pid));
    assert_eq!(records_in(dir.path()), []);
    bystander.kill().await.unwrap();
}

/// A supervisor whose ledger is `<state>/groups`.
fn recording_supervisor(state: &Path) -> Supervisor {
    Supervisor::new(SupervisorOptions {
        state_dir: Some(state.to_path_buf()),
        ..options()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_fails_to_start_leaves_no_record() {
    // Given a supervisor with a state directory
    let state = tempfile::tempdir().unwrap();
    let supervisor = recording_supervisor(state.path());
    let mut events = supervisor.events(0);

    // When a service's program cannot be started
    supervisor
        .apply(
            "missing",
            ServiceSpec::command("/nonexistent/program").with_restart(RestartPolicy::Never),
        )
        .unwrap();
    let failed = wait_state(&mut events, "missing", ServiceState::Failed).await;
    assert_eq!(
        failed.event.message,
        "Failed to start /nonexistent/program: No such file or directory"
    );

    // Then its intent was removed: no record is left
    assert_eq!(records_in(&state.path().join("groups")), []);
    supervisor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_probe_that_fails_to_start_leaves_no_record() {
    // Given a running service whose exec probe cannot be started (and is not retried soon)
    let state = tempfile::tempdir().unwrap();
    let supervisor = recording_supervisor(state.path());
    let mut events = supervisor.events(0);
    let health = HealthCheck {
        probe: Probe::Exec {
            command: "/nonexistent/probe".into(),
            args: vec![],
        },
        initial_delay: std::time::Duration::ZERO,
        period: std::time::Duration::from_secs(3600),
        timeout: std::time::Duration::from_secs(3600),
    };
    supervisor
        .apply(
            "checked",
            ServiceSpec::command("/bin/sleep")
                .with_args(["600"])
                .with_health(health),
        )
        .unwrap();
    let started = wait_state(&mut events, "checked", ServiceState::Running).await;

    // When its probe fails to start
    wait_message(
        &mut events,
        "checked",
        "Health check failed: /nonexistent/probe: entity not found",
    )
    .await;

    // Then the only record is the service's own, complete
    let records = records_in(&state.path().join("groups"));
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].service.as_str(), records[0].pgid),
        ("checked", Some(pid_in(&started.event.message)))
    );
    supervisor.shutdown().await;
}
