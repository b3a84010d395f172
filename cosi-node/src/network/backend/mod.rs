//! The [`NetworkBackend`] trait: what the address controllers need from the operating system —
//! the links, the addresses on them, adding and removing an address, and a subscription that
//! says when any of it changed. Two implementations: [`MemoryBackend`] (tests, with fault
//! injection) and, on Linux with the `netlink` feature, [`NetlinkBackend`] (the kernel).
//!
//! This module owns the OS boundary only; it knows no resources and no controllers.

mod memory;
#[cfg(all(target_os = "linux", feature = "netlink"))]
mod netlink;

use std::net::IpAddr;

use async_trait::async_trait;
use ipnet::IpNet;
use tokio::sync::watch;

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
