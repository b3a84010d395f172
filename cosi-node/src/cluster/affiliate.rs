//! Affiliates: what a node tells the cluster about itself. In `cluster-raw` each registry's
//! view of another node (id `<registry>/<nodeId>`); in `cluster` the local affiliate and the
//! merge of the raw ones (id `<nodeId>`).
//!
//! Affiliates arrive from other machines, so [`decode_remote`] reads them as hostile input:
//! a size limit, strict fields, bounded lists and strings, and a node id that must match the
//! key it was published under.

use std::net::IpAddr;

use cosi_core::{ResourceDefinition, ResourceSpec};
use serde::{Deserialize, Serialize};

use crate::cluster::validate_node_id;
use crate::namespaces;

/// The largest published affiliate accepted, in bytes.
pub const MAX_AFFILIATE_BYTES: usize = 16 * 1024;
/// The most addresses an affiliate may carry.
pub const MAX_ADDRESSES: usize = 64;
/// The longest hostname, nodename, machine type or OS string (a DNS name's limit).
pub const MAX_NAME: usize = 253;

/// A condition on an affiliate or member; present only while it holds.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Condition {
    /// What holds, e.g. [`Condition::STALE`].
    #[serde(rename = "type")]
    pub condition: String,
    /// Why, for an operator.
    pub message: String,
}

impl Condition {
    /// The registry that reported the affiliate is unreachable: what is shown is the last
    /// thing it said, and may be out of date.
    pub const STALE: &'static str = "Stale";

    /// A stale condition with a message.
    pub fn stale(message: impl Into<String>) -> Self {
        Condition {
            condition: Self::STALE.to_string(),
            message: message.into(),
        }
    }
}

/// What a node tells the cluster about itself.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Affiliate {
    /// The node id (see [`crate::cluster::Identity`]).
    pub node_id: String,
    /// The node's routed addresses, without the Kubernetes pod and service subnets.
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
    /// The hostname.
    #[serde(default)]
    pub hostname: String,
    /// The Kubernetes node name (members are keyed by it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nodename: String,
    /// The operating system, e.g. `cosi-node (0.1.0)`.
    #[serde(default)]
    pub operating_system: String,
    /// `controlplane`, `worker`, or `unknown`.
    #[serde(default)]
    pub machine_type: String,
    /// Conditions that hold (e.g. stale); not published, set by whoever reports it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl ResourceSpec for Affiliate {
    const TYPE: &'static str = "Affiliates.cluster.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::CLUSTER;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("Hostname", ".hostname")
            .with_print_column("Machine Type", ".machineType")
            .with_print_column("Addresses", ".addresses")
    }
}

impl Affiliate {
    /// Whether a stale condition holds.
    pub fn is_stale(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.condition == Condition::STALE)
    }

    /// Folds `other` into `self`: addresses are unioned (order kept), the other fields are
    /// taken from `other` where it has them (a machine type other than `unknown`), so folding
    /// the oldest first leaves the freshest non-empty value of each field.
    pub fn merge(&mut self, other: &Affiliate) {
        for address in &other.addresses {
            if !self.addresses.contains(address) {
                self.addresses.push(*address);
            }
        }
        for (mine, theirs) in [
            (&mut self.hostname, &other.hostname),
            (&mut self.nodename, &other.nodename),
            (&mut self.operating_system, &other.operating_system),
        ] {
            if !theirs.is_empty() {
                mine.clone_from(theirs);
            }
        }
        if !other.machine_type.is_empty() && other.machine_type != "unknown" {
            self.machine_type.clone_from(&other.machine_type);
        }
    }
}

