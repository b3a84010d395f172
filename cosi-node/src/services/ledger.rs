//! The record of started process groups, so a daemon that was killed leaves no orphan behind.
//!
//! A SIGKILL of the daemon gives it no chance to stop its services; their processes are
//! re-parented and keep running. A parent-death signal is no cure: it can only be set between
//! fork and exec (unsafe code here), it follows the *thread* that forked (tokio retires idle
//! threads, which would kill healthy services), and it reaches the main process only, not what
//! it forked. So the supervisor writes, before it reports a process as running, one file per
//! process group into `<state>/groups/`: the service, the group id, the leader's start time
//! (from `/proc/<pid>/stat`), the boot id, and a token that every process of the group carries
//! in its environment (`COSI_SERVICE_GROUP=<token>`). The file is removed once the group is
//! gone. A service's exec health probes are recorded the same way, as service
//! `<service>/health`, while each runs. The next supervisor started on the same state directory [`Ledger::sweep`]s the files
//! left over, before it starts any service:
//!
//! - a record of another boot is stale (nothing of that boot runs) and is deleted;
//! - if the leader is alive with the recorded start time, the whole group is SIGKILLed
//!   (a pid reused since has a later start time and is left alone);
//! - if the leader is gone, the processes still in that group *and* carrying the token are
//!   SIGKILLed — a process group id reused by someone else cannot carry our token.
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

/// One started process group, as written to the state directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    /// The service.
    pub service: String,
    /// The process group id (= the leader's pid).
    pub pgid: u32,
    /// The leader's start time, in clock ticks since boot.
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
    /// Its process group.
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

    /// Records the group led by `pid`. Written to a temporary file and renamed, so a crash
    /// leaves either the whole record or none.
    pub fn record(
        &self,
        service: &str,
        pid: u32,
        token: String,
    ) -> io::Result<Option<GroupRecord>> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        let start_time = process::read_stat(pid)?.map_or(0, |s| s.start_time);
        let record = GroupRecord {
            service: service.to_string(),
            pgid: pid,
            start_time,
            boot_id: self.boot_id.clone(),
            token,
        };
        let path = dir.join(file_name(&record));
        let temporary = path.with_extension("tmp");
        let bytes = serde_json::to_vec(&record).map_err(io::Error::other)?;
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &path)?;
        Ok(Some(record))
    }

    /// Forgets a group that is gone.
    pub fn release(&self, record: &GroupRecord) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_file(dir.join(file_name(record)));
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
                    let killed = kill_leftover(&record, &processes)?;
                    if !killed.is_empty() {
                        tracing::warn!(service = %record.service, pgid = record.pgid, ?killed, "killed processes left over by an earlier supervisor");
                    }
                    leftovers.push(Leftover {
                        service: record.service.clone(),
                        pgid: record.pgid,
                        killed,
                    });
                }
                std::fs::remove_file(&path)?;
            }
        }
        Ok(leftovers)
    }
}

fn file_name(record: &GroupRecord) -> String {
    format!("{}-{}.json", record.pgid, record.start_time)
}

fn kill_leftover(record: &GroupRecord, processes: &[process::ProcStat]) -> io::Result<Vec<u32>> {
    let members: Vec<&process::ProcStat> = processes
        .iter()
        .filter(|p| p.pgrp == record.pgid && !p.is_zombie())
        .collect();
    let leader_alive = members
        .iter()
        .any(|p| p.pid == record.pgid && p.start_time == record.start_time);
    let marker = format!("{GROUP_TOKEN_VAR}={}", record.token);
    let mut killed = Vec::new();
    if leader_alive {
        killed = members.iter().map(|p| p.pid).collect();
        process::signal_group(record.pgid, Signal::SIGKILL)?;
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
