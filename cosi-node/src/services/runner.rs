//! The task that runs one service: its states from `Starting` to `Finished`/`Failed`, its
//! process, its health checks and its restarts. One runner per service, started by
//! [`super::Supervisor::apply`], ended when the service is removed.
//!
//! The runner follows two signals: its [`Desired`] channel (spec, operator requests) and the
//! supervisor-wide change counter (dependencies coming up or being stopped). Every wait is a
//! `select!` over them, so a runner never sits deaf in a sleep. It writes its service's record
//! only as [`super::table`] allows: through [`Shared::transition`] and [`Shared::update`],
//! which never hold the table's lock across an `.await`. It knows the supervisor only through
//! that contract.

use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::events::{Health, ServiceState};
use super::ledger::{GroupRecord, GROUP_TOKEN_VAR};
use super::logs::{LineSplitter, LogBook, LogStream};
use super::spec::{HealthCheck, Program, RestartPolicy, ServiceSpec};
use super::table::{Desired, Shared};
use super::{health, process, reaper};

/// The `PATH` a service gets (its environment is the spec's, plus this and the group token).
const SERVICE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The longest stderr line quoted in an exit event.
const QUOTE_LIMIT: usize = 1024;
/// How long output is read after the main process exited and its group was killed. Only a
/// process that left the group (setsid) can keep the pipes open that long; then the readers
/// are aborted, closing the supervisor's ends of the pipes, so no reader (nor its hold on the
/// service's [`LogBook`]) outlives the run. What such a process writes later is not captured.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Runs the service `id` until it is removed.
pub(super) async fn run(
    sup: Arc<Shared>,
    id: String,
    desired: watch::Receiver<Desired>,
    logs: Arc<LogBook>,
) {
    let spec = desired.borrow().spec.clone();
    let mut runner = Runner {
        backoff: sup.options.restart_backoff.clone(),
        changes: sup.changes.subscribe(),
        sup,
        id,
        desired,
        logs,
        spec,
        seen_kick: 0,
        seen_restart: 0,
        seen_run: true,
        health: Health::Unknown,
    };
    loop {
        runner.run().await;
        // Re-added while it was being removed: carry on with the new spec.
        if runner.sup.retire(&runner.id) {
            return;
        }
    }
}

/// How one run of the process ended.
enum Next {
    /// Asked to do something else (stop, restart, a new spec): look at what is desired now.
    Again,
    /// The process exited on its own (or could not start); `restart` is the policy's verdict,
    /// already counted in the record's restarts.
    Exited { restart: bool, uptime: Duration },
    /// Cannot run until the spec changes (its image has no program).
    Blocked,
}

struct Runner {
    sup: Arc<Shared>,
    id: String,
    desired: watch::Receiver<Desired>,
    changes: watch::Receiver<u64>,
    logs: Arc<LogBook>,
    /// The spec in effect (in-place changes applied).
    spec: Arc<ServiceSpec>,
    backoff: cosi_controllers::Backoff,
    seen_kick: u64,
    seen_restart: u64,
    seen_run: bool,
    health: Health,
}

/// A started process and what reads its output and health.
struct Running {
    child: Child,
    pid: u32,
    /// The tasks reading stdout and stderr; dropping the set aborts them.
    readers: JoinSet<()>,
    last_stderr: Arc<Mutex<Option<String>>>,
    record: Option<GroupRecord>,
    started: Instant,
    health: Option<HealthTask>,
}

/// A running health check. Dropping it tells its task to stop (an exec probe in flight is
/// killed and reaped by the task); [`HealthTask::stop`] also waits until it has.
struct HealthTask {
    results: mpsc::Receiver<Result<(), String>>,
    task: JoinHandle<()>,
    /// Dropped (or set) to stop the task.
    stop: watch::Sender<bool>,
}

impl HealthTask {
    /// Stops the check and waits until its task, and any probe process, is gone.
    async fn stop(self) {
        let HealthTask { task, stop, .. } = self;
        drop(stop);
        let _ = task.await;
    }
}

