//! [`NetlinkBackend`]: the Linux kernel's links and addresses through rtnetlink (Linux only,
//! feature `netlink`).
//!
//! Two netlink sockets, both opened in the network namespace of the thread that calls
//! [`NetlinkBackend::connect`] (a socket belongs to the namespace it was created in): one for
//! requests (dumps, add, delete) and one bound to the `RTNLGRP_LINK`, `RTNLGRP_IPV4_IFADDR`
//! and `RTNLGRP_IPV6_IFADDR` multicast groups. Every message on the second one is a change
//! notice for [`NetworkBackend::subscribe`]rs; nothing polls. rtnetlink hands the messages over
//! through its own unbounded channel, which a task here drains as they come, collapsing them
//! into one coalescing notice, so they cannot pile up.
//!
//! The kernel has one habit the controllers must live with: deleting the primary IPv4 address
//! of a subnet also deletes that subnet's secondary addresses, unless the link's
//! `promote_secondaries` sysctl is set. The spec controller sees them vanish through the
//! subscription and adds back the ones still stated.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::packet_route::address::{
    AddressAttribute, AddressFlags, AddressMessage, AddressScope as KernelScope,
};
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::packet_route::AddressFamily as KernelFamily;
use rtnetlink::{Handle, MulticastGroup};
use tokio::task::JoinHandle;

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
    pub fn connect() -> Result<Self, BackendError> {
        let (connection, handle, _) =
            rtnetlink::new_connection().map_err(|e| os_error("open a netlink socket", e))?;
        let requests = tokio::spawn(connection);
        let (connection, _, mut messages) = rtnetlink::new_multicast_connection(&[
            MulticastGroup::Link,
            MulticastGroup::Ipv4Ifaddr,
            MulticastGroup::Ipv6Ifaddr,
        ])
        .map_err(|e| {
            requests.abort();
            os_error("subscribe to netlink link and address groups", e)
        })?;
        let subscription = tokio::spawn(connection);
        let signal = Arc::new(ChangeSignal::default());
        let notices = signal.clone();
        let drain = tokio::spawn(async move {
            while messages.next().await.is_some() {
                notices.notify();
            }
            tracing::warn!("the netlink subscription socket closed; no more change notices");
        });
        Ok(NetlinkBackend {
            handle,
            signal,
            tasks: vec![requests, subscription, drain],
        })
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
