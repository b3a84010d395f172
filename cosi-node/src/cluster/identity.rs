//! The node identity: 32 random bytes written in base62, generated once and kept.
//! [`Identity`] `local` in `cluster` holds it; [`NodeIdentityController`] creates it when it is
//! missing and otherwise leaves it alone, so a node whose `cluster` namespace lives on the disk
//! backend keeps its identity across restarts (and gets a new one only when its state is wiped).

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Error, ResourceDefinition, ResourceSpec, Result, StateExt};
use serde::{Deserialize, Serialize};

use crate::namespaces;

/// How many random bytes make a node id.
pub const NODE_ID_BYTES: usize = 32;
/// The length of a node id in base62 (62^43 > 2^256).
pub const NODE_ID_LEN: usize = 43;
/// The id of the one identity resource.
pub const LOCAL: &str = "local";

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The node's identity, `cluster/Identities.cluster.cosi.dev/local`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The node id: [`NODE_ID_LEN`] base62 characters.
    pub node_id: String,
}

impl ResourceSpec for Identity {
    const TYPE: &'static str = "Identities.cluster.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = namespaces::CLUSTER;

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_print_column("ID", ".nodeId")
    }
}

/// Writes `bytes` as a big-endian number in base62, zero-padded to [`NODE_ID_LEN`] characters.
///
/// ```
/// use cosi_node::cluster::encode_node_id;
/// assert_eq!(encode_node_id(&[0; 32]), "0".repeat(43));
/// assert_eq!(encode_node_id(&[0xff; 32]).len(), 43);
/// ```
pub fn encode_node_id(bytes: &[u8; NODE_ID_BYTES]) -> String {
    let mut number = bytes.to_vec();
    let mut digits = Vec::with_capacity(NODE_ID_LEN);
    while digits.len() < NODE_ID_LEN {
        // Divide the big-endian number by 62 in place; the remainder is the next digit.
        let mut remainder = 0u32;
        for byte in number.iter_mut() {
            let value = (remainder << 8) | u32::from(*byte);
            *byte = (value / 62) as u8;
            remainder = value % 62;
        }
        digits.push(ALPHABET[remainder as usize]);
    }
    digits.reverse();
    // Invariant: every digit comes from the ASCII alphabet.
    String::from_utf8(digits).expect("base62 digits are ASCII")
}

/// Checks that `id` looks like a node id: exactly [`NODE_ID_LEN`] base62 characters.
pub fn validate_node_id(id: &str) -> std::result::Result<(), String> {
    if id.len() != NODE_ID_LEN {
        return Err(format!(
            "a node id has {NODE_ID_LEN} characters, this one has {}",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| !c.is_ascii_alphanumeric()) {
        return Err(format!("a node id is base62, {c:?} is not a base62 digit"));
    }
    Ok(())
}

/// A fresh node id from the operating system's random source.
pub fn generate_node_id() -> Result<String> {
    let mut bytes = [0u8; NODE_ID_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| Error::Backend {
        subject: "node identity".into(),
        message: format!("no random bytes from the operating system: {e}"),
        retryable: true,
        source: None,
    })?;
    Ok(encode_node_id(&bytes))
}

/// Creates the node identity once. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct NodeIdentityController;

impl NodeIdentityController {
    /// The controller's name (the owner of the identity).
    pub const NAME: &'static str = "NodeIdentityController";
}

#[async_trait]
impl Controller for NodeIdentityController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<Identity>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let pointer = Identity::kind().pointer(LOCAL);
        match state.get_typed::<Identity>(&pointer).await {
            Ok(stored) if validate_node_id(&stored.spec.node_id).is_ok() => {
                return Ok(Reconciled::Done)
            }
            Ok(stored) => {
                tracing::warn!(node_id = %stored.spec.node_id, "the stored node id is malformed; generating a new one");
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        let node_id = generate_node_id()?;
        state
            .modify_output(
                cosi_core::Resource::new(
                    LOCAL,
                    Identity {
                        node_id: node_id.clone(),
                    },
                ),
                |r| {
                    r.spec.node_id = node_id.clone();
                    Ok(())
                },
            )
            .await?;
        Ok(Reconciled::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_largest_id_fits_in_43_digits() {
        let id = encode_node_id(&[0xff; 32]);
        assert_eq!(id.len(), NODE_ID_LEN);
        assert!(validate_node_id(&id).is_ok());
    }

    #[test]
    fn one_is_the_last_digit() {
        let mut bytes = [0u8; 32];
        bytes[31] = 1;
        assert_eq!(encode_node_id(&bytes), format!("{}1", "0".repeat(42)));
        bytes[31] = 62;
        assert_eq!(encode_node_id(&bytes), format!("{}10", "0".repeat(41)));
    }

    #[test]
    fn generated_ids_differ() {
        assert_ne!(generate_node_id().unwrap(), generate_node_id().unwrap());
    }

    #[test]
    fn a_short_or_non_base62_id_is_refused() {
        assert!(validate_node_id("abc").is_err());
        assert!(validate_node_id(&format!("{}-", "a".repeat(42))).is_err());
    }

    proptest! {
        #[test]
        fn distinct_bytes_give_distinct_valid_ids(a in any::<[u8; 32]>(), b in any::<[u8; 32]>()) {
            let (x, y) = (encode_node_id(&a), encode_node_id(&b));
            prop_assert!(validate_node_id(&x).is_ok());
            prop_assert_eq!(a == b, x == y);
            // Fixed width keeps the numeric order as string order.
            prop_assert_eq!(a.cmp(&b), x.cmp(&y));
        }
    }
}
