//! The record of started process groups, so a daemon that was killed leaves no orphan behind.
//!
//! A SIGKILL of the daemon gives it no chance to stop its services; their processes are
//! re-parented and keep running. A parent-death signal is no cure: it can only be set between
//! fork and exec (unsafe code here), it follows the *thread* that forked (tokio retires idle
//! threads, which would kill healthy services), and it reaches the main process only, not what
//! it forked. So the supervisor keeps one file per process group in `<state>/groups/`, named
//! after a token that every process of the group carries in its environment
//! (`COSI_SERVICE_GROUP=<token>`), and [`Ledger::start`]s each group in three steps:
//!
//! 1. **intent**: before the fork, the file records the service, the token and the boot id,
//!    but no group yet;
//! 2. **spawn**: the group's leader is started, with the token in its environment;
//! 3. **complete**: the file is replaced by the full record, which adds the group id and the
//!    leader's start time (from `/proc/<pid>/stat`).
//!
//! Each write goes to a temporary file that is renamed over the group's file, so a daemon
//! killed at any instant leaves one whole record of every group it started, intent or
//! complete (the files are not fsynced: they guard against a killed daemon, not a lost
//! machine, whose next boot makes them stale anyway). If the spawn fails, the intent is
//! removed. The file is removed once the group is gone ([`Ledger::release`]). A service's
//! exec health probes are recorded the same way, as service `<service>/health`, while each
//! runs.
//!
//! A record that cannot be written does not stop the group from starting: the service runs,
//! unguarded, and one warning per group says so.
//!
//! The next supervisor started on the same state directory [`Ledger::sweep`]s the files left
//! over, before it starts any service:
//!
//! - a record of another boot is stale (nothing of that boot runs) and is deleted;
//! - for a complete record, if the leader is alive with the recorded start time, the whole
//!   group is SIGKILLed (a pid reused since has a later start time and is left alone);
//! - for a complete record whose leader is gone, the processes still in that group *and*
//!   carrying the token are SIGKILLed — a process group id reused by someone else cannot carry
//!   our token;
//! - for an intent (a daemon killed between the intent and the complete record), every live
//!   process carrying the token is SIGKILLed, wherever it is: the token is unique, so only the
//!   group that was being started, and what it forked, carries it.
//!
//! What is killed is reported ([`Leftover`]) and logged.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use super::process;

/// The environment variable that marks every process of a supervised group.
pub const GROUP_TOKEN_VAR: &str = "COSI_SERVICE_GROUP";

/// One process group, as written to the state directory: an intent (no `pgid` yet) or a
/// complete record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    /// The service.
    pub service: String,
    /// The process group id (= the leader's pid); `None` in an intent, written before the
    /// leader exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pgid: Option<u32>,
    /// The leader's start time, in clock ticks since boot (0 in an intent).
    #[serde(default)]
    pub start_time: u64,
    /// The boot the record was written in.
    pub boot_id: String,
    /// The value of [`GROUP_TOKEN_VAR`] in the group's environment.
    pub token: String,
}

/// A group left over by an earlier supervisor, and what the sweep did about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// The service it ran.
    pub service: String,
    /// Its process group. For an intent, which names none, the group of the leader the earlier
    /// supervisor started (the oldest process killed whose parent was not killed; its group
    /// unless it left it), or 0 if nothing was left.
    pub pgid: u32,
    /// The processes that were killed (empty when nothing was left).
    pub killed: Vec<u32>,
}

/// The directory of group records (or none, for a supervisor without a state directory).
#[derive(Debug)]
pub struct Ledger {
    dir: Option<PathBuf>,
    boot_id: String,
    /// This process's identity: its pid and start time, unique within a boot.
    instance: String,
}

/// The number of the next token: process-wide, so two ledgers of one process (tests run
/// several supervisors) never hand out the same token.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

