//! [`MachineClient`]: the machine service with this crate's types, errors as
//! [`cosi_core::Error`]s, each call bounded by the client's deadline
//! ([`MachineClient::with_call_timeout`]).

use std::time::{Duration, SystemTime};

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

use super::deadline::{within, DEFAULT_CALL_TIMEOUT};

/// Where a [`MachineClient`]'s deadline is set, as its errors name it.
const CALL_TIMEOUT: &str = "MachineClient::with_call_timeout";

/// A client of a node's machine service.
///
/// Every call waits at most the client's deadline for the server (default
/// [`DEFAULT_CALL_TIMEOUT`]): a unary call for its answer, [`MachineClient::logs`] and
/// [`MachineClient::events`] for their stream to open; a stream that opened in time is then
/// followed for as long as it goes on. Past the deadline the call fails with a retryable error.
///
/// ```no_run
/// use std::time::Duration;
/// use cosi_api::client::{channel, ClientSecurity, MachineClient};
/// # async fn demo() -> cosi_core::Result<()> {
/// let channel = channel("127.0.0.1:50000".parse().unwrap(), None, ClientSecurity::Plaintext)?;
/// // A caller that keeps its own deadline turns this one off.
/// let machine = MachineClient::new(channel).with_call_timeout(Some(Duration::from_secs(5)));
/// let version = machine.version().await?;
/// println!("{}", version.tag);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MachineClient {
    client: MachineServiceClient<Channel>,
    call_timeout: Option<Duration>,
}

fn ctx(what: &str) -> CallContext {
    CallContext::new(Call::Machine, Pointer::new("machine", what, ""))
}

fn time(t: Option<prost_types::Timestamp>) -> SystemTime {
    decode_time(t.as_ref()).unwrap_or(SystemTime::UNIX_EPOCH)
}

impl MachineClient {
    /// A client over `channel`, with the default deadline ([`DEFAULT_CALL_TIMEOUT`]).
    pub fn new(channel: Channel) -> Self {
        MachineClient {
            client: MachineServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            call_timeout: Some(DEFAULT_CALL_TIMEOUT),
        }
    }

    /// This client with deadline `limit` for each call (for a stream, its opening); `None`:
    /// no deadline, for a caller that bounds its calls itself.
    ///
    /// ```
    /// use std::time::Duration;
    /// use cosi_api::client::{channel, ClientSecurity, MachineClient, DEFAULT_CALL_TIMEOUT};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> cosi_core::Result<()> {
    /// let channel = channel("127.0.0.1:50000".parse().unwrap(), None, ClientSecurity::Plaintext)?;
    /// let machine = MachineClient::new(channel);
    /// assert_eq!(machine.call_timeout(), Some(DEFAULT_CALL_TIMEOUT));
    /// let patient = machine.with_call_timeout(None);
    /// assert_eq!(patient.call_timeout(), None);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_call_timeout(mut self, limit: Option<Duration>) -> Self {
        self.call_timeout = limit;
        self
    }

    /// The deadline of each call (`None`: none).
    pub fn call_timeout(&self) -> Option<Duration> {
        self.call_timeout
    }

    /// Applies a configuration.
    pub async fn apply_configuration(&self, request: ApplyRequest) -> Result<ApplyOutcome> {
        let ctx = ctx("ApplyConfiguration");
        let mut client = self.client.clone();
        let call = client.apply_configuration(pb::ApplyConfigurationRequest {
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
        });
        let response = within(self.call_timeout, CALL_TIMEOUT, call)
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
        let mut client = self.client.clone();
        let call = client.service_list(pb::ServiceListRequest {});
        let response = within(self.call_timeout, CALL_TIMEOUT, call)
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
        let limit = self.call_timeout;
        let (what, result) = match action {
            ServiceAction::Start => (
                "ServiceStart",
                within(limit, CALL_TIMEOUT, client.service_start(request)).await,
            ),
            ServiceAction::Stop => (
                "ServiceStop",
                within(limit, CALL_TIMEOUT, client.service_stop(request)).await,
            ),
            ServiceAction::Restart => (
                "ServiceRestart",
                within(limit, CALL_TIMEOUT, client.service_restart(request)).await,
            ),
        };
        Ok(result
            .map_err(|s| from_status(&s, &ctx(what)))?
            .into_inner()
            .response)
    }

    /// A service's log, as chunks of whole lines. The deadline bounds the stream's opening.
    pub async fn logs(&self, request: LogRequest) -> Result<impl Stream<Item = Result<Vec<u8>>>> {
        let ctx = ctx("Logs");
        let mut client = self.client.clone();
        let call = client.logs(pb::LogsRequest {
            service: request.service,
            tail_lines: request.tail.map_or(-1, |t| t.min(i32::MAX as usize) as i32),
            follow: request.follow,
        });
        // Bounds the opening (the server's answer to the call), not the stream: a log
        // followed goes on as long as the service writes.
        let stream = within(self.call_timeout, CALL_TIMEOUT, call)
            .await
            .map_err(|s| from_status(&s, &ctx))?
            .into_inner();
        Ok(stream.map(move |item| item.map(|d| d.bytes).map_err(|s| from_status(&s, &ctx))))
    }

    /// Machine events. The deadline bounds the stream's opening.
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
        let mut client = self.client.clone();
        let call = client.events(pb::EventsRequest { tail_events });
        // As for logs: the opening is bounded, the stream is not.
        let stream = within(self.call_timeout, CALL_TIMEOUT, call)
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
        let mut client = self.client.clone();
        let call = client.version(pb::VersionRequest {});
        let v = within(self.call_timeout, CALL_TIMEOUT, call)
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
