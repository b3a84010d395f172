//! Unknown spec fields: an error naming the resource and the field's path in outside input,
//! skipped in what this project wrote (read-back), and skipped on input for a type that opts
//! out.

use cosi_core::dynamic::Decoder;
use cosi_core::spec_decode::Origin;
use cosi_core::{downcast_ref, Error, Metadata, Registry, ResourceSpec, UnknownFields};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Machine {
    hostname: String,
    #[serde(default)]
    kubelet: Kubelet,
    #[serde(default)]
    mounts: Vec<Mount>,
}

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Kubelet {
    #[serde(default)]
    extra_args: Vec<String>,
}

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Mount {
    path: String,
}

impl ResourceSpec for Machine {
    const TYPE: &'static str = "Machines.config.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "config";
}

/// A type that takes settings it does not declare (they are passed on to plugins).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Plugin {
    name: String,
}

impl ResourceSpec for Plugin {
    const TYPE: &'static str = "Plugins.ext.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "ext";
    const UNKNOWN_FIELDS: UnknownFields = UnknownFields::Accept;
}

fn registry() -> Registry {
    Registry::new()
        .with::<Machine>()
        .unwrap()
        .with::<Plugin>()
        .unwrap()
}

fn invalid_parts(err: Error) -> (String, String, String) {
    match err {
        Error::InvalidArgument {
            subject,
            field,
            message,
        } => (subject, field, message),
        other => panic!("expected an invalid argument, got {other:?}"),
    }
}

const TYPO: &str = "unknown field: Machines.config.cosi.dev has no such field (check its spelling)";

#[test]
fn unknown_nested_spec_field_in_yaml_names_the_resource_and_its_path() {
    let yaml = "metadata: {type: machines, id: m1}\n\
                spec:\n  hostname: node-1\n  kubelet:\n    extraArgz: [--v=2]\n";
    let (subject, field, message) = invalid_parts(registry().decode_yaml(yaml).unwrap_err());
    assert_eq!(subject, "config/Machines.config.cosi.dev/m1");
    assert_eq!(field, "spec.kubelet.extraArgz");
    assert_eq!(message, TYPO);
}

#[test]
fn unknown_spec_field_in_json_names_the_resource_and_its_path() {
    let json = r#"{"metadata": {"type": "Machines.config.cosi.dev", "id": "m1"},
                   "spec": {"hostname": "node-1", "hostnme": "node-2"}}"#;
    let (subject, field, message) = invalid_parts(registry().decode_json(json).unwrap_err());
    assert_eq!(subject, "config/Machines.config.cosi.dev/m1");
    assert_eq!(field, "spec.hostnme");
    assert_eq!(message, TYPO);
}

#[test]
fn unknown_spec_field_in_a_list_item_names_its_index() {
    let yaml = "metadata: {type: machines, id: m1}\n\
                spec: {hostname: n, mounts: [{path: /a}, {path: /b, readOnly: true}]}\n";
    let (_, field, _) = invalid_parts(registry().decode_yaml(yaml).unwrap_err());
    assert_eq!(field, "spec.mounts[1].readOnly");
}

#[test]
fn a_type_that_accepts_unknown_fields_decodes_input_with_them_skipped() {
    let yaml = "metadata: {type: plugins, id: p}\nspec: {name: dns, upstream: 9.9.9.9}\n";
    let decoded = registry().decode_yaml(yaml).unwrap();
    assert_eq!(
        downcast_ref::<Plugin>(&*decoded[0]).unwrap().spec,
        Plugin { name: "dns".into() }
    );
}

#[test]
fn read_back_skips_unknown_spec_fields_a_newer_writer_stored() {
    let metadata = Metadata::new(Machine::kind().pointer("m1"));
    let stored =
        serde_json::json!({"hostname": "n", "kubelet": {"extraArgs": ["-v"], "cgroups": "v2"}});
    let decoded = registry()
        .decode_spec(metadata, stored, Origin::ReadBack)
        .unwrap();
    assert_eq!(
        downcast_ref::<Machine>(&*decoded).unwrap().spec,
        Machine {
            hostname: "n".into(),
            kubelet: Kubelet {
                extra_args: vec!["-v".into()]
            },
            mounts: vec![],
        }
    );
}

#[test]
fn read_back_decoder_skips_unknown_spec_fields_in_documents() {
    let registry = registry();
    let yaml = "metadata: {type: machines, id: m1}\nspec: {hostname: n, uuid: 42}\n";
    let decoded = Decoder::new(&registry)
        .origin(Origin::ReadBack)
        .decode_yaml(yaml)
        .unwrap();
    assert_eq!(
        downcast_ref::<Machine>(&*decoded[0]).unwrap().spec.hostname,
        "n"
    );
}

#[test]
fn read_back_still_refuses_a_value_of_the_wrong_type() {
    let metadata = Metadata::new(Machine::kind().pointer("m1"));
    let stored = serde_json::json!({"hostname": 7});
    let (subject, field, message) = invalid_parts(
        registry()
            .decode_spec(metadata, stored, Origin::ReadBack)
            .unwrap_err(),
    );
    assert_eq!(
        (subject.as_str(), field.as_str(), message.as_str()),
        (
            "config/Machines.config.cosi.dev/m1",
            "spec.hostname",
            "invalid type: integer `7`, expected a string"
        )
    );
}

/// Extra top-level keys that are not fields of `Machine`.
fn extra_keys() -> impl Strategy<Value = Vec<(String, i64)>> {
    prop::collection::vec(("[a-z]{1,8}_x", any::<i64>()), 1..5)
}

proptest! {
    #[test]
    fn any_extra_field_is_refused_on_input_by_its_path_and_skipped_on_read_back(
        hostname in "[a-z0-9-]{0,12}",
        extra in extra_keys(),
    ) {
        let registry = registry();
        let metadata = Metadata::new(Machine::kind().pointer("m1"));
        let mut spec = serde_json::json!({"hostname": hostname});
        for (key, value) in &extra {
            spec[key] = serde_json::json!(value);
        }
        // serde_json's maps are ordered by key, so the first unknown field is the least key.
        let first = extra.iter().map(|(k, _)| k).min().unwrap();

        let err = registry.decode_spec(metadata.clone(), spec.clone(), Origin::Input).unwrap_err();
        let (_, field, _) = invalid_parts(err);
        prop_assert_eq!(field, format!("spec.{first}"));

        let read = registry.decode_spec(metadata, spec, Origin::ReadBack).unwrap();
        prop_assert_eq!(
            &downcast_ref::<Machine>(&*read).unwrap().spec,
            &Machine { hostname, ..Machine::default() }
        );
    }
}
