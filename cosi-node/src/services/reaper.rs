//! Starting children and reaping them, including the orphans a service leaves behind.
//!
//! Every process the supervisor starts goes through [`spawn`], which makes it the leader of its
//! own process group and registers it as a *direct child*: tokio's child handle reaps those.
//!
//! A service's own children are another matter: when the service's main process exits, its
//! children are re-parented to the nearest *subreaper* ancestor, or to pid 1. If pid 1 does not
//! reap (a container's init, a test runner), they stay zombies forever. [`Reaper::install`]
//! makes this process a subreaper (`PR_SET_CHILD_SUBREAPER`) and reaps, on every SIGCHLD, the
//! zombie children that are **not** registered direct children and that belong to a process
//! group the supervisor started. Those two conditions keep it away from anyone else's children:
//! a child another part of the program started with tokio is not in a supervised group, so
//! its handle still gets its exit status.
//!
//! The subreaper attribute belongs to the whole process, so the registry here is process-wide.

use std::collections::HashSet;
use std::io;
use std::sync::{Mutex, MutexGuard, OnceLock};

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::process;

#[derive(Default)]
struct Registry {
    /// Direct children whose exit status belongs to a tokio handle.
    direct: HashSet<u32>,
    /// Process groups started by the supervisor (only tracked while a reaper runs).
    groups: HashSet<u32>,
    reaping: bool,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Starts `command` as the leader of a new process group and registers it as a direct child.
/// Call [`forget`] with its pid once its handle has reaped it.
pub fn spawn(command: &mut Command) -> io::Result<Child> {
    command.process_group(0);
    // Held across the fork, so a reaper pass cannot see the new child before it is registered.
    let mut registry = registry();
    let child = command.spawn()?;
    if let Some(pid) = child.id() {
        registry.direct.insert(pid);
        if registry.reaping {
            registry.groups.insert(pid);
        }
    }
    Ok(child)
}

/// The direct child `pid` has been reaped by its handle: the pid may be reused from now on.
pub fn forget(pid: u32) {
    registry().direct.remove(&pid);
}

/// A running reaper of orphaned service processes. See the module docs.
#[derive(Debug)]
pub struct Reaper {
    task: tokio::task::JoinHandle<()>,
}

impl Reaper {
    /// Makes this process a child subreaper and starts reaping orphans of supervised groups.
    /// Needs a tokio runtime with signal support; one reaper per process is enough (a second
    /// one only duplicates the work).
    pub fn install() -> io::Result<Reaper> {
        nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)?;
        let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
        registry().reaping = true;
        let task = tokio::spawn(async move {
            loop {
                // Reading /proc is blocking I/O that grows with the process count.
                let _ = tokio::task::spawn_blocking(reap_orphans).await;
                if sigchld.recv().await.is_none() {
                    return;
                }
            }
        });
        Ok(Reaper { task })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reaps every zombie child that is an orphan of a supervised group; forgets groups that are
/// empty. Returns the reaped pids.
pub fn reap_orphans() -> Vec<u32> {
    let me = std::process::id();
    let children: Vec<process::ProcStat> = match own_children() {
        Some(pids) => pids
            .into_iter()
            .filter_map(|pid| process::read_stat(pid).ok().flatten())
            .collect(),
        // A kernel without /proc/<pid>/task/<tid>/children: look at every process.
        None => match process::all_processes() {
            Ok(all) => all.into_iter().filter(|p| p.ppid == me).collect(),
            Err(_) => return Vec::new(),
        },
    };
    let mut reaped = Vec::new();
    let mut registry = registry();
    for stat in children.iter().filter(|p| p.is_zombie()) {
        if registry.direct.contains(&stat.pid) || !registry.groups.contains(&stat.pgrp) {
            continue;
        }
        let pid = Pid::from_raw(stat.pid as i32);
        if waitpid(pid, Some(WaitPidFlag::WNOHANG)).is_ok() {
            reaped.push(stat.pid);
        }
    }
    // A group stays while its leader runs or any member (a zombie included) is left.
    let Registry { direct, groups, .. } = &mut *registry;
    groups.retain(|g| direct.contains(g) || process::group_exists(*g));
    reaped
}

/// The pids of this process's children, from `/proc/self/task/<tid>/children` (one list per
/// thread: an orphan is re-parented to one of the subreaper's threads). `None` if the kernel
/// does not provide the lists.
fn own_children() -> Option<Vec<u32>> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path().join("children");
        match std::fs::read_to_string(&path) {
            Ok(text) => pids.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            ),
            // The thread ended meanwhile.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    && path.parent().is_some_and(|t| !t.exists()) => {}
            Err(_) => return None,
        }
    }
    Some(pids)
}
