//! How a [`super::Supervisor`] runs: [`SupervisorOptions`], read by the supervisor and by
//! every runner (backoff, stability, image resolution, dependents' timeout).

use std::path::PathBuf;
use std::time::Duration;

use cosi_controllers::Backoff;

use super::log_file::LogFileOptions;
use super::resolver::ImageResolver;

/// How a [`super::Supervisor`] runs.
#[derive(Clone, Debug)]
pub struct SupervisorOptions {
    /// Where log files (`logs/<service>.log`) and process group records (`groups/`) go. With
    /// none, logs are kept in memory only and a killed daemon's leftovers are not swept.
    pub state_dir: Option<PathBuf>,
    /// Lines kept in memory per service (default 1000).
    pub log_lines: usize,
    /// Size cap and rotation of the log files.
    pub log_file: LogFileOptions,
    /// Delay before an automatic restart (default 500 ms doubling up to 30 s).
    pub restart_backoff: Backoff,
    /// A process that stayed up this long resets the backoff (default 10 s).
    pub stable_after: Duration,
    /// Image references → programs.
    pub resolver: ImageResolver,
    /// Make this process a child subreaper and reap orphans of service groups (see
    /// [`super::Reaper`]); for a daemon that starts children only through the supervisor.
    pub reap_orphans: bool,
    /// How long a stop waits for its dependents to go down before it goes on (default 30 s,
    /// as the original): a safety net for dependency cycles, not a schedule.
    pub dependents_timeout: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        SupervisorOptions {
            state_dir: None,
            log_lines: 1000,
            log_file: LogFileOptions::default(),
            restart_backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)),
            stable_after: Duration::from_secs(10),
            resolver: ImageResolver::new(),
            reap_orphans: false,
            dependents_timeout: Duration::from_secs(30),
        }
    }
}
