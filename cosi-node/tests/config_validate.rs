//! Semantic validation: one test per rule, every error with its path, all at once.

mod config_support;

use config_support::BASE;
use cosi_node::config::document::decode;
use cosi_node::config::patch::{apply, Patch};
use cosi_node::config::validate::{validate, Validation};

/// Validates BASE with a strategic patch applied.
fn check(patch: &str) -> Validation {
    let base = decode(BASE.as_bytes()).unwrap();
    let patch = Patch::parse(patch.as_bytes(), "patches[0]").unwrap();
    validate(&apply(&base, &[patch]).unwrap())
}

fn errors(patch: &str) -> Vec<String> {
    check(patch)
        .errors
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn warnings(patch: &str) -> Vec<String> {
    check(patch)
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn the_base_config_is_valid_without_warnings() {
    assert_eq!(check(""), Validation::default());
}

#[test]
fn required_fields_are_all_reported_at_once() {
    let config = decode(b"version: v1alpha1\nmachine:\n  install: {}\n  network:\n    interfaces: [{mtu: 1500}]\n---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: x\n").unwrap();
    let paths: Vec<String> = validate(&config)
        .errors
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(
        paths,
        [
            "machine.type",
            "machine.token",
            "machine.install.disk",
            "machine.network.interfaces[0].interface",
            "cluster.name",
            "cluster.controlPlane.endpoint",
            "ServiceConfig/x.command",
        ]
    );
}

#[test]
fn a_label_key_with_a_space_is_invalid() {
    let errors = errors("machine:\n  nodeLabels:\n    bad key: x\n");
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("machine.nodeLabels[\"bad key\"]: invalid label key \"bad key\""),
        "{errors:?}"
    );
}

#[test]
fn a_label_value_with_invalid_characters_is_invalid() {
    let errors = errors("machine:\n  nodeLabels:\n    zone: eu 1a\n");
    assert!(
        errors[0].starts_with("machine.nodeLabels.zone: invalid label value \"eu 1a\""),
        "{errors:?}"
    );
}

#[test]
fn interface_addresses_must_be_cidrs() {
    let errors = errors("machine:\n  network:\n    interfaces:\n    - interface: eth0\n      addresses: [192.0.2.11, 192.0.2.12/33, fe80::1/64]\n");
    assert_eq!(
        errors,
        [
            "machine.network.interfaces[0].addresses[1]: not an address in CIDR form: \"192.0.2.11\" has no /prefix length",
            "machine.network.interfaces[0].addresses[2]: not an address in CIDR form: prefix length 33 is more than 32",
        ]
    );
}

#[test]
fn a_prefix_length_with_a_sign_or_leading_zero_is_invalid_where_it_is_written() {
    // The network layer (ipnet) would drop these addresses with only a warning.
    let errors = errors("machine:\n  network:\n    interfaces:\n    - interface: eth0\n      addresses: [192.0.2.11/+24, 192.0.2.12/024]\n");
    assert_eq!(
        errors,
        [
            "machine.network.interfaces[0].addresses[1]: not an address in CIDR form: \"+24\" is not a prefix length: write it in decimal digits, without a sign or leading zeros",
            "machine.network.interfaces[0].addresses[2]: not an address in CIDR form: \"024\" is not a prefix length: write it in decimal digits, without a sign or leading zeros",
        ]
    );
}

#[test]
fn an_address_listed_twice_is_invalid() {
    let errors = errors("machine:\n  network:\n    interfaces:\n    - interface: eth0\n      addresses: [192.0.2.10/24]\n");
    assert_eq!(
        errors,
        ["machine.network.interfaces[0].addresses[1]: address 192.0.2.10/24 is listed twice"]
    );
}

#[test]
fn interface_names_are_unique() {
    let config = BASE.replace(
        "      mtu: 1500\n",
        "      mtu: 1500\n    - interface: eth0\n",
    );
    let errors: Vec<String> = validate(&decode(config.as_bytes()).unwrap())
        .errors
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(errors, ["machine.network.interfaces[1].interface: interface \"eth0\" is already configured at machine.network.interfaces[0]"]);
}

#[test]
fn the_mtu_is_within_range() {
    let errors =
        errors("machine:\n  network:\n    interfaces:\n    - interface: eth0\n      mtu: 20\n");
    assert_eq!(
        errors,
        ["machine.network.interfaces[0].mtu: 20 is outside 68..=65535"]
    );
}

#[test]
fn the_hostname_is_an_rfc1123_name() {
    let errors = errors("machine:\n  network:\n    hostname: Node_1\n");
    assert!(
        errors[0].starts_with("machine.network.hostname: \"Node_1\" is not an RFC 1123 hostname"),
        "{errors:?}"
    );
}

#[test]
fn the_install_disk_is_an_absolute_device_path() {
    for disk in ["sda", "/dev/", "/dev/../etc/passwd", "/mnt/disk"] {
        let errors = errors(&format!("machine:\n  install:\n    disk: {disk}\n"));
        assert_eq!(
            errors,
            [format!(
                "machine.install.disk: {disk:?} is not an absolute device path (like /dev/sda)"
            )]
        );
    }
}

#[test]
fn kubelet_extra_args_keys_are_flag_names() {
    let errors =
        errors("machine:\n  kubelet:\n    extraArgs:\n      --node-ip: 1.2.3.4\n      'a b': x\n");
    assert_eq!(
        errors,
        [
            "machine.kubelet.extraArgs.--node-ip: \"--node-ip\": write the flag name without leading dashes (\"node-ip\")",
            "machine.kubelet.extraArgs[\"a b\"]: \"a b\" is not a flag name (letters, digits, '-', '_', '.')",
        ]
    );
}

#[test]
fn an_unknown_kubelet_flag_is_accepted() {
    assert_eq!(
        check("machine:\n  kubelet:\n    extraArgs:\n      no-such-flag: 'true'\n"),
        Validation::default()
    );
}

#[test]
fn sysctl_names_are_kernel_parameter_names() {
    let errors = errors("machine:\n  sysctls:\n    'net..ipv4': '1'\n    vm.swappiness: ''\n");
    assert_eq!(
        errors,
        [
            "machine.sysctls[\"net..ipv4\"]: \"net..ipv4\" is not a kernel parameter name (like net.ipv4.ip_forward)",
            "machine.sysctls[\"vm.swappiness\"]: the value must not be empty",
        ]
    );
}

#[test]
fn the_control_plane_endpoint_is_an_https_url() {
    for (endpoint, message) in [
        (
            "http://192.0.2.1:6443",
            "\"http://192.0.2.1:6443\" is not an https:// URL",
        ),
        ("https://:6443", "\"https://:6443\" has no host"),
        (
            "https://cp:port",
            "\"https://cp:port\" has an invalid port \"port\"",
        ),
    ] {
        let errors = errors(&format!(
            "cluster:\n  controlPlane:\n    endpoint: '{endpoint}'\n"
        ));
        assert_eq!(
            errors,
            [format!("cluster.controlPlane.endpoint: {message}")]
        );
    }
    assert!(
        check("cluster:\n  controlPlane:\n    endpoint: 'https://[2001:db8::1]:6443'\n").is_ok()
    );
}

#[test]
fn subnets_are_network_cidrs() {
    let errors = errors("cluster:\n  network:\n    podSubnets: [10.244.0.1/16, nonsense]\n");
    assert_eq!(
        errors,
        [
            "cluster.network.podSubnets[0]: 10.244.0.1/16 has host bits set: the network is 10.244.0.0/16",
            "cluster.network.podSubnets[1]: not a subnet in CIDR form: \"nonsense\" has no /prefix length",
        ]
    );
}

#[test]
fn pod_and_service_subnets_do_not_overlap() {
    let errors = errors("cluster:\n  network:\n    serviceSubnets: [10.244.128.0/20]\n");
    assert_eq!(errors, ["cluster.network.serviceSubnets[0]: 10.244.128.0/20 overlaps pod subnet 10.244.0.0/16 (cluster.network.podSubnets[0])"]);
}

#[test]
fn a_service_subnet_overlapping_several_pod_subnets_is_one_error_naming_the_first() {
    let errors = errors(
        "cluster:\n  network:\n    podSubnets: [10.0.0.0/8, 10.1.0.0/16, 10.2.0.0/16]\n    serviceSubnets: [0.0.0.0/0, 10.1.0.0/24]\n",
    );
    assert_eq!(
        errors,
        [
            "cluster.network.serviceSubnets[0]: 0.0.0.0/0 overlaps pod subnet 10.0.0.0/8 (cluster.network.podSubnets[0])",
            "cluster.network.serviceSubnets[1]: 10.1.0.0/24 overlaps pod subnet 10.0.0.0/8 (cluster.network.podSubnets[0])",
        ]
    );
}

#[test]
fn a_service_depending_on_an_unknown_service_is_invalid() {
    let errors =
        errors("apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ndependsOn: [db, kubelet]\n");
    assert_eq!(errors, ["ServiceConfig/web.dependsOn[0]: unknown service \"db\" (no ServiceConfig document has this name)"]);
}

#[test]
fn a_cycle_of_service_dependencies_is_invalid() {
    let patch = "apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ndependsOn: [db]\n---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: db\ncommand: /bin/db\ndependsOn: [cache]\n---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: cache\ncommand: /bin/cache\ndependsOn: [web]\n---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: solo\ncommand: /bin/solo\ndependsOn: [solo]\n";
    assert_eq!(
        errors(patch),
        [
            "ServiceConfig/cache.dependsOn: dependency cycle: cache -> web -> db -> cache",
            "ServiceConfig/solo.dependsOn: dependency cycle: solo -> solo",
        ]
    );
}

#[test]
fn service_fields_follow_their_rules() {
    let patch = "apiVersion: v1alpha1\nkind: ServiceConfig\nname: Bad_Name\ncommand: python3\nworkingDirectory: tmp\nenvironment: {1X: a}\nstopTimeout: 0s\nhealthCheck: {tcp: nohost, http: 'ftp://x', period: 0s}\n";
    assert_eq!(
        errors(patch),
        [
            "ServiceConfig/Bad_Name.name: \"Bad_Name\" is not a DNS label (1-63 lowercase letters, digits and '-', not starting or ending with '-')",
            "ServiceConfig/Bad_Name.command: \"python3\" is not an absolute path",
            "ServiceConfig/Bad_Name.workingDirectory: \"tmp\" is not an absolute path",
            "ServiceConfig/Bad_Name.environment.1X: \"1X\" is not a variable name (letters, digits, _; not starting with a digit)",
            "ServiceConfig/Bad_Name.healthCheck: needs exactly one probe: exec, tcp or http",
            "ServiceConfig/Bad_Name.healthCheck.tcp: \"nohost\" is not host:port",
            "ServiceConfig/Bad_Name.healthCheck.http: \"ftp://x\" is not an http:// URL",
            "ServiceConfig/Bad_Name.healthCheck.period: must be longer than zero",
            "ServiceConfig/Bad_Name.stopTimeout: must be longer than zero",
        ]
    );
}

#[test]
fn a_nul_byte_in_any_text_a_service_process_is_given_is_invalid() {
    let patch = "apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ncommand: \"/bin/w\\0\"\nargs: [ok, \"a\\0b\"]\nenvironment: {MODE: \"x\\0\"}\nworkingDirectory: \"/srv\\0\"\nhealthCheck: {exec: [/bin/true, \"\\0\"]}\n";
    assert_eq!(
        errors(patch),
        [
            "ServiceConfig/web.command: contains a NUL byte, which no program can be given",
            "ServiceConfig/web.args[1]: contains a NUL byte, which no program can be given",
            "ServiceConfig/web.environment.MODE: contains a NUL byte, which no program can be given",
            "ServiceConfig/web.workingDirectory: contains a NUL byte, which no program can be given",
            "ServiceConfig/web.healthCheck.exec[1]: contains a NUL byte, which no program can be given",
        ]
    );
}

#[test]
fn a_service_named_kubelet_is_invalid() {
    let errors =
        errors("apiVersion: v1alpha1\nkind: ServiceConfig\nname: kubelet\ncommand: /bin/k\n");
    assert_eq!(errors, ["ServiceConfig/kubelet.name: \"kubelet\" is the built-in service: configure it under machine.kubelet"]);
}

#[test]
fn warnings_are_kept_apart_from_errors() {
    let patch = "machine:\n  kubelet:\n    image: kubelet\ncluster:\n  allowSchedulingOnControlPlanes: true\n  network:\n    cni:\n      name: none\n";
    assert!(check(patch).is_ok());
    assert_eq!(
        warnings(patch),
        [
            "machine.kubelet.image: \"kubelet\" has no tag: the registry's latest image is used",
            "cluster.network.cni.name: no CNI will be installed: pods get no network until one is",
            "cluster.allowSchedulingOnControlPlanes: has no effect on a worker",
        ]
    );
}
