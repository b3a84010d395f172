//! Semantic validation of a decoded [`Config`]: every rule a well-shaped config must also meet,
//! all problems reported at once, each with its field path; warnings are kept apart (they do
//! not stop an apply).
//!
//! The rules:
//! - required: `machine.type`, `machine.token`, `machine.install.disk` (when `install` is
//!   given), `cluster.name`, `cluster.controlPlane.endpoint`, each interface's `interface`, each
//!   service's `command`;
//! - `machine.nodeLabels`: Kubernetes label key and value syntax;
//! - `machine.install.disk`: an absolute device path under `/dev/`;
//! - `machine.kubelet.extraArgs`: keys are flag names without dashes (`max-pods`). Whether the
//!   kubelet knows the flag cannot be known here: an unknown flag is accepted (the service
//!   will say so when it runs);
//! - `machine.network`: the hostname is an RFC 1123 name; interface names are unique; addresses
//!   are CIDRs (`192.0.2.10/24`, only in the form the network layer reads: see [`Cidr`]), each
//!   once per interface; the MTU is within 68..=65535;
//! - `machine.sysctls`: keys are dotted kernel parameter names, values non-empty;
//! - `cluster.controlPlane.endpoint`: an `https://host[:port]` URL;
//! - `cluster.network`: pod and service subnets are network CIDRs (no host bits) and pod
//!   subnets do not overlap service subnets;
//! - services: names are DNS labels and not `kubelet` (the built-in service); `command` and
//!   `workingDirectory` are absolute paths; environment names are shell names; no command,
//!   argument, environment value, working directory or exec probe holds a NUL byte; `dependsOn`
//!   names known services (or `kubelet`), each once, without cycles; a health check has
//!   exactly one probe and positive durations.
//!
//! Warnings: an installer or kubelet image without a tag, `cni: none`, and
//! `allowSchedulingOnControlPlanes` on a worker (it has no effect there).

use std::collections::{BTreeMap, BTreeSet};

use cosi_core::{validate_label_key, validate_label_value};

use super::cidr::Cidr;
use super::document::{DocumentId, SERVICE_CONFIG_KIND};
use super::error::{join_index, join_key, ConfigErrors, FieldError};
use super::schema::{Config, HealthCheck, MachineRole, ServiceConfig};

/// The name of the built-in kubelet service, which service documents may depend on.
pub const KUBELET_SERVICE: &str = "kubelet";

/// What validation found.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Validation {
    /// Problems that make the config unacceptable.
    pub errors: Vec<FieldError>,
    /// Problems worth telling the operator that do not stop an apply.
    pub warnings: Vec<FieldError>,
}

impl Validation {
    /// Whether there are no errors.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// The errors, if any.
    pub fn into_result(self) -> Result<Vec<FieldError>, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(self.warnings)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }

    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError::new(path, message));
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(FieldError::new(path, message));
    }
}

/// Checks every rule (see the module docs) on `config`.
///
/// ```
/// use cosi_node::config::{document, validate};
/// let text = "version: v1alpha1\nmachine:\n  nodeLabels: {\"bad key\": x}\n";
/// let config = document::decode(text.as_bytes()).unwrap();
/// let found = validate::validate(&config);
/// let paths: Vec<&str> = found.errors.iter().map(|e| e.path.as_str()).collect();
/// assert_eq!(paths, [
///     "machine.type",
///     "machine.token",
///     "machine.nodeLabels[\"bad key\"]",
///     "cluster.name",
///     "cluster.controlPlane.endpoint",
/// ]);
/// ```
pub fn validate(config: &Config) -> Validation {
    let mut v = Validation::default();
    machine(config, &mut v);
    cluster(config, &mut v);
    services(config, &mut v);
    v
}

