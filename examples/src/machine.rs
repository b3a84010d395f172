//! [`NodeMachine`]: the node behind the API's machine service — where `cosi-api` (which knows
//! no node types) meets `cosi-node` (which knows no API). It holds a [`NodeHandle`], so every
//! call reaches the runtime that runs *now*: after a restart in place the same adapter serves
//! the new runtime.
//!
//! How each call maps, and its errors (all [`cosi_core::Error`]s, so the API's one mapping
//! turns them into gRPC codes):
//!
//! - **apply**: a whole config (`data`) or `patches`, to the runtime's
//!   [`ConfigApplier`](cosi_node::config::ConfigApplier) with the caller the server
//!   authenticated as the history's actor. A rejected config is an invalid argument naming
//!   every field path; a stale expected version is a version conflict; another apply in
//!   progress, or a runtime restarting, is a retryable unavailable. The returned version is
//!   the one the apply made current: the persisted config's for `staged` and `reboot` (the
//!   active config follows at the next start), the active config's otherwise.
//! - **services**: the supervisor's list, with health and the event ring; **start / stop /
//!   restart** return at once (the services view shows the progress); an unknown service is
//!   not found, named as its `ServiceStatus`.
//! - **logs**: the last `tail` lines (every line kept without a tail), then with `follow`
//!   each new line. A reader slower than the service never slows it down: lines it fell too
//!   far behind on are skipped and it reads one marker line saying how many
//!   ([`skipped_line`]). A follow ends when the service goes — also when a restart in place
//!   stops it; the client follows again.
//! - **events**: the node's event log (service state changes of every runtime, and config
//!   changes from the config history, including the rollbacks and starts the node did by
//!   itself), the newest `tail` first; a stream goes on across a restart in place. A reader
//!   that falls more than the log's buffer behind gets a retryable error ending the stream
//!   (read again with a tail) rather than a silent gap.
//! - **version**: this crate's version, the git revision and commit time it was built from
//!   (empty outside a git checkout), the compiler's version, the CPU and OS.

use std::time::SystemTime;

use async_trait::async_trait;
use cosi_api::machine::{
    ApplyMode, ApplyOutcome, ApplyRequest, EventStream, EventTail, LogRequest, LogStream, Machine,
    MachineEvent, MachineEventPayload, ServiceAction, ServiceEvent, ServiceHealth, ServiceStatus,
    VersionInfo,
};
use cosi_core::{Error, ResourceSpec, Result, Version};
use cosi_node::config::{self, ApplyInput};
use cosi_node::node::{NodeEventItem, NodeEventKind, NodeHandle, Runtime};
use cosi_node::services::{self, Health, LogItem, ServiceError, ServiceInfo};
use futures::StreamExt;

/// The node's build, as `version` reports it.
pub fn build_version() -> VersionInfo {
    VersionInfo {
        tag: format!("v{}", env!("CARGO_PKG_VERSION")),
        sha: env!("COSI_GIT_SHA").to_string(),
        built: env!("COSI_GIT_COMMITTED").to_string(),
        rust_version: env!("COSI_RUSTC_VERSION").to_string(),
        arch: std::env::consts::ARCH.to_string(),
        os: std::env::consts::OS.to_string(),
    }
}

/// The line a log reader reads where it skipped `n` lines.
///
/// ```
/// assert_eq!(
///     examples::machine::skipped_line(3),
///     "[3 lines skipped: the reader fell behind the service]\n"
/// );
/// ```
pub fn skipped_line(n: u64) -> String {
    format!("[{n} lines skipped: the reader fell behind the service]\n")
}

/// The node behind the machine service. See the module docs.
#[derive(Clone, Debug)]
pub struct NodeMachine {
    node: NodeHandle,
}

impl NodeMachine {
    /// An adapter over `node`.
    pub fn new(node: NodeHandle) -> Self {
        NodeMachine { node }
    }

    fn runtime(&self) -> Result<std::sync::Arc<Runtime>> {
        self.node.runtime().ok_or_else(|| Error::Backend {
            subject: "node".into(),
            message: "the node runtime is restarting or stopping; try again once it runs".into(),
            retryable: true,
            source: None,
        })
    }
}

