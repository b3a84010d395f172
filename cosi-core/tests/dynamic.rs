//! The dynamic `{metadata, spec}` form: writing, strict decoding and exact round trips.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cosi_core::dynamic::{self, Decoder, UnknownTypes};
use cosi_core::{
    downcast, downcast_ref, DynamicResource, Error, Metadata, Phase, Pointer, Registry, Resource,
    ResourceDefinition, ResourceSpec, Version,
};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Service {
    image: String,
    port: u16,
    env: BTreeMap<String, String>,
    args: Vec<String>,
    weight: f64,
    limit: Option<i64>,
}

impl ResourceSpec for Service {
    const TYPE: &'static str = "Services.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "runtime";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE).with_aliases(["svc"])
    }
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Hostname(String);

impl ResourceSpec for Hostname {
    const TYPE: &'static str = "Hostnames.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "network";
}

fn registry() -> Registry {
    let mut registry = Registry::new();
    registry.register::<Service>().unwrap();
    registry.register::<Hostname>().unwrap();
    registry
}

fn service() -> Service {
    Service {
        image: "etcd:3.5".into(),
        port: 2379,
        env: BTreeMap::new(),
        args: vec![],
        weight: 0.5,
        limit: None,
    }
}

fn invalid_parts(err: Error) -> (String, String, String) {
    match err {
        Error::InvalidArgument {
            subject,
            field,
            message,
        } => (subject, field, message),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn yaml_omits_empty_maps_and_absent_owner_and_writes_nanosecond_timestamps() {
    let mut r = Resource::new("etcd", service());
    r.metadata.set_version(Version::new(3));
    r.metadata.set_timestamps(
        UNIX_EPOCH + Duration::new(1_700_000_000, 5),
        UNIX_EPOCH + Duration::new(1_700_000_001, 123_456_789),
    );
    assert_eq!(
        dynamic::to_yaml(&r).unwrap(),
        "\
metadata:
  namespace: runtime
  type: Services.runtime.cosi.dev
  id: etcd
  version: 3
  phase: running
  created: 2023-11-14T22:13:20.000000005Z
  updated: 2023-11-14T22:13:21.123456789Z
spec:
  args: []
  env: {}
  image: etcd:3.5
  limit: null
  port: 2379
  weight: 0.5
"
    );
}

#[test]
fn json_carries_owner_labels_annotations_and_finalizers_when_set() {
    let mut r = Resource::new("etcd", service());
    r.metadata.set_owner(Some("ServiceController".into()));
    r.metadata.set_phase(Phase::TearingDown);
    r.metadata.labels_mut().insert("role".into(), "cp".into());
    r.metadata
        .annotations_mut()
        .insert("note".into(), "x".into());
    r.metadata
        .finalizers_mut()
        .insert("VolumeController".into());
    let value: serde_json::Value = serde_json::from_str(&dynamic::to_json(&r).unwrap()).unwrap();
    assert_eq!(
        value["metadata"],
        serde_json::json!({
            "namespace": "runtime", "type": "Services.runtime.cosi.dev", "id": "etcd",
            "version": 0, "owner": "ServiceController", "phase": "tearingDown",
            "created": "1970-01-01T00:00:00.000000000Z", "updated": "1970-01-01T00:00:00.000000000Z",
            "labels": {"role": "cp"}, "annotations": {"note": "x"},
            "finalizers": ["VolumeController"]
        })
    );
}

#[test]
fn timestamp_before_1970_is_an_error_not_a_panic() {
    let mut r = Resource::new("etcd", service());
    r.metadata
        .set_timestamps(UNIX_EPOCH - Duration::from_secs(1), UNIX_EPOCH);
    let (subject, field, _) = invalid_parts(dynamic::to_yaml(&r).unwrap_err());
    assert_eq!(subject, "runtime/Services.runtime.cosi.dev/etcd");
    assert_eq!(field, "metadata.created");
}

#[test]
fn a_timestamp_metadata_cannot_keep_is_an_error_naming_its_field() {
    // Metadata keeps times to 2262-04-11T23:47:16.854775807Z; RFC 3339 writes up to 9999.
    let last = "2262-04-11T23:47:16.854775807Z";
    let yaml = |created: &str| {
        format!("metadata: {{type: svc, id: a, created: '{created}', updated: '{last}'}}\nspec: {{image: b, port: 1, env: {{}}, args: [], weight: 1}}\n")
    };
    let kept = registry().decode_yaml(&yaml(last)).unwrap();
    assert_eq!(
        humantime::format_rfc3339_nanos(kept[0].metadata().created()).to_string(),
        last
    );
    let err = registry()
        .decode_yaml(&yaml("2262-04-11T23:47:16.854775808Z"))
        .unwrap_err();
    assert_eq!(
        invalid_parts(err),
        (
            "YAML document 1".to_string(),
            "metadata.created".to_string(),
            "\"2262-04-11T23:47:16.854775808Z\" is after 2262-04-11T23:47:16.854775807Z, \
             the last time metadata keeps"
                .to_string()
        )
    );
}

#[test]
fn an_integer_beyond_64_bits_in_a_dynamic_spec_is_refused_saying_so() {
    let registry = registry();
    let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    let err = decoder
        .decode_yaml("metadata: {namespace: ns, type: Widgets.test.cosi.dev, id: w}\nspec: {size: [1, -99999999999999999999]}\n")
        .unwrap_err();
    assert_eq!(
        invalid_parts(err),
        (
            "YAML document 1".to_string(),
            "spec.size[1]".to_string(),
            "integer -99999999999999999999 is outside the 64-bit range a spec's integers are \
             kept in at line 2 column 18"
                .to_string()
        )
    );
}

#[test]
fn an_integer_beyond_64_bits_in_a_json_spec_is_refused_as_in_yaml() {
    let registry = registry();
    let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    let json = "{\"metadata\": {\"namespace\": \"ns\", \"type\": \"Widgets.test.cosi.dev\", \"id\": \"w\"},\n\
                \"spec\": {\"size\": [1, -99999999999999999999]}}";
    let err = decoder.decode_json(json).unwrap_err();
    assert_eq!(
        invalid_parts(err),
        (
            "JSON document 1".to_string(),
            "spec.size[1]".to_string(),
            "integer -99999999999999999999 is outside the 64-bit range a spec's integers are \
             kept in at line 2 column 22"
                .to_string()
        )
    );
}

#[test]
fn an_integer_beyond_64_bits_in_a_later_json_document_names_that_document() {
    let registry = Registry::new();
    let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    let json = r#"{"metadata": {"namespace": "ns", "type": "W.x.dev", "id": "a"}, "spec": 18446744073709551615}
{"metadata": {"namespace": "ns", "type": "W.x.dev", "id": "b"}, "spec": {"n": 18446744073709551616}}"#;
    let (subject, field, _) = invalid_parts(decoder.decode_json(json).unwrap_err());
    assert_eq!(
        (subject.as_str(), field.as_str()),
        ("JSON document 2", "spec.n")
    );
}

#[test]
fn a_json_float_stays_a_float_however_large() {
    let registry = Registry::new();
    let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    let json = r#"{"metadata": {"namespace": "ns", "type": "W.x.dev", "id": "w"},
                  "spec": [1e30, 18446744073709551616.0, -9223372036854775809e0]}"#;
    let decoded = decoder.decode_json(json).unwrap();
    assert_eq!(
        decoded[0].spec_value().unwrap(),
        serde_json::json!([1e30, 18446744073709551616.0, -9223372036854775809.0])
    );
}

#[test]
fn multi_document_yaml_decodes_every_document_in_order_with_defaults() {
    let yaml = "\
metadata: {type: svc, id: b}
spec: {image: b, port: 1, env: {}, args: [], weight: 1, limit: 5}
---
---
metadata: {namespace: other, type: hostname, id: a, version: 4}
spec: node-1
";
    let decoded = registry().decode_yaml(yaml).unwrap();
    assert_eq!(decoded.len(), 2);
    let svc = downcast_ref::<Service>(&*decoded[0]).unwrap();
    assert_eq!(svc.metadata.namespace(), "runtime");
    assert_eq!(svc.metadata.resource_type(), Service::TYPE);
    assert_eq!(svc.metadata.version(), Version::UNSET);
    assert_eq!(svc.metadata.created(), UNIX_EPOCH);
    assert_eq!(svc.spec.limit, Some(5));
    let host = downcast::<Hostname>(decoded[1].clone()).unwrap();
    assert_eq!(
        host.metadata.pointer(),
        &Pointer::new("other", Hostname::TYPE, "a")
    );
    assert_eq!(host.metadata.version(), Version::new(4));
    assert_eq!(host.spec, Hostname("node-1".into()));
}

#[test]
fn unknown_type_is_an_error_naming_the_type() {
    let err = registry()
        .decode_yaml("metadata: {namespace: ns, type: Widgets.test.cosi.dev, id: w}\n")
        .unwrap_err();
    let (subject, field, message) = invalid_parts(err);
    assert_eq!(subject, "YAML document 1");
    assert_eq!(field, "metadata.type");
    assert_eq!(
        message,
        "\"Widgets.test.cosi.dev\": no registered type has this full name, plural, singular or alias"
    );
}

#[test]
fn unknown_type_is_kept_as_dynamic_resource_only_when_asked() {
    let registry = registry();
    let yaml = "metadata: {namespace: ns, type: Widgets.test.cosi.dev, id: w}\nspec: {size: 3}\n";
    let decoded = Decoder::new(&registry)
        .unknown_types(UnknownTypes::KeepDynamic)
        .decode_yaml(yaml)
        .unwrap();
    let widget = decoded[0]
        .as_any()
        .downcast_ref::<DynamicResource>()
        .unwrap();
    assert_eq!(widget.spec, serde_json::json!({"size": 3}));
    assert_eq!(
        dynamic::to_yaml(widget).unwrap().lines().nth(2),
        Some("  type: Widgets.test.cosi.dev")
    );
}

#[test]
fn ambiguous_type_is_not_kept_dynamic_even_when_asked() {
    let mut registry = registry();
    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Other;
    impl ResourceSpec for Other {
        const TYPE: &'static str = "Others.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "t";
        fn definition() -> ResourceDefinition {
            ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE).with_aliases(["svc"])
        }
    }
    registry.register::<Other>().unwrap();
    let err = Decoder::new(&registry)
        .unknown_types(UnknownTypes::KeepDynamic)
        .decode_yaml("metadata: {namespace: ns, type: svc, id: w}\n")
        .unwrap_err();
    let (_, field, message) = invalid_parts(err);
    assert_eq!(field, "metadata.type");
    assert_eq!(
        message,
        "\"svc\": ambiguous, it names Others.test.cosi.dev, Services.runtime.cosi.dev"
    );
}

