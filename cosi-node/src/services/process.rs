//! Processes as the kernel shows them: `/proc/<pid>/stat`, process groups and signals.
//!
//! Every process the supervisor starts leads its own process group (`process_group(0)`), so
//! one signal reaches the service and everything it forked. This module reads and signals
//! processes; it starts none (see [`super::reaper::spawn`]) and decides nothing.

use std::io;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// What `/proc/<pid>/stat` says about a process (the fields the supervisor needs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id.
    pub pid: u32,
    /// The command name (up to 15 bytes, as the kernel keeps it).
    pub comm: String,
    /// The state letter: `R`, `S`, `D`, `Z` (zombie), `T`, ...
    pub state: char,
    /// The parent's pid.
    pub ppid: u32,
    /// The process group.
    pub pgrp: u32,
    /// When it started, in clock ticks since boot: with the pid, it names one process for the
    /// whole boot (a reused pid has a later start time).
    pub start_time: u64,
}

impl ProcStat {
    /// Whether the process has exited and waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

/// Parses the text of `/proc/<pid>/stat`; `None` if it is not in the kernel's format.
///
/// The command name is in parentheses and may itself contain spaces and parentheses, so the
/// fields are counted from the *last* `)`.
///
/// ```
/// use cosi_node::services::parse_proc_stat;
/// let stat = parse_proc_stat("42 (a (b) c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 9876 0").unwrap();
/// assert_eq!((stat.pid, stat.comm.as_str(), stat.state), (42, "a (b) c", 'S'));
/// assert_eq!((stat.ppid, stat.pgrp, stat.start_time), (1, 42, 9876));
/// ```
pub fn parse_proc_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_string();
    let mut fields = text[close + 1..].split_ascii_whitespace();
    // Fields after the name, 1-based from the state: state(1) ppid(2) pgrp(3) ... starttime(20).
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let start_time = fields.nth(16)?.parse().ok()?;
    Some(ProcStat {
        pid,
        comm,
        state,
        ppid,
        pgrp,
        start_time,
    })
}

/// Reads `/proc/<pid>/stat`; `Ok(None)` if there is no such process.
pub fn read_stat(pid: u32) -> io::Result<Option<ProcStat>> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => Ok(parse_proc_stat(&text)),
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound) || e.raw_os_error() == Some(3) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Every process on the system (those that vanish while being read are left out).
pub fn all_processes() -> io::Result<Vec<ProcStat>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(Some(stat)) = read_stat(pid) {
            out.push(stat);
        }
    }
    Ok(out)
}

/// Whether the environment of `pid` holds `KEY=value` exactly.
pub fn has_environment_entry(pid: u32, entry: &str) -> bool {
    let path = format!("/proc/{pid}/environ");
    match std::fs::read(Path::new(&path)) {
        Ok(bytes) => bytes.split(|&b| b == 0).any(|e| e == entry.as_bytes()),
        Err(_) => false,
    }
}

/// Sends `signal` to every process of group `pgid`. `Ok(false)` if the group is gone.
pub fn signal_group(pgid: u32, signal: Signal) -> io::Result<bool> {
    match signal::killpg(pid_of(pgid), signal) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Sends `signal` to one process. `Ok(false)` if it is gone.
pub fn signal_process(pid: u32, signal: Signal) -> io::Result<bool> {
    match signal::kill(pid_of(pid), signal) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

/// Whether any process (a zombie included) is still in group `pgid`.
pub fn group_exists(pgid: u32) -> bool {
    !matches!(signal::killpg(pid_of(pgid), None), Err(Errno::ESRCH))
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`): start times count from the boot, so a
/// record of a process is only meaningful within the boot it was written in.
pub fn boot_id() -> io::Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?
        .trim()
        .to_string())
}

fn pid_of(pid: u32) -> Pid {
    // Pids fit in i32 (the kernel's pid_max is at most 2^22); a larger value is refused by
    // the kernel as ESRCH rather than wrapping to a negative (group) id here.
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}
