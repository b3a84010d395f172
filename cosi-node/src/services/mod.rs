//! Services: the processes the node runs, supervised like an init system would, and shown as
//! resources (DESIGN §7).
//!
//! On a node with no shell, the services view and a service's logs are how an operator finds
//! out why the node is unwell. This module owns the service resources, the supervisor of
//! their processes, and the controllers between the two. It must not touch the machine config
//! beyond reading its derived resources (that family lives in `config`).
//!
//! ## A tour
//!
//! - [`ServiceSpec`] (`ServiceSpecs.runtime.cosi.dev`, namespace `runtime`): what to run —
//!   a [`Program`] (a command, or an image mapped to a program by the [`ImageResolver`]),
//!   arguments, environment, working directory, dependencies, [`RestartPolicy`], a
//!   [`HealthCheck`] ([`Probe`]: exec, TCP or HTTP GET) and a stop timeout. Specs are derived
//!   from the machine config: the built-in `kubelet` from the config's `KubeletSpec` by
//!   [`kubelet_service`], one per `ServiceConfig` document by [`ServiceConfigController`]
//!   (both registered by [`register_config_controllers`]).
//! - [`Supervisor`]: a plain async component with one runner task per service. States
//!   ([`ServiceState`]) `Starting → Waiting → Preparing → Running → Stopping → Finished |
//!   Failed`, or `Skipped`; dependencies, restarts with backoff, health, stop with SIGTERM then
//!   SIGKILL to the process group; a ring of the last [`EVENT_RING`] events per service; logs
//!   in a bounded ring, a rotated file and a follow stream ([`LogReader`]). Its module docs
//!   list what it guarantees and the numbers.
//! - The operator's surface, on [`Supervisor`]: [`Supervisor::list`] (state, health and last
//!   event per service), [`Supervisor::start`] / [`Supervisor::stop`] /
//!   [`Supervisor::restart`] (an unknown service is [`ServiceError::Unknown`]),
//!   [`Supervisor::logs`] (tail, then follow) and [`Supervisor::events`] (a stream of every
//!   service's events). Readers are bounded: a slow one skips, and is told how much.
//! - No orphans, no zombies: [`ledger`] records every process group in the state directory
//!   so the next supervisor kills what a SIGKILLed daemon left behind; the [`Reaper`] makes
//!   the daemon a child subreaper and reaps what a service's main process left when it
//!   exited.
//! - Resources: [`ServiceStatus`] per service and [`Service`] per running service, both in
//!   `runtime`, written by [`ServiceStatusController`]; [`ServiceSpecController`] applies the
//!   specs to the supervisor.
//!
//! ## Where the resources live, and why
//!
//! All three types are in namespace `runtime` (what runs on the node). `ServiceSpec` is there
//! too, not in `config`: it is not a piece of the config but the supervisor's input, merged from
//! several sources (the built-in kubelet from `machine.kubelet`, one per `ServiceConfig`
//! document), the same way Talos keeps its service specs beside the runtime state. Register
//! them with [`register_types`].
//!
//! ## Example
//!
//! ```
//! use cosi_node::services::{EventItem, Supervisor, SupervisorOptions, ServiceSpec, ServiceState};
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let supervisor = Supervisor::new(SupervisorOptions::default()).unwrap();
//! let mut events = supervisor.events(0);
//! supervisor.apply("db", ServiceSpec::command("/bin/sleep").with_args(["600"])).unwrap();
//! supervisor.apply("app", ServiceSpec::command("/bin/sleep").with_args(["600"]).with_depends_on(["db"])).unwrap();
//! // "app" runs only once "db" does.
//! let mut running = Vec::new();
//! while running.len() < 2 {
//!     if let Some(EventItem::Event(e)) = events.next().await {
//!         if e.event.state == ServiceState::Running {
//!             running.push(e.service);
//!         }
//!     }
//! }
//! assert_eq!(running, ["db", "app"]);
//! supervisor.shutdown().await; // "app" stops before "db"
//! # });
//! ```

mod config;
mod controllers;
mod events;
mod health;
pub mod ledger;
mod log_file;
mod logs;
mod options;
mod process;
mod reaper;
mod resolver;
mod resources;
mod runner;
mod spec;
mod supervisor;
mod table;

pub use config::{
    kubelet_service, kubelet_spec, register_config_controllers, service_spec,
    ServiceConfigController, KUBELET_SERVICE_CONTROLLER,
};
pub use controllers::{status_of, ServiceSpecController, ServiceStatusController};
pub use events::{EventRing, Health, ServiceEvent, ServiceEventRecord, ServiceState, EVENT_RING};
pub use health::probe;
pub use ledger::{Leftover, GROUP_TOKEN_VAR};
pub use log_file::{LogFileOptions, RotatingFile};
pub use logs::{
    LineSplitter, LogBook, LogItem, LogLine, LogReader, LogStream, FOLLOW_BUFFER, MAX_LINE,
    TRUNCATED_MARK,
};
pub use process::{group_exists, parse_proc_stat, read_stat, ProcStat};
pub use reaper::{reap_orphans, Reaper};
pub use resolver::{repository_of, ImageProgram, ImageResolver};
pub use resources::{Service, ServiceStatus};
pub use spec::{HealthCheck, Probe, Program, RestartPolicy, ServiceSpec};
/// Registers the service resource types (`ServiceSpec`, `ServiceStatus`, `Service`).
///
/// ```
/// let mut registry = cosi_core::Registry::new();
/// cosi_node::services::register_types(&mut registry).unwrap();
/// assert_eq!(registry.resolve("svc").unwrap().resource_type, "Services.runtime.cosi.dev");
/// ```
pub fn register_types(registry: &mut cosi_core::Registry) -> cosi_core::Result<()> {
    registry.register::<ServiceSpec>()?;
    registry.register::<ServiceStatus>()?;
    registry.register::<Service>()
}

pub use options::SupervisorOptions;
pub use supervisor::{
    EventItem, EventReader, ServiceError, ServiceInfo, Supervisor, EVENT_STREAM_BUFFER,
};
