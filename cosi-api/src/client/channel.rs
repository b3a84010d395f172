//! Connecting to a node: one lazily connected HTTP/2 channel per address, plaintext or TLS
//! (rustls, ALPN `h2`), reconnecting by itself after a failure on the next call.
//!
//! A failure to connect names the address dialled ("connecting to 192.0.2.7:50000: Connection
//! refused"), so that a caller of several nodes can tell which one is down: the clients over a
//! channel ([`super::RemoteState`], [`super::MachineClient`]) do not know its address, and their
//! errors name the resource or call instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cosi_core::Error;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint};

use crate::pki::CertifiedKey;
use crate::tls::Fingerprint;

/// How the client secures its connection.
#[derive(Clone)]
pub enum ClientSecurity {
    /// Plaintext HTTP/2 (h2c).
    Plaintext,
    /// Mutual TLS: verify the server against `ca_pem`, present `identity`.
    MutualTls {
        /// The cluster CA.
        ca_pem: String,
        /// The client's certificate and key.
        identity: CertifiedKey,
    },
    /// TLS verified against `ca_pem` without a client certificate (a mutual-TLS server
    /// refuses it; useful to show that).
    ServerOnly {
        /// The cluster CA.
        ca_pem: String,
    },
    /// Maintenance mode: the server's key must have one of these fingerprints.
    Pinned {
        /// Accepted server key fingerprints.
        fingerprints: Vec<Fingerprint>,
    },
}

impl std::fmt::Debug for ClientSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientSecurity::Plaintext => "Plaintext",
            ClientSecurity::MutualTls { .. } => "MutualTls",
            ClientSecurity::ServerOnly { .. } => "ServerOnly",
            ClientSecurity::Pinned { .. } => "Pinned",
        })
    }
}

/// How long dialling a node (its TCP and TLS handshakes) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn setup_error(address: SocketAddr, message: impl std::fmt::Display) -> Error {
    Error::invalid(format!("node {address}"), "tls", message.to_string())
}

/// Transport tuning of a channel.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChannelOptions {
    /// The HTTP/2 receive window per stream, in bytes (`None`: the transport's default, 2 MiB).
    /// It bounds how many bytes of a watch travel ahead of a consumer that is not reading.
    pub stream_window: Option<u32>,
    /// The local address to connect from (`None`: the one the OS picks). For a host with
    /// several addresses whose peer tells callers apart by address (a node in maintenance
    /// counts its unauthenticated callers' connections per address).
    pub local_address: Option<std::net::IpAddr>,
}

/// A channel to `address`. `server_name` is the name the server's certificate must carry
/// (default: the address). Nothing is dialled until the first call.
pub fn channel(
    address: SocketAddr,
    server_name: Option<&str>,
    security: ClientSecurity,
) -> Result<Channel, Error> {
    channel_with(address, server_name, security, ChannelOptions::default())
}

/// [`channel`] with transport tuning.
pub fn channel_with(
    address: SocketAddr,
    server_name: Option<&str>,
    security: ClientSecurity,
    options: ChannelOptions,
) -> Result<Channel, Error> {
    let tls = match &security {
        ClientSecurity::Plaintext => None,
        ClientSecurity::MutualTls { ca_pem, identity } => {
            Some(crate::tls::client_mutual(ca_pem, identity).map_err(|e| setup_error(address, e))?)
        }
        ClientSecurity::ServerOnly { ca_pem } => Some(
            crate::tls::client_without_certificate(ca_pem).map_err(|e| setup_error(address, e))?,
        ),
        ClientSecurity::Pinned { fingerprints } => {
            Some(crate::tls::client_pinned(fingerprints).map_err(|e| setup_error(address, e))?)
        }
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
        .map_err(|e| setup_error(address, e))?
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .initial_stream_window_size(options.stream_window);
    let name = match server_name {
        Some(name) => {
            ServerName::try_from(name.to_string()).map_err(|e| setup_error(address, e))?
        }
        None => ServerName::IpAddress(address.ip().into()),
    };
    let connector = tls.map(|config| TlsConnector::from(Arc::new(config)));
    let local_address = options.local_address;
    Ok(
        endpoint.connect_with_connector_lazy(tower::service_fn(move |_uri| {
            let connector = connector.clone();
            let name = name.clone();
            let dial = async move {
                let tcp = match local_address {
                    None => TcpStream::connect(address).await?,
                    Some(local) => {
                        let socket = match local {
                            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
                        };
                        socket.bind(SocketAddr::new(local, 0))?;
                        socket.connect(address).await?
                    }
                };
                tcp.set_nodelay(true)?;
                Ok::<_, std::io::Error>(match connector {
                    None => Transport::Plain(TokioIo::new(tcp)),
                    Some(connector) => {
                        let tls = connector.connect(name, tcp).await?;
                        Transport::Tls(TokioIo::new(Box::new(tls)))
                    }
                })
            };
            async move {
                let failed = |kind, why: &dyn std::fmt::Display| {
                    std::io::Error::new(kind, format!("connecting to {address}: {why}"))
                };
                match tokio::time::timeout(CONNECT_TIMEOUT, dial).await {
                    Ok(Ok(transport)) => Ok(transport),
                    Ok(Err(error)) => Err(failed(error.kind(), &error)),
                    Err(_) => Err(failed(
                        std::io::ErrorKind::TimedOut,
                        &format_args!("no answer within {CONNECT_TIMEOUT:?}"),
                    )),
                }
            }
        })),
    )
}

/// A dialled connection, either kind.
enum Transport {
    Plain(TokioIo<TcpStream>),
    Tls(TokioIo<Box<tokio_rustls::client::TlsStream<TcpStream>>>),
}

impl hyper::rt::Read for Transport {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Transport {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Transport::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Transport::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Transport::Tls(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}