fn to_node_mode(mode: ApplyMode) -> config::ApplyMode {
    match mode {
        ApplyMode::Auto => config::ApplyMode::Auto,
        ApplyMode::NoReboot => config::ApplyMode::NoReboot,
        ApplyMode::Reboot => config::ApplyMode::Reboot,
        ApplyMode::Staged => config::ApplyMode::Staged,
        ApplyMode::Try => config::ApplyMode::Try,
    }
}

fn to_api_mode(mode: config::ApplyMode) -> ApplyMode {
    match mode {
        config::ApplyMode::Auto => ApplyMode::Auto,
        config::ApplyMode::NoReboot => ApplyMode::NoReboot,
        config::ApplyMode::Reboot => ApplyMode::Reboot,
        config::ApplyMode::Staged => ApplyMode::Staged,
        config::ApplyMode::Try => ApplyMode::Try,
    }
}

/// The API's mode for a history entry's mode: the node's own `rollback` undoes a try, and its
/// `start` makes the persisted config active as a reboot does.
fn history_mode(mode: &str) -> ApplyMode {
    match mode {
        "no-reboot" => ApplyMode::NoReboot,
        "reboot" | "start" => ApplyMode::Reboot,
        "staged" => ApplyMode::Staged,
        "try" | "rollback" => ApplyMode::Try,
        _ => ApplyMode::Auto,
    }
}

fn service_error(id: &str, error: ServiceError) -> Error {
    match error {
        ServiceError::Unknown(_) => Error::NotFound {
            pointer: services::ServiceStatus::kind().pointer(id),
        },
        ServiceError::InvalidId { .. } => Error::invalid(
            services::ServiceStatus::kind().pointer(id).to_string(),
            "id",
            error.to_string(),
        ),
        ServiceError::Closed | ServiceError::StateDir { .. } => Error::Backend {
            subject: format!("service {id:?}"),
            message: error.to_string(),
            retryable: true,
            source: None,
        },
    }
}

fn service_status(info: ServiceInfo) -> ServiceStatus {
    // When the health last changed: the oldest event of the newest run of events that all
    // carry the current health.
    let last_change = info
        .events
        .iter()
        .rev()
        .take_while(|e| e.health == info.health)
        .last()
        .map_or(SystemTime::UNIX_EPOCH, |e| e.time);
    ServiceStatus {
        health: ServiceHealth {
            unknown: info.health == Health::Unknown,
            healthy: info.health == Health::Ok,
            last_message: info.health_message.clone().unwrap_or_default(),
            last_change,
        },
        events: info
            .events
            .iter()
            .map(|e| ServiceEvent {
                message: e.message.clone(),
                state: e.state.to_string(),
                time: e.time,
            })
            .collect(),
        state: info.state.to_string(),
        id: info.id,
    }
}

#[async_trait]
impl Machine for NodeMachine {
    async fn apply_configuration(&self, request: ApplyRequest) -> Result<ApplyOutcome> {
        let runtime = self.runtime()?;
        let input = if request.patches.is_empty() {
            ApplyInput::Config(request.data)
        } else {
            ApplyInput::Patches(request.patches)
        };
        let outcome = runtime
            .applier()
            .apply(config::ApplyRequest {
                input,
                mode: to_node_mode(request.mode),
                dry_run: request.dry_run,
                try_timeout: request.try_timeout,
                expected_version: request.expected_version.map(Version::new),
                actor: request.actor,
            })
            .await
            .map_err(|e| e.to_state_error())?;
        let version = match outcome.mode {
            config::ApplyMode::Staged | config::ApplyMode::Reboot => outcome.persisted_version,
            _ => outcome.active_version,
        };
        Ok(ApplyOutcome {
            mode: to_api_mode(outcome.mode),
            details: outcome.details,
            warnings: outcome.warnings.iter().map(ToString::to_string).collect(),
            diff: outcome.diff.unified,
            version: version.map_or(0, |v| v.get()),
        })
    }

