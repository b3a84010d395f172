//! Decoding a spec into its registered Rust type, and where unknown fields are errors.
//!
//! # The boundary: strict for outside input, tolerant for what we wrote
//!
//! A spec field the type does not have is either a mistake or a field from the future:
//!
//! - **Outside input** ([`Origin::Input`]) — a document a user wrote (YAML or JSON decoded by
//!   [`dynamic`](crate::dynamic)), a remote caller's Create or Update (the API server), a
//!   dynamic resource a writer hands to a store that keeps it typed. An unknown field there is
//!   almost always a typo (`extraArgz` for `extraArgs`); dropping it silently would store a
//!   resource that is not what its author asked for. It is an [`Error::InvalidArgument`] that
//!   names the resource (type and id) and the field's path (`spec.kubelet.extraArgz`), and
//!   nothing is stored.
//! - **Read-back** ([`Origin::ReadBack`]) — what this project's own store wrote (a disk or etcd
//!   record loaded on start), or what its own server sent (a client's Get, List or Watch). The
//!   writer may be a newer version that knows fields this reader does not; an older reader must
//!   keep working, so unknown fields are skipped there. Type errors (a string where a number
//!   belongs) are errors on both sides.
//!
//! The rule of thumb: whoever *accepts a write* from outside decodes strictly; whoever *reads
//! back* what a trusted writer produced decodes tolerantly. The decision is made by the caller
//! of [`Registry::decode_spec`](crate::Registry::decode_spec), not by the type: the same type is
//! strict in one place and tolerant in the other. Across the workspace:
//!
//! | where | origin |
//! |---|---|
//! | [`dynamic::Decoder`](crate::dynamic::Decoder) (unless told otherwise) | input |
//! | `cosi-api` server: the resource of a Create or Update | input |
//! | `cosi-state` disk store: a dynamic resource handed to a write | input |
//! | `cosi-state` disk and etcd stores: records loaded | read-back |
//! | `cosi-api` client: resources in replies and watch events | read-back |
//!
//! A type that deliberately accepts extra fields on input (a spec that passes settings through
//! to another program, or that keeps the fields it does not know) opts out by setting
//! [`ResourceSpec::UNKNOWN_FIELDS`] to [`UnknownFields::Accept`]. Types with
//! `#[serde(deny_unknown_fields)]` refuse unknown fields everywhere, read-back included, which
//! gives up forward compatibility; the registry's strictness makes that attribute unnecessary.
//!
//! Unknown fields are found with `serde_ignored` (every value the type's `Deserialize` skips),
//! so they are found at any depth. Values serde buffers before the type sees them are beyond
//! its reach: an unknown field beside a `#[serde(flatten)]` field, or inside an untagged enum,
//! is not reported.

use std::fmt::Write as _;

use serde::de::DeserializeOwned;
use serde::Deserializer;

use crate::text::clipped;
use crate::{Error, Metadata, Resource, ResourceSpec, Result, SharedResource, UnknownFields};

/// Where a spec being decoded comes from, which decides whether an unknown field is an error
/// (see the [module docs](self)).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Origin {
    /// Outside input: a user's document, a remote caller's write. Unknown fields are errors,
    /// unless the type [accepts them](ResourceSpec::UNKNOWN_FIELDS).
    Input,
    /// What this project wrote — a store's record, a server's reply — possibly by a newer
    /// version of it. Unknown fields are skipped.
    ReadBack,
}

/// How many unknown fields an error lists by path (the rest are counted), so that a hostile
/// spec of a million unknown keys costs no more memory than a spec of six.
const LISTED_UNKNOWN: usize = 6;

/// The unknown fields met while decoding, the first few by path.
#[derive(Default)]
struct UnknownPaths {
    listed: Vec<String>,
    total: usize,
}

impl UnknownPaths {
    fn record(&mut self, path: &serde_ignored::Path<'_>) {
        self.total += 1;
        if self.listed.len() < LISTED_UNKNOWN {
            let mut text = String::from("spec");
            write_path(path, &mut text);
            self.listed.push(text);
        }
    }

