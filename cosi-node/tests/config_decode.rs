//! Strict decoding of config text: the shape rules of `cosi_node::config::document`.

use cosi_core::{dynamic, Registry, Resource};
use cosi_node::config::document::{decode, encode};
use cosi_node::config::schema::RestartPolicy;
use cosi_node::config::{register_types, MachineConfig, MachineRole, ACTIVE};

const FULL: &str = "\
version: v1alpha1
machine:
  type: controlplane
  token: s3cr3t
  install:
    disk: /dev/sda
    image: installer:v1
    wipe: true
  nodeLabels:
    topology.kubernetes.io/zone: eu-1a
  kubelet:
    image: kubelet:v1.31
    extraArgs:
      max-pods: '110'
  network:
    hostname: node-1
    interfaces:
    - interface: eth0
      addresses:
      - 192.0.2.10/24
      mtu: 1500
  sysctls:
    net.ipv4.ip_forward: '1'
cluster:
  name: demo
  controlPlane:
    endpoint: https://192.0.2.1:6443
  network:
    podSubnets:
    - 10.244.0.0/16
    serviceSubnets:
    - 10.96.0.0/12
    cni:
      name: flannel
  allowSchedulingOnControlPlanes: true
---
apiVersion: v1alpha1
kind: ServiceConfig
name: web
command: /usr/bin/python3
args:
- -m
- http.server
environment:
  PYTHONUNBUFFERED: '1'
dependsOn:
- db
restart: on-failure
healthCheck:
  http: http://127.0.0.1:8080/
  period: 5s
  timeout: 1s
stopTimeout: 10s
---
apiVersion: v1alpha1
kind: ServiceConfig
name: db
command: /usr/bin/db
";

fn errors(text: &str) -> Vec<String> {
    decode(text.as_bytes())
        .unwrap_err()
        .0
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_full_config_decodes_into_typed_fields() {
    let config = decode(FULL.as_bytes()).unwrap();
    assert_eq!(
        config.machine().machine_type,
        Some(MachineRole::ControlPlane)
    );
    assert_eq!(config.machine().network.interfaces[0].mtu, Some(1500));
    assert_eq!(config.cluster().network.pod_subnets, ["10.244.0.0/16"]);
    let names: Vec<&str> = config.services().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["db", "web"]);
    let web = config.service("web").unwrap();
    assert_eq!(web.restart, RestartPolicy::OnFailure);
    assert_eq!(
        web.health_check.as_ref().unwrap().period,
        Some(std::time::Duration::from_secs(5))
    );
}

#[test]
fn canonical_encoding_decodes_to_the_same_config_and_is_stable() {
    let config = decode(FULL.as_bytes()).unwrap();
    let text = encode(&config);
    assert_eq!(decode(text.as_bytes()).unwrap(), config);
    assert_eq!(encode(&decode(text.as_bytes()).unwrap()), text);
    // Services come out sorted by name, after the main document.
    let db = text.find("name: db").unwrap();
    let web = text.find("name: web").unwrap();
    assert!(
        text.starts_with("version: v1alpha1\n") && db < web,
        "{text}"
    );
}

#[test]
fn an_unknown_field_is_rejected_with_its_path() {
    let text = "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n    - interface: eth0\n    - interface: eth1\n      adresses: [192.0.2.1/24]\n";
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("machine.network.interfaces[1].adresses: unknown field `adresses`"),
        "{errors:?}"
    );
}

#[test]
fn a_value_of_the_wrong_shape_is_rejected_with_its_path() {
    let text = "version: v1alpha1\nmachine:\n  network:\n    interfaces:\n    - interface: eth0\n      addresses: [192.0.2.1/24, {a: 1}]\n";
    let errors = errors(text);
    assert!(
        errors[0].starts_with("machine.network.interfaces[0].addresses[1]: invalid type: map"),
        "{errors:?}"
    );
}

#[test]
fn an_unknown_machine_type_is_rejected_naming_the_choices() {
    let errors = errors("version: v1alpha1\nmachine:\n  type: laptop\n");
    assert_eq!(
        errors,
        ["machine.type: unknown variant `laptop`, expected `controlplane` or `worker`"]
    );
}

#[test]
fn a_duplicate_document_is_rejected() {
    let text = format!(
        "{FULL}---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: web\ncommand: /bin/true\n"
    );
    assert_eq!(
        errors(&text),
        ["documents[3]: duplicate document ServiceConfig/web"]
    );
    let text = "version: v1alpha1\n---\nversion: v1alpha1\n";
    assert_eq!(errors(text), ["documents[1]: duplicate document v1alpha1"]);
}

