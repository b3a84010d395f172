//! Properties over generated configs: encoding round-trips, empty patches are the identity,
//! add-then-delete is the identity, JSON `test` agrees with the config.

use std::collections::BTreeMap;

use cosi_node::config::document::{decode, encode};
use cosi_node::config::patch::{apply, Patch};
use cosi_node::config::schema::{
    Cluster, ClusterNetwork, Cni, ControlPlane, Install, Interface, Kubelet, Machine,
    MachineNetwork, MainDocument, RestartPolicy, Secret, ServiceConfig,
};
use cosi_node::config::{Config, MachineRole};
use proptest::prelude::*;

/// Any text, including what YAML finds tricky (`yes`, `~`, `: `, `#`, newlines, unicode).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9.-]{1,12}",
        Just("yes".to_string()),
        Just("null".to_string()),
        Just("1.0".to_string()),
        ".{0,16}",
    ]
}

fn strings() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(text(), text(), 0..4)
}

fn main_document() -> impl Strategy<Value = MainDocument> {
    let machine = (
        prop::option::of(prop_oneof![
            Just(MachineRole::Worker),
            Just(MachineRole::ControlPlane)
        ]),
        prop::option::of(text().prop_map(Secret)),
        prop::option::of((
            prop::option::of(text()),
            prop::option::of(text()),
            any::<bool>(),
        )),
        strings(),
        prop::option::of((prop::option::of(text()), strings())),
        (
            prop::option::of(text()),
            prop::collection::vec(
                (
                    prop::option::of(text()),
                    prop::collection::vec(text(), 0..3),
                    prop::option::of(any::<u32>()),
                ),
                0..3,
            ),
        ),
        strings(),
    )
        .prop_map(
            |(
                machine_type,
                token,
                install,
                node_labels,
                kubelet,
                (hostname, interfaces),
                sysctls,
            )| Machine {
                machine_type,
                token,
                install: install.map(|(disk, image, wipe)| Install { disk, image, wipe }),
                node_labels,
                kubelet: kubelet.map(|(image, extra_args)| Kubelet { image, extra_args }),
                network: MachineNetwork {
                    hostname,
                    interfaces: interfaces
                        .into_iter()
                        .map(|(interface, addresses, mtu)| Interface {
                            interface,
                            addresses,
                            mtu,
                        })
                        .collect(),
                },
                sysctls,
            },
        );
    let cluster = (
        prop::option::of(text()),
        prop::option::of(text()),
        prop::collection::vec(text(), 0..3),
        prop::collection::vec(text(), 0..3),
        prop::option::of(text()),
        any::<bool>(),
    )
        .prop_map(
            |(name, endpoint, pod_subnets, service_subnets, cni, allow)| Cluster {
                name,
                control_plane: ControlPlane { endpoint },
                network: ClusterNetwork {
                    pod_subnets,
                    service_subnets,
                    cni: cni.map(|name| Cni { name }),
                },
                allow_scheduling_on_control_planes: allow,
            },
        );
    (machine, cluster).prop_map(|(machine, cluster)| MainDocument {
        version: Default::default(),
        machine,
        cluster,
    })
}

fn service() -> impl Strategy<Value = ServiceConfig> {
    (
        "[a-z][a-z0-9-]{0,8}",
        prop::option::of(text()),
        prop::collection::vec(text(), 0..3),
        strings(),
        prop::collection::vec(text(), 0..2),
        prop_oneof![
            Just(RestartPolicy::Always),
            Just(RestartPolicy::OnFailure),
            Just(RestartPolicy::Never)
        ],
        prop::option::of(0u64..100_000),
    )
        .prop_map(
            |(name, command, args, environment, depends_on, restart, stop_ms)| ServiceConfig {
                name,
                command,
                args,
                environment,
                depends_on,
                restart,
                stop_timeout: stop_ms.map(std::time::Duration::from_millis),
                ..Default::default()
            },
        )
}