impl Runner {
    /// Runs until the service is removed.
    async fn run(&mut self) {
        loop {
            let want = self.desired.borrow_and_update().clone();
            if want.removed {
                return;
            }
            self.adopt(&want);
            self.seen_kick = want.kick;
            self.seen_restart = want.restart;
            self.seen_run = want.run;
            if !want.run || !want.spec.enabled {
                let state = self.state();
                if !want.run && !matches!(state, ServiceState::Finished | ServiceState::Initialized)
                {
                    self.sup.transition(
                        &self.id,
                        ServiceState::Finished,
                        "Service stopped",
                        |_| {},
                    );
                } else if want.run && state != ServiceState::Skipped {
                    self.sup.transition(
                        &self.id,
                        ServiceState::Skipped,
                        "Service skipped: disabled in its spec",
                        |_| {},
                    );
                }
                self.wait_for_instruction().await;
                continue;
            }
            match self.run_once().await {
                Next::Again => continue,
                Next::Blocked => {
                    self.wait_for_instruction().await;
                    self.backoff.reset();
                }
                Next::Exited { restart, uptime } => {
                    if !restart {
                        self.wait_for_instruction().await;
                        self.backoff.reset();
                        continue;
                    }
                    if uptime >= self.sup.options.stable_after {
                        self.backoff.reset();
                    }
                    let delay = self.backoff.next_delay();
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.wait_for_instruction() => self.backoff.reset(),
                    }
                }
            }
        }
    }

    /// One run: start, wait for dependencies, prepare, spawn, supervise.
    async fn run_once(&mut self) -> Next {
        let spec = self.spec.clone();
        self.sup
            .transition(&self.id, ServiceState::Starting, "Starting service", |_| {});
        if !self.wait_for_dependencies().await {
            return Next::Again;
        }
        // From here the record says `alive`: a deliberate stop of a dependency waits for us.
        if let Err(problem) = spec.check_process_fields().and(spec.check_health()) {
            // Retrying cannot help: the spec must change.
            self.sup.transition(
                &self.id,
                ServiceState::Failed,
                format!("Invalid spec: {problem}"),
                |r| r.alive = false,
            );
            return Next::Blocked;
        }
        let (program, args) = match self.resolve(&spec) {
            Ok(resolved) => resolved,
            Err(message) => {
                self.sup
                    .transition(&self.id, ServiceState::Failed, message, |r| r.alive = false);
                return Next::Blocked;
            }
        };
        let preparing = match &spec.program {
            Program::Image(image) => format!("Resolved image {image:?} to {program}"),
            Program::Command(_) => format!("Preparing to run {program}"),
        };
        self.sup
            .transition(&self.id, ServiceState::Preparing, preparing, |_| {});
        let mut running = match self.spawn(&spec, &program, &args).await {
            Ok(running) => running,
            Err(SpawnFailed {
                message,
                retry: false,
            }) => {
                self.sup
                    .transition(&self.id, ServiceState::Failed, message, |r| r.alive = false);
                return Next::Blocked;
            }
            Err(SpawnFailed { message, .. }) => {
                let restart = self.restarts_after(true);
                self.sup
                    .transition(&self.id, ServiceState::Failed, message, |r| {
                        r.alive = false;
                        r.restarts += u32::from(restart);
                    });
                return Next::Exited {
                    restart,
                    uptime: Duration::ZERO,
                };
            }
        };
        let pid = running.pid;
        self.health = Health::Unknown;
        self.sup.transition(
            &self.id,
            ServiceState::Running,
            format!("Process {program} started with PID {pid}"),
            |r| {
                r.pid = Some(pid);
                r.health = Health::Unknown;
                r.health_message = None;
            },
        );
        self.capture_output(&mut running);
        running.health = self.start_health(spec.health.as_ref());

        loop {
            tokio::select! {
                status = running.child.wait() => {
                    return self.exited(running, status).await;
                }
                changed = self.desired.changed() => {
                    if changed.is_err() {
                        self.stop(running, "Service removed").await;
                        return Next::Again;
                    }
                    let want = self.desired.borrow_and_update().clone();
                    let reason = if want.removed {
                        Some("Service removed")
                    } else if !want.run {
                        Some("Stopping service")
                    } else if want.restart != self.seen_restart {
                        Some("Restarting service")
                    } else if self.spec.needs_restart_for(&want.spec) {
                        Some("Spec changed")
                    } else if want.spec.check_health().is_err() {
                        // Not applied in place: the next run fails it, naming the field.
                        Some("Spec changed")
                    } else {
                        None
                    };
                    if let Some(reason) = reason {
                        self.stop(running, reason).await;
                        if want.restart != self.seen_restart || self.spec.needs_restart_for(&want.spec) {
                            self.backoff.reset();
                        }
                        return Next::Again;
                    }
                    self.seen_kick = want.kick;
                    if self.adopt(&want) {
                        if let Some(old) = running.health.take() {
                            old.stop().await;
                        }
                        running.health = self.start_health(self.spec.health.as_ref());
                        self.health = Health::Unknown;
                        self.sup.update(&self.id, |r| {
                            r.health = Health::Unknown;
                            r.health_message = None;
                        });
                    }
                }
                _ = self.changes.changed() => {
                    if let Some(dependency) = self.draining_dependency() {
                        self.stop(running, &format!("Service {dependency:?} is stopping")).await;
                        return Next::Again;
                    }
                }
                Some(result) = next_health(&mut running.health) => {
                    self.health_result(result);
                }
            }
        }
    }

    /// Takes an in-place change of the spec; returns whether the health check changed.
    fn adopt(&mut self, want: &Desired) -> bool {
        if Arc::ptr_eq(&self.spec, &want.spec) {
            return false;
        }
        let health_changed = self.spec.health != want.spec.health;
        self.spec = want.spec.clone();
        let spec = self.spec.clone();
        self.sup.update(&self.id, |r| r.spec = spec);
        health_changed
    }

    fn state(&self) -> ServiceState {
        self.sup
            .table()
            .services
            .get(&self.id)
            .map_or(ServiceState::Initialized, |e| e.record.state)
    }

    /// Waits until something is asked of the runner: removal, stop, start, restart, or a spec
    /// that needs a new process. In-place spec changes are taken on the way.
    async fn wait_for_instruction(&mut self) {
        loop {
            if self.desired.changed().await.is_err() {
                return;
            }
            let want = self.desired.borrow().clone();
            if want.removed
                || want.run != self.seen_run
                || want.kick != self.seen_kick
                || want.restart != self.seen_restart
                || self.spec.needs_restart_for(&want.spec)
                // A spec that failed its checks is tried again when any of it changes (a
                // health check is otherwise changed in place).
                || (self.spec.check_health().is_err() && *self.spec != *want.spec)
            {
                return;
            }
            self.desired.borrow_and_update();
            self.adopt(&want);
        }
    }

    /// Waits until every dependency is up, saying what it waits for. On success the record
    /// is marked `alive`, in the same critical section as the check, so a dependency that
    /// starts stopping is either seen here or sees us. `false` if interrupted by an
    /// instruction.
    async fn wait_for_dependencies(&mut self) -> bool {
        let mut announced: Option<String> = None;
        loop {
            let unmet = {
                let mut table = self.sup.table();
                let unmet: Vec<String> = self
                    .spec
                    .depends_on
                    .iter()
                    .filter_map(|dep| match table.services.get(dep) {
                        None => Some(format!("service {dep:?} to be registered")),
                        Some(entry) if entry.record.is_up() => None,
                        Some(_) => Some(format!("service {dep:?} to be up")),
                    })
                    .collect();
                if unmet.is_empty() {
                    if let Some(entry) = table.services.get_mut(&self.id) {
                        entry.record.alive = true;
                    }
                }
                unmet
            };
            if unmet.is_empty() {
                return true;
            }
            let description = format!("Waiting for {}", unmet.join(", "));
            if announced.as_deref() != Some(description.as_str()) {
                self.sup
                    .transition(&self.id, ServiceState::Waiting, description.clone(), |_| {});
                announced = Some(description);
            }
            tokio::select! {
                _ = self.changes.changed() => {}
                changed = self.desired.changed() => {
                    if changed.is_err() {
                        return false;
                    }
                    let want = self.desired.borrow_and_update().clone();
                    if want.removed
                        || !want.run
                        || want.restart != self.seen_restart
                        || self.spec.needs_restart_for(&want.spec)
                    {
                        return false;
                    }
                    self.seen_kick = want.kick;
                    self.adopt(&want);
                }
            }
        }
    }

    /// A dependency being stopped on purpose, if any.
    fn draining_dependency(&self) -> Option<String> {
        let table = self.sup.table();
        self.spec
            .depends_on
            .iter()
            .find(|dep| {
                table
                    .services
                    .get(dep.as_str())
                    .is_some_and(|e| e.record.draining)
            })
            .cloned()
    }

    /// Services that depend on this one and still have a process.
    fn alive_dependents(&self) -> Vec<String> {
        let table = self.sup.table();
        table
            .services
            .iter()
            .filter(|(_, e)| e.record.alive && e.record.spec.depends_on.contains(&self.id))
            .map(|(id, _)| format!("service {id:?}"))
            .collect()
    }

    fn resolve(&self, spec: &ServiceSpec) -> Result<(String, Vec<String>), String> {
        match &spec.program {
            Program::Command(command) => Ok((command.clone(), spec.args.clone())),
            Program::Image(image) => {
                let program = self.sup.options.resolver.resolve(image)?;
                let mut args = program.args.clone();
                args.extend(spec.args.iter().cloned());
                Ok((program.command.clone(), args))
            }
        }
    }

    async fn spawn(
        &self,
        spec: &ServiceSpec,
        program: &str,
        args: &[String],
    ) -> Result<Running, SpawnFailed> {
        let token = self.sup.ledger.token(&self.id);
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .env("PATH", SERVICE_PATH)
            .envs(&spec.environment)
            .env(GROUP_TOKEN_VAR, &token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(dir) = &spec.working_dir {
            command.current_dir(dir);
        }
        // fork and exec block the calling thread for up to a millisecond: keep them off the
        // runtime's workers, so a crash loop does not stall other tasks.
        // The group's records (intent, then complete) are written in the same blocking task,
        // before the process is reported running.
        let sup = self.sup.clone();
        let id = self.id.clone();
        let spawned = tokio::task::spawn_blocking(move || {
            sup.ledger.start(&id, token, || {
                let child = reaper::spawn(&mut command)?;
                let pid = child.id().unwrap_or(0);
                Ok((child, pid))
            })
        })
        .await
        .map_err(|e| SpawnFailed {
            message: format!("Failed to start {program}: {e}"),
            retry: true,
        })?;
        let ((child, pid), record) = spawned.map_err(|e| SpawnFailed {
            message: format!(
                "Failed to start {program}: {}",
                spawn_reason(&e, spec.working_dir.as_deref())
            ),
            // Too long for the kernel: only a changed spec helps.
            retry: e.raw_os_error() != Some(nix::errno::Errno::E2BIG as i32),
        })?;
        Ok(Running {
            child,
            pid,
            readers: JoinSet::new(),
            last_stderr: Arc::new(Mutex::new(None)),
            record,
            started: Instant::now(),
            health: None,
        })
    }

    /// Starts `check` for this service, if there is one.
    fn start_health(&self, check: Option<&HealthCheck>) -> Option<HealthTask> {
        check.map(|check| start_health(check.clone(), self.sup.clone(), &self.id))
    }

    /// Starts reading the process's output into the service's logs. Called once the record
    /// has the pid, so whoever reads a line of the output finds the process that wrote it
    /// (until then the output waits in the pipes).
    fn capture_output(&self, running: &mut Running) {
        if let Some(stdout) = running.child.stdout.take() {
            running.readers.spawn(read_output(
                stdout,
                LogStream::Stdout,
                self.logs.clone(),
                None,
            ));
        }
        if let Some(stderr) = running.child.stderr.take() {
            running.readers.spawn(read_output(
                stderr,
                LogStream::Stderr,
                self.logs.clone(),
                Some(running.last_stderr.clone()),
            ));
        }
    }

    /// The process exited on its own.
    async fn exited(&mut self, running: Running, status: std::io::Result<ExitStatus>) -> Next {
        let uptime = running.started.elapsed();
        let last = self.finish(running).await;
        let (state, message, failed) = describe_exit(status, last);
        let checked = self.spec.health.is_some();
        let restart = self.restarts_after(failed);
        // The verdict is counted with the exit event, so a reader of that event knows it.
        self.sup.transition(&self.id, state, message, |r| {
            r.alive = false;
            r.pid = None;
            r.restarts += u32::from(restart);
            if checked {
                r.health = Health::Failed;
                r.health_message = Some("service not running".into());
            }
        });
        self.health = Health::Unknown;
        Next::Exited { restart, uptime }
    }

    /// Whether the restart policy starts the process again after an exit.
    fn restarts_after(&self, failed: bool) -> bool {
        match self.spec.restart {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => failed,
            RestartPolicy::Never => false,
        }
    }

    /// Stops the process on purpose: dependents first, then SIGTERM to the group, SIGKILL
    /// after the stop timeout.
    async fn stop(&mut self, mut running: Running, reason: &str) {
        self.sup.update(&self.id, |r| r.draining = true);
        let deadline = Instant::now() + self.sup.options.dependents_timeout;
        let mut exited = None;
        let mut announced: Option<Vec<String>> = None;
        loop {
            let dependents = self.alive_dependents();
            if dependents.is_empty() {
                break;
            }
            if announced.as_ref() != Some(&dependents) {
                self.sup.transition(
                    &self.id,
                    ServiceState::Stopping,
                    format!("{reason}: waiting for {} to stop", dependents.join(", ")),
                    |_| {},
                );
                announced = Some(dependents);
            }
            tokio::select! {
                status = running.child.wait() => { exited = Some(status); break; }
                _ = self.changes.changed() => {}
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(service = %self.id, "dependents did not stop in time; stopping anyway");
                    break;
                }
            }
        }
        let mut killed = false;
        if exited.is_none() {
            let pid = running.pid;
            self.sup.transition(
                &self.id,
                ServiceState::Stopping,
                format!("{reason}: sending SIGTERM to process group {pid}"),
                |_| {},
            );
            let _ = process::signal_group(pid, Signal::SIGTERM);
            let timeout = self.spec.stop_timeout;
            tokio::select! {
                status = running.child.wait() => exited = Some(status),
                _ = tokio::time::sleep(timeout) => {}
            }
            if exited.is_none() {
                self.sup.transition(
                    &self.id,
                    ServiceState::Stopping,
                    format!(
                        "Process did not exit within {} of SIGTERM: sending SIGKILL",
                        humantime::format_duration(timeout)
                    ),
                    |_| {},
                );
                let _ = process::signal_group(pid, Signal::SIGKILL);
                let _ = running.child.wait().await;
                killed = true;
            }
        }
        self.finish(running).await;
        let checked = self.spec.health.is_some();
        let message = if killed {
            "Service stopped: killed with SIGKILL after the stop timeout"
        } else {
            "Service stopped"
        };
        self.sup
            .transition(&self.id, ServiceState::Finished, message, |r| {
                r.alive = false;
                r.draining = false;
                r.pid = None;
                if checked {
                    r.health = Health::Failed;
                    r.health_message = Some("service not running".into());
                }
            });
        self.health = Health::Unknown;
    }

    /// After the main process is gone: kill what is left of its group, read the rest of its
    /// output (for at most [`DRAIN_LIMIT`]), drop its record. Returns its last stderr line.
    /// When it returns, the output readers are gone.
    async fn finish(&mut self, running: Running) -> Option<String> {
        let Running {
            pid,
            mut readers,
            last_stderr,
            record,
            health,
            ..
        } = running;
        if let Some(health) = health {
            health.stop().await;
        }
        let _ = process::signal_group(pid, Signal::SIGKILL);
        reaper::forget(pid);
        let drain = async { while readers.join_next().await.is_some() {} };
        if tokio::time::timeout(DRAIN_LIMIT, drain).await.is_err() {
            tracing::warn!(service = %self.id, pid, "output pipes still open after the process group was killed (a process left the group); no longer reading them");
            // Aborts the readers and waits until they are dropped, with their pipes.
            readers.shutdown().await;
        }
        if let Some(record) = record {
            self.sup.ledger.release(&record);
        }
        let last = last_stderr.lock().unwrap_or_else(|e| e.into_inner()).take();
        last
    }

    fn health_result(&mut self, result: Result<(), String>) {
        let (health, message) = match result {
            Ok(()) => (Health::Ok, None),
            Err(reason) => (Health::Failed, Some(reason)),
        };
        if health == self.health {
            self.sup
                .update(&self.id, |r| r.health_message = message.clone());
            return;
        }
        self.health = health;
        let text = match &message {
            None => "Health check successful".to_string(),
            Some(reason) => format!("Health check failed: {reason}"),
        };
        self.sup
            .transition(&self.id, ServiceState::Running, text, |r| {
                r.health = health;
                r.health_message = message;
            });
    }
}

