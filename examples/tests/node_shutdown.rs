//! How the `node` daemon ends, with real processes: SIGTERM, SIGINT and SIGHUP stop its
//! services and exit 0; a SIGKILLed daemon leaves its services running, and its next start kills them
//! before anything else (checked by pid).
//!
//! This test process makes itself a child subreaper, so a SIGKILLed daemon's orphans are
//! re-parented to it, and reaping one tells how it died.

mod node_support;

use cosi_api::auth::Role;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use node_support::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

fn become_subreaper() {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
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

async fn stops_cleanly_on(signal: Signal) {
    // Given a configured node running its kubelet, its logs at the default level
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut command = command(&pki, state.path(), "127.0.0.1:0", &[]);
    command
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped());
    let mut node = Daemon::spawn(command);
    configure(&mut node, &pki, &config("node-1", "worker")).await;
    let mut stderr = node.child.stderr.take().unwrap();
    let admin = mtls(&pki, node.address(), Role::Admin);
    let kubelet = running_pid(&admin, "kubelet").await;

    // When the daemon gets the signal
    let status = node.signal(signal).await;

    // Then it exits 0 having said nothing on stderr (its store closed, nothing went wrong), and
    // the kubelet is gone: stopped and reaped by the daemon
    assert_eq!(status.code(), Some(0), "{signal}: {status:?}");
    let mut logged = String::new();
    stderr.read_to_string(&mut logged).await.unwrap();
    assert_eq!(logged, "", "{signal}");
    assert!(!alive(kubelet), "{signal}: kubelet {kubelet} still runs");
    assert!(
        cosi_node::services::read_stat(kubelet).unwrap().is_none(),
        "{signal}: kubelet {kubelet} was not reaped"
    );
}

#[tokio::test]
async fn sigterm_stops_the_services_and_exits_zero() {
    stops_cleanly_on(Signal::SIGTERM).await;
}

#[tokio::test]
async fn sigint_stops_the_services_and_exits_zero() {
    stops_cleanly_on(Signal::SIGINT).await;
}

#[tokio::test]
async fn sighup_stops_the_services_and_exits_zero() {
    stops_cleanly_on(Signal::SIGHUP).await;
}

#[tokio::test]
async fn a_killed_daemons_services_are_killed_at_its_next_start() {
    become_subreaper();
    // Given a configured node running its kubelet
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let node = configured(&pki, state.path(), &config("node-1", "worker"), &[]).await;
    let admin = mtls(&pki, node.address(), Role::Admin);
    let kubelet = running_pid(&admin, "kubelet").await;
    // Its first line read: with its sync loop quiet, it writes nothing more (writing to the
    // pipe of a dead daemon would end it before the sweep could)
    first_log_line(&admin, "kubelet").await;

    // When the daemon is SIGKILLed, its kubelet is left running, an orphan
    let status = node.signal(Signal::SIGKILL).await;
    assert_eq!(status.code(), None, "killed by a signal: {status:?}");
    assert!(
        alive(kubelet),
        "the kubelet {kubelet} outlives a SIGKILLed daemon"
    );

    // Then the next start on the same state directory kills it before it serves
    let mut node = Daemon::start(&pki, state.path(), &[]);
    let (address, mode) = node.ready().await;
    assert_eq!(mode, Mode::MutualTls);
    assert_eq!(
        reap(kubelet).await,
        WaitStatus::Signaled(Pid::from_raw(kubelet as i32), Signal::SIGKILL, false)
    );

    // And runs a kubelet of its own
    let admin = mtls(&pki, address, Role::Admin);
    let started = running_pid_except(&admin, "kubelet", Some(kubelet)).await;
    assert!(alive(started));
}

#[tokio::test]
async fn a_closed_stdout_does_not_stop_the_node() {
    // Given a node in maintenance whose stdout reader went away after the first ready line
    let pki = Pki::new();
    let state = tempfile::tempdir().unwrap();
    let mut command = command(&pki, state.path(), "127.0.0.1:0", &[]);
    command
        .env("RUST_LOG", "node=info")
        .stderr(std::process::Stdio::piped());
    let mut node = Daemon::spawn(command);
    let (address, _) = node.ready().await;
    let mut logs = BufReader::new(node.child.stderr.take().unwrap()).lines();
    node.close_stdout();

    // When it is configured, and so has a second ready line to print (its log says when)
    pinned(&pki, address)
        .machine
        .apply_configuration(cosi_api::machine::ApplyRequest {
            data: config("node-1", "worker").into_bytes(),
            ..cosi_api::machine::ApplyRequest::default()
        })
        .await
        .unwrap();
    loop {
        let line = tokio::time::timeout(PATIENCE, logs.next_line())
            .await
            .expect("the daemon logs the switch")
            .unwrap()
            .expect("the daemon logs the switch before its stderr ends");
        if line.contains("serving the API over mutual TLS") {
            break;
        }
    }

    // Then it serves on over mutual TLS and runs its services, and stops cleanly on SIGTERM
    let admin = mtls(&pki, address, Role::Admin);
    let kubelet = running_pid(&admin, "kubelet").await;
    let status = node.signal(Signal::SIGTERM).await;
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(!alive(kubelet), "kubelet {kubelet} still runs");
}
