//! The `cosi.machine.MachineService` over a node's [`Machine`]. Streams (logs, events) are
//! bounded: a few responses are buffered, then the node's stream is read only as fast as the
//! client takes them; a log response holds at most [`MAX_LOG_CHUNK`] bytes of whole lines. A
//! counted caller's stream reads its next response only while the caller's byte budget has room
//! for it ([`super::held_bytes`]), and so do the answers of ApplyConfiguration and ServiceList
//! (the others are a few bytes). A server shutting down ends open streams, and answers waiting
//! for room, with `Unavailable`.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::codec::encode_time;
use crate::machine::{
    ApplyMode, ApplyRequest, EventTail, LogRequest, Machine, MachineEventPayload, ServiceAction,
};
use crate::proto::machine::{self as pb, machine_service_server};
use crate::status::{to_status, Call};

use super::held_bytes::{counted, framed_len, Admission, StreamBytes};

/// Bytes of log lines per response.
pub const MAX_LOG_CHUNK: usize = 64 * 1024;
const STREAM_BUFFER: usize = 8;

/// The machine service.
pub struct MachineService {
    machine: Arc<dyn Machine>,
    shutdown: crate::server::StopSignal,
}

impl std::fmt::Debug for MachineService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineService").finish_non_exhaustive()
    }
}

impl MachineService {
    /// Serves `machine`.
    pub fn new(machine: Arc<dyn Machine>) -> Self {
        MachineService {
            machine,
            shutdown: crate::server::never(),
        }
    }

    pub(crate) fn with_shutdown(mut self, shutdown: crate::server::StopSignal) -> Self {
        self.shutdown = shutdown;
        self
    }
}

fn err(e: cosi_core::Error) -> Status {
    to_status(&e, Call::Machine)
}

/// Moves `source` onto a response stream. For a counted caller (`bytes`), each response is
/// sent once the caller's byte budget has room for it, and counted: while it waits, the stream
/// holds that one response (a log chunk of at most [`MAX_LOG_CHUNK`] bytes of whole lines, or
/// an event) and reads no more. It takes no room before it has a response: an idle follow
/// must not keep the caller's other streams waiting.
async fn forward<T: prost::Message + Send + 'static>(
    mut source: impl futures::Stream<Item = Result<T, Status>> + Unpin + Send,
    tx: mpsc::Sender<Result<T, Status>>,
    mut shutdown: crate::server::StopSignal,
    bytes: Option<Arc<StreamBytes>>,
) {
    loop {
        let next = async {
            let item = source.next().await;
            if let (Some(bytes), Some(Ok(message))) = (&bytes, &item) {
                bytes.admit().await.charge(framed_len(message));
            }
            item
        };
        let item = tokio::select! {
            item = next => item,
            reason = crate::server::stopped(&mut shutdown) => {
                let _ = tx.send(Err(Status::unavailable(reason.to_string()))).await;
                return;
            }
            _ = tx.closed() => return,
        };
        let Some(item) = item else { return };
        let last = item.is_err();
        if tx.send(item).await.is_err() || last {
            return;
        }
    }
}

#[tonic::async_trait]
impl machine_service_server::MachineService for MachineService {
    async fn apply_configuration(
        &self,
        request: Request<pb::ApplyConfigurationRequest>,
    ) -> Result<Response<pb::ApplyConfigurationResponse>, Status> {
        let actor = crate::auth::caller_of(&request)?.describe();
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let r = request.into_inner();
        if !r.data.is_empty() && !r.patches.is_empty() {
            return Err(err(cosi_core::Error::invalid(
                "apply configuration",
                "patches",
                "give either a whole configuration (data) or patches, not both",
            )));
        }
        let mode = ApplyMode::from_wire(r.mode).ok_or_else(|| {
            err(cosi_core::Error::invalid(
                "apply configuration",
                "mode",
                format!("unknown mode {}", r.mode),
            ))
        })?;
        let try_timeout = match r.try_mode_timeout {
            None => None,
            Some(d) => Some(
                u64::try_from(d.seconds)
                    .ok()
                    .filter(|_| (0..1_000_000_000).contains(&d.nanos))
                    .map(|s| std::time::Duration::new(s, d.nanos as u32))
                    .ok_or_else(|| {
                        err(cosi_core::Error::invalid(
                            "apply configuration",
                            "try_mode_timeout",
                            "must be a non-negative duration",
                        ))
                    })?,
            ),
        };
        let outcome = self
            .machine
            .apply_configuration(ApplyRequest {
                data: r.data,
                patches: r.patches,
                mode,
                dry_run: r.dry_run,
                try_timeout,
                expected_version: r.expected_version,
                actor,
            })
            .await
            .map_err(err)?;
        let applied = (!r.dry_run).then_some(outcome.version);
        let admission = self.room(bytes.as_ref(), applied).await?;
        let answer = pb::ApplyConfigurationResponse {
            mode: outcome.mode.to_wire() as i32,
            mode_details: outcome.details,
            warnings: outcome.warnings,
            diff: outcome.diff,
            version: outcome.version,
        };
        Ok(counted(admission, answer))
    }

