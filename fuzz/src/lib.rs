//! The checks behind the fuzz targets, shared with `cosi-core/tests/fuzz_corpus.rs`, which
//! replays every corpus file through them on a normal `cargo test` (it includes this file as a
//! module, so it must build both as this crate's root and as a module of that test).
//!
//! Each check panics when a rule breaks and otherwise reports whether the input was accepted.

use std::collections::BTreeMap;

use cosi_core::dynamic::{self, Decoder, UnknownTypes};
use cosi_core::{
    same_content, AnyResource, LabelQueries, Registry, ResourceDefinition, ResourceSpec,
};
use serde::{Deserialize, Serialize};

/// What a check made of its input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// The input was valid and every round trip held.
    Accepted,
    /// The input was rejected with an error (not a panic).
    Rejected,
}

/// Parses `data` as a selector; a parsed selector must display to text that parses back equal
/// and displays the same again.
pub fn selector(data: &[u8]) -> Outcome {
    let Ok(text) = std::str::from_utf8(data) else {
        return Outcome::Rejected;
    };
    let Ok(parsed) = LabelQueries::parse(text) else {
        return Outcome::Rejected;
    };
    let shown = parsed.to_string();
    let reparsed = match LabelQueries::parse(&shown) {
        Ok(reparsed) => reparsed,
        Err(err) => panic!("{text:?} displayed as {shown:?}, which does not parse: {err}"),
    };
    assert_eq!(reparsed, parsed, "{text:?} displayed as {shown:?}");
    assert_eq!(
        reparsed.to_string(),
        shown,
        "display is not stable for {text:?}"
    );
    Outcome::Accepted
}

/// A service-like spec with the shapes YAML makes tricky: nested maps, lists, options, floats and
/// an enum with data. Unknown fields are refused by the registry's strict decoding of input,
/// not by the type.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct ServiceSpec {
    /// Container image.
    pub image: String,
    /// Listening ports.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Replica count, if fixed.
    #[serde(default)]
    pub replicas: Option<u32>,
    /// Share of the node's CPU.
    #[serde(default)]
    pub cpu_share: f64,
    /// How it restarts.
    #[serde(default)]
    pub restart: Restart,
}

/// Restart policy of [`ServiceSpec`].
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Restart {
    /// Never restart.
    #[default]
    Never,
    /// Restart after a delay in seconds.
    After(u64),
    /// Restart with backoff.
    Backoff {
        /// First delay in seconds.
        initial: u64,
        /// Largest delay in seconds.
        max: u64,
    },
}

impl ResourceSpec for ServiceSpec {
    const TYPE: &'static str = "Services.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "runtime";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["svc", "s"])
            .with_print_column("Image", ".image")
    }
}

/// A spec that is a bare string, to exercise non-map specs.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct SecretSpec(pub String);

impl ResourceSpec for SecretSpec {
    const TYPE: &'static str = "Secrets.secrets.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "secrets";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE).with_aliases(["s"])
    }
}

/// The registry the dynamic checks decode with: [`ServiceSpec`] and [`SecretSpec`] (which
/// share the ambiguous alias `s`).
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    // Two distinct, well-formed definitions: registration cannot fail.
    registry
        .register::<ServiceSpec>()
        .expect("ServiceSpec registers");
    registry
        .register::<SecretSpec>()
        .expect("SecretSpec registers");
    registry
}

/// Decodes `data` as a YAML stream, rejecting unknown types and then keeping them; every decoded
/// resource must write to YAML and JSON that decode back to an equal resource (metadata with
/// timestamps, and spec), and writing that again must give the same text.
pub fn dynamic_yaml(data: &[u8]) -> Outcome {
    let Ok(text) = std::str::from_utf8(data) else {
        return Outcome::Rejected;
    };
    let registry = registry();
    let mut outcome = Outcome::Rejected;
    for unknown in [UnknownTypes::Reject, UnknownTypes::KeepDynamic] {
        let decoder = Decoder::new(&registry).unknown_types(unknown);
        if let Ok(resources) = decoder.decode_yaml(text) {
            for resource in &resources {
                round_trip(&decoder, &**resource);
            }
            outcome = Outcome::Accepted;
        }
    }
    outcome
}

fn round_trip(decoder: &Decoder<'_>, resource: &dyn AnyResource) {
    let yaml = dynamic::to_yaml(resource).expect("a decoded resource writes as YAML");
    let again = match decoder.decode_yaml(&yaml) {
        Ok(again) => again,
        Err(err) => panic!("written YAML does not decode: {err}\n{yaml}"),
    };
    assert_eq!(again.len(), 1, "{yaml}");
    assert_equal(resource, &*again[0], &yaml);
    assert_eq!(dynamic::to_yaml(&*again[0]).unwrap(), yaml);

    let json = dynamic::to_json(resource).expect("a decoded resource writes as JSON");
    let again = match decoder.decode_json(&json) {
        Ok(again) => again,
        Err(err) => panic!("written JSON does not decode: {err}\n{json}"),
    };
    assert_eq!(again.len(), 1, "{json}");
    assert_equal(resource, &*again[0], &json);
}

fn assert_equal(a: &dyn AnyResource, b: &dyn AnyResource, text: &str) {
    assert!(same_content(a, b), "{a:?}\n!=\n{b:?}\nvia\n{text}");
    assert_eq!(a.metadata(), b.metadata(), "via\n{text}");
}
