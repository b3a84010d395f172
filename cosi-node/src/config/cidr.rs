//! [`Cidr`]: an IP address with a prefix length (`192.0.2.10/24`, `2001:db8::1/64`), the form
//! of interface addresses and pod/service subnets in the config.
//!
//! What validates here must be what the network layer reads: it parses the same text with
//! `ipnet`, and drops (with only a warning) what it cannot read. So the form accepted is a
//! subset of `ipnet`'s, with the same meaning: the address as [`IpAddr`] reads it (no leading
//! zeros in IPv4 octets), then `/`, then the prefix length in plain decimal digits — no sign,
//! no leading zeros (`/0` aside), at most 32 for IPv4 and 128 for IPv6.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An address and a prefix length.
///
/// ```
/// use cosi_node::config::Cidr;
/// let cidr: Cidr = "192.0.2.10/24".parse().unwrap();
/// assert_eq!(cidr.prefix, 24);
/// assert_eq!(cidr.network().to_string(), "192.0.2.0/24");
/// assert_eq!(
///     "192.0.2.10/33".parse::<Cidr>().unwrap_err(),
///     "prefix length 33 is more than 32"
/// );
/// assert_eq!(
///     "192.0.2.10/+24".parse::<Cidr>().unwrap_err(),
///     "\"+24\" is not a prefix length: write it in decimal digits, without a sign or leading zeros"
/// );
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length (at most 32 for IPv4, 128 for IPv6).
    pub prefix: u8,
}

impl Cidr {
    /// The most prefix bits of this address family.
    pub fn max_prefix(&self) -> u8 {
        if self.addr.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// The network: the address with its host bits cleared.
    pub fn network(&self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        };
        Cidr {
            addr,
            prefix: self.prefix,
        }
    }

    /// Whether the two networks share an address.
    pub fn overlaps(&self, other: &Cidr) -> bool {
        if self.addr.is_ipv4() != other.addr.is_ipv4() {
            return false;
        }
        let prefix = self.prefix.min(other.prefix);
        let a = Cidr {
            addr: self.addr,
            prefix,
        }
        .network();
        let b = Cidr {
            addr: other.addr,
            prefix,
        }
        .network();
        a == b
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let Some((addr, prefix)) = text.split_once('/') else {
            return Err(format!("{text:?} has no /prefix length"));
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let max = Cidr { addr, prefix: 0 }.max_prefix();
        let prefix = prefix_length(prefix, max)?;
        Ok(Cidr { addr, prefix })
    }
}

/// Reads a prefix length of at most `max` bits. Only plain decimal digits: `str::parse` would
/// also take `+24` and `024`, which `ipnet` (the network layer) refuses.
fn prefix_length(text: &str, max: u8) -> Result<u8, String> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || (text.len() > 1 && text.starts_with('0')) {
        return Err(format!(
            "{text:?} is not a prefix length: write it in decimal digits, without a sign or leading zeros"
        ));
    }
    // Only digits: a number too large for a byte is also more than any maximum.
    match text.parse::<u8>() {
        Ok(prefix) if prefix <= max => Ok(prefix),
        _ => Err(format!("prefix length {text} is more than {max}")),
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// What `ipnet` (the network layer) reads from `text`: address and prefix length.
    fn ipnet_reads(text: &str) -> Option<(IpAddr, u8)> {
        let net: ipnet::IpNet = text.parse().ok()?;
        Some((net.addr(), net.prefix_len()))
    }

    #[test]
    fn a_prefix_with_a_sign_is_not_a_prefix_length() {
        for text in ["192.0.2.10/+24", "2001:db8::1/+64", "192.0.2.10/-0"] {
            let prefix = text.rsplit('/').next().unwrap();
            assert_eq!(
                text.parse::<Cidr>(),
                Err(format!("{prefix:?} is not a prefix length: write it in decimal digits, without a sign or leading zeros")),
                "{text}"
            );
            assert_eq!(ipnet_reads(text), None, "{text}");
        }
    }

    #[test]
    fn a_prefix_with_a_leading_zero_is_not_a_prefix_length() {
        // ipnet refuses 024 for IPv4 and 0064 for IPv6, but reads 08 and 064: leading zeros
        // are refused alike, as they are in an IPv4 address's octets. A lone 0 has none.
        for text in [
            "192.0.2.10/024",
            "192.0.2.10/08",
            "0.0.0.0/00",
            "2001:db8::1/064",
            "2001:db8::1/0064",
        ] {
            let prefix = text.rsplit('/').next().unwrap();
            assert_eq!(
                text.parse::<Cidr>(),
                Err(format!("{prefix:?} is not a prefix length: write it in decimal digits, without a sign or leading zeros")),
                "{text}"
            );
        }
        assert_eq!("0.0.0.0/0".parse::<Cidr>().map(|c| c.prefix), Ok(0));
        assert_eq!("::/0".parse::<Cidr>().map(|c| c.prefix), Ok(0));
    }

    #[test]
    fn a_prefix_too_large_for_a_byte_is_more_than_the_maximum() {
        assert_eq!(
            "192.0.2.10/300".parse::<Cidr>(),
            Err("prefix length 300 is more than 32".to_string())
        );
        assert_eq!(
            "2001:db8::1/99999".parse::<Cidr>(),
            Err("prefix length 99999 is more than 128".to_string())
        );
    }

    /// Addresses as written in configs, and near misses: leading zeros, octets over 255,
    /// `::` anywhere, IPv4 inside IPv6, stray characters.
    fn address() -> impl Strategy<Value = String> {
        let group = "[0-9a-fA-F]{1,5}";
        let v6 = (
            prop::collection::vec(group, 0..9),
            0usize..10,
            any::<bool>(),
        )
            .prop_map(|(groups, at, elide)| {
                let mut text = groups.join(":");
                if elide {
                    let at = at.min(groups.len());
                    let head = groups[..at].join(":");
                    let tail = groups[at..].join(":");
                    text = format!("{head}::{tail}");
                }
                text
            });
        prop_oneof![
            any::<Ipv4Addr>().prop_map(|a| a.to_string()),
            any::<Ipv6Addr>().prop_map(|a| a.to_string()),
            "[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}",
            "(::|::ffff:|64:ff9b::|1:2:3:4:5:6:|1::2:)[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}\\.[0-9]{1,4}",
            v6,
            "[0-9a-fA-F:.%]{0,24}",
        ]
    }

    /// Prefix lengths and near misses: signs, leading zeros, too many digits, spaces, other
    /// characters.
    fn prefix() -> impl Strategy<Value = String> {
        prop_oneof![
            "[0-9]{1,3}",
            "[+-]?0{0,3}[0-9]{0,4}",
            " ?[0-9]{1,3} ?",
            ".{0,4}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn what_validates_is_what_ipnet_reads(
            text in prop_oneof![
                4 => (address(), prefix()).prop_map(|(a, p)| format!("{a}/{p}")),
                1 => ".{0,40}",
            ]
        ) {
            if let Ok(cidr) = text.parse::<Cidr>() {
                prop_assert_eq!(ipnet_reads(&text), Some((cidr.addr, cidr.prefix)), "{}", text);
            }
        }
    }
}
