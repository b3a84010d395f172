//! Accepted connections: plaintext or TLS, each tagged with its [`Caller`] so every request on
//! it carries the identity (tonic puts a connection's `ConnectInfo` into each request's
//! extensions). Handshakes run in their own tasks under a timeout, so a slow or silent client
//! delays nobody else; a failed handshake (wrong CA, expired or missing certificate) is logged
//! and the connection dropped before any request is read. An accept that fails for want of a
//! resource (file descriptors, memory) is retried after a growing wait ([`AcceptBackoff`]), not
//! at once in a busy loop. At most [`Limits::connections`] connections are open at once; at
//! the limit the loop stops accepting until one closes, so callers queue in the kernel's listen
//! queue instead of taking the process's last descriptors. One certificate (or one address, for
//! maintenance callers, who have no certificate) holds at most [`Limits::per_caller`] of them: a
//! connection past that is closed after its handshake, so one caller cannot take every place.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::Connected;

use super::per_caller::{Claim, PerCaller};
use crate::auth::Caller;

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handshaking at once; more wait in the kernel's accept queue.
const MAX_HANDSHAKES: usize = 64;

/// What the accept loop holds to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Connections open at once, handshaking ones included.
    pub(crate) connections: usize,
    /// Connections one caller may hold: per client certificate name, and for maintenance
    /// callers per address (plaintext callers are trusted and not counted).
    pub(crate) per_caller: usize,
}

/// One accepted connection.
pub(crate) struct Connection {
    stream: Stream,
    caller: Caller,
    _registered: Registered,
    /// Its place among the open connections, given back when it closes.
    _slot: OwnedSemaphorePermit,
}

/// The sockets of the open connections, so that [`OpenConnections::sever_all`] can cut them
/// (what a crash or a network failure looks like to clients).
#[derive(Clone, Default)]
pub(crate) struct OpenConnections {
    inner: Arc<Mutex<OpenInner>>,
    /// Open connections per counted caller.
    callers: Arc<PerCaller>,
}

#[derive(Default)]
struct OpenInner {
    next: u64,
    sockets: HashMap<u64, std::net::TcpStream>,
}

impl OpenConnections {
    fn register(&self, tcp: &TcpStream) -> Registered {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let id = inner.next;
        inner.next += 1;
        // A duplicate descriptor of the socket: shutting it down cuts the connection.
        if let Ok(dup) = socket2::SockRef::from(tcp).try_clone() {
            inner.sockets.insert(id, dup.into());
        }
        Registered {
            id,
            open: self.clone(),
            claim: None,
        }
    }