/// The next health result, or never if there is no check.
async fn next_health(task: &mut Option<HealthTask>) -> Option<Result<(), String>> {
    match task {
        Some(task) => task.results.recv().await,
        None => std::future::pending().await,
    }
}

/// Starts the health check of service `id`; its exec probes are recorded in the ledger.
fn start_health(check: HealthCheck, sup: Arc<Shared>, id: &str) -> HealthTask {
    let name = format!("{id}/health");
    let (sender, results) = mpsc::channel(4);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(async move {
        // Completes when the runner stops the check (or drops it).
        let cancelled = || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(check.initial_delay) => {}
            () = cancelled() => return,
        }
        loop {
            let Some(result) = health::probe_until(
                &check.probe,
                check.timeout,
                cancelled(),
                Some((&sup.ledger, name.as_str())),
            )
            .await
            else {
                return;
            };
            tokio::select! {
                sent = sender.send(result) => if sent.is_err() { return },
                () = cancelled() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(check.period) => {}
                () = cancelled() => return,
            }
        }
    });
    HealthTask {
        results,
        task,
        stop,
    }
}

/// Reads one pipe into the service's logs until its end (or until aborted).
async fn read_output(
    mut pipe: impl AsyncRead + Unpin + Send + 'static,
    stream: LogStream,
    logs: Arc<LogBook>,
    last: Option<Arc<Mutex<Option<String>>>>,
) {
    let mut lines = LineSplitter::default();
    let mut buffer = vec![0u8; 8192];
    let record = |line: String| {
        if let Some(last) = &last {
            if !line.trim().is_empty() {
                *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(line.clone());
            }
        }
        logs.push(stream, line);
    };
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => lines.push(&buffer[..n]).into_iter().for_each(&record),
        }
    }
    if let Some(line) = lines.finish() {
        record(line);
    }
}