#[test]
fn a_duplicate_key_is_rejected() {
    let errors = errors("version: v1alpha1\nmachine:\n  type: worker\n  type: controlplane\n");
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("documents[0]: not valid YAML: "),
        "{errors:?}"
    );
    assert!(errors[0].contains("duplicate key \"type\""), "{errors:?}");
}

#[test]
fn an_unknown_document_kind_is_rejected() {
    let text = "version: v1alpha1\n---\napiVersion: v1alpha1\nkind: Volume\nname: data\n";
    assert_eq!(
        errors(text),
        ["documents[1].kind: unknown document kind \"Volume\" (known: ServiceConfig)"]
    );
}

#[test]
fn a_named_document_needs_api_version_and_name() {
    let text = "version: v1alpha1\n---\nkind: ServiceConfig\nname: a\n---\napiVersion: v1alpha1\nkind: ServiceConfig\n";
    assert_eq!(
        errors(text),
        [
            "documents[1].apiVersion: required: a ServiceConfig document needs apiVersion: v1alpha1",
            "documents[2].name: required: a ServiceConfig document needs a name",
        ]
    );
}

#[test]
fn every_document_reports_its_first_error() {
    let text = "version: v1alpha1\nmachine:\n  typo: 1\n---\napiVersion: v1alpha1\nkind: ServiceConfig\nname: web\nrestart: sometimes\n";
    let errors = errors(text);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("machine.typo: unknown field"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("ServiceConfig/web.restart: unknown variant `sometimes`"),
        "{errors:?}"
    );
}

#[test]
fn a_config_without_a_main_document_is_rejected() {
    let text = "apiVersion: v1alpha1\nkind: ServiceConfig\nname: web\n";
    assert_eq!(
        errors(text),
        ["documents: the config has no main document (version: v1alpha1)"]
    );
}

#[test]
fn a_wrong_version_is_rejected() {
    let errors = errors("version: v2\n");
    assert!(
        errors[0].starts_with("version: unknown variant `v2`"),
        "{errors:?}"
    );
}

#[test]
fn oversized_and_non_utf8_text_is_rejected() {
    let big = format!("version: v1alpha1\n#{}\n", "x".repeat(1 << 20));
    assert!(errors(&big)[0].starts_with("config: "), "too big");
    let err = decode(b"version: v1alpha1\n\xff\n").unwrap_err();
    assert!(err.0[0].message.starts_with("not UTF-8 text"), "{err}");
}

#[test]
fn empty_documents_and_comments_are_skipped() {
    let config = decode(b"# node config\n---\nversion: v1alpha1\n---\n# nothing\n").unwrap();
    assert!(config.services().is_empty());
}

#[test]
fn the_machine_config_resource_is_one_yaml_string_in_dynamic_form() {
    let mut registry = Registry::new();
    register_types(&mut registry).unwrap();
    let text = "version: v1alpha1 # written by hand\nmachine:\n  type: worker\n";
    let resource = Resource::new(ACTIVE, MachineConfig::from_text(text).unwrap());
    let yaml = dynamic::to_yaml(&resource).unwrap();
    assert!(
        yaml.ends_with(
            "spec: |\n  version: v1alpha1 # written by hand\n  machine:\n    type: worker\n"
        ),
        "{yaml}"
    );
    let decoded = cosi_core::dynamic::Decoder::new(&registry)
        .decode_yaml(&yaml)
        .unwrap();
    let back = cosi_core::downcast_ref::<MachineConfig>(&*decoded[0]).unwrap();
    assert_eq!(back.spec.text(), text);
    assert_eq!(back.spec.config(), resource.spec.config());
}

#[test]
fn the_machine_config_resource_is_sensitive_and_answers_to_mc() {
    let mut registry = Registry::new();
    register_types(&mut registry).unwrap();
    let definition = registry.resolve("mc").unwrap();
    assert_eq!(definition.resource_type, "MachineConfigs.config.cosi.dev");
    assert_eq!(definition.default_namespace, "config");
    assert_eq!(definition.sensitivity, cosi_core::Sensitivity::Sensitive);
}

#[test]
fn the_token_is_not_shown_by_debug() {
    let config = decode(FULL.as_bytes()).unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("s3cr3t") && debug.contains("<redacted>"));
}

#[test]
fn a_config_whose_aliases_stand_for_megabytes_of_text_is_refused_before_it_is_read() {
    // 106 KB as written; 200 MB of strings once its 2,001 aliases are expanded.
    let mut text = format!(
        "version: v1alpha1\nmachine:\n  sysctls:\n    anchor: &v {}\n",
        "x".repeat(100_000)
    );
    for i in 0..2_001 {
        text.push_str(&format!("    k{i}: *v\n"));
    }
    let errors = errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("more than 4194304 bytes of strings once aliases are expanded"),
        "{}",
        &errors[0][..errors[0].len().min(300)]
    );
}
