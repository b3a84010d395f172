//! [`MemoryBackend`]: links and addresses held in memory, for controller tests. It behaves like
//! the kernel where the controllers can tell (adding an existing address succeeds, removing an
//! absent one succeeds, an address needs its link), notifies subscribers of every change, and
//! lets a test add links and "hand-made" addresses and inject faults into the next calls.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ipnet::IpNet;

use super::{
    AddressRequest, BackendError, ChangeSignal, Changes, Link, NetworkBackend, ObservedAddress,
};
use crate::network::{AddressFamily, AddressScope};

/// A backend call that a fault can be injected into.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum BackendOperation {
    /// [`NetworkBackend::links`].
    Links,
    /// [`NetworkBackend::addresses`].
    Addresses,
    /// [`NetworkBackend::add_address`].
    Add,
    /// [`NetworkBackend::remove_address`].
    Remove,
}

#[derive(Default)]
struct Inner {
    links: BTreeMap<String, u32>,
    /// (link, address) → scope.
    addresses: BTreeMap<(String, IpNet), AddressScope>,
    faults: Vec<(BackendOperation, usize)>,
    adds: u64,
    removes: u64,
}

/// An in-memory network. Cheap to clone; clones share the same network.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use cosi_node::network::{AddressRequest, AddressScope, MemoryBackend, NetworkBackend};
/// let net = MemoryBackend::with_links(["lo", "eth0"]);
/// let request = AddressRequest {
///     link_name: "eth0".into(),
///     address: "192.0.2.1/24".parse().unwrap(),
///     scope: AddressScope::Global,
/// };
/// net.add_address(&request).await.unwrap();
/// assert_eq!(net.addresses().await.unwrap()[0].link_name, "eth0");
/// # });
/// ```
#[derive(Clone, Default)]
pub struct MemoryBackend {
    inner: Arc<Mutex<Inner>>,
    signal: Arc<ChangeSignal>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend").finish_non_exhaustive()
    }
}

impl MemoryBackend {
    /// A network with these links (indexes 1, 2, ... in order).
    pub fn with_links<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let backend = MemoryBackend::default();
        for name in names {
            backend.add_link(name);
        }
        backend
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a link (a no-op if it exists).
    pub fn add_link(&self, name: impl Into<String>) {
        {
            let mut inner = self.lock();
            let next = inner.links.len() as u32 + 1;
            inner.links.entry(name.into()).or_insert(next);
        }
        self.signal.notify();
    }

    /// Removes a link and every address on it, as unplugging a device does.
    pub fn remove_link(&self, name: &str) {
        {
            let mut inner = self.lock();
            inner.links.remove(name);
            inner.addresses.retain(|(link, _), _| link != name);
        }
        self.signal.notify();
    }

    /// Adds an address "by hand", bypassing the controllers (as an operator with a shell
    /// would). Fails if the link does not exist.
    pub fn add_by_hand(&self, link: &str, address: IpNet) -> Result<(), BackendError> {
        {
            let mut inner = self.lock();
            if !inner.links.contains_key(link) {
                return Err(BackendError::LinkNotFound(link.to_string()));
            }
            inner
                .addresses
                .insert((link.to_string(), address), AddressScope::Global);
        }
        self.signal.notify();
        Ok(())
    }

    /// Removes an address "by hand", bypassing the controllers. Returns whether it was there.
    pub fn remove_by_hand(&self, link: &str, address: &IpNet) -> bool {
        let removed = self
            .lock()
            .addresses
            .remove(&(link.to_string(), *address))
            .is_some();
        if removed {
            self.signal.notify();
        }
        removed
    }

    /// Makes the next `count` calls of `operation` fail with [`BackendError::Injected`].
    pub fn fail_next(&self, operation: BackendOperation, count: usize) {
        self.lock().faults.push((operation, count));
    }

    /// Whether `address` is on `link`.
    pub fn has(&self, link: &str, address: &IpNet) -> bool {
        self.lock()
            .addresses
            .contains_key(&(link.to_string(), *address))
    }

    /// The scope of `address` on `link`, if it is there.
    pub fn scope_of(&self, link: &str, address: &IpNet) -> Option<AddressScope> {
        self.lock()
            .addresses
            .get(&(link.to_string(), *address))
            .copied()
    }

    /// How many addresses were added and removed through the trait (not by hand).
    pub fn calls(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.adds, inner.removes)
    }

    fn fault(
        &self,
        operation: BackendOperation,
        what: impl FnOnce() -> String,
    ) -> Result<(), BackendError> {
        let mut inner = self.lock();
        if let Some(slot) = inner
            .faults
            .iter_mut()
            .find(|(op, left)| *op == operation && *left > 0)
        {
            slot.1 -= 1;
            return Err(BackendError::Injected(what()));
        }
        inner.faults.retain(|(_, left)| *left > 0);
        Ok(())
    }
}

#[async_trait]
impl NetworkBackend for MemoryBackend {
    fn name(&self) -> &str {
        "memory"
    }

    async fn links(&self) -> Result<Vec<Link>, BackendError> {
        self.fault(BackendOperation::Links, || "list links".into())?;
        Ok(self
            .lock()
            .links
            .iter()
            .map(|(name, index)| Link {
                index: *index,
                name: name.clone(),
            })
            .collect())
    }

    async fn addresses(&self) -> Result<Vec<ObservedAddress>, BackendError> {
        self.fault(BackendOperation::Addresses, || "list addresses".into())?;
        let inner = self.lock();
        Ok(inner
            .addresses
            .iter()
            .map(|((link, address), scope)| ObservedAddress {
                address: *address,
                local: Some(address.addr()),
                broadcast: None,
                link_index: inner.links.get(link).copied().unwrap_or(0),
                link_name: link.clone(),
                family: AddressFamily::of(address),
                scope: *scope,
                flags: vec!["permanent".to_string()],
            })
            .collect())
    }

    async fn add_address(&self, request: &AddressRequest) -> Result<(), BackendError> {
        self.fault(BackendOperation::Add, || {
            format!("add {} to {}", request.address, request.link_name)
        })?;
        {
            let mut inner = self.lock();
            if !inner.links.contains_key(&request.link_name) {
                return Err(BackendError::LinkNotFound(request.link_name.clone()));
            }
            inner.adds += 1;
            inner
                .addresses
                .insert((request.link_name.clone(), request.address), request.scope);
        }
        self.signal.notify();
        Ok(())
    }

    async fn remove_address(&self, link_name: &str, address: &IpNet) -> Result<(), BackendError> {
        self.fault(BackendOperation::Remove, || {
            format!("remove {address} from {link_name}")
        })?;
        let removed = {
            let mut inner = self.lock();
            inner.removes += 1;
            inner
                .addresses
                .remove(&(link_name.to_string(), *address))
                .is_some()
        };
        if removed {
            self.signal.notify();
        }
        Ok(())
    }

    async fn subscribe(&self) -> Result<Changes, BackendError> {
        Ok(self.signal.subscribe())
    }
}
