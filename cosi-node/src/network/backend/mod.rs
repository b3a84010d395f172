//! The [`NetworkBackend`] trait: what the address controllers need from the operating system —
//! the links, the addresses on them, adding and removing an address, and a subscription that
//! says when any of it changed. Two implementations: [`MemoryBackend`] (tests, with fault
//! injection) and, on Linux with the `netlink` feature, [`NetlinkBackend`] (the kernel).
//!
//! This module owns the OS boundary only; it knows no resources and no controllers.

mod memory;
#[cfg(all(target_os = "linux", feature = "netlink"))]
mod netlink;

use std::future::Future;
use std::net::IpAddr;

use async_trait::async_trait;
use cosi_controllers::Backoff;
use futures::{Stream, StreamExt};
use ipnet::IpNet;
use tokio::sync::watch;
use tokio::time::Instant;

pub use memory::{BackendOperation, MemoryBackend};
#[cfg(all(target_os = "linux", feature = "netlink"))]
pub use netlink::NetlinkBackend;

use crate::network::{AddressFamily, AddressScope};

/// A network link as the OS reports it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Link {
    /// The kernel's index.
    pub index: u32,
    /// The name.
    pub name: String,
}

/// An address as the OS reports it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ObservedAddress {
    /// The address with its prefix length.
    pub address: IpNet,
    /// The local address, when the OS reports one separately.
    pub local: Option<IpAddr>,
    /// The broadcast address, if any.
    pub broadcast: Option<IpAddr>,
    /// The link's index.
    pub link_index: u32,
    /// The link's name.
    pub link_name: String,
    /// IPv4 or IPv6.
    pub family: AddressFamily,
    /// The scope.
    pub scope: AddressScope,
    /// Flags by name (`permanent`, `tentative`, ...), sorted.
    pub flags: Vec<String>,
}

/// An address to put on a link.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct AddressRequest {
    /// The link's name.
    pub link_name: String,
    /// The address with its prefix length.
    pub address: IpNet,
    /// The scope.
    pub scope: AddressScope,
}

/// What went wrong in a backend call.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum BackendError {
    /// The link does not exist (yet).
    #[error("link {0:?} not found")]
    LinkNotFound(String),
    /// The OS refused or failed the call.
    #[error("{operation}: {message}")]
    Os {
        /// What was attempted, e.g. `add 192.0.2.1/24 to eth0`.
        operation: String,
        /// What the OS said.
        message: String,
    },
    /// A fault injected by a test ([`MemoryBackend::fail_next`]).
    #[error("{0}: injected fault")]
    Injected(String),
}

/// A subscription to changes of links and addresses: it does not carry the changes, it says
/// that something changed, and any number of changes before the subscriber looks coalesce into
/// one notice (a slow subscriber costs nothing). Read the new state with
/// [`NetworkBackend::addresses`].
#[derive(Debug)]
pub struct Changes {
    receiver: watch::Receiver<u64>,
}

impl Changes {
    /// Waits for the next change. `None` once the backend can report no more changes (its
    /// source closed); a subscriber then re-subscribes.
    pub async fn changed(&mut self) -> Option<()> {
        self.receiver.changed().await.ok()
    }
}

/// The sending side of [`Changes`], kept by a backend.
#[derive(Debug)]
pub(crate) struct ChangeSignal {
    sender: watch::Sender<u64>,
}

impl Default for ChangeSignal {
    fn default() -> Self {
        ChangeSignal {
            sender: watch::Sender::new(0),
        }
    }
}

impl ChangeSignal {
    pub(crate) fn notify(&self) {
        self.sender.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(crate) fn subscribe(&self) -> Changes {
        Changes {
            receiver: self.sender.subscribe(),
        }
    }

    /// Turns an OS change source into notices, for as long as the backend lives: every item of
    /// the source is a notice. A source ends when its socket fails; `reopen` then opens a new
    /// one, after `backoff`'s delay (failed opens count as failures too; the delays start over
    /// once a source has stayed up for the backoff's longest delay). Changes made while no
    /// source was open are not lost: one notice goes out as soon as the new source is open, so
    /// every subscriber reads the state afresh. Without this, a failed socket would leave the
    /// subscribers waiting, unaware, for notices that never come.
    #[cfg_attr(not(all(target_os = "linux", feature = "netlink")), allow(dead_code))]
    pub(crate) async fn keep_following<S, F, Fut>(
        &self,
        mut source: S,
        mut reopen: F,
        mut backoff: Backoff,
        what: &str,
    ) where
        S: Stream + Unpin,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<S, BackendError>>,
    {
        loop {
            let opened = Instant::now();
            while source.next().await.is_some() {
                self.notify();
            }
            if opened.elapsed() >= backoff.max_delay() {
                backoff.reset();
            }
            source = loop {
                let delay = backoff.next_delay();
                tracing::warn!(
                    source = what,
                    ?delay,
                    "the change subscription ended; opening a new one"
                );
                tokio::time::sleep(delay).await;
                match reopen().await {
                    Ok(source) => break source,
                    Err(error) => {
                        tracing::warn!(source = what, %error, "could not open a new change subscription")
                    }
                }
            };
            self.notify();
        }
    }
}

/// What the address controllers need from the OS. See the module docs.
#[async_trait]
pub trait NetworkBackend: Send + Sync + 'static {
    /// A short name for logs and errors (`memory`, `netlink`).
    fn name(&self) -> &str;