#[test]
fn malformed_version_names_metadata_version() {
    let err = registry()
        .decode_yaml("metadata: {type: svc, id: a, version: three}\n")
        .unwrap_err();
    let (subject, field, message) = invalid_parts(err);
    assert_eq!(
        (subject.as_str(), field.as_str()),
        ("YAML document 1", "metadata.version")
    );
    assert!(
        message.starts_with("invalid type: string \"three\", expected u64"),
        "{message}"
    );
}

#[test]
fn malformed_spec_field_names_the_resource_and_spec_path() {
    let err = registry()
        .decode_yaml("metadata: {type: svc, id: a}\nspec: {image: a, port: 99999, env: {}, args: [], weight: 1, limit: null}\n")
        .unwrap_err();
    let (subject, field, message) = invalid_parts(err);
    assert_eq!(subject, "runtime/Services.runtime.cosi.dev/a");
    assert_eq!(field, "spec.port");
    assert_eq!(message, "invalid value: integer `99999`, expected u16");
}

#[test]
fn unknown_metadata_field_is_rejected() {
    let err = registry()
        .decode_yaml("metadata: {type: svc, id: a, uid: x}\n")
        .unwrap_err();
    let (_, field, message) = invalid_parts(err);
    assert_eq!(field, "metadata.uid");
    assert!(message.starts_with("unknown field `uid`"), "{message}");
}

