//! The configuration layers an address spec can come from, lowest priority first. When several
//! layers state the same address, the highest one wins the merge.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a network spec came from. Ordered by priority: a later variant wins over an earlier.
///
/// ```
/// use cosi_node::network::ConfigLayer;
/// assert!(ConfigLayer::Configuration > ConfigLayer::Operator);
/// assert!(ConfigLayer::Operator > ConfigLayer::Platform);
/// assert_eq!("cmdline".parse::<ConfigLayer>().unwrap(), ConfigLayer::Cmdline);
/// assert_eq!(ConfigLayer::Default.to_string(), "default");
/// ```
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub enum ConfigLayer {
    /// Built-in defaults (`lo` 127.0.0.1/8).
    #[default]
    Default,
    /// The kernel command line (`ip=`).
    Cmdline,
    /// The platform (cloud metadata).
    Platform,
    /// Operators (DHCP, VIP, or an API caller).
    Operator,
    /// The machine configuration.
    Configuration,
}

impl ConfigLayer {
    /// Every layer, lowest priority first.
    pub const ALL: [ConfigLayer; 5] = [
        ConfigLayer::Default,
        ConfigLayer::Cmdline,
        ConfigLayer::Platform,
        ConfigLayer::Operator,
        ConfigLayer::Configuration,
    ];

    /// The name used in ids and specs.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigLayer::Default => "default",
            ConfigLayer::Cmdline => "cmdline",
            ConfigLayer::Platform => "platform",
            ConfigLayer::Operator => "operator",
            ConfigLayer::Configuration => "configuration",
        }
    }
}

impl fmt::Display for ConfigLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name is not one of the five layers.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("unknown layer {0:?}: expected default, cmdline, platform, operator or configuration")]
pub struct UnknownLayer(pub String);

impl FromStr for ConfigLayer {
    type Err = UnknownLayer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ConfigLayer::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| UnknownLayer(s.to_string()))
    }
}