    fn into_error(self, metadata: &Metadata) -> Option<Error> {
        let mut listed = self.listed.into_iter();
        let first = listed.next()?;
        let mut message = format!(
            "unknown field: {} has no such field (check its spelling)",
            clipped(metadata.resource_type())
        );
        // The keys are the caller's: each path is quoted clipped.
        let others: Vec<String> = listed.map(|path| clipped(&path).to_string()).collect();
        if !others.is_empty() {
            let _ = write!(message, "; also unknown: {}", others.join(", "));
            let unlisted = self.total - 1 - others.len();
            if unlisted > 0 {
                let _ = write!(message, " and {unlisted} more");
            }
        }
        Some(Error::invalid(
            metadata.pointer().to_string(),
            first,
            message,
        ))
    }
}

/// Writes `path` the way `serde_path_to_error` writes its paths (`a.b[1].c`), so that both
/// kinds of spec error read alike.
fn write_path(path: &serde_ignored::Path<'_>, out: &mut String) {
    use serde_ignored::Path;
    match path {
        Path::Root => {}
        Path::Seq { parent, index } => {
            write_path(parent, out);
            let _ = write!(out, "[{index}]");
        }
        Path::Map { parent, key } => {
            write_path(parent, out);
            out.push('.');
            out.push_str(key);
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => write_path(parent, out),
    }
}

/// `spec` followed by a path as `serde_path_to_error` writes it (`.` for the root).
pub(crate) fn spec_field(path: &str) -> String {
    match path {
        "." => "spec".to_string(),
        p if p.starts_with('[') => format!("spec{p}"),
        p => format!("spec.{p}"),
    }
}

/// Whether decoding `S` from `origin` refuses unknown fields.
fn strict<S: ResourceSpec>(origin: Origin) -> bool {
    origin == Origin::Input && S::UNKNOWN_FIELDS == UnknownFields::Reject
}

/// Decodes `S` without tracking paths: the spec, or `None` when it does not decode or (with
/// `strict`) has an unknown field. Tracking paths costs an allocation per map key, most of the
/// cost of a small spec, so it is left to [`located`], which runs only when this fails.
fn unlocated<'de, S, D>(deserializer: D, strict: bool) -> Option<S>
where
    S: DeserializeOwned,
    D: Deserializer<'de>,
{
    if !strict {
        return S::deserialize(deserializer).ok();
    }
    let mut unknown = false;
    let spec = serde_ignored::deserialize(deserializer, |_| unknown = true).ok()?;
    (!unknown).then_some(spec)
}

/// Decodes `S` from `deserializer` tracking paths: a value that does not fit is an error at
/// its path; with `strict`, so is an unknown field. `message` turns the format's error into
/// text.
fn located<'de, S, D>(
    metadata: &Metadata,
    deserializer: D,
    strict: bool,
    message: impl FnOnce(D::Error) -> String,
) -> Result<S>
where
    S: DeserializeOwned,
    D: Deserializer<'de>,
{
    let mut track = serde_path_to_error::Track::new();
    let tracked = serde_path_to_error::Deserializer::new(deserializer, &mut track);
    let mut unknown = UnknownPaths::default();
    let decoded = if strict {
        serde_ignored::deserialize(tracked, |path| unknown.record(&path))
    } else {
        S::deserialize(tracked)
    };
    match decoded {
        Err(err) => Err(Error::invalid(
            metadata.pointer().to_string(),
            spec_field(&track.path().to_string()),
            message(err),
        )),
        Ok(spec) => match unknown.into_error(metadata) {
            Some(err) => Err(err),
            None => Ok(spec),
        },
    }
}

/// Builds a typed `S` resource from a spec in dynamic form.
pub(crate) fn typed_from_value<S: ResourceSpec>(
    metadata: Metadata,
    spec: serde_json::Value,
    origin: Origin,
) -> Result<SharedResource> {
    let strict = strict::<S>(origin);
    let spec = match unlocated::<S, _>(&spec, strict) {
        Some(spec) => spec,
        None => located::<S, _>(&metadata, &spec, strict, |e| e.to_string())?,
    };
    Ok(Resource::with_metadata(metadata, spec).into_shared())
}

