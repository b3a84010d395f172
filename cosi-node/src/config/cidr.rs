//! [`Cidr`]: an IP address with a prefix length (`192.0.2.10/24`, `2001:db8::1/64`), the form
//! of interface addresses and pod/service subnets in the config.

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
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{prefix:?} is not a prefix length"))?;
        let cidr = Cidr { addr, prefix };
        if prefix > cidr.max_prefix() {
            return Err(format!(
                "prefix length {prefix} is more than {}",
                cidr.max_prefix()
            ));
        }
        Ok(cidr)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}