fn machine(config: &Config, v: &mut Validation) {
    let m = config.machine();
    if m.machine_type.is_none() {
        v.error("machine.type", "required: controlplane or worker");
    }
    match &m.token {
        None => v.error("machine.token", "required"),
        Some(t) if t.0.trim().is_empty() => v.error("machine.token", "must not be empty"),
        Some(_) => {}
    }
    if let Some(install) = &m.install {
        match &install.disk {
            None => v.error("machine.install.disk", "required when install is given"),
            Some(disk) => {
                if let Err(m) = device_path(disk) {
                    v.error("machine.install.disk", m);
                }
            }
        }
        if let Some(image) = &install.image {
            image_rules(image, "machine.install.image", v);
        }
    }
    for (key, value) in &m.node_labels {
        let path = join_key("machine.nodeLabels", key);
        if let Err(e) = validate_label_key(key) {
            v.error(&path, format!("invalid label key {key:?}: {}", e.message()));
        }
        if let Err(e) = validate_label_value(value) {
            v.error(
                &path,
                format!("invalid label value {value:?}: {}", e.message()),
            );
        }
    }
    if let Some(kubelet) = &m.kubelet {
        if let Some(image) = &kubelet.image {
            image_rules(image, "machine.kubelet.image", v);
        }
        for key in kubelet.extra_args.keys() {
            if let Err(m) = flag_name(key) {
                v.error(join_key("machine.kubelet.extraArgs", key), m);
            }
        }
    }
    if let Some(hostname) = &m.network.hostname {
        if let Err(m) = dns_name(hostname) {
            v.error("machine.network.hostname", m);
        }
    }
    let mut seen = BTreeMap::new();
    for (i, interface) in m.network.interfaces.iter().enumerate() {
        let at = join_index("machine.network.interfaces", i);
        match &interface.interface {
            None => v.error(format!("{at}.interface"), "required: the link name"),
            Some(name) => {
                if let Err(m) = link_name(name) {
                    v.error(format!("{at}.interface"), m);
                } else if let Some(first) = seen.insert(name.clone(), i) {
                    v.error(
                        format!("{at}.interface"),
                        format!("interface {name:?} is already configured at machine.network.interfaces[{first}]"),
                    );
                }
            }
        }
        let mut addresses = BTreeSet::new();
        for (j, address) in interface.addresses.iter().enumerate() {
            let path = join_index(&format!("{at}.addresses"), j);
            match address.parse::<Cidr>() {
                Err(m) => v.error(path, format!("not an address in CIDR form: {m}")),
                Ok(cidr) => {
                    if !addresses.insert(cidr) {
                        v.error(path, format!("address {cidr} is listed twice"));
                    }
                }
            }
        }
        if let Some(mtu) = interface.mtu {
            if !(68..=65535).contains(&mtu) {
                v.error(format!("{at}.mtu"), format!("{mtu} is outside 68..=65535"));
            }
        }
    }
    for (key, value) in &m.sysctls {
        let path = join_key("machine.sysctls", key);
        if let Err(m) = sysctl_name(key) {
            v.error(&path, m);
        }
        if value.is_empty() {
            v.error(&path, "the value must not be empty");
        }
    }
}

fn cluster(config: &Config, v: &mut Validation) {
    let c = config.cluster();
    match &c.name {
        None => v.error("cluster.name", "required"),
        Some(name) if name.is_empty() || name.chars().any(char::is_whitespace) => {
            v.error("cluster.name", "must be non-empty without whitespace")
        }
        Some(_) => {}
    }
    match &c.control_plane.endpoint {
        None => v.error(
            "cluster.controlPlane.endpoint",
            "required: an https://host:port URL",
        ),
        Some(endpoint) => {
            if let Err(m) = https_endpoint(endpoint) {
                v.error("cluster.controlPlane.endpoint", m);
            }
        }
    }
    let pods = subnets(&c.network.pod_subnets, "cluster.network.podSubnets", v);
    let services = subnets(
        &c.network.service_subnets,
        "cluster.network.serviceSubnets",
        v,
    );
    // One error per service subnet, naming the first pod subnet it overlaps: every pair would
    // be as many errors as the product of the two lists.
    for (j, service) in &services {
        if let Some((i, pod)) = pods.iter().find(|(_, pod)| pod.overlaps(service)) {
            v.error(
                join_index("cluster.network.serviceSubnets", *j),
                format!("{service} overlaps pod subnet {pod} (cluster.network.podSubnets[{i}])"),
            );
        }
    }
    if let Some(cni) = &c.network.cni {
        if cni.name.is_empty() {
            v.error("cluster.network.cni.name", "must not be empty");
        } else if cni.name == "none" {
            v.warn(
                "cluster.network.cni.name",
                "no CNI will be installed: pods get no network until one is",
            );
        }
    }
    if c.allow_scheduling_on_control_planes
        && config.machine().machine_type == Some(MachineRole::Worker)
    {
        v.warn(
            "cluster.allowSchedulingOnControlPlanes",
            "has no effect on a worker",
        );
    }
}