/// Builds a typed `S` resource from a spec written as JSON, decoding it straight into `S`
/// (no dynamic form on the way: this is the wire's path). An integer beyond 64 bits is refused
/// at its path, as in the dynamic form, whatever field of `S` it is for.
pub(crate) fn typed_from_json<S: ResourceSpec>(
    metadata: Metadata,
    json: &[u8],
    origin: Origin,
) -> Result<SharedResource> {
    check_integers(&metadata, json)?;
    let strict = strict::<S>(origin);
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let spec = unlocated::<S, _>(&mut deserializer, strict).filter(|_| deserializer.end().is_ok());
    let spec = match spec {
        Some(spec) => spec,
        None => {
            let mut deserializer = serde_json::Deserializer::from_slice(json);
            let spec = located::<S, _>(&metadata, &mut deserializer, strict, json_message)?;
            deserializer.end().map_err(|e| {
                Error::invalid(metadata.pointer().to_string(), "spec", json_message(e))
            })?;
            spec
        }
    };
    Ok(Resource::with_metadata(metadata, spec).into_shared())
}

/// A spec written as JSON, in dynamic form (types known only by their definition). An integer
/// beyond 64 bits is an error at its path, as in YAML, not the float serde_json would make it.
pub(crate) fn value_from_json(metadata: &Metadata, json: &[u8]) -> Result<serde_json::Value> {
    check_integers(metadata, json)?;
    serde_json::from_slice(json)
        .map_err(|e| Error::invalid(metadata.pointer().to_string(), "spec", json_message(e)))
}

/// Refuses a spec's JSON holding an integer beyond 64 bits, which serde_json would read as the
/// nearest float (see [`crate::json`]), naming its path.
fn check_integers(metadata: &Metadata, json: &[u8]) -> Result<()> {
    crate::json::check_integers(json).map_err(|wide| {
        Error::invalid(
            metadata.pointer().to_string(),
            spec_field(&wide.path),
            wide.to_string(),
        )
    })
}

