//! Node addresses: the addresses a node is known by, derived from the address statuses.
//! [`NodeAddress`] `default` (one address, sticky), `current`, `routed`, `accumulative`, and per
//! [`NodeAddressFilter`] the filtered variants `<kind>-<filter>` (e.g. `routed-no-k8s`).
//!
//! The derivation is a pure function ([`derive_node_addresses`]); the controller that runs it
//! lives in `controllers::node_address`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use cosi_core::{ResourceDefinition, ResourceSpec};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::namespaces;
use crate::network::{AddressScope, AddressStatus};

/// Id of the node's one default address.
pub const DEFAULT: &str = "default";
/// Id of the addresses on the node's links, plus external ones.
pub const CURRENT: &str = "current";
/// Id of the addresses other nodes can route to (current without `external`).
pub const ROUTED: &str = "routed";
/// Id of every address the node has had since it started (never shrinks).
pub const ACCUMULATIVE: &str = "accumulative";
/// Id of the filter that excludes the Kubernetes pod and service subnets.
pub const FILTER_NO_K8S: &str = "no-k8s";
/// The link name of external addresses (platform public IPs, not on any local link).
pub const EXTERNAL_LINK: &str = "external";

/// A set of node addresses, sorted: IPv4 before IPv6, then by address, then by prefix length.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAddress {
    /// The addresses with their prefix lengths.
    pub addresses: Vec<IpNet>,
}

impl NodeAddress {
    /// The addresses without prefix lengths.
    pub fn ips(&self) -> Vec<IpAddr> {
        self.addresses.iter().map(IpNet::addr).collect()
    }
}

impl ResourceSpec for NodeAddress {
    const TYPE: &'static str = "NodeAddresses.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::NETWORK;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Addresses", ".addresses")
    }
}

/// A filter over node addresses, in `network` by filter id (`no-k8s`). An address passes when
/// it lies in one of the include subnets (or there are none) and in none of the exclude
/// subnets.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAddressFilter {
    /// Keep only addresses inside these (all when empty).
    #[serde(default)]
    pub include_subnets: Vec<IpNet>,
    /// Drop addresses inside these.
    #[serde(default)]
    pub exclude_subnets: Vec<IpNet>,
}

impl NodeAddressFilter {
    /// Whether `address` passes the filter.
    ///
    /// ```
    /// use cosi_node::network::NodeAddressFilter;
    /// let no_k8s = NodeAddressFilter {
    ///     include_subnets: vec![],
    ///     exclude_subnets: vec!["10.244.0.0/16".parse().unwrap()],
    /// };
    /// assert!(no_k8s.passes(&"192.0.2.1/24".parse().unwrap()));
    /// assert!(!no_k8s.passes(&"10.244.3.1/24".parse().unwrap()));
    /// ```
    pub fn passes(&self, address: &IpNet) -> bool {
        let ip = address.addr();
        (self.include_subnets.is_empty() || self.include_subnets.iter().any(|s| s.contains(&ip)))
            && !self.exclude_subnets.iter().any(|s| s.contains(&ip))
    }
}

impl ResourceSpec for NodeAddressFilter {
    const TYPE: &'static str = "NodeAddressFilters.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::NETWORK;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Include Subnets", ".includeSubnets")
            .with_print_column("Exclude Subnets", ".excludeSubnets")
    }
}

/// What the node addresses were before this derivation (for stickiness and accumulation).
#[derive(Clone, Debug, Default)]
pub struct PreviousNodeAddresses {
    /// The last `default`.
    pub default: Option<IpNet>,
    /// The last `accumulative`.
    pub accumulative: Vec<IpNet>,
}

/// Whether an address can identify the node: global or site scope, and not loopback,
/// multicast, link-local or unspecified.
pub fn is_node_address(status: &AddressStatus) -> bool {
    if status.scope > AddressScope::Site {
        return false;
    }
    match status.address.addr() {
        IpAddr::V4(ip) => {
            !(ip.is_loopback() || ip.is_multicast() || ip.is_link_local() || ip.is_unspecified())
        }
        IpAddr::V6(ip) => {
            !(ip.is_loopback()
                || ip.is_multicast()
                || ip.is_unicast_link_local()
                || ip.is_unspecified())
        }
    }
}

/// The sort order of node addresses: IPv4 first, then by address, then by prefix length.
pub fn sort_addresses(addresses: &mut Vec<IpNet>) {
    addresses.sort_by(|a, b| {
        (a.addr().is_ipv6(), a.addr(), a.prefix_len()).cmp(&(
            b.addr().is_ipv6(),
            b.addr(),
            b.prefix_len(),
        ))
    });
    addresses.dedup();
}

/// Derives every node address resource (id → spec) from the statuses, the filters (id →
/// filter) and what was there before. See the module docs for the ids.
///
/// - `current`: every node address ([`is_node_address`]).
/// - `routed`: `current` without external addresses.
/// - `default`: the previous default while it is still current; otherwise the first current
///   address. With no current address at all it keeps the previous one (a link that bounces
///   does not move the node's identity); it is absent only before the first address appears.
/// - `accumulative`: the previous accumulative set plus `current`.
/// - `<kind>-<filter>` for `current`, `routed` and `accumulative` and every filter.
pub fn derive_node_addresses(
    statuses: &[AddressStatus],
    filters: &BTreeMap<String, NodeAddressFilter>,
    previous: &PreviousNodeAddresses,
) -> BTreeMap<String, NodeAddress> {
    let mut current: Vec<IpNet> = statuses
        .iter()
        .filter(|s| is_node_address(s))
        .map(|s| s.address)
        .collect();
    sort_addresses(&mut current);
    let mut routed: Vec<IpNet> = statuses
        .iter()
        .filter(|s| is_node_address(s) && s.link_name != EXTERNAL_LINK)
        .map(|s| s.address)
        .collect();
    sort_addresses(&mut routed);
    let default = match previous.default {
        Some(previous) if current.contains(&previous) => Some(previous),
        _ => current.first().copied().or(previous.default),
    };
    let mut accumulative = previous.accumulative.clone();
    accumulative.extend(current.iter().copied());
    sort_addresses(&mut accumulative);

    let mut out = BTreeMap::new();
    if let Some(default) = default {
        out.insert(
            DEFAULT.to_string(),
            NodeAddress {
                addresses: vec![default],
            },
        );
    }
    for (kind, addresses) in [
        (CURRENT, &current),
        (ROUTED, &routed),
        (ACCUMULATIVE, &accumulative),
    ] {
        for (filter_id, filter) in filters {
            let filtered = addresses
                .iter()
                .filter(|a| filter.passes(a))
                .copied()
                .collect();
            out.insert(
                format!("{kind}-{filter_id}"),
                NodeAddress {
                    addresses: filtered,
                },
            );
        }
        out.insert(
            kind.to_string(),
            NodeAddress {
                addresses: addresses.clone(),
            },
        );
    }
    out
}