fn config() -> impl Strategy<Value = Config> {
    (main_document(), prop::collection::vec(service(), 0..3))
        .prop_map(|(main, services)| Config::new(main, services))
}

/// JSON text (valid YAML too) with every control character escaped: JSON allows raw DEL and
/// C1 controls in strings, YAML does not.
fn json(value: serde_json::Value) -> String {
    value
        .to_string()
        .chars()
        .map(|c| {
            if c.is_control() {
                format!("\\u{:04x}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn patch(text: &str) -> Patch {
    Patch::parse(text.as_bytes(), "patches[0]").unwrap()
}

/// A JSON pointer token for `key`.
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decode_of_encode_is_the_config(config in config()) {
        let text = encode(&config);
        let decoded = decode(text.as_bytes());
        prop_assert_eq!(decoded.as_ref(), Ok(&config), "{}", text);
    }

    #[test]
    fn an_empty_patch_is_the_identity(config in config()) {
        for empty in ["", "# nothing\n", "[]", "version: v1alpha1\n", "{}"] {
            prop_assert_eq!(&apply(&config, &[patch(empty)]).unwrap(), &config, "{:?}", empty);
        }
    }

    #[test]
    fn adding_then_deleting_a_key_gives_back_the_original(
        config in config(),
        key in text().prop_filter("not a directive", |k| k != "$patch"),
        value in text(),
        section in prop_oneof![Just("nodeLabels"), Just("sysctls")],
    ) {
        let existing = match section {
            "nodeLabels" => &config.machine().node_labels,
            _ => &config.machine().sysctls,
        };
        prop_assume!(!existing.contains_key(&key));
        let add = json(serde_json::json!({"machine": {section: {&key: value}}}));
        let delete = json(serde_json::json!({"machine": {section: {&key: {"$patch": "delete"}}}}));
        let added = apply(&config, &[patch(&add)]).unwrap();
        prop_assert_ne!(&added, &config);
        prop_assert_eq!(&apply(&added, &[patch(&delete)]).unwrap(), &config);
    }

    #[test]
    fn adding_then_deleting_a_named_document_gives_back_the_original(
        config in config(),
        name in "[a-z][a-z0-9-]{0,8}",
    ) {
        prop_assume!(config.service(&name).is_none());
        let add = format!("apiVersion: v1alpha1\nkind: ServiceConfig\nname: {name}\ncommand: /bin/true\n");
        let delete = format!("apiVersion: v1alpha1\nkind: ServiceConfig\nname: {name}\n$patch: delete\n");
        let added = apply(&config, &[patch(&add)]).unwrap();
        prop_assert!(added.service(&name).is_some());
        prop_assert_eq!(&apply(&added, &[patch(&delete)]).unwrap(), &config);
    }

    #[test]
    fn json_test_operations_agree_with_the_config(config in config(), other in text()) {
        for (key, value) in &config.machine().node_labels {
            let path = format!("/machine/nodeLabels/{}", token(key));
            let same = json(serde_json::json!([{"op": "test", "path": path, "value": value}]));
            prop_assert_eq!(&apply(&config, &[patch(&same)]).unwrap(), &config);
            let differs = &other != value;
            let test_other = json(serde_json::json!([{"op": "test", "path": path, "value": other}]));
            prop_assert_eq!(apply(&config, &[patch(&test_other)]).is_ok(), !differs);
        }
        if let Some(hostname) = &config.machine().network.hostname {
            let same = json(serde_json::json!([{"op": "test", "path": "/machine/network/hostname", "value": hostname}]));
            prop_assert!(apply(&config, &[patch(&same)]).is_ok());
        }
        for service in config.services() {
            let path = format!("/$docs/ServiceConfig/{}/name", service.name);
            let same = json(serde_json::json!([{"op": "test", "path": path, "value": service.name}]));
            prop_assert!(apply(&config, &[patch(&same)]).is_ok());
        }
    }
}