/// An exit status in the words of an event: state, message, and whether it is a failure.
fn describe_exit(
    status: std::io::Result<ExitStatus>,
    last_stderr: Option<String>,
) -> (ServiceState, String, bool) {
    use std::os::unix::process::ExitStatusExt;
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            return (
                ServiceState::Failed,
                format!("Waiting for the process failed: {}", os_reason(&e)),
                true,
            )
        }
    };
    if status.success() {
        return (
            ServiceState::Finished,
            "Service finished successfully".into(),
            false,
        );
    }
    let head = match (status.code(), status.signal()) {
        (Some(code), _) => format!("Process exited with code {code}"),
        (None, Some(signal)) => format!(
            "Process killed by signal {}",
            Signal::try_from(signal)
                .map_or_else(|_| signal.to_string(), |s| s.as_str().to_string())
        ),
        (None, None) => format!("Process ended: {status}"),
    };
    let message = match last_stderr {
        Some(line) => format!("{head}: {}", quote(line.trim())),
        None => head,
    };
    (ServiceState::Failed, message, true)
}

fn quote(line: &str) -> &str {
    cosi_core::text::prefix_within(line, QUOTE_LIMIT)
}

/// A spawn that failed: the service's message, and whether starting again can help (a
/// missing program may appear; arguments the kernel refuses as too long stay too long).
struct SpawnFailed {
    message: String,
    retry: bool,
}

