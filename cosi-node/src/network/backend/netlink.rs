//! [`NetlinkBackend`]: the Linux kernel's links and addresses through rtnetlink (Linux only,
//! feature `netlink`).
//!
//! Two netlink sockets, both opened in the network namespace of the thread that calls
//! [`NetlinkBackend::connect`] (a socket belongs to the namespace it was created in): one for
//! requests (dumps, add, delete) and one bound to the `RTNLGRP_LINK`, `RTNLGRP_IPV4_IFADDR`
//! and `RTNLGRP_IPV6_IFADDR` multicast groups. Every message on the second one is a change
//! notice for [`NetworkBackend::subscribe`]rs; nothing polls. rtnetlink hands the messages over
//! through its own unbounded channel, which a task here drains as they come, collapsing them
//! into one coalescing notice, so they cannot pile up. A kernel overrun (`ENOBUFS`: messages
//! lost) is a message like the others, so subscribers re-read; any other socket error ends
//! that socket, and a new one is opened in the same namespace after a backoff, followed by one
//! notice (see [`NetlinkBackend::connect`]).
//!
//! The kernel has one habit the controllers must live with: deleting the primary IPv4 address
//! of a subnet also deletes that subnet's secondary addresses, unless the link's
//! `promote_secondaries` sysctl is set. The spec controller sees them vanish through the
//! subscription and adds back the ones still stated.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use cosi_controllers::Backoff;
use futures::channel::mpsc::UnboundedReceiver;
use futures::{Stream, StreamExt, TryStreamExt};
use ipnet::IpNet;
use nix::sched::{setns, CloneFlags};
use rtnetlink::packet_core::NetlinkMessage;
use rtnetlink::packet_route::address::{
    AddressAttribute, AddressFlags, AddressMessage, AddressScope as KernelScope,
};
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::packet_route::AddressFamily as KernelFamily;
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::sys::SocketAddr;
use rtnetlink::{Handle, MulticastGroup};
use tokio::task::{AbortHandle, JoinHandle};

use super::{
    AddressRequest, BackendError, ChangeSignal, Changes, Link, NetworkBackend, ObservedAddress,
};
use crate::network::{AddressFamily, AddressScope};

/// `EEXIST`: adding an address that is already there.
const EEXIST: i32 = 17;
/// `EADDRNOTAVAIL`: deleting an address that is not there.
const EADDRNOTAVAIL: i32 = 99;
/// `ENODEV`: the link went away.
const ENODEV: i32 = 19;

/// The kernel's addresses. See the module docs.
pub struct NetlinkBackend {
    handle: Handle,
    signal: Arc<ChangeSignal>,
    tasks: Vec<JoinHandle<()>>,
    /// The open subscription's socket task.
    #[cfg(test)]
    current: Arc<Mutex<Option<AbortHandle>>>,
}

/// The subscription socket's messages; dropping it closes the socket.
struct Subscription {
    messages: UnboundedReceiver<(NetlinkMessage<RouteNetlinkMessage>, SocketAddr)>,
    connection: JoinHandle<()>,
}

impl Subscription {
    /// Opens a socket bound to the link and address groups, in the calling thread's network
    /// namespace (inside a tokio runtime: the socket's task is spawned on it). `current` is
    /// told the socket's task.
    fn open(current: &Mutex<Option<AbortHandle>>) -> Result<Self, BackendError> {
        let (connection, _, messages) = rtnetlink::new_multicast_connection(&[
            MulticastGroup::Link,
            MulticastGroup::Ipv4Ifaddr,
            MulticastGroup::Ipv6Ifaddr,
        ])
        .map_err(|e| os_error("subscribe to netlink link and address groups", e))?;
        let connection = tokio::spawn(connection);
        *current.lock().expect("not poisoned") = Some(connection.abort_handle());
        Ok(Subscription {
            messages,
            connection,
        })
    }

    /// Opens one in `namespace`, from a thread of its own (a thread that enters a namespace
    /// stays in it, so it must not be one of the runtime's).
    async fn open_in(
        namespace: Arc<File>,
        runtime: tokio::runtime::Handle,
        current: Arc<Mutex<Option<AbortHandle>>>,
    ) -> Result<Self, BackendError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("netlink-subscribe".into())
            .spawn(move || {
                let opened = setns(&*namespace, CloneFlags::CLONE_NEWNET)
                    .map_err(|e| os_error("enter the backend's network namespace", e))
                    .and_then(|()| {
                        let _runtime = runtime.enter();
                        Subscription::open(&current)
                    });
                let _ = answer.send(opened);
            })
            .map_err(|e| os_error("start a thread to open a netlink socket", e))?;
        answered.await.unwrap_or_else(|_| {
            Err(os_error(
                "open a netlink socket",
                "its thread ended without an answer",
            ))
        })
    }
}

impl Stream for Subscription {
    type Item = ();

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<()>> {
        self.messages.poll_next_unpin(cx).map(|m| m.map(|_| ()))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl std::fmt::Debug for NetlinkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetlinkBackend").finish_non_exhaustive()
    }
}

