//! The two controllers between the resources and the [`Supervisor`]:
//!
//! - [`ServiceSpecController`] applies the `ServiceSpec`s to the supervisor: the supervisor's
//!   services are exactly the specs (a new spec adds a service, a changed one is applied, a
//!   removed one stops and forgets it).
//! - [`ServiceStatusController`] mirrors the supervisor into [`ServiceStatus`] (every service)
//!   and [`Service`] (running services only). It has no resource input: the supervisor wakes
//!   it through a [`cosi_controllers::Waker`] on every change, and each reconcile writes what
//!   differs (a no-op write costs nothing), so a burst of transitions costs one reconcile.

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{ListOptions, Resource, ResourceSpec, Result, StateExt};
use tokio::task::JoinHandle;

use super::events::{Health, ServiceState};
use super::resources::{Service, ServiceStatus};
use super::spec::ServiceSpec;
use super::supervisor::{ServiceInfo, Supervisor};

/// Applies `ServiceSpec`s (namespace `runtime`) to the supervisor.
#[derive(Debug)]
pub struct ServiceSpecController {
    supervisor: Supervisor,
}

impl ServiceSpecController {
    /// The controller's name.
    pub const NAME: &'static str = "services.ServiceSpecController";

    /// A controller driving `supervisor`.
    pub fn new(supervisor: Supervisor) -> Self {
        ServiceSpecController { supervisor }
    }
}

#[async_trait]
impl Controller for ServiceSpecController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::weak_of::<ServiceSpec>()]
    }

    fn outputs(&self) -> Vec<Output> {
        Vec::new()
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let specs = state
            .list_typed::<ServiceSpec>(&ServiceSpec::kind(), &ListOptions::default())
            .await?;
        let mut wanted = std::collections::BTreeSet::new();
        for spec in &specs {
            let id = spec.metadata.id().to_string();
            if let Err(error) = self.supervisor.apply(&id, spec.spec.clone()) {
                // The spec cannot be run at all; the others still are.
                tracing::warn!(service = %id, %error, "service spec refused by the supervisor");
            }
            wanted.insert(id);
        }
        for id in self.supervisor.ids() {
            if !wanted.contains(&id) {
                // Only fails if the service is already gone.
                let _ = self.supervisor.remove(&id);
            }
        }
        Ok(Reconciled::Done)
    }
}

/// Mirrors the supervisor into `ServiceStatus` and `Service` resources (namespace `runtime`).
#[derive(Debug)]
pub struct ServiceStatusController {
    supervisor: Supervisor,
    follower: Option<JoinHandle<()>>,
}

impl ServiceStatusController {
    /// The controller's name.
    pub const NAME: &'static str = "services.ServiceStatusController";

    /// A controller mirroring `supervisor`.
    pub fn new(supervisor: Supervisor) -> Self {
        ServiceStatusController {
            supervisor,
            follower: None,
        }
    }
}

impl Drop for ServiceStatusController {
    fn drop(&mut self) {
        if let Some(follower) = &self.follower {
            follower.abort();
        }
    }
}

/// The status resource of a service.
pub fn status_of(info: &ServiceInfo) -> ServiceStatus {
    let last = info.last_event();
    ServiceStatus {
        state: info.state,
        health: info.health,
        health_message: info.health_message.clone(),
        pid: info.pid,
        restarts: info.restarts,
        stopped_by_operator: !info.enabled_by_operator,
        last_change: last.map(|e| humantime::format_rfc3339_seconds(e.time).to_string()),
        last_event: last.map(|e| e.message.clone()),
    }
}

#[async_trait]
impl Controller for ServiceStatusController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![
            Output::exclusive_of::<ServiceStatus>(),
            Output::exclusive_of::<Service>(),
        ]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        if self.follower.is_none() {
            let mut changes = self.supervisor.subscribe();
            let waker = state.waker();
            self.follower = Some(tokio::spawn(async move {
                while changes.changed().await.is_ok() {
                    waker.wake();
                }
            }));
        }
        state.start_tracking();
        for info in self.supervisor.list() {
            let status = status_of(&info);
            state
                .modify_output(Resource::new(info.id.clone(), status.clone()), |r| {
                    r.spec = status.clone();
                    Ok(())
                })
                .await?;
            if info.state == ServiceState::Running {
                let service = Service {
                    running: true,
                    healthy: info.health == Health::Ok,
                    unknown: info.health == Health::Unknown,
                };
                state
                    .modify_output(Resource::new(info.id.clone(), service.clone()), |r| {
                        r.spec = service.clone();
                        Ok(())
                    })
                    .await?;
            }
        }
        state
            .cleanup_outputs(&[ServiceStatus::kind(), Service::kind()])
            .await?;
        Ok(Reconciled::Done)
    }
}