    /// Every link.
    async fn links(&self) -> Result<Vec<Link>, BackendError>;

    /// Every address on every link.
    async fn addresses(&self) -> Result<Vec<ObservedAddress>, BackendError>;

    /// Puts an address on a link. Adding an address that is already there succeeds; one the
    /// OS refuses because the same IP is on the link with another prefix (IPv6 on Linux) is an
    /// error naming what is there.
    async fn add_address(&self, request: &AddressRequest) -> Result<(), BackendError>;

    /// Removes an address from a link. Removing an address (or from a link) that is not there
    /// succeeds: the goal, its absence, holds.
    async fn remove_address(&self, link_name: &str, address: &IpNet) -> Result<(), BackendError>;

    /// Subscribes to changes of links and addresses.
    async fn subscribe(&self) -> Result<Changes, BackendError>;
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures::channel::mpsc;

    use super::*;

    type Source = mpsc::UnboundedReceiver<()>;

    /// What successive reopens return, and how many there were.
    #[derive(Clone, Default)]
    struct Reopens {
        results: Arc<Mutex<VecDeque<Result<Source, BackendError>>>>,
        calls: Arc<Mutex<usize>>,
    }

    impl Reopens {
        fn new(results: Vec<Result<Source, BackendError>>) -> Self {
            Reopens {
                results: Arc::new(Mutex::new(results.into())),
                calls: Arc::default(),
            }
        }

        fn calls(&self) -> usize {
            *self.calls.lock().unwrap()
        }

        async fn next(&self) -> Result<Source, BackendError> {
            *self.calls.lock().unwrap() += 1;
            self.results
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or_else(|| Err(BackendError::Injected("no more sources".into())))
        }
    }

    /// Waits for the next notice; fails after a minute of the test's (paused) clock.
    async fn notice(changes: &mut Changes) {
        tokio::time::timeout(Duration::from_secs(60), changes.changed())
            .await
            .expect("a notice")
            .expect("the subscription");
    }

    fn refused() -> Result<Source, BackendError> {
        Err(BackendError::Injected("open".into()))
    }

    /// Follows `first`, reopening from `reopens`, with a backoff of 100 ms doubling to 1 s.
    fn follow(first: Source, reopens: &Reopens) -> (Changes, tokio::task::JoinHandle<()>) {
        let signal = Arc::new(ChangeSignal::default());
        let changes = signal.subscribe();
        let reopens = reopens.clone();
        let task = tokio::spawn(async move {
            let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
            signal
                .keep_following(
                    first,
                    move || {
                        let r = reopens.clone();
                        async move { r.next().await }
                    },
                    backoff,
                    "test",
                )
                .await
        });
        (changes, task)
    }

    #[tokio::test(start_paused = true)]
    async fn every_item_of_the_source_is_a_notice() {
        let (sender, first) = mpsc::unbounded();
        let (mut changes, _task) = follow(first, &Reopens::default());
        sender.unbounded_send(()).unwrap();
        notice(&mut changes).await;
        sender.unbounded_send(()).unwrap();
        notice(&mut changes).await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_source_is_reopened_after_the_backoff_and_subscribers_hear_once_it_is_open() {
        let (sender, first) = mpsc::unbounded();
        let (second_sender, second) = mpsc::unbounded();
        let reopens = Reopens::new(vec![Ok(second)]);
        let (mut changes, _task) = follow(first, &reopens);
        let ended = Instant::now();
        drop(sender);
        notice(&mut changes).await;
        assert_eq!(ended.elapsed(), Duration::from_millis(100));
        assert_eq!(reopens.calls(), 1);
        second_sender.unbounded_send(()).unwrap();
        notice(&mut changes).await;
        assert_eq!(reopens.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_reopen_is_tried_again_with_a_longer_delay() {
        let (sender, first) = mpsc::unbounded();
        let (_second_sender, second) = mpsc::unbounded();
        let reopens = Reopens::new(vec![refused(), refused(), Ok(second)]);
        let (mut changes, _task) = follow(first, &reopens);
        let ended = Instant::now();
        drop(sender);
        notice(&mut changes).await;
        assert_eq!(ended.elapsed(), Duration::from_millis(100 + 200 + 400));
        assert_eq!(reopens.calls(), 3);
    }

    /// The delay before the third source opens, when the second stayed up for `up`.
    async fn delay_after_a_second_source_up_for(up: Duration) -> Duration {
        let (sender, first) = mpsc::unbounded();
        let (second_sender, second) = mpsc::unbounded();
        let (_third_sender, third) = mpsc::unbounded();
        let reopens = Reopens::new(vec![Ok(second), Ok(third)]);
        let (mut changes, _task) = follow(first, &reopens);
        drop(sender);
        notice(&mut changes).await;
        tokio::time::sleep(up).await;
        let ended = Instant::now();
        drop(second_sender);
        notice(&mut changes).await;
        assert_eq!(reopens.calls(), 2);
        ended.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_ends_again_at_once_waits_longer_before_the_next() {
        let delay = delay_after_a_second_source_up_for(Duration::ZERO).await;
        assert_eq!(delay, Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_stayed_up_for_the_longest_delay_starts_the_delays_over() {
        let delay = delay_after_a_second_source_up_for(Duration::from_secs(1)).await;
        assert_eq!(delay, Duration::from_millis(100));
    }
}
