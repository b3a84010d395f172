//! What a service is asked to be: the [`ServiceSpec`] resource (namespace `runtime`), derived
//! from the machine config by controllers and read by the controller that drives the
//! supervisor.
//!
//! This module owns the spec's shape and its YAML form only; how a spec is run lives in
//! [`super::supervisor`], where it comes from in [`super::config`].

use std::collections::BTreeMap;
use std::time::Duration;

use cosi_core::{ResourceDefinition, ResourceSpec};
use serde::{Deserialize, Serialize};

use crate::namespaces;

/// The program a service runs. Written as a map with one key, `command` or `image`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(try_from = "ProgramForm", into = "ProgramForm")]
pub enum Program {
    /// A program by path (or by name, looked up in `PATH`).
    Command(String),
    /// An image reference (`ghcr.io/siderolabs/kubelet:v1.31.0`). There are no containers on
    /// this node: the supervisor maps the reference to a program through its
    /// [`super::ImageResolver`] when it prepares the service.
    Image(String),
}

/// The written form of a [`Program`] (a plain map in YAML and JSON alike).
#[derive(Clone, Serialize, Deserialize)]
struct ProgramForm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image: Option<String>,
}

impl TryFrom<ProgramForm> for Program {
    type Error = &'static str;
    fn try_from(form: ProgramForm) -> Result<Self, Self::Error> {
        match (form.command, form.image) {
            (Some(command), None) => Ok(Program::Command(command)),
            (None, Some(image)) => Ok(Program::Image(image)),
            (Some(_), Some(_)) => Err("set either `command` or `image`, not both"),
            (None, None) => Err("set `command` or `image`"),
        }
    }
}

impl From<Program> for ProgramForm {
    fn from(program: Program) -> Self {
        match program {
            Program::Command(command) => ProgramForm {
                command: Some(command),
                image: None,
            },
            Program::Image(image) => ProgramForm {
                command: None,
                image: Some(image),
            },
        }
    }
}

/// When a service's process is started again after it exits.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// After every exit, successful or not.
    #[default]
    Always,
    /// After a failure only (a non-zero exit code, a signal, a start that failed).
    OnFailure,
    /// Never: the first exit is final.
    Never,
}

/// How a service's health is probed. Written as a map with one key, `exec`, `tcp` or `http`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(try_from = "ProbeForm", into = "ProbeForm")]
pub enum Probe {
    /// Runs a command; healthy when it exits with code 0.
    Exec {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Connects to `address` (`host:port`); healthy when the connection is accepted.
    Tcp {
        /// Where to connect, e.g. `127.0.0.1:2379`.
        address: String,
    },
    /// Sends `GET url`; healthy on a 2xx or 3xx status (as Kubernetes probes).
    Http {
        /// An `http://` URL, e.g. `http://127.0.0.1:10248/healthz`.
        url: String,
    },
}

#[derive(Clone, Serialize, Deserialize)]
struct ExecForm {
    command: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
}

#[derive(Clone, Serialize, Deserialize)]
struct TcpForm {
    address: String,
}

#[derive(Clone, Serialize, Deserialize)]
struct HttpForm {
    url: String,
}

/// The written form of a [`Probe`].
#[derive(Clone, Serialize, Deserialize)]
struct ProbeForm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exec: Option<ExecForm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tcp: Option<TcpForm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    http: Option<HttpForm>,
}

impl TryFrom<ProbeForm> for Probe {
    type Error = &'static str;
    fn try_from(form: ProbeForm) -> Result<Self, Self::Error> {
        match (form.exec, form.tcp, form.http) {
            (Some(e), None, None) => Ok(Probe::Exec {
                command: e.command,
                args: e.args,
            }),
            (None, Some(t), None) => Ok(Probe::Tcp { address: t.address }),
            (None, None, Some(h)) => Ok(Probe::Http { url: h.url }),
            (None, None, None) => Err("set one of `exec`, `tcp` or `http`"),
            _ => Err("set only one of `exec`, `tcp` or `http`"),
        }
    }
}

impl From<Probe> for ProbeForm {
    fn from(probe: Probe) -> Self {
        let mut form = ProbeForm {
            exec: None,
            tcp: None,
            http: None,
        };
        match probe {
            Probe::Exec { command, args } => form.exec = Some(ExecForm { command, args }),
            Probe::Tcp { address } => form.tcp = Some(TcpForm { address }),
            Probe::Http { url } => form.http = Some(HttpForm { url }),
        }
        form
    }
}

/// A health check: a probe and its timing.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// What to probe.
    pub probe: Probe,
    /// Delay between the process start and the first probe (default 1 s).
    #[serde(default = "default_initial_delay", with = "duration_text")]
    pub initial_delay: Duration,
    /// Delay between probes (default 5 s).
    #[serde(default = "default_period", with = "duration_text")]
    pub period: Duration,
    /// How long one probe may take before it counts as failed (default 500 ms).
    #[serde(default = "default_timeout", with = "duration_text")]
    pub timeout: Duration,
}

