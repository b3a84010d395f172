//! The API server: the State and machine services on one listener, secured by one
//! [`Security`] mode, every call checked by the method table ([`crate::auth::MethodGate`]).
//!
//! [`ApiServer::serve`] runs on a listener the caller bound (so tests and daemons choose the
//! address, and a restart can reuse it) and returns a [`ServerHandle`]; stopping it ends open
//! watches and streams, and calls whose request is still arriving, with `Unavailable` (clients
//! reconnect and resume; [`ServerHandle::shutdown_because`] says why), and waits for the calls
//! being answered and then the connections to close. A node changes modes (maintenance →
//! mutual TLS) by stopping one server and serving the next on the same address, as Talos's
//! apid restarts its listener.

mod connection;
mod encodings;
mod framing;
mod held_bytes;
mod machine;
mod per_caller;
mod state;
mod stop;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use crate::auth::MethodGate;
use crate::machine::Machine;
use crate::pki::CertifiedKey;
use crate::proto::machine::machine_service_server::MachineServiceServer;
use crate::tls::TlsError;

use connection::{accept_loop, Acceptor, Limits, OpenConnections};
pub use encodings::DEFAULT_BUDGET as DEFAULT_SHARED_ENCODINGS;
use framing::FramedState;
pub use machine::{MachineService, MAX_LOG_CHUNK};
use per_caller::CallLimit;
pub use state::{StateService, MAX_EVENT_BYTES, OMIT_YAML_HEADER, WATCH_BATCH};
pub use stop::DEFAULT_STOP_REASON;
pub(crate) use stop::{never, stopped, StopSignal};
use stop::{EndArriving, Stop};

/// The message size limit, both directions (Talos uses the same).
pub const MAX_MESSAGE_SIZE: usize = 32 * 1024 * 1024;
/// Concurrent HTTP/2 streams per connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;
/// Open connections (handshaking ones included) a server holds at once by default
/// ([`ApiServer::with_max_connections`]): half of the 1,024 descriptors a process gets by
/// default, so callers cannot take the ones the node needs for its own files and services.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Open connections one caller (one client certificate name; one maintenance caller's address)
/// holds at once by default ([`ApiServer::with_max_connections_per_caller`]).
pub const DEFAULT_MAX_CONNECTIONS_PER_CALLER: usize = 64;
/// Calls one caller holds open at once by default, over all its connections
/// ([`ApiServer::with_max_calls_per_caller`]): a watch, a list or a log follow holds its place
/// until its stream ends; a remote controller engine needs one watch per kind it reads.
pub const DEFAULT_MAX_CALLS_PER_CALLER: usize = 256;
/// Bytes of responses one caller's streams and unary answers hold in the server at once by
/// default ([`ApiServer::with_max_bytes_per_caller`]): two messages at the 32 MiB limit, so a
/// caller's next response may be as large as a message whenever it holds at most 32 MiB; 256
/// unread watches of 1 MiB resources pin 64 MiB, not the gigabyte they did with calls counted
/// alone, and 256 unread Gets of a 32 MiB resource 64 MiB, not eight gigabytes.
pub const DEFAULT_MAX_BYTES_PER_CALLER: usize = 64 * 1024 * 1024;
/// The smallest byte budget per caller a server takes ([`ApiServer::with_max_bytes_per_caller`]):
/// one message at the limit with its 5-byte gRPC frame header, so that any one response fits.
pub const MIN_BYTES_PER_CALLER: usize = held_bytes::LARGEST_RESPONSE;

/// How the server secures connections.
#[derive(Clone)]
pub enum Security {
    /// Plaintext HTTP/2 (h2c): every caller is trusted with everything. For loopback and
    /// tests (and the original's client, which speaks h2c) only.
    Plaintext,
    /// Mutual TLS: the server presents `identity`; clients must present a certificate signed
    /// by `client_ca_pem`, and their roles come from it.
    MutualTls {
        /// The server's certificate and key.
        identity: CertifiedKey,
        /// The CA client certificates must chain to.
        client_ca_pem: String,
    },
    /// Maintenance mode (the node has no configuration yet): server-only TLS, and only
    /// `ApplyConfiguration` is accepted. Clients pin the server's key fingerprint.
    Maintenance {
        /// The server's (self-signed) certificate and key.
        identity: CertifiedKey,
    },
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Security::Plaintext => "Plaintext",
            Security::MutualTls { .. } => "MutualTls",
            Security::Maintenance { .. } => "Maintenance",
        })
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The TLS material is unusable.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The listener has no address.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The byte budget per caller ([`ApiServer::with_max_bytes_per_caller`]) is below
    /// [`MIN_BYTES_PER_CALLER`]: a response of a message at the limit could never be sent.
    #[error(
        "max bytes per caller: {max} is less than one message at the limit with its frame \
         header ({MIN_BYTES_PER_CALLER} bytes), so a caller's largest responses could never be \
         sent; give at least that"
    )]
    BytesPerCallerBelowMessage {
        /// The budget given.
        max: usize,
    },
}