impl Ledger {
    /// A ledger in `dir` (created if needed); `None` keeps no records.
    pub fn open(dir: Option<&Path>) -> io::Result<Self> {
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir)?;
        }
        let me = std::process::id();
        let start = process::read_stat(me)?.map_or(0, |s| s.start_time);
        Ok(Ledger {
            dir: dir.map(Path::to_path_buf),
            boot_id: process::boot_id().unwrap_or_default(),
            instance: format!("{me}.{start}"),
        })
    }

    /// A fresh token for the next group of `service`, unique within the boot.
    pub fn token(&self, service: &str) -> String {
        let n = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        format!("{}.{}.{service}", self.instance, n)
    }

    /// Starts a group of `service` whose processes carry `token`, recorded before its first
    /// process exists (see the module docs): writes the intent, runs `spawn` (which starts the
    /// leader, with `token` in its environment, and returns it with its pid), then completes
    /// the record.
    ///
    /// Returns what `spawn` returned, and the record to [`release`](Self::release) once the
    /// group is gone: the complete record, or the intent if completing it failed (it still
    /// covers the group), or `None` without a state directory or if nothing could be written
    /// (logged). If `spawn` fails, its error is returned and the intent removed.
    ///
    /// ```
    /// use std::os::unix::process::CommandExt;
    /// use cosi_node::services::ledger::{Ledger, GROUP_TOKEN_VAR};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let ledger = Ledger::open(Some(dir.path()))?;
    /// let token = ledger.token("hello");
    /// let mut command = std::process::Command::new("true");
    /// command.env(GROUP_TOKEN_VAR, &token).process_group(0);
    /// let ((mut child, pid), record) = ledger.start("hello", token, || {
    ///     let child = command.spawn()?;
    ///     let pid = child.id();
    ///     Ok((child, pid))
    /// })?;
    /// let record = record.expect("recorded in the directory");
    /// assert_eq!(record.pgid, Some(pid));
    /// child.wait()?;
    /// ledger.release(&record);
    /// assert_eq!(std::fs::read_dir(dir.path())?.count(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start<T>(
        &self,
        service: &str,
        token: String,
        spawn: impl FnOnce() -> io::Result<(T, u32)>,
    ) -> io::Result<((T, u32), Option<GroupRecord>)> {
        let intent = self.intend(service, &token).map_err(|error| {
            tracing::warn!(service, %error, "recording the intent to start a process group failed; a daemon killed before the group is recorded may leave it behind");
        });
        let started = match spawn() {
            Ok(started) => started,
            Err(error) => {
                if let Ok(Some(intent)) = &intent {
                    self.release(intent);
                }
                return Err(error);
            }
        };
        let pid = started.1;
        let record = match (self.complete(service, pid, token), intent) {
            (Ok(record), _) => record,
            (Err(error), Ok(intent)) => {
                tracing::warn!(service, pid, %error, "completing the process group's record failed; its intent still covers it");
                intent
            }
            // Logged once, when the intent failed.
            (Err(_), Err(())) => None,
        };
        Ok((started, record))
    }

    /// Records the intent to start a group of `service` whose processes will carry `token`:
    /// the first step of [`start`](Self::start), which a daemon killed before the group is
    /// complete leaves behind. `None` without a state directory.
    pub fn intend(&self, service: &str, token: &str) -> io::Result<Option<GroupRecord>> {
        self.write(GroupRecord {
            service: service.to_string(),
            pgid: None,
            start_time: 0,
            boot_id: self.boot_id.clone(),
            token: token.to_string(),
        })
    }

    /// Replaces the intent (if any) with the complete record of the group led by `pid`.
    fn complete(&self, service: &str, pid: u32, token: String) -> io::Result<Option<GroupRecord>> {
        if self.dir.is_none() {
            return Ok(None);
        }
        let start_time = process::read_stat(pid)?.map_or(0, |s| s.start_time);
        self.write(GroupRecord {
            service: service.to_string(),
            pgid: Some(pid),
            start_time,
            boot_id: self.boot_id.clone(),
            token,
        })
    }

    /// Writes `record` to a temporary file renamed over the group's file, so a crash leaves
    /// either the old record or the new one, whole.
    fn write(&self, record: GroupRecord) -> io::Result<Option<GroupRecord>> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        let name = file_stem(&record.token);
        let path = dir.join(format!("{name}.json"));
        let temporary = dir.join(format!("{name}.tmp"));
        let bytes = serde_json::to_vec(&record).map_err(io::Error::other)?;
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &path)?;
        Ok(Some(record))
    }

    /// Forgets a group that is gone (or was never started): removes its record, intent or
    /// complete.
    pub fn release(&self, record: &GroupRecord) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_file(dir.join(format!("{}.json", file_stem(&record.token))));
        }
    }

    /// Kills what earlier supervisors left running (see the module docs) and deletes their
    /// records. Unreadable records are deleted and logged.
    pub fn sweep(&self) -> io::Result<Vec<Leftover>> {
        let Some(dir) = &self.dir else {
            return Ok(Vec::new());
        };
        let mut records = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<GroupRecord>(&b).map_err(|e| e.to_string()))
            {
                Ok(record) => records.push((path, record)),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "dropping an unreadable process group record");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let mut leftovers = Vec::new();
        if !records.is_empty() {
            let processes = process::all_processes()?;
            for (path, record) in records {
                if record.boot_id == self.boot_id {
                    let (pgid, killed) = match record.pgid {
                        Some(pgid) => (pgid, kill_leftover(&record, pgid, &processes)?),
                        None => kill_intended(&record)?,
                    };
                    if !killed.is_empty() {
                        tracing::warn!(service = %record.service, pgid, ?killed, "killed processes left over by an earlier supervisor");
                    }
                    leftovers.push(Leftover {
                        service: record.service.clone(),
                        pgid,
                        killed,
                    });
                }
                std::fs::remove_file(&path)?;
            }
        }
        Ok(leftovers)
    }
}

