//! The server outlives running out of file descriptors: while none is free, a queued
//! connection cannot be accepted, and the accept loop waits before each new try (10 ms,
//! doubling) instead of retrying at once in a busy loop; once descriptors are free again, the
//! queued caller is served.
//!
//! Both tests lower this process's descriptor limit, so they run in their own test binary and
//! take turns ([`alone`]: each on its own runtime, dropped, with every descriptor it held,
//! before the next starts). The clock is paused: the waits pass in virtual time, and the
//! failures are timed in it exactly.

mod support;

use std::fs::File;
use std::sync::Arc;

use cosi_api::client::RemoteState;
use cosi_core::{Error, ResourceSpec, State};
use cosi_state::conformance::Widget;
use nix::sys::resource::{getrlimit, setrlimit, Resource as Limit};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Runs `test` on a fresh current-thread runtime with the clock paused, while no other test of
/// this binary runs.
fn alone<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F) {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(test());
}

fn codec() -> cosi_api::codec::Codec {
    cosi_api::codec::Codec::new(Arc::new(support::conformance_registry()))
}

/// Records, in the runtime's (paused) clock, when the server logged a failed accept that it
/// waits after.
struct AcceptFailures(watch::Sender<Vec<Instant>>);

impl<S: tracing::Subscriber> Layer<S> for AcceptFailures {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        struct Message(String);
        impl Visit for Message {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0.starts_with("accept failed:") {
            let now = Instant::now();
            self.0.send_modify(|times| times.push(now));
        }
    }
}

/// Every free descriptor of this process taken, under a lowered limit; dropping it gives them
/// back and restores the limit.
struct Exhausted {
    files: Vec<File>,
    limits: (u64, u64),
}

impl Exhausted {
    /// Lowers the soft limit to a little above the descriptors in use and opens files until
    /// none is left, then frees `spare` of them for the test's own use.
    fn leaving(spare: usize) -> Exhausted {
        let limits = getrlimit(Limit::RLIMIT_NOFILE).unwrap();
        let highest = std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .max()
            .unwrap();
        setrlimit(Limit::RLIMIT_NOFILE, highest + 32, limits.1).unwrap();
        let mut files = Vec::new();
        loop {
            match File::open("/dev/null") {
                Ok(file) => files.push(file),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(nix::libc::EMFILE), "{e}");
                    break;
                }
            }
        }
        assert!(
            files.len() >= spare,
            "only {} descriptors taken",
            files.len()
        );
        files.truncate(files.len() - spare);
        Exhausted { files, limits }
    }
}

impl Drop for Exhausted {
    fn drop(&mut self) {
        self.files.clear();
        let _ = setrlimit(Limit::RLIMIT_NOFILE, self.limits.0, self.limits.1);
    }
}

/// A server, a client of it with a get under way that connected while no descriptor was left
/// for the server to accept it with, and the failures recorded so far.
struct Starved {
    _server: cosi_api::server::ServerHandle,
    get: tokio::task::JoinHandle<Result<cosi_core::SharedResource, Error>>,
    exhausted: Exhausted,
    failures: watch::Receiver<Vec<Instant>>,
    _log: tracing::subscriber::DefaultGuard,
}

async fn starved_server() -> Starved {
    let (record, failures) = watch::channel(Vec::new());
    let log = tracing::subscriber::set_default(
        tracing_subscriber::registry().with(AcceptFailures(record)),
    );
    let store = Arc::new(cosi_state::MemoryState::default());
    let server = support::plaintext_server(store, codec(), support::any_port()).await;
    let client = support::plaintext_client(server.local_addr(), codec());
    // One descriptor left: the client's socket. The server has none to accept it with.
    let exhausted = Exhausted::leaving(1);
    let get = tokio::spawn(async move {
        let client: RemoteState = client;
        client.get(&Widget::kind().pointer("absent")).await
    });
    Starved {
        _server: server,
        get,
        exhausted,
        failures,
        _log: log,
    }
}

#[test]
fn an_accept_that_fails_for_want_of_descriptors_is_retried_after_doubling_waits() {
    alone(doubling_waits);
}

async fn doubling_waits() {
    let mut starved = starved_server().await;
    // Virtual time: a loop that stops trying fails here instead of hanging.
    let times = tokio::time::timeout(
        Duration::from_secs(60),
        starved.failures.wait_for(|times| times.len() >= 4),
    )
    .await
    .expect("four failed accepts")
    .unwrap()
    .clone();
    drop(starved.exhausted);
    let gaps: Vec<Duration> = times.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert_eq!(
        gaps[..3],
        [
            Duration::from_millis(10),
            Duration::from_millis(20),
            Duration::from_millis(40)
        ]
    );
    starved.get.abort();
}

#[test]
fn a_caller_queued_while_descriptors_ran_out_is_served_once_they_are_free() {
    alone(served_once_free);
}

async fn served_once_free() {
    let mut starved = starved_server().await;
    tokio::time::timeout(
        Duration::from_secs(60),
        starved.failures.wait_for(|times| !times.is_empty()),
    )
    .await
    .expect("a failed accept")
    .unwrap();
    assert!(!starved.get.is_finished());
    drop(starved.exhausted);
    // Virtual time: it passes only while nothing else can run, so a server that never
    // accepts again fails here instead of hanging.
    let served = tokio::time::timeout(Duration::from_secs(60), starved.get)
        .await
        .expect("the queued call is answered");
    match served.unwrap() {
        Err(Error::NotFound { pointer }) => {
            assert_eq!(pointer, Widget::kind().pointer("absent"))
        }
        other => panic!("expected NotFound from the server, got {other:?}"),
    }
}
