//! The checks behind the cosi-node fuzz targets (`cmdline`, `affiliate`), shared with
//! `cosi-node/tests/network_fuzz_corpus.rs` and `cluster_fuzz_corpus.rs`, which replay the
//! corpora on a normal `cargo test` (they include this file as a module; so do the targets).
//!
//! Each check panics when a rule breaks and otherwise reports whether the input was accepted.

use cosi_node::cluster::{decode_remote, encode_remote, MAX_ADDRESSES, MAX_NAME, NODE_ID_LEN};
use cosi_node::network::{validate_link_name, Cmdline};

/// What a check made of its input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// The input was valid and every round trip held.
    Accepted,
    /// The input was rejected with an error (not a panic).
    Rejected,
}

/// The key the `affiliate` target's documents claim to be published under.
pub const AFFILIATE_KEY: &str = "0000000000000000000000000000000000000000001";

/// Parses `data` as a kernel command line; every address it yields has a valid link name and
/// writes back as an `ip=` argument that parses to the same address.
pub fn cmdline(data: &[u8]) -> Outcome {
    let Ok(text) = std::str::from_utf8(data) else {
        return Outcome::Rejected;
    };
    let Ok(parsed) = Cmdline::parse(text) else {
        return Outcome::Rejected;
    };
    for address in &parsed.addresses {
        assert!(
            validate_link_name(&address.link).is_ok(),
            "{text:?}: link {:?}",
            address.link
        );
        let ip = match address.address.addr() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        let written = format!(
            "ip={ip}:::{}::{}:off",
            address.address.prefix_len(),
            address.link
        );
        let again = Cmdline::parse(&written)
            .unwrap_or_else(|e| panic!("{text:?} gave {address:?}, written as {written:?}: {e}"));
        assert_eq!(
            again.addresses,
            vec![address.clone()],
            "{text:?} via {written:?}"
        );
    }
    Outcome::Accepted
}

/// Decodes `data` as an affiliate published under [`AFFILIATE_KEY`]; an accepted one is within
/// every limit and encodes to bytes that decode back equal.
pub fn affiliate(data: &[u8]) -> Outcome {
    let Ok(affiliate) = decode_remote(AFFILIATE_KEY, data) else {
        return Outcome::Rejected;
    };
    assert_eq!(affiliate.node_id, AFFILIATE_KEY);
    assert_eq!(affiliate.node_id.len(), NODE_ID_LEN);
    assert!(affiliate.addresses.len() <= MAX_ADDRESSES);
    for name in [
        &affiliate.hostname,
        &affiliate.nodename,
        &affiliate.operating_system,
        &affiliate.machine_type,
    ] {
        assert!(name.len() <= MAX_NAME);
    }
    assert!(affiliate.conditions.is_empty());
    let again = decode_remote(AFFILIATE_KEY, &encode_remote(&affiliate))
        .unwrap_or_else(|e| panic!("a decoded affiliate does not decode again: {e}"));
    assert_eq!(again, affiliate);
    Outcome::Accepted
}