/// The file name (without extension) of the group carrying `token`: the token, with every
/// byte outside `A-Z a-z 0-9 . _ -` written `%XX` (a service's health probes are
/// `<service>/health`), so distinct tokens name distinct files.
fn file_stem(token: &str) -> String {
    let mut stem = String::with_capacity(token.len());
    for byte in token.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            stem.push(char::from(byte));
        } else {
            stem.push_str(&format!("%{byte:02X}"));
        }
    }
    stem
}

fn kill_leftover(
    record: &GroupRecord,
    pgid: u32,
    processes: &[process::ProcStat],
) -> io::Result<Vec<u32>> {
    let members: Vec<&process::ProcStat> = processes
        .iter()
        .filter(|p| p.pgrp == pgid && !p.is_zombie())
        .collect();
    let leader_alive = members
        .iter()
        .any(|p| p.pid == pgid && p.start_time == record.start_time);
    let marker = format!("{GROUP_TOKEN_VAR}={}", record.token);
    let mut killed = Vec::new();
    if leader_alive {
        killed = members.iter().map(|p| p.pid).collect();
        process::signal_group(pgid, Signal::SIGKILL)?;
    } else {
        for member in members {
            if process::has_environment_entry(member.pid, &marker)
                && process::signal_process(member.pid, Signal::SIGKILL)?
            {
                killed.push(member.pid);
            }
        }
    }
    Ok(killed)
}

/// Kills every live process carrying the intent's token; returns the group to report (see
/// [`Leftover::pgid`]) and the pids killed. The processes are killed one by one, so one may
/// fork between the scan and its kill: the scan is repeated until it finds no process not
/// killed yet.
fn kill_intended(record: &GroupRecord) -> io::Result<(u32, Vec<u32>)> {
    let marker = format!("{GROUP_TOKEN_VAR}={}", record.token);
    // A supervisor started from inside that group would carry the token too: it must not
    // kill itself (and, restarted, again).
    let me = std::process::id();
    let mut killed: Vec<process::ProcStat> = Vec::new();
    loop {
        let fresh: Vec<process::ProcStat> = process::all_processes()?
            .into_iter()
            .filter(|p| {
                p.pid != me
                    && !p.is_zombie()
                    && !killed
                        .iter()
                        .any(|k| k.pid == p.pid && k.start_time == p.start_time)
                    && process::has_environment_entry(p.pid, &marker)
            })
            .collect();
        if fresh.is_empty() {
            break;
        }
        for stat in fresh {
            if process::signal_process(stat.pid, Signal::SIGKILL)? {
                killed.push(stat);
            }
        }
    }
    // The leader is the oldest of those whose parent was not killed (the rest descend from
    // them); pids alone may wrap, start times tie within a clock tick.
    let pgid = killed
        .iter()
        .filter(|p| !killed.iter().any(|k| k.pid == p.ppid))
        .min_by_key(|p| (p.start_time, p.pid))
        .map_or(0, |p| p.pgrp);
    let mut pids: Vec<u32> = killed.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    Ok((pgid, pids))
}