impl HealthCheck {
    /// A check with the default timing: 1 s initial delay, 5 s period, 500 ms timeout (the
    /// original's defaults).
    pub fn new(probe: Probe) -> Self {
        HealthCheck {
            probe,
            initial_delay: default_initial_delay(),
            period: default_period(),
            timeout: default_timeout(),
        }
    }
}

fn default_initial_delay() -> Duration {
    Duration::from_secs(1)
}
fn default_period() -> Duration {
    Duration::from_secs(5)
}
fn default_timeout() -> Duration {
    Duration::from_millis(500)
}
fn default_stop_timeout() -> Duration {
    Duration::from_secs(10)
}
fn enabled_by_default() -> bool {
    true
}

/// One service: what to run, how, after what, and how to tell it is healthy.
///
/// Id = the service id (`kubelet`, or the name of a `ServiceConfig` document).
///
/// ```
/// use cosi_node::services::{Program, ServiceSpec};
/// let spec: ServiceSpec = serde_yaml::from_str(
///     "program:\n  command: /usr/bin/db\nargs: [--port=5432]\ndependsOn: [network]\nrestart: on-failure\nstopTimeout: 2s\n",
/// ).unwrap();
/// assert_eq!(spec.program, Program::Command("/usr/bin/db".into()));
/// assert_eq!(spec.stop_timeout, std::time::Duration::from_secs(2));
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// The program.
    pub program: Program,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment variables (the process starts with an empty environment plus these
    /// and `PATH`, so what it sees does not depend on the daemon's own environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// Working directory; the daemon's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Services that must be up (running and healthy, or skipped) before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// When the process is started again.
    #[serde(default)]
    pub restart: RestartPolicy,
    /// How health is checked; no check means health is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthCheck>,
    /// How long a stop waits after SIGTERM before it sends SIGKILL (default 10 s).
    #[serde(default = "default_stop_timeout", with = "duration_text")]
    pub stop_timeout: Duration,
    /// A disabled service is not run: it is `Skipped`, which counts as up for its dependents.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

/// Why a text with a NUL byte cannot reach a process (argv, environ and paths are C strings).
const NUL: &str = "contains a NUL byte, which a process cannot be given";

impl ServiceSpec {
    /// A spec running `program` with no arguments, restart `always`, no health check and a
    /// 10 s stop timeout.
    pub fn new(program: Program) -> Self {
        ServiceSpec {
            program,
            args: Vec::new(),
            environment: BTreeMap::new(),
            working_dir: None,
            depends_on: Vec::new(),
            restart: RestartPolicy::default(),
            health: None,
            stop_timeout: default_stop_timeout(),
            enabled: true,
        }
    }

    /// A spec running the program at `path`.
    pub fn command(path: impl Into<String>) -> Self {
        Self::new(Program::Command(path.into()))
    }

    /// Sets the arguments.
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Adds dependencies.
    pub fn with_depends_on<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.depends_on.extend(ids.into_iter().map(Into::into));
        self
    }

    /// Sets the restart policy.
    pub fn with_restart(mut self, restart: RestartPolicy) -> Self {
        self.restart = restart;
        self
    }

    /// Sets the health check.
    pub fn with_health(mut self, health: HealthCheck) -> Self {
        self.health = Some(health);
        self
    }

    /// Sets the stop timeout.
    pub fn with_stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// Adds an environment variable.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.environment.insert(key.into(), value.into());
        self
    }

    /// Checks what a process would be given — program, arguments, environment and working
    /// directory — against what the OS can carry: no NUL byte anywhere (C strings end there),
    /// and environment names that are not empty and hold no `=` (it ends a name: `A=B` with
    /// value `C` would reach the process as `A` = `B=C`). Returns what is wrong, naming the
    /// field.
    ///
    /// ```
    /// use cosi_node::services::ServiceSpec;
    /// let spec = ServiceSpec::command("/bin/echo").with_args(["ok", "a\0b"]);
    /// assert_eq!(
    ///     spec.check_process_fields().unwrap_err(),
    ///     "args[1] contains a NUL byte, which a process cannot be given"
    /// );
    /// assert!(ServiceSpec::command("/bin/echo").with_env("A", "1").check_process_fields().is_ok());
    /// ```
    pub fn check_process_fields(&self) -> Result<(), String> {
        if let Program::Command(command) = &self.program {
            if command.contains('\0') {
                return Err(format!("program.command {NUL}"));
            }
        }
        if let Some(i) = self.args.iter().position(|a| a.contains('\0')) {
            return Err(format!("args[{i}] {NUL}"));
        }
        for (name, value) in &self.environment {
            if name.is_empty() {
                return Err("environment name \"\" is empty".to_string());
            }
            if name.contains('=') {
                return Err(format!(
                    "environment name {name:?} contains '=', which ends a variable's name"
                ));
            }
            if name.contains('\0') {
                return Err(format!("environment name {name:?} {NUL}"));
            }
            if value.contains('\0') {
                return Err(format!("environment.{name} {NUL}"));
            }
        }
        if self.working_dir.as_ref().is_some_and(|d| d.contains('\0')) {
            return Err(format!("workingDir {NUL}"));
        }
        Ok(())
    }

    /// Checks the health check against what the supervisor can run: a period and a timeout
    /// longer than zero (a zero period probes in a busy loop, a zero timeout fails every
    /// probe), and an exec probe with no NUL byte. Returns what is wrong, naming the field.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cosi_node::services::{HealthCheck, Probe, ServiceSpec};
    /// let mut check = HealthCheck::new(Probe::Tcp { address: "127.0.0.1:80".into() });
    /// check.period = Duration::ZERO;
    /// let spec = ServiceSpec::command("/bin/db").with_health(check);
    /// assert_eq!(spec.check_health().unwrap_err(), "health.period must be longer than zero");
    /// ```
    pub fn check_health(&self) -> Result<(), String> {
        let Some(check) = &self.health else {
            return Ok(());
        };
        for (name, value) in [("period", check.period), ("timeout", check.timeout)] {
            if value.is_zero() {
                return Err(format!("health.{name} must be longer than zero"));
            }
        }
        if let Probe::Exec { command, args } = &check.probe {
            if command.contains('\0') {
                return Err(format!("health.probe.exec.command {NUL}"));
            }
            if let Some(i) = args.iter().position(|a| a.contains('\0')) {
                return Err(format!("health.probe.exec.args[{i}] {NUL}"));
            }
        }
        Ok(())
    }

    /// Whether going from `self` to `next` needs the process to be started again: the
    /// program, its arguments, environment or working directory changed, or the service was
    /// enabled or disabled. Everything else (dependencies, restart policy, health check, stop
    /// timeout) applies to the running process in place.
    pub fn needs_restart_for(&self, next: &ServiceSpec) -> bool {
        self.program != next.program
            || self.args != next.args
            || self.environment != next.environment
            || self.working_dir != next.working_dir
            || self.enabled != next.enabled
    }
}