/// The services to serve and how.
#[derive(Debug)]
pub struct ApiServer {
    state: Option<StateService>,
    machine: Option<MachineService>,
    security: Security,
    max_connections: usize,
    max_connections_per_caller: usize,
    max_calls_per_caller: usize,
    max_bytes_per_caller: usize,
}

impl ApiServer {
    /// A server with no services yet.
    pub fn new(security: Security) -> Self {
        ApiServer {
            state: None,
            machine: None,
            security,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_caller: DEFAULT_MAX_CONNECTIONS_PER_CALLER,
            max_calls_per_caller: DEFAULT_MAX_CALLS_PER_CALLER,
            max_bytes_per_caller: DEFAULT_MAX_BYTES_PER_CALLER,
        }
    }

    /// Holds at most `max` connections open at once (at least 1; default
    /// [`DEFAULT_MAX_CONNECTIONS`]). At the limit the server accepts no more: new callers wait
    /// in the kernel's listen queue, and the first of them is taken when a connection closes.
    ///
    /// ```
    /// use cosi_api::server::{ApiServer, Security};
    /// let server = ApiServer::new(Security::Plaintext).with_max_connections(64);
    /// # let _ = server;
    /// ```
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// Lets one caller hold at most `max` connections at once (at least 1; default
    /// [`DEFAULT_MAX_CONNECTIONS_PER_CALLER`]): callers are told apart by their client
    /// certificate's name, maintenance callers by the address they connect from, plaintext
    /// callers (trusted) are not counted. A connection past the limit is closed after its handshake.
    ///
    /// ```
    /// use cosi_api::server::{ApiServer, Security};
    /// let server = ApiServer::new(Security::Plaintext).with_max_connections_per_caller(8);
    /// # let _ = server;
    /// ```
    pub fn with_max_connections_per_caller(mut self, max: usize) -> Self {
        self.max_connections_per_caller = max.max(1);
        self
    }

    /// Lets one caller hold at most `max` calls open at once over all its connections (at
    /// least 1; default [`DEFAULT_MAX_CALLS_PER_CALLER`]), counted as connections are (per
    /// client certificate name; maintenance callers per address; plaintext callers not at all). A
    /// watch, list or log follow holds its place until its stream ends or is cancelled; a call
    /// past the limit is refused with `ResourceExhausted` (retryable) before any service
    /// sees it. Without it, one certificate's 64 connections of 1,024 streams each could hold
    /// 65,536 watches, each with its buffered messages; what the calls it allows hold is
    /// bounded in bytes by [`ApiServer::with_max_bytes_per_caller`].
    ///
    /// ```
    /// use cosi_api::server::{ApiServer, Security};
    /// let server = ApiServer::new(Security::Plaintext).with_max_calls_per_caller(32);
    /// # let _ = server;
    /// ```
    pub fn with_max_calls_per_caller(mut self, max: usize) -> Self {
        self.max_calls_per_caller = max.max(1);
        self
    }

    /// Lets one caller's streams (watches, lists, log follows, event streams) and the answers of
    /// its unary calls (Get, Create, Update, ApplyConfiguration, ServiceList) hold at most `max`
    /// bytes of responses in the server at once (default [`DEFAULT_MAX_BYTES_PER_CALLER`]), counted
    /// as calls are (per client certificate name; maintenance callers per address; plaintext
    /// callers not at all). `max` must be at least [`MIN_BYTES_PER_CALLER`] (one message at the
    /// limit and its frame header): a smaller one is refused by [`ApiServer::serve`] with
    /// [`ServeError::BytesPerCallerBelowMessage`], not raised behind the caller's back. A response
    /// counts from when it is made until it has been written to the caller's socket. A stream makes
    /// its next response, and a unary call its answer, only while the caller holds at most `max`
    /// less one largest message; until then it waits, holding no encoded response: a watch stops
    /// reading the store, which serves it as any lagging watcher (exactly from its window, or a
    /// compacted catch-up or a resync beyond it) once the caller reads again; a Get reads its
    /// resource again once it has room. No call is refused for want of room; a wait ends when the
    /// caller cancels or the server stops (`Unavailable`). So a caller that never reads pins at
    /// most `max` bytes of encoded responses, however many calls it holds (beside them a waiting
    /// call keeps only what it was handed to send: a watch the store's events, a list the listed
    /// resources, a log stream one chunk, a write the resource it stored); without it, 256 unread
    /// watches of 1 MiB resources held about a gigabyte, and 256 unread Gets of a 2 MiB resource
    /// over 512 MiB. A caller waits on its own unread responses only: one that stops reading one
    /// stream until another call answers must keep them within `max`.
    ///
    /// ```
    /// use cosi_api::server::{ApiServer, Security};
    /// let server = ApiServer::new(Security::Plaintext).with_max_bytes_per_caller(128 << 20);
    /// # let _ = server;
    /// ```
    pub fn with_max_bytes_per_caller(mut self, max: usize) -> Self {
        self.max_bytes_per_caller = max;
        self
    }