fn subnets(list: &[String], at: &str, v: &mut Validation) -> Vec<(usize, Cidr)> {
    let mut parsed = Vec::new();
    for (i, text) in list.iter().enumerate() {
        let path = join_index(at, i);
        match text.parse::<Cidr>() {
            Err(m) => v.error(path, format!("not a subnet in CIDR form: {m}")),
            Ok(cidr) if cidr.network() != cidr => v.error(
                path,
                format!(
                    "{cidr} has host bits set: the network is {}",
                    cidr.network()
                ),
            ),
            Ok(cidr) => parsed.push((i, cidr)),
        }
    }
    parsed
}

fn services(config: &Config, v: &mut Validation) {
    let known: BTreeSet<&str> = config.services().iter().map(|s| s.name.as_str()).collect();
    for service in config.services() {
        let at = DocumentId::Named {
            kind: SERVICE_CONFIG_KIND.into(),
            name: service.name.clone(),
        }
        .path();
        service_rules(service, &at, &known, v);
    }
    for cycle in dependency_cycles(config) {
        let at = format!("{SERVICE_CONFIG_KIND}/{}.dependsOn", cycle[0]);
        v.error(at, format!("dependency cycle: {}", cycle.join(" -> ")));
    }
}

fn service_rules(service: &ServiceConfig, at: &str, known: &BTreeSet<&str>, v: &mut Validation) {
    if let Err(m) = dns_label(&service.name) {
        v.error(format!("{at}.name"), m);
    } else if service.name == KUBELET_SERVICE {
        v.error(
            format!("{at}.name"),
            "\"kubelet\" is the built-in service: configure it under machine.kubelet",
        );
    }
    match &service.command {
        None => v.error(format!("{at}.command"), "required: the program to run"),
        Some(command) if !command.starts_with('/') => v.error(
            format!("{at}.command"),
            format!("{command:?} is not an absolute path"),
        ),
        Some(_) => {}
    }
    if let Some(dir) = &service.working_directory {
        if !dir.starts_with('/') {
            v.error(
                format!("{at}.workingDirectory"),
                format!("{dir:?} is not an absolute path"),
            );
        }
    }
    for name in service.environment.keys() {
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            v.error(
                join_key(&format!("{at}.environment"), name),
                format!("{name:?} is not a variable name (letters, digits, _; not starting with a digit)"),
            );
        }
    }
    // A NUL byte cannot reach a process (argv, environ and paths are C strings): refused here,
    // so the stored config is never one whose service can only fail.
    let mut texts: Vec<(String, &str)> = Vec::new();
    texts.extend(
        service
            .command
            .as_deref()
            .map(|c| (format!("{at}.command"), c)),
    );
    for (i, arg) in service.args.iter().enumerate() {
        texts.push((join_index(&format!("{at}.args"), i), arg));
    }
    for (name, value) in &service.environment {
        texts.push((join_key(&format!("{at}.environment"), name), value));
    }
    texts.extend(
        service
            .working_directory
            .as_deref()
            .map(|d| (format!("{at}.workingDirectory"), d)),
    );
    for (i, part) in service
        .health_check
        .iter()
        .flat_map(|check| check.exec.iter().flatten())
        .enumerate()
    {
        texts.push((join_index(&format!("{at}.healthCheck.exec"), i), part));
    }
    for (path, text) in texts {
        if text.contains('\0') {
            v.error(path, "contains a NUL byte, which no program can be given");
        }
    }
    let mut seen = BTreeSet::new();
    for (i, dependency) in service.depends_on.iter().enumerate() {
        let path = join_index(&format!("{at}.dependsOn"), i);
        if !seen.insert(dependency.as_str()) {
            v.error(path, format!("{dependency:?} is listed twice"));
        } else if dependency != KUBELET_SERVICE && !known.contains(dependency.as_str()) {
            v.error(
                path,
                format!("unknown service {dependency:?} (no ServiceConfig document has this name)"),
            );
        }
    }
    if let Some(check) = &service.health_check {
        health_check(check, &format!("{at}.healthCheck"), v);
    }
    if service.stop_timeout.is_some_and(|d| d.is_zero()) {
        v.error(format!("{at}.stopTimeout"), "must be longer than zero");
    }
}

