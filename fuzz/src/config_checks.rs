//! The checks behind the machine config fuzz targets (`config_decode`, `config_patch`), shared
//! with `cosi-node/tests/config_fuzz_corpus.rs`, which replays every corpus file through them
//! on a normal `cargo test -p cosi-node`. Each target and that test include this file as a
//! module, so it depends on nothing but `cosi-node` and `serde_json`.
//!
//! Each check panics when a rule breaks and otherwise reports whether the input was accepted.

use cosi_node::config::document::{decode, encode};
use cosi_node::config::patch::{apply, Patch};
use cosi_node::config::validate::validate;
use cosi_node::config::MachineConfig;

/// What a check made of its input.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// The input was valid and every round trip held.
    Accepted,
    /// The input was rejected with an error (not a panic).
    Rejected,
}

/// Separates the base config from the patches (and the patches from each other) in a
/// `config_patch` input.
pub const SEPARATOR: &str = "\n%%%\n";

/// Decodes `data` as a config: no panic; a decoded config validates without panicking, its
/// canonical text decodes back equal and encodes the same again, and the resource's dynamic
/// form (one string) decodes back to an equal resource.
pub fn config_decode(data: &[u8]) -> Outcome {
    let Ok(config) = decode(data) else {
        return Outcome::Rejected;
    };
    let _ = validate(&config);
    round_trip(&config);
    let text = std::str::from_utf8(data).expect("a decoded config is UTF-8");
    let resource = MachineConfig::from_text(text).expect("decoded once, decodes again");
    let value = serde_json::to_value(&resource).expect("a machine config is a string");
    let back: MachineConfig = serde_json::from_value(value).expect("its string decodes");
    assert_eq!(back, resource);
    assert_eq!(back.text(), text);
    Outcome::Accepted
}

/// Reads `data` as a base config and patches separated by [`SEPARATOR`]; applies the patches:
/// no panic, and a patched config validates without panicking and round-trips through its
/// canonical text. Accepted when the base decodes and every patch applies.
pub fn config_patch(data: &[u8]) -> Outcome {
    let Ok(text) = std::str::from_utf8(data) else {
        return Outcome::Rejected;
    };
    let mut parts = text.split(SEPARATOR);
    let Some(Ok(base)) = parts.next().map(|b| decode(b.as_bytes())) else {
        return Outcome::Rejected;
    };
    let mut patches = Vec::new();
    for (i, part) in parts.enumerate() {
        match Patch::parse(part.as_bytes(), &format!("patches[{i}]")) {
            Ok(patch) => patches.push(patch),
            Err(_) => return Outcome::Rejected,
        }
    }
    let Ok(patched) = apply(&base, &patches) else {
        return Outcome::Rejected;
    };
    let _ = validate(&patched);
    round_trip(&patched);
    Outcome::Accepted
}

fn round_trip(config: &cosi_node::config::Config) {
    let text = encode(config);
    let again = match decode(text.as_bytes()) {
        Ok(again) => again,
        Err(err) => panic!("canonical text does not decode: {err}\n{text}"),
    };
    assert_eq!(&again, config, "via\n{text}");
    assert_eq!(encode(&again), text, "encoding is not stable");
}
