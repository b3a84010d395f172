//! Address resources: [`AddressSpec`] (what should be on a link, per layer in `network-config`,
//! merged in `network`), [`AddressStatus`] (what the kernel reports, in `network`) and
//! [`PendingAddress`] (a merged spec not applied yet, and why), with the id schemes and the
//! rules for link names.

use std::fmt;
use std::net::IpAddr;

use cosi_core::{Error, ResourceDefinition, ResourceSpec, Result};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::namespaces;
use crate::network::ConfigLayer;

/// The longest link name Linux accepts (`IFNAMSIZ` less the terminating zero).
pub const MAX_LINK_NAME: usize = 15;

/// IPv4 or IPv6.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AddressFamily {
    /// IPv4.
    Inet4,
    /// IPv6.
    Inet6,
}

impl AddressFamily {
    /// The family of an address.
    pub fn of(address: &IpNet) -> Self {
        match address {
            IpNet::V4(_) => AddressFamily::Inet4,
            IpNet::V6(_) => AddressFamily::Inet6,
        }
    }
}

/// How far an address is valid (the kernel's `rtm_scope` for addresses).
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum AddressScope {
    /// Valid everywhere (0).
    #[default]
    Global,
    /// Valid inside the site (200, IPv6 only).
    Site,
    /// Valid on the link only (253).
    Link,
    /// Valid on this host only (254).
    Host,
    /// Not valid anywhere (255).
    Nowhere,
}

impl AddressScope {
    /// The kernel's number for the scope.
    pub fn to_kernel(self) -> u8 {
        match self {
            AddressScope::Global => 0,
            AddressScope::Site => 200,
            AddressScope::Link => 253,
            AddressScope::Host => 254,
            AddressScope::Nowhere => 255,
        }
    }

    /// The scope for a kernel number; unknown numbers (user-defined scopes) read as the
    /// nearest wider named scope.
    pub fn from_kernel(scope: u8) -> Self {
        match scope {
            0..=199 => AddressScope::Global,
            200..=252 => AddressScope::Site,
            253 => AddressScope::Link,
            254 => AddressScope::Host,
            255 => AddressScope::Nowhere,
        }
    }
}

/// An address a layer wants on a link. In `network-config` its id is
/// `<layer>/<link>/<prefix>`; the merged spec in `network` has id `<link>/<prefix>`.
///
/// ```
/// use cosi_node::network::{AddressSpec, ConfigLayer};
/// let spec = AddressSpec::new("eth0", "192.0.2.10/24".parse().unwrap(), ConfigLayer::Operator);
/// assert_eq!(spec.id(), "eth0/192.0.2.10/24");
/// assert_eq!(spec.layered_id(), "operator/eth0/192.0.2.10/24");
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressSpec {
    /// The address with its prefix length, e.g. `192.0.2.10/24`.
    pub address: IpNet,
    /// The link it goes on.
    pub link_name: String,
    /// IPv4 or IPv6 (follows the address).
    pub family: AddressFamily,
    /// The address scope.
    #[serde(default)]
    pub scope: AddressScope,
    /// The layer that stated it.
    pub layer: ConfigLayer,
}

impl AddressSpec {
    /// A global-scope address on `link` from `layer`.
    pub fn new(link: impl Into<String>, address: IpNet, layer: ConfigLayer) -> Self {
        AddressSpec {
            family: AddressFamily::of(&address),
            address,
            link_name: link.into(),
            scope: AddressScope::Global,
            layer,
        }
    }

    /// With another scope.
    pub fn with_scope(mut self, scope: AddressScope) -> Self {
        self.scope = scope;
        self
    }

    /// The merged id, `<link>/<prefix>`.
    pub fn id(&self) -> String {
        address_id(&self.link_name, &self.address)
    }

    /// The id in `network-config`, `<layer>/<link>/<prefix>`.
    pub fn layered_id(&self) -> String {
        format!("{}/{}", self.layer, self.id())
    }

    /// Checks the spec on its own: a valid link name and the family of the address. `subject`
    /// names the resource in the error.
    pub fn validate(&self, subject: &str) -> Result<()> {
        validate_link_name(&self.link_name)
            .map_err(|message| Error::invalid(subject, "spec.linkName", message.to_string()))?;
        if self.family != AddressFamily::of(&self.address) {
            return Err(Error::invalid(
                subject,
                "spec.family",
                format!(
                    "{:?} does not match the address {} ({:?})",
                    self.family,
                    self.address,
                    AddressFamily::of(&self.address)
                ),
            ));
        }
        Ok(())
    }
}

