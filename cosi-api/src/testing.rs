//! Test support (feature `testing`): an in-memory node behind the machine service, with real
//! behaviour: a configuration that must parse and carry a hostname, versioned, with dry runs and
//! optimistic concurrency; services with states, restarts, events, health and logs
//! (followable); a machine event log. Not for production: a test fixture other crates' tests
//! (the CLI's) drive over the wire as this crate's own tests do.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use crate::machine::{
    ApplyMode, ApplyOutcome, ApplyRequest, EventStream, EventTail, LogRequest, LogStream, Machine,
    MachineEvent, MachineEventPayload, ServiceAction, ServiceEvent, ServiceHealth, ServiceStatus,
    VersionInfo,
};
use async_trait::async_trait;
use cosi_core::{Error, Pointer, Result, Version};
use futures::StreamExt;
use tokio::sync::broadcast;

/// The type the node keeps its configuration as.
pub const MACHINE_CONFIG_TYPE: &str = "MachineConfigs.config.cosi.dev";

#[derive(Debug)]
struct Service {
    state: String,
    restarts: u32,
    log: Vec<String>,
    health: ServiceHealth,
    events: Vec<ServiceEvent>,
}

impl Service {
    fn new(state: &str, log: Vec<String>) -> Self {
        Service {
            state: state.to_string(),
            restarts: 0,
            log,
            health: ServiceHealth {
                unknown: false,
                healthy: state == "Running",
                last_message: String::new(),
                last_change: SystemTime::UNIX_EPOCH,
            },
            events: Vec::new(),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    config: Option<String>,
    version: u64,
    services: BTreeMap<String, Service>,
    events: Vec<MachineEvent>,
    last_apply: Option<ApplyRequest>,
}

/// The in-memory node.
pub struct TestMachine {
    inner: Mutex<Inner>,
    lines: broadcast::Sender<(String, String)>,
    events: broadcast::Sender<MachineEvent>,
}

/// What the tests compare to show that nothing changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSnapshot {
    /// The configuration text.
    pub config: Option<String>,
    /// Its version (0: none yet).
    pub version: u64,
    /// Every service: id, state, restarts.
    pub services: Vec<(String, String, u32)>,
}

impl Default for TestMachine {
    fn default() -> Self {
        Self::new()
    }
}

impl TestMachine {
    /// The last apply request that reached the node, as the node received it.
    pub fn last_apply(&self) -> Option<ApplyRequest> {
        self.inner.lock().unwrap().last_apply.clone()
    }

    /// A node with services `etcd` (Running) and `kubelet` (Stopped), no configuration.
    pub fn new() -> Self {
        let mut inner = Inner::default();
        for (id, state) in [("etcd", "Running"), ("kubelet", "Stopped")] {
            inner.services.insert(
                id.to_string(),
                Service::new(state, (1..=5).map(|i| format!("{id} line {i}\n")).collect()),
            );
        }
        TestMachine {
            inner: Mutex::new(inner),
            lines: broadcast::channel(64).0,
            events: broadcast::channel(64).0,
        }
    }

    /// The configuration and the services as they are now.
    pub fn snapshot(&self) -> MachineSnapshot {
        let inner = self.inner.lock().unwrap();
        MachineSnapshot {
            config: inner.config.clone(),
            version: inner.version,
            services: inner
                .services
                .iter()
                .map(|(id, s)| (id.clone(), s.state.clone(), s.restarts))
                .collect(),
        }
    }

    /// Adds a service (or replaces one with the same id): its state, health and events (oldest
    /// first), with an empty log.
    pub fn set_service(&self, status: ServiceStatus) {
        let mut inner = self.inner.lock().unwrap();
        let mut service = Service::new(&status.state, Vec::new());
        service.health = status.health;
        service.events = status.events;
        inner.services.insert(status.id, service);
    }

    /// Publishes a machine event (to the log and to followers).
    pub fn publish_event(&self, payload: MachineEventPayload) {
        let mut inner = self.inner.lock().unwrap();
        self.publish(&mut inner, payload);
    }

    /// Appends a log line to a service (and to followers).
    pub fn log(&self, service: &str, line: &str) {
        let mut inner = self.inner.lock().unwrap();
        let line = format!("{line}\n");
        if let Some(s) = inner.services.get_mut(service) {
            s.log.push(line.clone());
        }
        drop(inner);
        let _ = self.lines.send((service.to_string(), line));
    }