#[test]
fn yaml_syntax_error_names_where_it_is() {
    let err = registry()
        .decode_yaml("metadata: {type: svc\n  id: [\n")
        .unwrap_err();
    let (subject, field, message) = invalid_parts(err);
    assert_eq!(subject, "YAML document 1");
    assert_eq!(field, "line 2 column 5");
    assert!(
        message.starts_with("did not find expected ',' or '}'"),
        "{message}"
    );
}

#[test]
fn yaml_scan_error_inside_metadata_is_reported_at_its_position() {
    let yaml = "metadata:\n  type: svc\n  id: a\n  labels: {app: web\nspec: {}\n";
    let (subject, field, message) = invalid_parts(registry().decode_yaml(yaml).unwrap_err());
    assert_eq!(subject, "YAML document 1");
    assert_eq!(field, "line 5 column 5");
    assert_eq!(
        message,
        "did not find expected ',' or '}' at line 5 column 5, while parsing a flow mapping at \
         line 4 column 11"
    );
}

#[test]
fn yaml_scan_error_in_a_later_document_is_reported_at_its_position() {
    let yaml =
        "metadata: {type: hostname, id: a}\nspec: x\n---\nmetadata: {type: hostname, id: 'b}\n";
    let (subject, field, message) = invalid_parts(registry().decode_yaml(yaml).unwrap_err());
    assert_eq!(subject, "YAML document 2");
    assert_eq!(field, "line 5 column 1");
    assert!(
        message.starts_with("found unexpected end of stream"),
        "{message}"
    );
}

