//! A machine server implementing the generated service by hand, late or silent on every call,
//! and an in-memory connection to it: what a [`cosi_api::client::MachineClient`] does with a
//! node that accepts a call and takes its time (or forever) to answer.
//!
//! The connection is a pair of in-process pipes, not a socket, so that a test can run on
//! tokio's paused clock: nothing waits on the kernel, and time moves only when every task is
//! idle, straight to the next timer. A deadline is then measured exactly.
#![allow(dead_code)]

use std::pin::Pin;
use std::time::Duration;

use cosi_api::proto::machine::{self as pb, machine_service_server};
use futures::{Stream, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};

/// A machine server that answers each call after `delay`, or never when `None`.
pub struct HostileMachine {
    /// How long a unary call waits before its answer, and a stream before its first message.
    pub delay: Option<Duration>,
    /// Streams open at once (their first message still waits `delay`); otherwise the opening
    /// itself waits, as a unary answer does.
    pub streams_open_at_once: bool,
}

/// What a [`HostileMachine`] answers `Version` with.
pub const VERSION_TAG: &str = "v-hostile";

/// What a [`HostileMachine`]'s log sends as its first message.
pub const FIRST_LINE: &[u8] = b"late line\n";

impl HostileMachine {
    async fn wait(&self) {
        match self.delay {
            Some(delay) => tokio::time::sleep(delay).await,
            None => std::future::pending().await,
        }
    }

    /// `first` after the delay, then nothing more (a stream that stays open).
    fn stream<T: Send + 'static>(&self, first: T) -> Responses<T> {
        let delay = self.delay;
        Box::pin(futures::stream::unfold(
            Some(first),
            move |first| async move {
                match (first, delay) {
                    (Some(first), Some(delay)) => {
                        tokio::time::sleep(delay).await;
                        Some((Ok(first), None))
                    }
                    _ => std::future::pending().await,
                }
            },
        ))
    }

    async fn open<T: Send + 'static>(&self, first: T) -> Result<Response<Responses<T>>, Status> {
        if !self.streams_open_at_once {
            self.wait().await;
        }
        Ok(Response::new(self.stream(first)))
    }
}

pub type Responses<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl machine_service_server::MachineService for HostileMachine {
    async fn apply_configuration(
        &self,
        _: Request<pb::ApplyConfigurationRequest>,
    ) -> Result<Response<pb::ApplyConfigurationResponse>, Status> {
        self.wait().await;
        Ok(Response::new(pb::ApplyConfigurationResponse::default()))
    }

    async fn service_list(
        &self,
        _: Request<pb::ServiceListRequest>,
    ) -> Result<Response<pb::ServiceListResponse>, Status> {
        self.wait().await;
        Ok(Response::new(pb::ServiceListResponse::default()))
    }

    async fn service_start(
        &self,
        _: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceActionResponse>, Status> {
        self.wait().await;
        Ok(Response::new(pb::ServiceActionResponse::default()))
    }

    async fn service_stop(
        &self,
        _: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceActionResponse>, Status> {
        self.wait().await;
        Ok(Response::new(pb::ServiceActionResponse::default()))
    }

    async fn service_restart(
        &self,
        _: Request<pb::ServiceRequest>,
    ) -> Result<Response<pb::ServiceActionResponse>, Status> {
        self.wait().await;
        Ok(Response::new(pb::ServiceActionResponse::default()))
    }

    type LogsStream = Responses<pb::LogData>;

    async fn logs(
        &self,
        _: Request<pb::LogsRequest>,
    ) -> Result<Response<Self::LogsStream>, Status> {
        self.open(pb::LogData {
            bytes: FIRST_LINE.to_vec(),
        })
        .await
    }

    type EventsStream = Responses<pb::MachineEvent>;

    async fn events(
        &self,
        _: Request<pb::EventsRequest>,
    ) -> Result<Response<Self::EventsStream>, Status> {
        let config = pb::machine_event::Payload::Config(pb::ConfigEvent::default());
        self.open(pb::MachineEvent {
            id: "1".into(),
            time: None,
            payload: Some(config),
        })
        .await
    }

    async fn version(
        &self,
        _: Request<pb::VersionRequest>,
    ) -> Result<Response<pb::VersionResponse>, Status> {
        self.wait().await;
        Ok(Response::new(pb::VersionResponse {
            tag: VERSION_TAG.into(),
            ..Default::default()
        }))
    }
}

/// A channel to `machine`, served in this runtime over in-memory pipes (one per connection the
/// channel makes). The server runs until the runtime ends.
pub fn in_memory(machine: HostileMachine) -> Channel {
    let (connections, incoming) = mpsc::channel::<tokio::io::DuplexStream>(4);
    tokio::spawn(
        Server::builder()
            .add_service(machine_service_server::MachineServiceServer::new(machine))
            .serve_with_incoming(
                tokio_stream::wrappers::ReceiverStream::new(incoming).map(Ok::<_, std::io::Error>),
            ),
    );
    Endpoint::from_static("http://in-memory.invalid").connect_with_connector_lazy(
        tower::service_fn(move |_| {
            let connections = connections.clone();
            async move {
                let (client, server) = tokio::io::duplex(64 * 1024);
                connections
                    .send(server)
                    .await
                    .map_err(|_| std::io::Error::other("the in-memory server has stopped"))?;
                Ok::<_, std::io::Error>(TokioIo::new(client))
            }
        }),
    )
}
