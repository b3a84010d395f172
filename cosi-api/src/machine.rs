//! The node side of the machine service: the [`Machine`] trait a node implements, and the
//! values that cross it. This crate knows no node types: the configuration travels as YAML
//! bytes, services are ids with states, logs are lines.
//!
//! Errors are [`cosi_core::Error`]s, so they reach the client through the one error mapping
//! ([`crate::status`]): a configuration that does not validate is an
//! [`Error::InvalidArgument`](cosi_core::Error::InvalidArgument) naming the field, an unknown
//! service a [`NotFound`](cosi_core::Error::NotFound), a stale `expected_version` a
//! [`VersionConflict`](cosi_core::Error::VersionConflict).

use std::pin::Pin;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use cosi_core::Result;
use futures::Stream;

/// How a configuration is applied.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum ApplyMode {
    /// The node decides (without a reboot when the change allows it).
    #[default]
    Auto,
    /// Apply now, refuse if a reboot would be needed.
    NoReboot,
    /// Apply and reboot.
    Reboot,
    /// Store it for the next boot.
    Staged,
    /// Apply now, revert after the try timeout unless another apply confirms it.
    Try,
}

impl ApplyMode {
    /// The wire form.
    pub(crate) fn to_wire(self) -> crate::proto::machine::ApplyMode {
        use crate::proto::machine::ApplyMode as Wire;
        match self {
            ApplyMode::Auto => Wire::Auto,
            ApplyMode::NoReboot => Wire::NoReboot,
            ApplyMode::Reboot => Wire::Reboot,
            ApplyMode::Staged => Wire::Staged,
            ApplyMode::Try => Wire::Try,
        }
    }

    /// Back from the wire; `None` for a value this side does not know.
    pub(crate) fn from_wire(mode: i32) -> Option<Self> {
        use crate::proto::machine::ApplyMode as Wire;
        Some(match Wire::try_from(mode).ok()? {
            Wire::Auto => ApplyMode::Auto,
            Wire::NoReboot => ApplyMode::NoReboot,
            Wire::Reboot => ApplyMode::Reboot,
            Wire::Staged => ApplyMode::Staged,
            Wire::Try => ApplyMode::Try,
        })
    }
}

/// An apply-configuration request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyRequest {
    /// The configuration document(s), YAML. Empty when [`patches`](Self::patches) are given.
    pub data: Vec<u8>,
    /// Patches the node applies in order to its current configuration (strategic-merge YAML or
    /// RFC 6902 JSON, detected from the content), instead of a whole configuration in `data`.
    /// Giving both is an invalid argument.
    pub patches: Vec<Vec<u8>>,
    /// The requested mode.
    pub mode: ApplyMode,
    /// Validate and diff only; change nothing (not even a pending try-mode rollback).
    pub dry_run: bool,
    /// Try mode: when to revert; `None` for the node's default.
    pub try_timeout: Option<Duration>,
    /// Apply only if the stored configuration is at this version.
    pub expected_version: Option<u64>,
    /// Who asks, as the server authenticated them (a certificate's common name and role, such
    /// as `admin@ops (os:admin)`), for the node's configuration history. The server fills it
    /// in; a value a client sets is not sent.
    pub actor: String,
}

/// What an apply did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// The mode the node resolved (never [`ApplyMode::Auto`]).
    pub mode: ApplyMode,
    /// A human-readable account of what happened (or would happen, on a dry run).
    pub details: String,
    /// Non-fatal findings of validation.
    pub warnings: Vec<String>,
    /// Unified diff from the stored configuration to the applied one.
    pub diff: String,
    /// The configuration version after the apply.
    pub version: u64,
}

/// A service's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceHealth {
    /// No health check has reported yet.
    pub unknown: bool,
    /// The last check passed.
    pub healthy: bool,
    /// The last check's message.
    pub last_message: String,
    /// When health last changed.
    pub last_change: SystemTime,
}

/// One event in a service's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEvent {
    /// What happened.
    pub message: String,
    /// The state the service entered.
    pub state: String,
    /// When.
    pub time: SystemTime,
}

/// A service as the node reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceStatus {
    /// The service id.
    pub id: String,
    /// Its state (`Running`, `Finished`, ...).
    pub state: String,
    /// Its health.
    pub health: ServiceHealth,
    /// Its recent events, oldest first.
    pub events: Vec<ServiceEvent>,
}

/// A service management action.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ServiceAction {
    /// Start it.
    Start,
    /// Stop it.
    Stop,
    /// Stop and start it.
    Restart,
}

/// A logs request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRequest {
    /// The service.
    pub service: String,
    /// Lines from the end to start with; `None` from the beginning.
    pub tail: Option<usize>,
    /// Keep the stream open for new lines.
    pub follow: bool,
}

/// Log lines (each ending in `\n`); ends unless following.
pub type LogStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>>> + Send>>;

/// Which past events an events stream starts with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EventTail {
    /// None: only new events.
    None,
    /// The last `n`.
    Last(usize),
    /// Every event the node keeps.
    All,
}

/// What a machine event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MachineEventPayload {
    /// A service changed state.
    Service {
        /// The service.
        service: String,
        /// Its new state.
        state: String,
        /// Why.
        message: String,
    },
    /// The configuration changed.
    Config {
        /// Its new version.
        version: u64,
        /// How it was applied.
        mode: ApplyMode,
        /// What happened.
        message: String,
    },
}

/// One machine event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineEvent {
    /// A unique, increasing id.
    pub id: String,
    /// When.
    pub time: SystemTime,
    /// What.
    pub payload: MachineEventPayload,
}

/// Machine events, in order; never ends by itself.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<MachineEvent>> + Send>>;

/// The node's build.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionInfo {
    /// Release tag.
    pub tag: String,
    /// Source revision.
    pub sha: String,
    /// Build time.
    pub built: String,
    /// Compiler version.
    pub rust_version: String,
    /// CPU architecture.
    pub arch: String,
    /// Operating system.
    pub os: String,
}

/// What a node implements to serve the machine service.
#[async_trait]
pub trait Machine: Send + Sync + 'static {
    /// Validates and applies a configuration.
    async fn apply_configuration(&self, request: ApplyRequest) -> Result<ApplyOutcome>;
    /// Every service, by id.
    async fn services(&self) -> Result<Vec<ServiceStatus>>;
    /// Starts, stops or restarts a service; returns a short response text.
    async fn service_action(&self, id: &str, action: ServiceAction) -> Result<String>;
    /// A service's log lines.
    async fn logs(&self, request: LogRequest) -> Result<LogStream>;
    /// Machine events.
    async fn events(&self, tail: EventTail) -> Result<EventStream>;
    /// The node's build.
    async fn version(&self) -> Result<VersionInfo>;
}