#[test]
fn bad_document_anywhere_in_the_stream_fails_the_whole_decode() {
    let yaml = "metadata: {type: hostname, id: a}\nspec: x\n---\nmetadata: {type: hostname, id: ''}\nspec: y\n";
    let (subject, field, message) = invalid_parts(registry().decode_yaml(yaml).unwrap_err());
    assert_eq!(subject, "YAML document 2");
    assert_eq!(field, "metadata.id");
    assert_eq!(message, "must not be empty");
}

#[test]
fn json_stream_decodes_each_document() {
    let json = r#"{"metadata": {"type": "hostname", "id": "a"}, "spec": "x"}
{"metadata": {"type": "hostname", "id": "b"}, "spec": "y"}"#;
    let decoded = registry().decode_json(json).unwrap();
    let ids: Vec<_> = decoded
        .iter()
        .map(|r| r.metadata().id().to_string())
        .collect();
    assert_eq!(ids, ["a", "b"]);
}

#[test]
fn json_syntax_error_names_the_document_line_and_column() {
    let json =
        "{\"metadata\": {\"type\": \"hostname\", \"id\": \"a\"}, \"spec\": \"x\"}\n{\"metadata\": ";
    let (subject, field, _) = invalid_parts(registry().decode_json(json).unwrap_err());
    assert_eq!(subject, "JSON document 2");
    assert_eq!(field, "line 2 column 13");
}

#[test]
fn downcast_to_the_wrong_type_is_an_error_naming_both() {
    let decoded = registry()
        .decode_yaml("metadata: {type: hostname, id: a}\nspec: x\n")
        .unwrap();
    let err = downcast_ref::<Service>(&*decoded[0]).unwrap_err();
    let (subject, field, message) = invalid_parts(err);
    assert_eq!(subject, "network/Hostnames.net.cosi.dev/a");
    assert_eq!(field, "spec");
    assert!(message.contains(Service::TYPE), "{message}");
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9-]{1,10}",
        prop::collection::vec(any::<char>(), 0..8).prop_map(String::from_iter),
        prop::sample::select(vec![
            "yes", "null", "~", "0x1F", "1e3", "- a", "#", "", "'", "\""
        ])
        .prop_map(String::from),
    ]
}

fn non_empty_text() -> impl Strategy<Value = String> {
    text().prop_filter("non-empty", |s| !s.is_empty())
}