impl ResourceSpec for ServiceSpec {
    const TYPE: &'static str = "ServiceSpecs.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::RUNTIME;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["svcspec"])
            .with_print_column("Program", ".program")
            .with_print_column("Depends On", ".dependsOn")
            .with_print_column("Restart", ".restart")
    }
}

/// Durations as humantime text (`500ms`, `10s`, `1m 30s`) in YAML and JSON.
pub(crate) mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text)
            .map_err(|e| serde::de::Error::custom(format!("duration {text:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_through_yaml_with_defaults_filled() {
        let yaml = "program:\n  image: ghcr.io/x/kubelet:v1\nhealth:\n  probe:\n    http:\n      url: http://127.0.0.1:10248/healthz\n";
        let spec: ServiceSpec = serde_yaml::from_str(yaml).unwrap();
        let health = spec.health.clone().unwrap();
        assert_eq!(health.period, Duration::from_secs(5));
        assert_eq!(health.timeout, Duration::from_millis(500));
        assert_eq!(spec.stop_timeout, Duration::from_secs(10));
        assert!(spec.enabled);
        let again: ServiceSpec =
            serde_yaml::from_str(&serde_yaml::to_string(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
    }

    fn decode(spec: &str, origin: cosi_core::spec_decode::Origin) -> cosi_core::Result<()> {
        let mut registry = cosi_core::Registry::new();
        registry.register::<ServiceSpec>().unwrap();
        let metadata = cosi_core::Metadata::new(ServiceSpec::kind().pointer("db"));
        let spec = serde_yaml::from_str(spec).unwrap();
        registry.decode_spec(metadata, spec, origin).map(|_| ())
    }

    #[test]
    fn an_unknown_spec_field_from_outside_is_rejected_with_its_path() {
        let err = decode(
            "program:\n  command: x\nhealth:\n  probe:\n    tcp: {address: 'a:1', tls: true}\n",
            cosi_core::spec_decode::Origin::Input,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("spec.health.probe.tcp.tls"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_spec_field_read_back_is_skipped() {
        // A newer version's record: an older reader keeps what it knows.
        decode(
            "program:\n  command: x\nrestartJitter: 1s\n",
            cosi_core::spec_decode::Origin::ReadBack,
        )
        .unwrap();
    }

    #[test]
    fn only_process_fields_need_a_restart() {
        let base = ServiceSpec::command("/bin/x").with_args(["a"]);
        let policy = base.clone().with_restart(RestartPolicy::Never);
        assert!(!base.needs_restart_for(&policy));
        let deps = base.clone().with_depends_on(["db"]);
        assert!(!base.needs_restart_for(&deps));
        let args = base.clone().with_args(["b"]);
        assert!(base.needs_restart_for(&args));
        let env = base.clone().with_env("A", "1");
        assert!(base.needs_restart_for(&env));
    }
}