    /// Serves the State service.
    pub fn with_state(mut self, service: StateService) -> Self {
        self.state = Some(service);
        self
    }

    /// Serves the machine service over `machine`.
    pub fn with_machine(mut self, machine: Arc<dyn Machine>) -> Self {
        self.machine = Some(MachineService::new(machine));
        self
    }

    /// Starts serving on `listener`.
    pub fn serve(self, listener: TcpListener) -> Result<ServerHandle, ServeError> {
        if self.max_bytes_per_caller < MIN_BYTES_PER_CALLER {
            return Err(ServeError::BytesPerCallerBelowMessage {
                max: self.max_bytes_per_caller,
            });
        }
        let local_addr = listener.local_addr()?;
        let acceptor = match &self.security {
            Security::Plaintext => Acceptor::Plain,
            Security::MutualTls {
                identity,
                client_ca_pem,
            } => Acceptor::mutual(crate::tls::server_mutual(identity, client_ca_pem)?),
            Security::Maintenance { identity } => {
                Acceptor::maintenance(crate::tls::server_maintenance(identity)?)
            }
        };
        let (stop, stop_signal) = Stop::new();
        let (connections, incoming) = mpsc::channel(16);
        let open = OpenConnections::default();
        let accept = tokio::spawn(accept_loop(
            listener,
            acceptor,
            Limits {
                connections: self.max_connections,
                per_caller: self.max_connections_per_caller,
            },
            open.clone(),
            connections,
            stop_signal.clone(),
        ));

        let mut routes = tonic::service::Routes::default();
        if let Some(state) = self.state {
            routes = routes.add_service(FramedState::new(
                state.with_shutdown(stop_signal.clone()),
                MAX_MESSAGE_SIZE,
            ));
        }
        if let Some(machine) = self.machine {
            routes = routes.add_service(
                MachineServiceServer::new(machine.with_shutdown(stop_signal.clone()))
                    .max_decoding_message_size(MAX_MESSAGE_SIZE)
                    .max_encoding_message_size(MAX_MESSAGE_SIZE),
            );
        }
        let mut signal = stop_signal.clone();
        let server = tonic::transport::Server::builder()
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(20)))
            .layer(EndArriving::new(stop_signal.clone()))
            .layer(MethodGate)
            .layer(CallLimit::new(
                self.max_calls_per_caller,
                self.max_bytes_per_caller,
            ))
            .add_routes(routes)
            .serve_with_incoming_shutdown(ReceiverStream::new(incoming), async move {
                stopped(&mut signal).await;
            });
        let task = tokio::spawn(server);
        Ok(ServerHandle {
            local_addr,
            stop,
            open,
            task: Some(task),
            accept: Some(accept),
        })
    }
}

/// A running server.
pub struct ServerHandle {
    local_addr: SocketAddr,
    stop: Stop,
    open: OpenConnections,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    /// The accept loop: it owns the listener, so the address is free once it has ended.
    accept: Option<JoinHandle<()>>,
}

impl Drop for ServerHandle {
    /// A dropped handle stops its server (without waiting for it).
    fn drop(&mut self) {
        self.stop.fire(DEFAULT_STOP_REASON);
    }
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, ends open watches and streams, and calls whose request is still
    /// arriving, with `Unavailable` ([`DEFAULT_STOP_REASON`]), and waits until the calls being
    /// answered are answered, every connection has closed and the listener is released.
    pub async fn shutdown(self) -> Result<(), tonic::transport::Error> {
        self.shutdown_because(DEFAULT_STOP_REASON).await
    }

    /// [`ServerHandle::shutdown`], the calls it ends told `reason` (the message of their
    /// `Unavailable` status): what a client should do next, e.g. where to connect instead.
    ///
    /// A client that holds a call open without sending its request does not hold the stop:
    /// that call is ended at once, as a watch is.
    pub async fn shutdown_because(mut self, reason: &str) -> Result<(), tonic::transport::Error> {
        self.stop.fire(reason);
        let result = match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result,
                // The task never panics on its own; a join error means the runtime is going away.
                Err(_) => Ok(()),
            },
            None => Ok(()),
        };
        self.release().await;
        result
    }

    /// Waits for the accept loop (which ends on the stop signal) to drop the listener.
    async fn release(&mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }

    /// Cuts every connection at once, without ending streams first (a crash or a network
    /// failure, as clients see it), then stops.
    pub async fn abort(mut self) {
        self.open.sever_all();
        self.stop.fire(DEFAULT_STOP_REASON);
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        self.release().await;
        self.open.sever_all();
    }
}