fn health_check(check: &HealthCheck, at: &str, v: &mut Validation) {
    let probes = [
        check.exec.is_some(),
        check.tcp.is_some(),
        check.http.is_some(),
    ];
    if probes.iter().filter(|p| **p).count() != 1 {
        v.error(at, "needs exactly one probe: exec, tcp or http");
    }
    if let Some(exec) = &check.exec {
        if exec.first().is_none_or(|c| c.is_empty()) {
            v.error(format!("{at}.exec"), "needs a command");
        }
    }
    if let Some(tcp) = &check.tcp {
        let port = tcp
            .rsplit_once(':')
            .map(|(host, port)| (host, port.parse::<u16>()));
        if !matches!(port, Some((host, Ok(p))) if !host.is_empty() && p > 0) {
            v.error(format!("{at}.tcp"), format!("{tcp:?} is not host:port"));
        }
    }
    if let Some(http) = &check.http {
        let host = http
            .strip_prefix("http://")
            .map(|rest| rest.split('/').next().unwrap_or(""));
        if host.is_none_or(str::is_empty) {
            v.error(
                format!("{at}.http"),
                format!("{http:?} is not an http:// URL"),
            );
        }
    }
    for (name, value) in [("period", check.period), ("timeout", check.timeout)] {
        if value.is_some_and(|d| d.is_zero()) {
            v.error(format!("{at}.{name}"), "must be longer than zero");
        }
    }
}

/// Every dependency cycle among services, each once, starting at its smallest name and
/// ending where it started (`a -> b -> a`).
fn dependency_cycles(config: &Config) -> Vec<Vec<String>> {
    let edges: BTreeMap<&str, Vec<&str>> = config
        .services()
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.depends_on.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    let mut cycles = BTreeSet::new();
    let mut done = BTreeSet::new();
    for start in edges.keys() {
        let mut path = Vec::new();
        walk(start, &edges, &mut path, &mut done, &mut cycles);
    }
    cycles.into_iter().collect()
}

fn walk<'a>(
    node: &'a str,
    edges: &BTreeMap<&'a str, Vec<&'a str>>,
    path: &mut Vec<&'a str>,
    done: &mut BTreeSet<&'a str>,
    cycles: &mut BTreeSet<Vec<String>>,
) {
    if let Some(at) = path.iter().position(|n| *n == node) {
        let ring = &path[at..];
        // Rotate so the smallest name comes first: the same cycle found from another start is
        // the same entry.
        let first = (0..ring.len()).min_by_key(|i| ring[*i]).unwrap_or(0);
        let mut cycle: Vec<String> = ring[first..]
            .iter()
            .chain(&ring[..first])
            .map(|s| s.to_string())
            .collect();
        cycle.push(cycle[0].clone());
        cycles.insert(cycle);
        return;
    }
    if done.contains(node) {
        return;
    }
    path.push(node);
    for next in edges.get(node).into_iter().flatten() {
        if edges.contains_key(next) {
            walk(next, edges, path, done, cycles);
        }
    }
    path.pop();
    done.insert(node);
}