fn time() -> impl Strategy<Value = SystemTime> {
    // Up to 2262-04-11, the last second metadata keeps to the nanosecond, with nanoseconds.
    (0u64..9_223_372_036, 0u32..1_000_000_000)
        .prop_map(|(secs, nanos)| UNIX_EPOCH + Duration::new(secs, nanos))
}

prop_compose! {
    fn service_resource()(
        namespace in non_empty_text(),
        id in non_empty_text(),
        version in any::<u64>(),
        owner in proptest::option::of(text()),
        tearing_down in any::<bool>(),
        labels in prop::collection::btree_map(text(), text(), 0..4),
        annotations in prop::collection::btree_map(text(), text(), 0..3),
        finalizers in prop::collection::btree_set(text(), 0..3),
        created in time(),
        updated in time(),
        image in text(),
        port in any::<u16>(),
        env in prop::collection::btree_map(text(), text(), 0..3),
        args in prop::collection::vec(text(), 0..3),
        weight in any::<f64>().prop_filter("finite", |w| w.is_finite()),
        limit in proptest::option::of(any::<i64>()),
    ) -> Resource<Service> {
        let mut md = Metadata::new(Pointer::new(&namespace, Service::TYPE, id));
        md.set_version(Version::new(version));
        md.set_owner(owner.map(Into::into));
        md.set_phase(if tearing_down { Phase::TearingDown } else { Phase::Running });
        *md.labels_mut() = labels;
        *md.annotations_mut() = annotations;
        *md.finalizers_mut() = finalizers;
        md.set_timestamps(created, updated);
        Resource::with_metadata(md, Service { image, port, env, args, weight, limit })
    }
}

proptest! {
    #[test]
    fn typed_resource_round_trips_exactly_through_yaml(original in service_resource()) {
        let yaml = dynamic::to_yaml(&original).unwrap();
        let decoded = registry().decode_yaml(&yaml);
        prop_assert!(decoded.is_ok(), "{:?}\n{}", decoded.err(), yaml);
        let decoded = decoded.unwrap();
        prop_assert_eq!(decoded.len(), 1);
        prop_assert_eq!(downcast_ref::<Service>(&*decoded[0]).unwrap(), &original, "{}", yaml);
    }

    #[test]
    fn typed_resource_round_trips_exactly_through_json(original in service_resource()) {
        let json = dynamic::to_json(&original).unwrap();
        let decoded = registry().decode_json(&json).unwrap();
        prop_assert_eq!(downcast_ref::<Service>(&*decoded[0]).unwrap(), &original);
    }

    #[test]
    fn decoding_arbitrary_text_never_panics(text in ".{0,200}") {
        let _ = registry().decode_yaml(&text);
        let _ = registry().decode_json(&text);
    }
}

fn nested_json(depth: usize) -> String {
    // The document object is depth 1, the spec's lists the rest.
    let spec = format!("{}{}", "[".repeat(depth - 1), "]".repeat(depth - 1));
    format!(r#"{{"metadata": {{"namespace": "n", "type": "T.x.dev", "id": "i"}}, "spec": {spec}}}"#)
}

#[test]
fn json_nested_deeper_than_yaml_may_be_is_refused_where_it_passes_the_limit() {
    let registry = Registry::new();
    let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    let err = decoder.decode_json(&nested_json(100)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "JSON document 1: invalid line 1 column 135: more than 64 levels of nesting"
    );
}

#[test]
fn json_as_deep_as_yaml_may_be_is_decoded_and_its_yaml_reads_back() {
    let registry = Registry::new();
    let decoder = Decoder::new(&registry).unknown_types(UnknownTypes::KeepDynamic);
    let decoded = decoder.decode_json(&nested_json(64)).unwrap();
    let yaml = dynamic::to_yaml(&*decoded[0]).unwrap();
    let again = decoder.decode_yaml(&yaml).unwrap();
    assert_eq!(
        again[0].spec_value().unwrap(),
        decoded[0].spec_value().unwrap()
    );
}