impl Drop for NetlinkBackend {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn os_error(operation: impl Into<String>, error: impl std::fmt::Display) -> BackendError {
    BackendError::Os {
        operation: operation.into(),
        message: error.to_string(),
    }
}

/// The errno of a netlink error reply, if it is one.
fn errno(error: &rtnetlink::Error) -> Option<i32> {
    match error {
        rtnetlink::Error::NetlinkError(message) => Some(-message.raw_code()),
        _ => None,
    }
}

impl NetlinkBackend {
    /// Opens the request and subscription sockets in the calling thread's network namespace.
    /// Must be called inside a tokio runtime (the sockets' tasks are spawned on it).
    ///
    /// If the subscription socket fails later (the kernel reports an error other than an
    /// overrun), a new one is opened in the same namespace, after a backoff (100 ms doubling
    /// to 30 s), and subscribers get a notice once it is open, so they read the kernel's
    /// state afresh.
    pub fn connect() -> Result<Self, BackendError> {
        let namespace = Arc::new(
            File::open("/proc/thread-self/ns/net")
                .map_err(|e| os_error("open this thread's network namespace", e))?,
        );
        let (connection, handle, _) =
            rtnetlink::new_connection().map_err(|e| os_error("open a netlink socket", e))?;
        let requests = tokio::spawn(connection);
        let current = Arc::new(Mutex::new(None));
        let first = Subscription::open(&current).inspect_err(|_| requests.abort())?;
        let signal = Arc::new(ChangeSignal::default());
        let runtime = tokio::runtime::Handle::current();
        let follow = {
            let signal = signal.clone();
            let current = current.clone();
            tokio::spawn(async move {
                let reopen = move || {
                    Subscription::open_in(namespace.clone(), runtime.clone(), current.clone())
                };
                signal
                    .keep_following(first, reopen, Backoff::default(), "netlink")
                    .await;
            })
        };
        Ok(NetlinkBackend {
            handle,
            signal,
            tasks: vec![requests, follow],
            #[cfg(test)]
            current,
        })
    }

    /// Ends the subscription's socket task, as a socket error does (tests only).
    #[cfg(test)]
    fn end_subscription(&self) {
        if let Some(task) = self.current.lock().expect("not poisoned").take() {
            task.abort();
        }
    }

    async fn link_index(&self, name: &str) -> Result<Option<u32>, BackendError> {
        Ok(self
            .links()
            .await?
            .into_iter()
            .find(|l| l.name == name)
            .map(|l| l.index))
    }

    /// Whether an `EEXIST` answer to adding `request` means it is there. The kernel also
    /// answers so when the address is on the link with another prefix (IPv6 holds an address
    /// once per link, whatever its prefix): that is a failure, naming what is there.
    async fn already_there(
        &self,
        request: &AddressRequest,
        index: u32,
        error: rtnetlink::Error,
    ) -> Result<(), BackendError> {
        let operation = format!("add {} to {}", request.address, request.link_name);
        let on_link: Vec<IpNet> = self
            .dump_addresses()
            .await?
            .iter()
            .filter(|m| m.header.index == index)
            .filter_map(prefix_of)
            .collect();
        if on_link.contains(&request.address) {
            return Ok(());
        }
        match on_link
            .iter()
            .find(|present| present.addr() == request.address.addr())
        {
            Some(present) => Err(os_error(
                operation,
                format!(
                    "{} is already on {} as {present}",
                    request.address.addr(),
                    request.link_name
                ),
            )),
            None => Err(os_error(operation, error)),
        }
    }

    async fn dump_addresses(&self) -> Result<Vec<AddressMessage>, BackendError> {
        self.handle
            .address()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| os_error("list addresses", e))
    }
}

/// The address and prefix a kernel message describes. For IPv4 the local address is the
/// interface's own (`IFA_ADDRESS` is the peer on point-to-point links).
fn prefix_of(message: &AddressMessage) -> Option<IpNet> {
    let mut address = None;
    let mut local = None;
    for attribute in &message.attributes {
        match attribute {
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Local(ip) => local = Some(*ip),
            _ => {}
        }
    }
    let ip = match message.header.family {
        KernelFamily::Inet => local.or(address),
        _ => address.or(local),
    }?;
    IpNet::new(ip, message.header.prefix_len).ok()
}

fn flag_names(message: &AddressMessage) -> Vec<String> {
    let flags = message
        .attributes
        .iter()
        .find_map(|a| match a {
            AddressAttribute::Flags(flags) => Some(*flags),
            _ => None,
        })
        .unwrap_or_else(|| AddressFlags::from_bits_retain(u32::from(message.header.flags.bits())));
    let named = [
        (AddressFlags::Secondary, "secondary"),
        (AddressFlags::Nodad, "nodad"),
        (AddressFlags::Optimistic, "optimistic"),
        (AddressFlags::Dadfailed, "dadfailed"),
        (AddressFlags::Homeaddress, "homeaddress"),
        (AddressFlags::Deprecated, "deprecated"),
        (AddressFlags::Tentative, "tentative"),
        (AddressFlags::Permanent, "permanent"),
        (AddressFlags::Managetempaddr, "managetempaddr"),
        (AddressFlags::Noprefixroute, "noprefixroute"),
        (AddressFlags::Mcautojoin, "mcautojoin"),
        (AddressFlags::StablePrivacy, "stable-privacy"),
    ];
    let mut names: Vec<String> = named
        .into_iter()
        .filter(|(flag, _)| flags.contains(*flag))
        .map(|(_, name)| name.to_string())
        .collect();
    names.sort();
    names
}