fn device_path(disk: &str) -> Result<(), String> {
    let valid = disk.starts_with("/dev/")
        && disk.len() > "/dev/".len()
        && !disk.split('/').any(|part| part == "..")
        && !disk.chars().any(|c| c.is_whitespace() || c.is_control());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{disk:?} is not an absolute device path (like /dev/sda)"
        ))
    }
}

fn image_rules(image: &str, at: &str, v: &mut Validation) {
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        v.error(at, format!("{image:?} is not an image reference"));
        return;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    if !image.starts_with('/') && !last.contains(':') && !last.contains('@') {
        v.warn(
            at,
            format!("{image:?} has no tag: the registry's latest image is used"),
        );
    }
}

fn flag_name(key: &str) -> Result<(), String> {
    if key.starts_with('-') {
        return Err(format!(
            "{key:?}: write the flag name without leading dashes ({:?})",
            key.trim_start_matches('-')
        ));
    }
    let valid = key
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{key:?} is not a flag name (letters, digits, '-', '_', '.')"
        ))
    }
}

fn dns_label(label: &str) -> Result<(), String> {
    let valid = !label.is_empty()
        && label.len() <= 63
        && label
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !label.starts_with('-')
        && !label.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{label:?} is not a DNS label (1-63 lowercase letters, digits and '-', not starting or ending with '-')"
        ))
    }
}

/// Checks a hostname by the rule `machine.network.hostname` is held to (an RFC 1123 name), for
/// a hostname that comes from elsewhere (a daemon's flag).
///
/// ```
/// use cosi_node::config::validate::hostname;
/// assert!(hostname("node-1.example").is_ok());
/// assert_eq!(
///     hostname("Node/1").unwrap_err(),
///     "\"Node/1\" is not an RFC 1123 hostname: \"Node/1\" is not a DNS label (1-63 lowercase letters, digits and '-', not starting or ending with '-')"
/// );
/// ```
pub fn hostname(name: &str) -> Result<(), String> {
    dns_name(name)
}

fn dns_name(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err(format!("{name:?} is longer than 253 characters"));
    }
    name.split('.')
        .try_for_each(dns_label)
        .map_err(|m| format!("{name:?} is not an RFC 1123 hostname: {m}"))
}

/// Checks a link name by the rule the config's `interface` fields are held to (what Linux
/// takes: 1-15 characters, no '/', ':' or whitespace), for a link named elsewhere (a daemon's
/// flag).
///
/// ```
/// use cosi_node::config::validate::link_name;
/// assert!(link_name("eth0").is_ok());
/// assert_eq!(
///     link_name("").unwrap_err(),
///     "\"\" is not a link name (1-15 characters, no '/', ':' or whitespace)"
/// );
/// ```
pub fn link_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control());
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a link name (1-15 characters, no '/', ':' or whitespace)"
        ))
    }
}

fn sysctl_name(key: &str) -> Result<(), String> {
    let valid = !key.is_empty()
        && key.split(['.', '/']).all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{key:?} is not a kernel parameter name (like net.ipv4.ip_forward)"
        ))
    }
}

fn https_endpoint(endpoint: &str) -> Result<(), String> {
    let Some(rest) = endpoint.strip_prefix("https://") else {
        return Err(format!("{endpoint:?} is not an https:// URL"));
    };
    let authority = rest.split('/').next().unwrap_or("");
    let (host, port) = match authority.rsplit_once(':') {
        // An IPv6 literal keeps its colons inside brackets.
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (authority, None),
    };
    if host.is_empty() || host.chars().any(char::is_whitespace) {
        return Err(format!("{endpoint:?} has no host"));
    }
    if let Some(port) = port {
        if !port.parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(format!("{endpoint:?} has an invalid port {port:?}"));
        }
    }
    Ok(())
}
