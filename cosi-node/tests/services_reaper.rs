//! The orphan reaper: this test process is a child subreaper, so what a service's main
//! process leaves behind is re-parented to it. The reaper must reap those orphans of
//! supervised groups — and nothing else: a child this process started itself stays for its
//! own handle to reap. Each test waits (without reaping) until the zombie exists, then runs
//! one reaper pass and checks what it took.

mod services_support;

use cosi_node::services::{read_stat, reap_orphans, RestartPolicy, ServiceSpec, ServiceState};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;
use services_support::*;

/// Waits until `pid`, a child of this process, has exited, leaving it unreaped. `false` if it
/// was reaped already (it is no child of this process any more).
async fn until_zombie(pid: u32) -> bool {
    let waited = tokio::time::timeout(
        PATIENCE,
        tokio::task::spawn_blocking(move || {
            waitid(
                Id::Pid(Pid::from_raw(pid as i32)),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            )
        }),
    )
    .await
    .expect("the process exits")
    .unwrap();
    match waited {
        Ok(_) => true,
        Err(nix::errno::Errno::ECHILD) => false,
        Err(e) => panic!("waiting for {pid}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_of_a_service_group_is_reaped_and_a_foreign_child_is_not() {
    // Given a supervisor with the reaper (so this process is the subreaper) and a service
    // whose main process exits at once, leaving a child behind
    let supervisor = reaping_supervisor();
    let mut events = supervisor.events(0);
    let spec = ServiceSpec::command("/bin/sh")
        .with_args(["-c", "sleep 600 & echo child $!"])
        .with_restart(RestartPolicy::Never);
    supervisor.apply("leaver", spec).unwrap();
    let mut logs = supervisor.logs("leaver", 10, true).unwrap();
    let orphan: u32 = wait_line_prefix(&mut logs, "child ").await.parse().unwrap();
    wait_state(&mut events, "leaver", ServiceState::Finished).await;

    // And a child of this process's own, outside any service group, that exited
    let mut foreign = std::process::Command::new("/bin/true").spawn().unwrap();
    let foreign_pid = foreign.id();

    // When both are zombies (the supervisor killed what was left of the group)
    until_zombie(orphan).await;
    assert!(
        until_zombie(foreign_pid).await,
        "no reaper pass took the foreign child"
    );
    let reaped = reap_orphans();

    // Then the orphan is reaped (by this pass, or by the reaper's own on SIGCHLD) and the
    // foreign child is left for its handle
    assert!(!reaped.contains(&foreign_pid), "{reaped:?}");
    assert!(gone(orphan), "the orphan is reaped");
    assert!(read_stat(foreign_pid).unwrap().unwrap().is_zombie());
    assert!(foreign.wait().unwrap().success());
    supervisor.shutdown().await;
}
