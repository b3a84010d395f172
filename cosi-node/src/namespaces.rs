//! The namespaces the node's resources live in. Specs written by users and producers go to a
//! `*-config` or `*-raw` namespace; controllers merge them into the namespace readers use.

/// The machine config and the small typed resources fanned out of it.
pub const CONFIG: &str = "config";
/// What runs on the node: services, their status, controller status.
pub const RUNTIME: &str = "runtime";
/// Network specs as each layer (default, cmdline, platform, operator, configuration) states them.
pub const NETWORK_CONFIG: &str = "network-config";
/// Merged network specs and what the kernel reports.
pub const NETWORK: &str = "network";
/// Affiliates as each registry reports them.
pub const CLUSTER_RAW: &str = "cluster-raw";
/// Merged affiliates and members.
pub const CLUSTER: &str = "cluster";
/// Resource definitions, so clients can discover types and aliases.
pub const META: &str = "meta";

/// Every namespace, in the order a listing shows them.
pub const ALL: [&str; 7] = [
    CONFIG,
    RUNTIME,
    NETWORK_CONFIG,
    NETWORK,
    CLUSTER_RAW,
    CLUSTER,
    META,
];