/// Why a spawn failed. The OS reports a working directory it cannot enter with the same
/// error as a missing program; name the directory when it is the culprit.
fn spawn_reason(error: &std::io::Error, working_dir: Option<&str>) -> String {
    let Some(dir) = working_dir else {
        return os_reason(error);
    };
    match std::fs::metadata(dir) {
        Err(e) => format!("workingDir {dir:?}: {}", os_reason(&e)),
        Ok(m) if !m.is_dir() => format!("workingDir {dir:?}: not a directory"),
        Ok(_) => os_reason(error),
    }
}

/// What the OS said, and for a refusal that only a changed spec can cure, what to change.
fn os_reason(error: &std::io::Error) -> String {
    let reason = os_text(error);
    if error.raw_os_error() == Some(nix::errno::Errno::E2BIG as i32) {
        return format!(
            "{reason}: its arguments and environment are more than the kernel takes (at most \
             128 KiB in one string, a quarter of the stack size limit in all); change the spec"
        );
    }
    reason
}

/// An OS error without the `(os error N)` suffix: `No such file or directory`.
fn os_text(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn exit_with_code_names_the_code_and_the_last_stderr_line() {
        let (state, message, failed) = describe_exit(
            Ok(ExitStatus::from_raw(1 << 8)),
            Some("unknown flag: --foo".into()),
        );
        assert_eq!(state, ServiceState::Failed);
        assert_eq!(message, "Process exited with code 1: unknown flag: --foo");
        assert!(failed);
    }

    #[test]
    fn death_by_signal_names_the_signal() {
        let (_, message, _) = describe_exit(Ok(ExitStatus::from_raw(11)), None);
        assert_eq!(message, "Process killed by signal SIGSEGV");
    }

    #[test]
    fn a_clean_exit_is_finished() {
        let (state, message, failed) = describe_exit(Ok(ExitStatus::from_raw(0)), None);
        assert_eq!(
            (state, message.as_str(), failed),
            (
                ServiceState::Finished,
                "Service finished successfully",
                false
            )
        );
    }
}