/// Why a published affiliate was refused.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("affiliate {key}: invalid {field}: {message}")]
pub struct AffiliateError {
    /// The key it was published under (node id or file name).
    pub key: String,
    /// The offending field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// The published form: the affiliate without conditions.
pub fn encode_remote(affiliate: &Affiliate) -> Vec<u8> {
    let mut published = affiliate.clone();
    published.conditions.clear();
    // Invariant: the affiliate is plain strings and addresses, which JSON always encodes.
    serde_json::to_vec(&published).expect("an affiliate encodes as JSON")
}

/// Reads an affiliate another node published under `key` (its node id). See the module docs.
///
/// ```
/// use cosi_node::cluster::{decode_remote, encode_remote, Affiliate};
/// let id = "A".repeat(43);
/// let mine = Affiliate { node_id: id.clone(), hostname: "node-1".into(), ..Default::default() };
/// assert_eq!(decode_remote(&id, &encode_remote(&mine)).unwrap(), mine);
/// let err = decode_remote(&"B".repeat(43), &encode_remote(&mine)).unwrap_err();
/// assert_eq!(err.field, "nodeId");
/// ```
pub fn decode_remote(key: &str, bytes: &[u8]) -> Result<Affiliate, AffiliateError> {
    let error = |field: &str, message: String| AffiliateError {
        key: cosi_core::text::prefix_within(key, 64).to_string(),
        field: field.to_string(),
        message,
    };
    if bytes.len() > MAX_AFFILIATE_BYTES {
        return Err(error(
            "size",
            format!("{} bytes, at most {MAX_AFFILIATE_BYTES}", bytes.len()),
        ));
    }
    let affiliate: Affiliate =
        serde_json::from_slice(bytes).map_err(|e| error("document", e.to_string()))?;
    validate_node_id(&affiliate.node_id).map_err(|m| error("nodeId", m))?;
    if affiliate.node_id != key {
        return Err(error(
            "nodeId",
            format!(
                "{:?} differs from the key it was published under",
                affiliate.node_id
            ),
        ));
    }
    if affiliate.addresses.len() > MAX_ADDRESSES {
        return Err(error(
            "addresses",
            format!(
                "{} addresses, at most {MAX_ADDRESSES}",
                affiliate.addresses.len()
            ),
        ));
    }
    for (field, value) in [
        ("hostname", &affiliate.hostname),
        ("nodename", &affiliate.nodename),
        ("operatingSystem", &affiliate.operating_system),
        ("machineType", &affiliate.machine_type),
    ] {
        if value.len() > MAX_NAME {
            return Err(error(
                field,
                format!("{} bytes, at most {MAX_NAME}", value.len()),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(error(field, "contains control characters".to_string()));
        }
    }
    if affiliate.nodename.contains('/') {
        return Err(error("nodename", "must not contain '/'".to_string()));
    }
    if !affiliate.conditions.is_empty() {
        return Err(error(
            "conditions",
            "are set by the receiving node, not published".to_string(),
        ));
    }
    Ok(affiliate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(c: char) -> String {
        c.to_string().repeat(43)
    }

    #[test]
    fn merge_unions_addresses_and_takes_the_newer_non_empty_fields() {
        let mut merged = Affiliate {
            node_id: id('a'),
            addresses: vec!["192.0.2.1".parse().unwrap()],
            hostname: "old".into(),
            machine_type: "worker".into(),
            ..Default::default()
        };
        merged.merge(&Affiliate {
            node_id: id('a'),
            addresses: vec!["192.0.2.2".parse().unwrap(), "192.0.2.1".parse().unwrap()],
            hostname: "new".into(),
            machine_type: "unknown".into(),
            ..Default::default()
        });
        assert_eq!(merged.addresses.len(), 2);
        assert_eq!(merged.hostname, "new");
        assert_eq!(merged.machine_type, "worker");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let text = format!(r#"{{"nodeId":"{}","extra":1}}"#, id('a'));
        assert_eq!(
            decode_remote(&id('a'), text.as_bytes()).unwrap_err().field,
            "document"
        );
    }

    #[test]
    fn too_many_addresses_are_refused() {
        let affiliate = Affiliate {
            node_id: id('a'),
            addresses: vec!["192.0.2.1".parse().unwrap(); MAX_ADDRESSES + 1],
            ..Default::default()
        };
        let err = decode_remote(&id('a'), &serde_json::to_vec(&affiliate).unwrap()).unwrap_err();
        assert_eq!(err.field, "addresses");
    }

    #[test]
    fn an_oversized_document_is_refused_before_parsing() {
        let err = decode_remote(&id('a'), &vec![b' '; MAX_AFFILIATE_BYTES + 1]).unwrap_err();
        assert_eq!(err.field, "size");
    }

    #[test]
    fn published_conditions_are_refused() {
        let affiliate = Affiliate {
            node_id: id('a'),
            conditions: vec![Condition::stale("forged")],
            ..Default::default()
        };
        let err = decode_remote(&id('a'), &serde_json::to_vec(&affiliate).unwrap()).unwrap_err();
        assert_eq!(err.field, "conditions");
    }

    #[test]
    fn a_nodename_with_a_slash_is_refused() {
        let affiliate = Affiliate {
            node_id: id('a'),
            nodename: "a/b".into(),
            ..Default::default()
        };
        let err = decode_remote(&id('a'), &encode_remote(&affiliate)).unwrap_err();
        assert_eq!(err.field, "nodename");
    }
}