/// A JSON error as text: a value that does not fit is located by its path in the error's
/// field, so the position (always line 1 of a one-line spec) is left out; text that is not JSON
/// at all keeps it.
fn json_message(err: serde_json::Error) -> String {
    let text = err.to_string();
    if !err.is_data() {
        return format!("not JSON: {text}");
    }
    let position = format!(" at line {} column {}", err.line(), err.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pointer;
    use serde::{Deserialize, Serialize};

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Kubelet {
        image: String,
        #[serde(default)]
        extra_args: Vec<String>,
        #[serde(default)]
        mounts: Vec<Mount>,
        #[serde(default)]
        log: Option<Log>,
    }

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Mount {
        path: String,
    }

    #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
    struct Log(Mount);

    impl ResourceSpec for Kubelet {
        const TYPE: &'static str = "Kubelets.k8s.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "k8s";
    }

    fn metadata() -> Metadata {
        Metadata::new(Pointer::new("k8s", Kubelet::TYPE, "kubelet"))
    }

    fn input(spec: serde_json::Value) -> Result<SharedResource> {
        typed_from_value::<Kubelet>(metadata(), spec, Origin::Input)
    }

    #[test]
    fn json_and_dynamic_form_decode_to_the_same_errors() {
        let spec = serde_json::json!({"image": "k", "mounts": [{"path": 1}]});
        let from_value = input(spec.clone()).unwrap_err();
        let json = serde_json::to_vec(&spec).unwrap();
        let from_json = typed_from_json::<Kubelet>(metadata(), &json, Origin::Input).unwrap_err();
        assert_eq!(from_json.to_string(), from_value.to_string());
        assert_eq!(
            from_json.to_string(),
            "k8s/Kubelets.k8s.cosi.dev/kubelet: invalid spec.mounts[0].path: \
             invalid type: integer `1`, expected a string"
        );
    }

    #[test]
    fn an_integer_beyond_64_bits_is_refused_at_its_path_whatever_the_field_s_type() {
        #[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
        struct Gauge {
            level: f64,
            raw: serde_json::Value,
        }
        impl ResourceSpec for Gauge {
            const TYPE: &'static str = "Gauges.test.cosi.dev";
            const DEFAULT_NAMESPACE: &'static str = "test";
        }
        let md = || Metadata::new(Pointer::new("test", Gauge::TYPE, "g"));
        let outside = "is outside the 64-bit range a spec's integers are kept in at line 1";
        for (json, expected) in [
            (
                &br#"{"level": 18446744073709551616, "raw": 1}"#[..],
                format!("invalid spec.level: integer 18446744073709551616 {outside} column 11"),
            ),
            (
                br#"{"level": 1.5, "raw": {"n": -9223372036854775809}}"#,
                format!("invalid spec.raw.n: integer -9223372036854775809 {outside} column 29"),
            ),
        ] {
            let err = typed_from_json::<Gauge>(md(), json, Origin::Input).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("test/Gauges.test.cosi.dev/g: {expected}")
            );
        }
        // Written as floats, they are floats.
        let json = br#"{"level": 18446744073709551616.0, "raw": 1e30}"#;
        assert!(typed_from_json::<Gauge>(md(), json, Origin::Input).is_ok());
    }

    #[test]
    fn json_that_is_not_json_keeps_its_position() {
        let err =
            typed_from_json::<Kubelet>(metadata(), b"{\"image\": }", Origin::Input).unwrap_err();
        assert_eq!(
            err.to_string(),
            "k8s/Kubelets.k8s.cosi.dev/kubelet: invalid spec.image: \
             not JSON: expected value at line 1 column 11"
        );
    }

    #[test]
    fn json_with_text_after_the_spec_is_refused() {
        let err = typed_from_json::<Kubelet>(metadata(), b"{\"image\": \"k\"} x", Origin::Input)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "k8s/Kubelets.k8s.cosi.dev/kubelet: invalid spec: \
             not JSON: trailing characters at line 1 column 16"
        );
    }

    #[test]
    fn unknown_path_is_written_like_serde_path_to_error() {
        let err = input(serde_json::json!({
            "image": "k",
            "mounts": [{"path": "/a"}, {"path": "/b", "readOnly": true}],
        }))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "k8s/Kubelets.k8s.cosi.dev/kubelet: invalid spec.mounts[1].readOnly: unknown field: \
             Kubelets.k8s.cosi.dev has no such field (check its spelling)"
        );
    }

    #[test]
    fn unknown_fields_past_the_listed_few_are_counted() {
        let mut spec = serde_json::json!({"image": "k"});
        for i in 0..10 {
            spec[format!("x{i}")] = serde_json::json!(i);
        }
        let err = input(spec).unwrap_err();
        assert_eq!(
            err.to_string(),
            "k8s/Kubelets.k8s.cosi.dev/kubelet: invalid spec.x0: unknown field: \
             Kubelets.k8s.cosi.dev has no such field (check its spelling); also unknown: \
             spec.x1, spec.x2, spec.x3, spec.x4, spec.x5 and 4 more"
        );
    }

    #[test]
    fn a_type_error_is_reported_before_unknown_fields() {
        let err = input(serde_json::json!({"imag": "k", "image": 1})).unwrap_err();
        assert_eq!(
            err.to_string(),
            "k8s/Kubelets.k8s.cosi.dev/kubelet: invalid spec.image: \
             invalid type: integer `1`, expected a string"
        );
    }

    #[test]
    fn option_and_newtype_steps_add_nothing_to_the_path() {
        let err =
            input(serde_json::json!({"image": "k", "log": {"path": "/l", "size": 1}})).unwrap_err();
        assert_eq!(
            err.to_string().split(": ").nth(1),
            Some("invalid spec.log.size")
        );
    }
}
