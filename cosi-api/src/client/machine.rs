//! [`MachineClient`]: the machine service with this crate's types, errors as
//! [`cosi_core::Error`]s.

use std::time::SystemTime;

use cosi_core::{Error, Pointer, Result};
use futures::{Stream, StreamExt};
use tonic::transport::Channel;

use crate::codec::decode_time;
use crate::machine::ApplyMode;
use crate::machine::{
    ApplyOutcome, ApplyRequest, EventTail, LogRequest, MachineEvent, MachineEventPayload,
    ServiceAction, ServiceEvent, ServiceHealth, ServiceStatus, VersionInfo,
};
use crate::proto::machine::{self as pb, machine_service_client::MachineServiceClient};
use crate::server::MAX_MESSAGE_SIZE;
use crate::status::{from_status, Call, CallContext};

/// A client of a node's machine service.
#[derive(Clone, Debug)]
pub struct MachineClient {
    client: MachineServiceClient<Channel>,
}

fn ctx(what: &str) -> CallContext {
    CallContext::new(Call::Machine, Pointer::new("machine", what, ""))
}

fn time(t: Option<prost_types::Timestamp>) -> SystemTime {
    decode_time(t.as_ref()).unwrap_or(SystemTime::UNIX_EPOCH)
}

impl MachineClient {
    /// A client over `channel`.
    pub fn new(channel: Channel) -> Self {
        MachineClient {
            client: MachineServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
        }
    }

    /// Applies a configuration.
    pub async fn apply_configuration(&self, request: ApplyRequest) -> Result<ApplyOutcome> {
        let ctx = ctx("ApplyConfiguration");
        let response = self
            .client
            .clone()
            .apply_configuration(pb::ApplyConfigurationRequest {
                data: request.data,
                mode: request.mode.to_wire() as i32,
                dry_run: request.dry_run,
                // Longer than the wire's seconds: the longest it carries (a cast would turn it
                // negative), which the node refuses as too long.
                try_mode_timeout: request.try_timeout.map(|d| prost_types::Duration {
                    seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
                }),
                expected_version: request.expected_version,
                patches: request.patches,
            })
            .await
            .map_err(|s| from_status(&s, &ctx))?
            .into_inner();
        Ok(ApplyOutcome {
            mode: ApplyMode::from_wire(response.mode).ok_or_else(|| {
                Error::invalid(
                    "apply configuration",
                    "response.mode",
                    format!("unknown mode {}", response.mode),
                )
            })?,
            details: response.mode_details,
            warnings: response.warnings,
            diff: response.diff,
            version: response.version,
        })
    }

    /// Every service.
    pub async fn services(&self) -> Result<Vec<ServiceStatus>> {
        let ctx = ctx("ServiceList");
        let response = self
            .client
            .clone()
            .service_list(pb::ServiceListRequest {})
            .await
            .map_err(|s| from_status(&s, &ctx))?
            .into_inner();
        Ok(response
            .services
            .into_iter()
            .map(|s| {
                let health = s.health.unwrap_or_default();
                ServiceStatus {
                    id: s.id,
                    state: s.state,
                    health: ServiceHealth {
                        unknown: health.unknown,
                        healthy: health.healthy,
                        last_message: health.last_message,
                        last_change: time(health.last_change),
                    },
                    events: s
                        .events
                        .into_iter()
                        .map(|e| ServiceEvent {
                            message: e.message,
                            state: e.state,
                            time: time(e.time),
                        })
                        .collect(),
                }
            })
            .collect())
    }

    /// Starts, stops or restarts a service.
    pub async fn service_action(&self, id: &str, action: ServiceAction) -> Result<String> {
        let request = pb::ServiceRequest { id: id.to_string() };
        let mut client = self.client.clone();
        let (what, result) = match action {
            ServiceAction::Start => ("ServiceStart", client.service_start(request).await),
            ServiceAction::Stop => ("ServiceStop", client.service_stop(request).await),
            ServiceAction::Restart => ("ServiceRestart", client.service_restart(request).await),
        };
        Ok(result
            .map_err(|s| from_status(&s, &ctx(what)))?
            .into_inner()
            .response)
    }

    /// A service's log, as chunks of whole lines.
    pub async fn logs(&self, request: LogRequest) -> Result<impl Stream<Item = Result<Vec<u8>>>> {
        let ctx = ctx("Logs");
        let stream = self
            .client
            .clone()
            .logs(pb::LogsRequest {
                service: request.service,
                tail_lines: request.tail.map_or(-1, |t| t.min(i32::MAX as usize) as i32),
                follow: request.follow,
            })
            .await
            .map_err(|s| from_status(&s, &ctx))?
            .into_inner();
        Ok(stream.map(move |item| item.map(|d| d.bytes).map_err(|s| from_status(&s, &ctx))))
    }

    /// Machine events.
    pub async fn events(
        &self,
        tail: EventTail,
    ) -> Result<impl Stream<Item = Result<MachineEvent>>> {
        let ctx = ctx("Events");
        let tail_events = match tail {
            EventTail::None => 0,
            EventTail::All => -1,
            EventTail::Last(n) => n.min(i32::MAX as usize) as i32,
        };
        let stream = self
            .client
            .clone()
            .events(pb::EventsRequest { tail_events })
            .await
            .map_err(|s| from_status(&s, &ctx))?
            .into_inner();
        Ok(stream.map(move |item| {
            let event = item.map_err(|s| from_status(&s, &ctx))?;
            let payload = match event.payload {
                Some(pb::machine_event::Payload::Service(s)) => MachineEventPayload::Service {
                    service: s.service,
                    state: s.state,
                    message: s.message,
                },
                Some(pb::machine_event::Payload::Config(c)) => MachineEventPayload::Config {
                    version: c.version,
                    mode: ApplyMode::from_wire(c.mode).unwrap_or_default(),
                    message: c.message,
                },
                None => {
                    return Err(Error::invalid("machine event", "payload", "missing"));
                }
            };
            Ok(MachineEvent {
                id: event.id,
                time: time(event.time),
                payload,
            })
        }))
    }

    /// The node's build.
    pub async fn version(&self) -> Result<VersionInfo> {
        let ctx = ctx("Version");
        let v = self
            .client
            .clone()
            .version(pb::VersionRequest {})
            .await
            .map_err(|s| from_status(&s, &ctx))?
            .into_inner();
        Ok(VersionInfo {
            tag: v.tag,
            sha: v.sha,
            built: v.built,
            rust_version: v.rust_version,
            arch: v.arch,
            os: v.os,
        })
    }
}