#[async_trait]
impl NetworkBackend for NetlinkBackend {
    fn name(&self) -> &str {
        "netlink"
    }

    async fn links(&self) -> Result<Vec<Link>, BackendError> {
        let messages: Vec<_> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(|e| os_error("list links", e))?;
        Ok(messages
            .into_iter()
            .filter_map(|m| {
                let name = m.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(name) => Some(name.clone()),
                    _ => None,
                })?;
                Some(Link {
                    index: m.header.index,
                    name,
                })
            })
            .collect())
    }

    async fn addresses(&self) -> Result<Vec<ObservedAddress>, BackendError> {
        let names: BTreeMap<u32, String> = self
            .links()
            .await?
            .into_iter()
            .map(|l| (l.index, l.name))
            .collect();
        let mut out = Vec::new();
        for message in self.dump_addresses().await? {
            let Some(address) = prefix_of(&message) else {
                continue;
            };
            let index = message.header.index;
            // An address whose link vanished between the two dumps is gone too.
            let Some(link_name) = names.get(&index) else {
                continue;
            };
            let mut local = None;
            let mut broadcast = None;
            for attribute in &message.attributes {
                match attribute {
                    AddressAttribute::Local(ip) => local = Some(*ip),
                    AddressAttribute::Broadcast(ip) => broadcast = Some(IpAddr::V4(*ip)),
                    _ => {}
                }
            }
            out.push(ObservedAddress {
                address,
                local,
                broadcast,
                link_index: index,
                link_name: link_name.clone(),
                family: AddressFamily::of(&address),
                scope: AddressScope::from_kernel(u8::from(message.header.scope)),
                flags: flag_names(&message),
            });
        }
        Ok(out)
    }

    async fn add_address(&self, request: &AddressRequest) -> Result<(), BackendError> {
        let operation = || format!("add {} to {}", request.address, request.link_name);
        let index = self
            .link_index(&request.link_name)
            .await?
            .ok_or_else(|| BackendError::LinkNotFound(request.link_name.clone()))?;
        let mut add =
            self.handle
                .address()
                .add(index, request.address.addr(), request.address.prefix_len());
        add.message_mut().header.scope = KernelScope::from(request.scope.to_kernel());
        match add.execute().await {
            Ok(()) => Ok(()),
            Err(e) if errno(&e) == Some(EEXIST) => self.already_there(request, index, e).await,
            Err(e) if errno(&e) == Some(ENODEV) => {
                Err(BackendError::LinkNotFound(request.link_name.clone()))
            }
            Err(e) => Err(os_error(operation(), e)),
        }
    }

    async fn remove_address(&self, link_name: &str, address: &IpNet) -> Result<(), BackendError> {
        let Some(index) = self.link_index(link_name).await? else {
            // No link, no address on it.
            return Ok(());
        };
        let found = self
            .dump_addresses()
            .await?
            .into_iter()
            .find(|m| m.header.index == index && prefix_of(m) == Some(*address));
        let Some(message) = found else {
            return Ok(());
        };
        match self.handle.address().del(message).execute().await {
            Ok(()) => Ok(()),
            Err(e) if matches!(errno(&e), Some(EADDRNOTAVAIL) | Some(ENODEV)) => Ok(()),
            Err(e) => Err(os_error(format!("remove {address} from {link_name}"), e)),
        }
    }

    async fn subscribe(&self) -> Result<Changes, BackendError> {
        Ok(self.signal.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cosi_test_support::netns::Namespace;

    use super::*;

    /// Bounds every wait; only a broken system takes this long.
    const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

    #[test]
    fn a_subscription_whose_socket_ended_is_opened_again_and_hears_the_kernel() {
        let ns = Namespace::create();
        let kernel = ns.kernel();
        ns.enter(move || async move {
            let backend = NetlinkBackend::connect().expect("netlink sockets in the namespace");
            let mut changes = backend.subscribe().await.unwrap();
            backend.end_subscription();
            tokio::time::timeout(EVENT_TIMEOUT, changes.changed())
                .await
                .expect("a notice once a new socket is open")
                .expect("the subscription");
            kernel.ip(&["addr", "add", "192.0.2.40/24", "dev", "veth0"]);
            let added: IpNet = "192.0.2.40/24".parse().unwrap();
            loop {
                tokio::time::timeout(EVENT_TIMEOUT, changes.changed())
                    .await
                    .expect("the new socket hears the kernel's change")
                    .expect("the subscription");
                let addresses = backend.addresses().await.unwrap();
                if addresses.iter().any(|a| a.address == added) {
                    break;
                }
            }
        });
    }
}