    /// Shuts down every open socket, both directions.
    pub(crate) fn sever_all(&self) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for socket in inner.sockets.values() {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

struct Registered {
    id: u64,
    open: OpenConnections,
    /// The caller's place this connection holds, once claimed.
    claim: Option<Claim>,
}

impl Registered {
    /// Counts this connection for `caller`, unless the caller already holds `limit`.
    fn claim(&mut self, caller: &Caller, limit: usize) -> io::Result<()> {
        let claim = self.open.callers.claim(caller, limit).map_err(|_| {
            io::Error::other(format!(
                "{} already holds as many connections as one caller may ({limit})",
                caller.describe()
            ))
        })?;
        self.claim = Some(claim);
        Ok(())
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut inner = self.open.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.sockets.remove(&self.id);
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connected for Connection {
    type ConnectInfo = Caller;
    fn connect_info(&self) -> Caller {
        self.caller.clone()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// How connections are secured.
#[derive(Clone)]
pub(crate) enum Acceptor {
    /// Plaintext: every caller trusted.
    Plain,
    /// Mutual TLS: the caller from the verified client certificate.
    Mutual(TlsAcceptor),
    /// Maintenance: server-only TLS.
    Maintenance(TlsAcceptor),
}

impl Acceptor {
    pub(crate) fn mutual(config: rustls::ServerConfig) -> Self {
        Acceptor::Mutual(TlsAcceptor::from(Arc::new(config)))
    }

    pub(crate) fn maintenance(config: rustls::ServerConfig) -> Self {
        Acceptor::Maintenance(TlsAcceptor::from(Arc::new(config)))
    }

    async fn accept(
        &self,
        tcp: TcpStream,
        open: &OpenConnections,
        slot: OwnedSemaphorePermit,
        per_caller: usize,
    ) -> io::Result<Connection> {
        let _ = tcp.set_nodelay(true);
        let mut registered = open.register(&tcp);
        match self {
            Acceptor::Plain => Ok(Connection {
                stream: Stream::Plain(tcp),
                caller: Caller::trusted(),
                _registered: registered,
                _slot: slot,
            }),
            Acceptor::Mutual(acceptor) => {
                let tls = acceptor.accept(tcp).await?;
                let leaf = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|certs| certs.first())
                    .ok_or_else(|| io::Error::other("no client certificate"))?;
                let caller = crate::tls::caller_of_certificate(leaf)
                    .ok_or_else(|| io::Error::other("unreadable client certificate"))?;
                registered.claim(&caller, per_caller)?;
                Ok(Connection {
                    stream: Stream::Tls(Box::new(tls)),
                    caller,
                    _registered: registered,
                    _slot: slot,
                })
            }
            Acceptor::Maintenance(acceptor) => {
                let caller = Caller::maintenance_from(tcp.peer_addr()?.ip());
                let tls = acceptor.accept(tcp).await?;
                registered.claim(&caller, per_caller)?;
                Ok(Connection {
                    stream: Stream::Tls(Box::new(tls)),
                    caller,
                    _registered: registered,
                    _slot: slot,
                })
            }
        }
    }
}

/// The first wait after an accept fails for want of a resource.
pub(crate) const ACCEPT_RETRY_FIRST: Duration = Duration::from_millis(10);
/// The longest wait between two such tries.
pub(crate) const ACCEPT_RETRY_MAX: Duration = Duration::from_secs(1);

/// How long the accept loop waits after a failed accept.
///
/// An error that belongs to one queued connection (it was reset or aborted before it was
/// taken) costs nothing to retry. Any other — out of file descriptors (`EMFILE`, `ENFILE`) or
/// memory (`ENOBUFS`, `ENOMEM`) — repeats until something is freed, so the loop waits
/// [`ACCEPT_RETRY_FIRST`], doubling up to [`ACCEPT_RETRY_MAX`], and starts again from the first
/// wait after an accept succeeds.
#[derive(Debug, Default)]
pub(crate) struct AcceptBackoff {
    next: Option<Duration>,
}

impl AcceptBackoff {
    /// After a failed accept: `None` to try again at once, or how long to wait first.
    pub(crate) fn failed(&mut self, error: &io::Error) -> Option<Duration> {
        if matches!(
            error.kind(),
            io::ErrorKind::ConnectionAborted
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::Interrupted
                | io::ErrorKind::WouldBlock
        ) {
            return None;
        }
        let delay = self.next.unwrap_or(ACCEPT_RETRY_FIRST);
        self.next = Some((delay * 2).min(ACCEPT_RETRY_MAX));
        Some(delay)
    }

    /// After an accepted connection: the next failure waits the first delay again.
    pub(crate) fn succeeded(&mut self) {
        self.next = None;
    }
}

/// Accepts connections until `shutdown` turns true, handing secured ones to `out`.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    acceptor: Acceptor,
    limits: Limits,
    open: OpenConnections,
    out: mpsc::Sender<io::Result<Connection>>,
    mut shutdown: crate::server::StopSignal,
) {
    let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let slots = Arc::new(Semaphore::new(limits.connections));
    let mut backoff = AcceptBackoff::default();
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                tracing::warn!(
                    "at the limit of {} open connections: new callers wait until one closes",
                    limits.connections
                );
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => return,
                    },
                    _ = crate::server::stopped(&mut shutdown) => return,
                }
            }
        };
        let permit = tokio::select! {
            permit = handshakes.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = crate::server::stopped(&mut shutdown) => return,
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.succeeded();
                    accepted
                }
                Err(e) => {
                    let Some(delay) = backoff.failed(&e) else {
                        // That connection is gone; the next one may be fine.
                        tracing::debug!("accept failed for one connection: {e}");
                        continue;
                    };
                    // Out of file descriptors or memory: the queued connection stays queued
                    // and retrying at once would fail at once, a busy loop. Open connections
                    // are served meanwhile, and closing them frees what the next try needs.
                    tracing::warn!("accept failed: {e}; retrying in {delay:?}");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => continue,
                        _ = crate::server::stopped(&mut shutdown) => return,
                    }
                }
            },
            _ = crate::server::stopped(&mut shutdown) => return,
        };
        let acceptor = acceptor.clone();
        let out = out.clone();
        let open = open.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(
                HANDSHAKE_TIMEOUT,
                acceptor.accept(tcp, &open, slot, limits.per_caller),
            )
            .await
            {
                Ok(Ok(connection)) => {
                    let _ = out.send(Ok(connection)).await;
                }
                Ok(Err(e)) => tracing::info!(%peer, "connection refused: {e}"),
                Err(_) => tracing::info!(%peer, "connection refused: handshake timed out"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os_error(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[tokio::test]
    async fn a_caller_gets_its_place_back_when_its_connection_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let open = OpenConnections::default();
        let caller = Caller::from_certificate("reader-user", ["os:reader"]);
        let mut first = open.register(&tcp);
        first.claim(&caller, 1).unwrap();
        let mut second = open.register(&tcp);
        let refused = second.claim(&caller, 1).unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!(
                "{} already holds as many connections as one caller may (1)",
                caller.describe()
            )
        );
        drop(first);
        second.claim(&caller, 1).unwrap();
        // Plaintext callers are trusted and not counted.
        for _ in 0..3 {
            open.register(&tcp).claim(&Caller::trusted(), 1).unwrap();
        }
    }

    #[test]
    fn a_failed_accept_for_want_of_a_resource_waits_doubling_up_to_a_second() {
        let mut backoff = AcceptBackoff::default();
        let emfile = os_error(24);
        let waits: Vec<Duration> = (0..9).map(|_| backoff.failed(&emfile).unwrap()).collect();
        let ms = |ms| Duration::from_millis(ms);
        assert_eq!(
            waits,
            [
                ms(10),
                ms(20),
                ms(40),
                ms(80),
                ms(160),
                ms(320),
                ms(640),
                ms(1000),
                ms(1000)
            ]
        );
    }

    #[test]
    fn an_accepted_connection_resets_the_wait_to_the_first() {
        let mut backoff = AcceptBackoff::default();
        let enfile = os_error(23);
        backoff.failed(&enfile);
        backoff.failed(&enfile);
        backoff.succeeded();
        assert_eq!(backoff.failed(&enfile), Some(ACCEPT_RETRY_FIRST));
    }

    #[test]
    fn an_error_of_one_queued_connection_is_retried_at_once() {
        let mut backoff = AcceptBackoff::default();
        for kind in [
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::Interrupted,
        ] {
            assert_eq!(backoff.failed(&io::Error::from(kind)), None, "{kind:?}");
        }
        // Nor do they count towards the next wait.
        assert_eq!(backoff.failed(&os_error(105)), Some(ACCEPT_RETRY_FIRST));
    }
}