impl ResourceSpec for AddressSpec {
    const TYPE: &'static str = "AddressSpecs.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::NETWORK;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Address", ".address")
            .with_print_column("Link", ".linkName")
            .with_print_column("Layer", ".layer")
    }
}

/// An address the kernel reports, in `network` with id `<link>/<prefix>`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressStatus {
    /// The address with its prefix length.
    pub address: IpNet,
    /// The local address (differs from `address` on point-to-point links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<IpAddr>,
    /// The broadcast address, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<IpAddr>,
    /// The kernel's index of the link.
    pub link_index: u32,
    /// The link's name.
    pub link_name: String,
    /// IPv4 or IPv6.
    pub family: AddressFamily,
    /// The scope.
    pub scope: AddressScope,
    /// The kernel's flags, by name (`permanent`, `tentative`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

impl AddressStatus {
    /// The id, `<link>/<prefix>`.
    pub fn id(&self) -> String {
        address_id(&self.link_name, &self.address)
    }
}

impl ResourceSpec for AddressStatus {
    const TYPE: &'static str = "AddressStatuses.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::NETWORK;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["address", "addresses"])
            .with_print_column("Address", ".address")
            .with_print_column("Link", ".linkName")
    }
}

/// A merged address spec that is not on its link, and why: in `network` with the spec's id
/// `<link>/<prefix>`, written by the
/// [`AddressSpecController`](crate::network::AddressSpecController) while the address waits
/// (today: for its link to exist), destroyed once it is applied or its spec is gone. An
/// operator asking why an address is missing reads it (`cosictl get pendingaddresses`).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingAddress {
    /// The address with its prefix length.
    pub address: IpNet,
    /// The link it is for.
    pub link_name: String,
    /// What it waits for, in words (`waiting for link "eth9", which does not exist`).
    pub reason: String,
}

impl PendingAddress {
    /// An address waiting for its link, `link_name`, to exist.
    pub fn waiting_for_link(link_name: &str, address: IpNet) -> Self {
        PendingAddress {
            address,
            link_name: link_name.to_string(),
            reason: format!("waiting for link {link_name:?}, which does not exist"),
        }
    }

    /// The id, `<link>/<prefix>`: the spec's.
    pub fn id(&self) -> String {
        address_id(&self.link_name, &self.address)
    }
}

impl ResourceSpec for PendingAddress {
    const TYPE: &'static str = "PendingAddresses.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::NETWORK;

    fn definition() -> ResourceDefinition {
        // Found by its automatic names, `pendingaddresses` and `pendingaddress`.
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Address", ".address")
            .with_print_column("Link", ".linkName")
            .with_print_column("Reason", ".reason")
    }
}

/// `<link>/<prefix>`: the id of a merged address spec, of an address status and of a pending
/// address.
pub fn address_id(link: &str, address: &IpNet) -> String {
    format!("{link}/{address}")
}

/// Checks a link name against the kernel's rules: 1 to 15 bytes, no `/`, no whitespace, no
/// `:` (alias syntax), not `.` or `..`. Returns what is wrong.
///
/// ```
/// use cosi_node::network::validate_link_name;
/// assert!(validate_link_name("eth0").is_ok());
/// assert!(validate_link_name("eth0/1").is_err());
/// assert!(validate_link_name("a-very-long-link-name").is_err());
/// ```
pub fn validate_link_name(name: &str) -> std::result::Result<(), LinkNameError> {
    if name.is_empty() {
        return Err(LinkNameError::Empty);
    }
    if name.len() > MAX_LINK_NAME {
        return Err(LinkNameError::TooLong(name.len()));
    }
    if name == "." || name == ".." {
        return Err(LinkNameError::Dots);
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(LinkNameError::Character(c));
    }
    Ok(())
}

/// What is wrong with a link name.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum LinkNameError {
    /// The name is empty.
    #[error("a link name must not be empty")]
    Empty,
    /// The name is longer than the kernel accepts.
    #[error("a link name has at most {MAX_LINK_NAME} bytes, this one has {0}")]
    TooLong(usize),
    /// `.` and `..` are not link names.
    #[error("\".\" and \"..\" are not link names")]
    Dots,
    /// A character the kernel refuses.
    #[error("a link name must not contain {0:?}")]
    Character(char),
}

impl fmt::Display for AddressFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressFamily::Inet4 => "inet4",
            AddressFamily::Inet6 => "inet6",
        })
    }
}