    async fn service_list(
        &self,
        request: Request<pb::ServiceListRequest>,
    ) -> Result<Response<pb::ServiceListResponse>, Status> {
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let services = self.machine.services().await.map_err(err)?;
        let admission = self.room(bytes.as_ref(), None).await?;
        let answer = pb::ServiceListResponse {
            services: services
                .into_iter()
                .map(|s| pb::ServiceInfo {
                    id: s.id,
                    state: s.state,
                    health: Some(pb::ServiceHealth {
                        unknown: s.health.unknown,
                        healthy: s.health.healthy,
                        last_message: s.health.last_message,
                        last_change: Some(encode_time(s.health.last_change)),
                    }),
                    events: s
                        .events
                        .into_iter()
                        .map(|e| pb::ServiceEvent {
                            message: e.message,
                            state: e.state,
                            time: Some(encode_time(e.time)),
                        })
                        .collect(),
                })
                .collect(),
        };
        Ok(counted(admission, answer))
    }

    async fn service_start(
        &self,
        request: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceActionResponse>, Status> {
        self.action(request, ServiceAction::Start).await
    }

    async fn service_stop(
        &self,
        request: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceActionResponse>, Status> {
        self.action(request, ServiceAction::Stop).await
    }

    async fn service_restart(
        &self,
        request: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceActionResponse>, Status> {
        self.action(request, ServiceAction::Restart).await
    }

    type LogsStream = ReceiverStream<Result<pb::LogData, Status>>;

    async fn logs(
        &self,
        request: Request<pb::LogsRequest>,
    ) -> Result<Response<Self::LogsStream>, Status> {
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let r = request.into_inner();
        let lines = self
            .machine
            .logs(LogRequest {
                service: r.service,
                tail: usize::try_from(r.tail_lines).ok(),
                follow: r.follow,
            })
            .await
            .map_err(err)?;
        // Whole lines, packed up to MAX_LOG_CHUNK bytes per response while more are ready.
        let chunks = lines
            .ready_chunks(256)
            .flat_map(|batch| {
                let mut out: Vec<Result<pb::LogData, Status>> = Vec::new();
                let mut chunk = Vec::new();
                for line in batch {
                    match line {
                        Ok(line) => {
                            if !chunk.is_empty() && chunk.len() + line.len() > MAX_LOG_CHUNK {
                                out.push(Ok(pb::LogData {
                                    bytes: std::mem::take(&mut chunk),
                                }));
                            }
                            chunk.extend_from_slice(&line);
                        }
                        Err(e) => {
                            if !chunk.is_empty() {
                                out.push(Ok(pb::LogData {
                                    bytes: std::mem::take(&mut chunk),
                                }));
                            }
                            out.push(Err(err(e)));
                        }
                    }
                }
                if !chunk.is_empty() {
                    out.push(Ok(pb::LogData { bytes: chunk }));
                }
                futures::stream::iter(out)
            })
            .boxed();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        tokio::spawn(forward(chunks, tx, self.shutdown.clone(), bytes));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    type EventsStream = ReceiverStream<Result<pb::MachineEvent, Status>>;

    async fn events(
        &self,
        request: Request<pb::EventsRequest>,
    ) -> Result<Response<Self::EventsStream>, Status> {
        let bytes = request.extensions().get::<Arc<StreamBytes>>().cloned();
        let tail = match request.into_inner().tail_events {
            0 => EventTail::None,
            n if n < 0 => EventTail::All,
            n => EventTail::Last(n as usize),
        };
        let events = self.machine.events(tail).await.map_err(err)?;
        let events = events
            .map(|event| {
                let event = event.map_err(err)?;
                let payload = match event.payload {
                    MachineEventPayload::Service {
                        service,
                        state,
                        message,
                    } => pb::machine_event::Payload::Service(pb::ServiceStateEvent {
                        service,
                        state,
                        message,
                    }),
                    MachineEventPayload::Config {
                        version,
                        mode,
                        message,
                    } => pb::machine_event::Payload::Config(pb::ConfigEvent {
                        version,
                        mode: mode.to_wire() as i32,
                        message,
                    }),
                };
                Ok(pb::MachineEvent {
                    id: event.id,
                    time: Some(encode_time(event.time)),
                    payload: Some(payload),
                })
            })
            .boxed();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        tokio::spawn(forward(events, tx, self.shutdown.clone(), bytes));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn version(
        &self,
        _request: Request<pb::VersionRequest>,
    ) -> Result<Response<pb::VersionResponse>, Status> {
        let v = self.machine.version().await.map_err(err)?;
        Ok(Response::new(pb::VersionResponse {
            tag: v.tag,
            sha: v.sha,
            built: v.built,
            rust_version: v.rust_version,
            arch: v.arch,
            os: v.os,
        }))
    }
}

impl MachineService {
    /// Room in the caller's byte budget for an answer (none for a caller that is not counted),
    /// taken once the caller has it; a server that stops first ends the call with
    /// `Unavailable` and the stop's reason, saying which configuration was `applied`, if any.
    async fn room(
        &self,
        bytes: Option<&Arc<StreamBytes>>,
        applied: Option<u64>,
    ) -> Result<Option<Admission>, Status> {
        let Some(bytes) = bytes else {
            return Ok(None);
        };
        match bytes.admit_or_stop(&self.shutdown).await {
            Ok(admission) => Ok(Some(admission)),
            Err(reason) => Err(Status::unavailable(match applied {
                None => reason.to_string(),
                Some(version) => format!(
                    "{reason}: the configuration was applied (version {version}); its answer was \
                     not sent"
                ),
            })),
        }
    }

    async fn action(
        &self,
        request: Request<pb::ServiceRequest>,
        action: ServiceAction,
    ) -> Result<Response<pb::ServiceActionResponse>, Status> {
        let id = request.into_inner().id;
        if id.is_empty() {
            return Err(err(cosi_core::Error::invalid(
                "service request",
                "id",
                "must not be empty",
            )));
        }
        let response = self
            .machine
            .service_action(&id, action)
            .await
            .map_err(err)?;
        Ok(Response::new(pb::ServiceActionResponse { response }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::held_bytes::BytesPerCaller;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_stream_cancelled_while_its_source_is_idle_gives_back_what_it_had_queued() {
        // The smallest budget: whatever the cancelled stream keeps counted stalls its caller.
        let budgets = BytesPerCaller::new(0);
        let observer = budgets.stream("reader");
        let (lines, source) = mpsc::channel(4);
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let task = tokio::spawn(forward(
            ReceiverStream::new(source),
            tx,
            crate::server::never(),
            Some(budgets.stream("reader")),
        ));
        let chunk = pb::LogData {
            bytes: b"line\n".to_vec(),
        };
        lines.send(Ok(chunk.clone())).await.unwrap();
        while rx.is_empty() {
            tokio::task::yield_now().await;
        }
        // Queued, not yet taken by HTTP/2: counted.
        assert_eq!(observer.caller_holds(), framed_len(&chunk));

        // The client cancels (its response stream is dropped) while the follow has nothing
        // new to send: the stream ends and its queued response is given back.
        drop(rx);
        tokio::time::timeout(Duration::from_secs(3600), task)
            .await
            .expect("the stream ended when its client cancelled")
            .unwrap();
        assert_eq!(observer.caller_holds(), 0);
        drop(lines);
    }
}