    fn publish(&self, inner: &mut Inner, payload: MachineEventPayload) {
        let event = MachineEvent {
            id: format!("{:08}", inner.events.len() + 1),
            time: SystemTime::now(),
            payload,
        };
        inner.events.push(event.clone());
        let _ = self.events.send(event);
    }
}

fn config_pointer() -> Pointer {
    Pointer::new("config", MACHINE_CONFIG_TYPE, "v1alpha1")
}

fn service_pointer(id: &str) -> Pointer {
    Pointer::new("runtime", "Services.runtime.cosi.dev", id)
}

fn validate(data: &[u8]) -> Result<String> {
    let text = std::str::from_utf8(data).map_err(|e| {
        Error::invalid(
            config_pointer().to_string(),
            "data",
            format!("not UTF-8: {e}"),
        )
    })?;
    let doc: serde_json::Value = crate::yaml::from_str(text).map_err(|e| {
        Error::invalid(
            config_pointer().to_string(),
            "data",
            format!("not YAML: {e}"),
        )
    })?;
    match doc.get("hostname") {
        Some(serde_json::Value::String(h)) if !h.is_empty() => Ok(text.to_string()),
        _ => Err(Error::invalid(
            config_pointer().to_string(),
            "hostname",
            "required, a non-empty string",
        )),
    }
}

fn diff(old: Option<&str>, new: &str) -> String {
    let old: Vec<&str> = old.map(|o| o.lines().collect()).unwrap_or_default();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut out = String::from("--- a\n+++ b\n");
    for line in &old {
        if !new_lines.contains(line) {
            out.push_str(&format!("-{line}\n"));
        }
    }
    for line in &new_lines {
        if !old.contains(line) {
            out.push_str(&format!("+{line}\n"));
        }
    }
    out
}

#[async_trait]
impl Machine for TestMachine {
    async fn apply_configuration(&self, request: ApplyRequest) -> Result<ApplyOutcome> {
        // This fixture's patch is a whole replacement: the last patch is the new text.
        let text = validate(request.patches.last().unwrap_or(&request.data))?;
        let mut inner = self.inner.lock().unwrap();
        inner.last_apply = Some(request.clone());
        if let Some(expected) = request.expected_version {
            if expected != inner.version {
                return Err(Error::VersionConflict {
                    pointer: config_pointer(),
                    expected: Version::new(expected),
                    actual: Version::new(inner.version),
                });
            }
        }
        let mode = match request.mode {
            ApplyMode::Auto => ApplyMode::NoReboot,
            other => other,
        };
        let diff = diff(inner.config.as_deref(), &text);
        if request.dry_run {
            return Ok(ApplyOutcome {
                mode,
                details: "Dry run summary: applied without a reboot (skipped in dry-run)".into(),
                warnings: vec![],
                diff,
                version: inner.version,
            });
        }
        inner.config = Some(text);
        inner.version += 1;
        let version = inner.version;
        self.publish(
            &mut inner,
            MachineEventPayload::Config {
                version,
                mode,
                message: "applied".into(),
            },
        );
        Ok(ApplyOutcome {
            mode,
            details: "Applied configuration without a reboot".into(),
            warnings: vec![],
            diff,
            version,
        })
    }

    async fn services(&self) -> Result<Vec<ServiceStatus>> {
        let inner = self.inner.lock().unwrap();
        Ok(inner
            .services
            .iter()
            .map(|(id, s)| ServiceStatus {
                id: id.clone(),
                state: s.state.clone(),
                health: s.health.clone(),
                events: s.events.clone(),
            })
            .collect())
    }

    async fn service_action(&self, id: &str, action: ServiceAction) -> Result<String> {
        let mut inner = self.inner.lock().unwrap();
        let service = inner.services.get_mut(id).ok_or_else(|| Error::NotFound {
            pointer: service_pointer(id),
        })?;
        let state = match action {
            ServiceAction::Start | ServiceAction::Restart => "Running",
            ServiceAction::Stop => "Stopped",
        };
        if action == ServiceAction::Restart {
            service.restarts += 1;
        }
        service.state = state.to_string();
        service.health.healthy = state == "Running";
        service.health.last_change = SystemTime::now();
        service.events.push(ServiceEvent {
            message: format!("{action:?} requested over the API"),
            state: state.to_string(),
            time: SystemTime::now(),
        });
        self.publish(
            &mut inner,
            MachineEventPayload::Service {
                service: id.to_string(),
                state: state.to_string(),
                message: format!("{action:?}"),
            },
        );
        Ok(format!("Service {id:?} {action:?}"))
    }

    async fn logs(&self, request: LogRequest) -> Result<LogStream> {
        let inner = self.inner.lock().unwrap();
        let service = inner
            .services
            .get(&request.service)
            .ok_or_else(|| Error::NotFound {
                pointer: service_pointer(&request.service),
            })?;
        let skip = request
            .tail
            .map_or(0, |t| service.log.len().saturating_sub(t));
        let past: Vec<Result<Vec<u8>>> = service.log[skip..]
            .iter()
            .map(|l| Ok(l.clone().into_bytes()))
            .collect();
        let past = futures::stream::iter(past);
        if !request.follow {
            return Ok(past.boxed());
        }
        let name = request.service.clone();
        let live = futures::stream::unfold(self.lines.subscribe(), move |mut rx| {
            let name = name.clone();
            async move {
                loop {
                    match rx.recv().await {
                        Ok((service, line)) if service == name => {
                            return Some((Ok(line.into_bytes()), rx))
                        }
                        Ok(_) => continue,
                        Err(_) => return None,
                    }
                }
            }
        });
        Ok(past.chain(live).boxed())
    }

    async fn events(&self, tail: EventTail) -> Result<EventStream> {
        let inner = self.inner.lock().unwrap();
        let past: Vec<MachineEvent> = match tail {
            EventTail::None => vec![],
            EventTail::All => inner.events.clone(),
            EventTail::Last(n) => inner.events[inner.events.len().saturating_sub(n)..].to_vec(),
        };
        let live = futures::stream::unfold(self.events.subscribe(), |mut rx| async move {
            rx.recv().await.ok().map(|e| (Ok(e), rx))
        });
        Ok(futures::stream::iter(past.into_iter().map(Ok))
            .chain(live)
            .boxed())
    }

    async fn version(&self) -> Result<VersionInfo> {
        Ok(VersionInfo {
            tag: "v0.1.0".into(),
            sha: "abc123".into(),
            built: "2026-12-02".into(),
            rust_version: "1.90".into(),
            arch: std::env::consts::ARCH.into(),
            os: std::env::consts::OS.into(),
        })
    }
}