    async fn services(&self) -> Result<Vec<ServiceStatus>> {
        let runtime = self.runtime()?;
        Ok(runtime
            .supervisor()
            .list()
            .into_iter()
            .map(service_status)
            .collect())
    }

    async fn service_action(&self, id: &str, action: ServiceAction) -> Result<String> {
        let runtime = self.runtime()?;
        let supervisor = runtime.supervisor();
        let (result, done) = match action {
            ServiceAction::Start => (supervisor.start(id), "started"),
            ServiceAction::Stop => (supervisor.stop(id), "stopped"),
            ServiceAction::Restart => (supervisor.restart(id), "restarted"),
        };
        result.map_err(|e| service_error(id, e))?;
        Ok(format!("Service {id:?} {done}"))
    }

    async fn logs(&self, request: LogRequest) -> Result<LogStream> {
        let runtime = self.runtime()?;
        let reader = runtime
            .supervisor()
            .logs(
                &request.service,
                request.tail.unwrap_or(usize::MAX),
                request.follow,
            )
            .map_err(|e| service_error(&request.service, e))?;
        Ok(reader
            .into_stream()
            .map(|item| {
                Ok(match item {
                    LogItem::Line(line) => format!("{}\n", line.text).into_bytes(),
                    LogItem::Skipped(n) => skipped_line(n).into_bytes(),
                })
            })
            .boxed())
    }

    async fn events(&self, tail: EventTail) -> Result<EventStream> {
        let tail = match tail {
            EventTail::None => 0,
            EventTail::Last(n) => n,
            EventTail::All => usize::MAX,
        };
        let events = self.node.events(tail).into_stream();
        Ok(events
            .scan(false, |ended, item| {
                if *ended {
                    return futures::future::ready(None);
                }
                let next = match item {
                    NodeEventItem::Event(event) => Ok(machine_event(&event)),
                    NodeEventItem::Missed(n) => {
                        *ended = true;
                        Err(Error::Backend {
                            subject: "node events".into(),
                            message: format!(
                                "the reader fell {n} events behind; read again with a tail"
                            ),
                            retryable: true,
                            source: None,
                        })
                    }
                };
                futures::future::ready(Some(next))
            })
            .boxed())
    }

    async fn version(&self) -> Result<VersionInfo> {
        Ok(build_version())
    }
}

fn machine_event(event: &cosi_node::node::NodeEvent) -> MachineEvent {
    let payload = match &event.kind {
        NodeEventKind::Service {
            service,
            state,
            message,
        } => MachineEventPayload::Service {
            service: service.clone(),
            state: state.to_string(),
            message: message.clone(),
        },
        NodeEventKind::Config {
            mode,
            actor,
            version,
            summary,
        } => MachineEventPayload::Config {
            version: version.unwrap_or(0),
            mode: history_mode(mode),
            message: format!("{mode} by {actor}: {summary}"),
        },
    };
    MachineEvent {
        // Zero-padded, so the ids sort as they were made.
        id: format!("{:012}", event.id),
        time: event.time,
        payload,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_history_mode_maps_to_an_api_mode() {
        let modes = [
            ("no-reboot", ApplyMode::NoReboot),
            ("reboot", ApplyMode::Reboot),
            ("start", ApplyMode::Reboot),
            ("staged", ApplyMode::Staged),
            ("try", ApplyMode::Try),
            ("rollback", ApplyMode::Try),
        ];
        for (history, api) in modes {
            assert_eq!(history_mode(history), api, "{history}");
        }
    }

    #[test]
    fn modes_map_both_ways() {
        for mode in config::ApplyMode::ALL {
            assert_eq!(to_node_mode(to_api_mode(mode)), mode);
        }
    }

    #[test]
    fn an_unknown_service_is_not_found_as_its_status() {
        let error = service_error("nope", ServiceError::Unknown("nope".into()));
        assert_eq!(
            error.to_string(),
            "runtime/ServiceStatuses.runtime.cosi.dev/nope: not found"
        );
    }
}
