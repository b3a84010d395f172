//! What a spec must be to be written: every value one the project's spec forms carry exactly.
//!
//! # The rule: refused, not stored as something else
//!
//! A spec leaves the process as JSON: the disk and etcd stores keep it in JSON records, the
//! remote API sends it as JSON (`proto_spec`, beside `yaml_spec`), and its dynamic form is a
//! [`serde_json::Value`]. JSON has no NaN and no infinity, and serde_json writes such a float
//! as `null` without a word; nor does the dynamic form hold an integer beyond 64 bits. A spec
//! holding one was acknowledged, stored as something that no longer decodes as its type, and
//! lost on the next read (or on the next start of the disk store).
//!
//! So a write of such a spec is refused, on every backend — the in-memory one too, which keeps
//! the typed value and could hold it, so that what a controller may write does not depend on
//! where its output is stored: an [`Error::InvalidArgument`] naming the resource and the
//! field's path, before anything changes:
//!
//! ```text
//! test/Gauges.test.cosi.dev/g: invalid spec.ratio: NaN cannot be stored; a spec's floats must
//! be finite (JSON, the form stores and the remote API keep specs in, has no NaN or infinity)
//! ```
//!
//! Storing them faithfully instead was considered and not taken: YAML has `.nan` and `.inf`,
//! but JSON has no spelling for them that its readers accept (`NaN` is not JSON, and a peer of
//! the wire protocol reads `proto_spec` with a standard parser), the dynamic form would need a
//! value type of its own, and every record already written would read the same number two
//! ways. A spec that needs "no value" says so with an `Option`, which JSON carries as `null`
//! and reads back as `None`.
//!
//! The same forms refuse rather than write what they cannot read back: the spec's
//! [`dynamic form`](crate::AnyResource::spec_value), its [JSON](crate::AnyResource::write_spec_json)
//! (the remote client refuses such a write before sending it) and its
//! [YAML](crate::AnyResource::spec_yaml).
//!
//! # Cost
//!
//! The check rides along the encoder: [`Exact`] wraps the serializer a store or the wire
//! writes with, and sees every number as it goes by, so a spec is walked once. The in-memory
//! store, which encodes nothing, walks it once with a serializer that writes nothing. Only a
//! refused spec is walked again, with paths tracked, to name the field.

use std::fmt;

use serde::ser::{self, Serialize, Serializer};

use crate::text::clipped;
use crate::{Error, Metadata, Result};

/// Why a value cannot be stored, as the error's message says it.
const FLOAT_REASON: &str = "a spec's floats must be finite (JSON, the form stores and the \
                            remote API keep specs in, has no NaN or infinity)";
const INTEGER_REASON: &str = "a spec's integers must fit 64 bits (an i64 when negative, a u64 \
                              otherwise), as the dynamic form and JSON readers keep them";

/// A value a spec holds that cannot be stored exactly (see the [module docs](self)).
///
/// ```
/// use cosi_core::spec_encode::{check, Inexact};
/// #[derive(serde::Serialize)]
/// struct Gauge { readings: Vec<f64> }
///
/// let err = check(&Gauge { readings: vec![0.5, f64::NEG_INFINITY] }).unwrap_err();
/// assert_eq!(err.path, "readings[1]");
/// assert!(err.message.starts_with("-inf cannot be stored; a spec's floats must be finite"));
/// assert!(check(&Gauge { readings: vec![0.5, f64::MAX] }).is_ok());
/// ```
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Inexact {
    /// Where the value is inside the spec, written as `serde_path_to_error` writes paths
    /// (`a.b[1]`, `.` for the spec itself).
    pub path: String,
    /// What the value is and why it cannot be stored.
    pub message: String,
}

impl fmt::Display for Inexact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for Inexact {}

/// Checks that `spec` holds only values its stored forms carry exactly: finite floats and
/// integers within 64 bits. Walks it once without writing anything; the path of a refused
/// value is found by a second walk, only then.
pub fn check<T: Serialize + ?Sized>(spec: &T) -> std::result::Result<(), Inexact> {
    match spec.serialize(Exact(Discard)) {
        Ok(()) => Ok(()),
        Err(_) => Err(locate(spec).unwrap_or_else(|| Inexact {
            // Invariant: `Discard` fails only where `Exact` refuses, and `locate` walks the
            // same way; a `Serialize` that answers differently on a second call lands here.
            path: ".".into(),
            message: "the spec serialized differently on a second look".into(),
        })),
    }
}

/// The refused value of `spec` and its path, if it holds one.
fn locate<T: Serialize + ?Sized>(spec: &T) -> Option<Inexact> {
    match serde_path_to_error::serialize(spec, Exact(Discard)) {
        Ok(()) => None,
        Err(e) => Some(Inexact {
            path: e.path().to_string(),
            message: e.into_inner().0,
        }),
    }
}

/// The error for a spec of the resource `metadata` names that an encoder refused: the refused
/// value and its field when the spec holds one, otherwise `otherwise` (the encoder's own error).
pub(crate) fn refused_or<T: Serialize + ?Sized>(
    metadata: &Metadata,
    spec: &T,
    otherwise: impl FnOnce() -> Error,
) -> Error {
    match locate(spec) {
        Some(inexact) => refusal(metadata, inexact),
        None => otherwise(),
    }
}

/// The error refusing `inexact` in the spec of the resource `metadata` names.
pub(crate) fn refusal(metadata: &Metadata, inexact: Inexact) -> Error {
    Error::invalid(
        metadata.pointer().to_string(),
        crate::spec_decode::spec_field(&inexact.path),
        inexact.message,
    )
}

/// Checks the spec of the resource `metadata` names (see [`check`]).
pub(crate) fn check_resource<T: Serialize + ?Sized>(metadata: &Metadata, spec: &T) -> Result<()> {
    check(spec).map_err(|inexact| refusal(metadata, inexact))
}

/// Serializes `T` through [`Exact`]: give `&Exact(&spec)` to any serde encoder (`to_value`,
/// `to_writer`, a YAML writer) and it fails, with the encoder's own error type, where the spec
/// holds a value that cannot be stored exactly, instead of writing something else.
///
/// ```
/// use cosi_core::spec_encode::Exact;
/// assert_eq!(serde_json::to_string(&Exact(&[1.5, 2.0])).unwrap(), "[1.5,2.0]");
/// // serde_json alone writes `[null]`.
/// let err = serde_json::to_string(&Exact(&[f64::NAN])).unwrap_err();
/// assert!(err.to_string().starts_with("NaN cannot be stored"));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Exact<S>(pub S);

impl<T: Serialize + ?Sized> Serialize for Exact<&T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(Exact(serializer))
    }
}

fn non_finite<E: ser::Error>(value: impl fmt::Display) -> E {
    E::custom(format_args!("{value} cannot be stored; {FLOAT_REASON}"))
}

fn wide<E: ser::Error>(value: impl fmt::Display) -> E {
    let value = value.to_string();
    E::custom(format_args!(
        "integer {} cannot be stored; {INTEGER_REASON}",
        clipped(&value)
    ))
}

/// Forwards a serializer method unchanged.
macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $method(self, $($arg: $ty),*) -> std::result::Result<S::Ok, S::Error> {
            self.0.$method($($arg),*)
        })*
    };
}

impl<S: Serializer> Serializer for Exact<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Exact<S::SerializeSeq>;
    type SerializeTuple = Exact<S::SerializeTuple>;
    type SerializeTupleStruct = Exact<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Exact<S::SerializeTupleVariant>;
    type SerializeMap = Exact<S::SerializeMap>;
    type SerializeStruct = Exact<S::SerializeStruct>;
    type SerializeStructVariant = Exact<S::SerializeStructVariant>;

    forward! {
        serialize_bool(v: bool);
        serialize_i8(v: i8);
        serialize_i16(v: i16);
        serialize_i32(v: i32);
        serialize_i64(v: i64);
        serialize_u8(v: u8);
        serialize_u16(v: u16);
        serialize_u32(v: u32);
        serialize_u64(v: u64);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_f32(self, v: f32) -> std::result::Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(non_finite(v));
        }
        self.0.serialize_f32(v)
    }

    fn serialize_f64(self, v: f64) -> std::result::Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(non_finite(v));
        }
        self.0.serialize_f64(v)
    }

    fn serialize_i128(self, v: i128) -> std::result::Result<S::Ok, S::Error> {
        match i64::try_from(v) {
            Ok(v) => self.0.serialize_i64(v),
            Err(_) => Err(wide(v)),
        }
    }

    fn serialize_u128(self, v: u128) -> std::result::Result<S::Ok, S::Error> {
        match u64::try_from(v) {
            Ok(v) => self.0.serialize_u64(v),
            Err(_) => Err(wide(v)),
        }
    }

    fn serialize_some<T: Serialize + ?Sized>(
        self,
        value: &T,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize_some(&Exact(value))
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Exact(value))
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> std::result::Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, &Exact(value))
    }

    fn serialize_seq(
        self,
        len: Option<usize>,
    ) -> std::result::Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(Exact)
    }

    fn serialize_tuple(self, len: usize) -> std::result::Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(Exact)
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> std::result::Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(Exact)
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> std::result::Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, index, variant, len)
            .map(Exact)
    }

    fn serialize_map(
        self,
        len: Option<usize>,
    ) -> std::result::Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(Exact)
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> std::result::Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(Exact)
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> std::result::Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, index, variant, len)
            .map(Exact)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// Implements a compound serializer of `Exact<S>` whose elements are written one way.
macro_rules! compound {
    ($trait:ident, $method:ident($($name:ident: $ty:ty),*)) => {
        impl<S: ser::$trait> ser::$trait for Exact<S> {
            type Ok = S::Ok;
            type Error = S::Error;

            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $($name: $ty,)*
                value: &T,
            ) -> std::result::Result<(), S::Error> {
                self.0.$method($($name,)* &Exact(value))
            }

            fn end(self) -> std::result::Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    };
}

compound!(SerializeSeq, serialize_element());
compound!(SerializeTuple, serialize_element());
compound!(SerializeTupleStruct, serialize_field());
compound!(SerializeTupleVariant, serialize_field());

/// Implements a struct-like serializer of `Exact<S>`: named fields, some of them skipped.
macro_rules! structure {
    ($trait:ident) => {
        impl<S: ser::$trait> ser::$trait for Exact<S> {
            type Ok = S::Ok;
            type Error = S::Error;

            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> std::result::Result<(), S::Error> {
                self.0.serialize_field(key, &Exact(value))
            }

            fn skip_field(&mut self, key: &'static str) -> std::result::Result<(), S::Error> {
                self.0.skip_field(key)
            }

            fn end(self) -> std::result::Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    };
}

structure!(SerializeStruct);
structure!(SerializeStructVariant);

impl<S: ser::SerializeMap> ser::SerializeMap for Exact<S> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_key<T: Serialize + ?Sized>(
        &mut self,
        key: &T,
    ) -> std::result::Result<(), S::Error> {
        self.0.serialize_key(&Exact(key))
    }

    fn serialize_value<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> std::result::Result<(), S::Error> {
        self.0.serialize_value(&Exact(value))
    }

    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> std::result::Result<(), S::Error> {
        self.0.serialize_entry(&Exact(key), &Exact(value))
    }

    fn end(self) -> std::result::Result<S::Ok, S::Error> {
        self.0.end()
    }
}

/// A serializer that writes nothing: under [`Exact`], the check of a spec no store encodes.
/// It reads as JSON and YAML do (human-readable), so a type that serializes differently for
/// binary formats is checked in the form that is stored.
struct Discard;

/// The message of a refusal met by [`Discard`].
#[derive(Debug)]
struct Refused(String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl ser::Error for Refused {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Refused(msg.to_string())
    }
}

/// Serializer methods of [`Discard`] that take a plain value and write nothing.
macro_rules! discard {
    ($($method:ident($($ty:ty),*);)*) => {
        $(fn $method(self, $(_: $ty),*) -> std::result::Result<(), Refused> {
            Ok(())
        })*
    };
}

impl Serializer for Discard {
    type Ok = ();
    type Error = Refused;
    type SerializeSeq = Discard;
    type SerializeTuple = Discard;
    type SerializeTupleStruct = Discard;
    type SerializeTupleVariant = Discard;
    type SerializeMap = Discard;
    type SerializeStruct = Discard;
    type SerializeStructVariant = Discard;

    discard! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_i128(i128);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_u128(u128);
        serialize_f32(f32);
        serialize_f64(f64);
        serialize_char(char);
        serialize_str(&str);
        serialize_bytes(&[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> std::result::Result<(), Refused> {
        value.serialize(self)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> std::result::Result<(), Refused> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> std::result::Result<(), Refused> {
        value.serialize(self)
    }

    fn serialize_seq(self, _: Option<usize>) -> std::result::Result<Discard, Refused> {
        Ok(Discard)
    }

    fn serialize_tuple(self, _: usize) -> std::result::Result<Discard, Refused> {
        Ok(Discard)
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> std::result::Result<Discard, Refused> {
        Ok(Discard)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> std::result::Result<Discard, Refused> {
        Ok(Discard)
    }

    fn serialize_map(self, _: Option<usize>) -> std::result::Result<Discard, Refused> {
        Ok(Discard)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> std::result::Result<Discard, Refused> {
        Ok(Discard)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> std::result::Result<Discard, Refused> {
        Ok(Discard)
    }
}

/// Implements a compound serializer of [`Discard`]: each element is walked, nothing written.
macro_rules! discard_compound {
    ($trait:ident, $method:ident($($ty:ty),*)) => {
        impl ser::$trait for Discard {
            type Ok = ();
            type Error = Refused;

            fn $method<T: Serialize + ?Sized>(
                &mut self,
                $(_: $ty,)*
                value: &T,
            ) -> std::result::Result<(), Refused> {
                value.serialize(Discard)
            }

            fn end(self) -> std::result::Result<(), Refused> {
                Ok(())
            }
        }
    };
}

discard_compound!(SerializeSeq, serialize_element());
discard_compound!(SerializeTuple, serialize_element());
discard_compound!(SerializeTupleStruct, serialize_field());
discard_compound!(SerializeTupleVariant, serialize_field());
discard_compound!(SerializeStruct, serialize_field(&'static str));
discard_compound!(SerializeStructVariant, serialize_field(&'static str));

impl ser::SerializeMap for Discard {
    type Ok = ();
    type Error = Refused;

    fn serialize_key<T: Serialize + ?Sized>(
        &mut self,
        key: &T,
    ) -> std::result::Result<(), Refused> {
        key.serialize(Discard)
    }

    fn serialize_value<T: Serialize + ?Sized>(
        &mut self,
        value: &T,
    ) -> std::result::Result<(), Refused> {
        value.serialize(Discard)
    }

    fn end(self) -> std::result::Result<(), Refused> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::{AnyResource, Resource, ResourceSpec};

    #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
    struct Probe {
        ratio: f64,
        narrow: f32,
        readings: Vec<f64>,
        limits: BTreeMap<String, Option<f64>>,
        shape: Shape,
    }

    #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
    enum Shape {
        #[default]
        Point,
        Circle {
            radius: f64,
        },
    }

    impl ResourceSpec for Probe {
        const TYPE: &'static str = "Probes.test.cosi.dev";
        const DEFAULT_NAMESPACE: &'static str = "test";
    }

    fn probe(change: impl FnOnce(&mut Probe)) -> Resource<Probe> {
        let mut spec = Probe::default();
        change(&mut spec);
        Resource::new("p", spec)
    }

    /// Every way a spec leaves the process, as the error each gives (`None` when written).
    fn refusals(resource: &Resource<Probe>) -> [Option<String>; 4] {
        let mut json = b"kept".to_vec();
        let written = resource.write_spec_json(&mut json);
        if written.is_err() {
            assert_eq!(
                json, b"kept",
                "a refused spec leaves nothing of itself written"
            );
        }
        [
            resource.check_spec().err(),
            resource.spec_value().err(),
            written.err(),
            resource.spec_yaml().err(),
        ]
        .map(|e| e.map(|e| e.to_string()))
    }

    #[test]
    fn a_float_no_spec_form_holds_is_refused_by_every_form_naming_its_field() {
        let cases: [(Resource<Probe>, &str); 6] = [
            (probe(|p| p.ratio = f64::NAN), "spec.ratio: NaN"),
            (probe(|p| p.narrow = f32::INFINITY), "spec.narrow: inf"),
            (
                probe(|p| p.readings = vec![1.0, f64::NEG_INFINITY]),
                "spec.readings[1]: -inf",
            ),
            (
                probe(|p| {
                    p.limits.insert("cpu".into(), Some(f64::NAN));
                }),
                "spec.limits.cpu: NaN",
            ),
            (
                probe(|p| p.shape = Shape::Circle { radius: f64::NAN }),
                // Paths name no enum variant, as `serde_path_to_error` writes them on decoding too.
                "spec.shape.radius: NaN",
            ),
            (probe(|p| p.ratio = -f64::NAN), "spec.ratio: NaN"),
        ];
        for (resource, field_and_value) in cases {
            let (field, value) = field_and_value.split_once(": ").unwrap();
            let expected = format!(
                "test/Probes.test.cosi.dev/p: invalid {field}: {value} cannot be stored; a \
                 spec's floats must be finite (JSON, the form stores and the remote API keep \
                 specs in, has no NaN or infinity)"
            );
            assert_eq!(
                refusals(&resource),
                [0, 1, 2, 3].map(|_| Some(expected.clone())),
                "{field_and_value}"
            );
        }
    }

    #[test]
    fn finite_floats_round_trip_exactly_through_every_form() {
        let resource = probe(|p| {
            p.ratio = f64::MAX;
            p.narrow = f32::MIN_POSITIVE;
            p.readings = vec![-0.0, 5e-324, 0.1, -1e308];
            p.limits.insert("none".into(), None);
            p.shape = Shape::Circle { radius: 1.5 };
        });
        assert_eq!(refusals(&resource), [None, None, None, None]);

        let mut json = Vec::new();
        resource.write_spec_json(&mut json).unwrap();
        let from_json: Probe = serde_json::from_slice(&json).unwrap();
        let from_value: Probe = serde_json::from_value(resource.spec_value().unwrap()).unwrap();
        let from_yaml: Probe = serde_yaml::from_str(&resource.spec_yaml().unwrap()).unwrap();
        for back in [from_json, from_value, from_yaml] {
            assert_eq!(back, resource.spec);
            assert!(back.readings[0].is_sign_negative(), "-0.0 keeps its sign");
        }
    }

    #[test]
    fn an_integer_beyond_64_bits_is_refused_naming_its_field() {
        #[derive(Serialize)]
        struct Wide {
            counts: Vec<i128>,
        }
        let refused = check(&Wide {
            counts: vec![i128::from(i64::MIN), i128::from(i64::MIN) - 1],
        })
        .unwrap_err();
        assert_eq!(refused.path, "counts[1]");
        assert!(
            refused
                .message
                .starts_with("integer -9223372036854775809 cannot be stored; a spec's integers"),
            "{}",
            refused.message
        );
        assert!(check(&(u128::from(u64::MAX), i128::from(i64::MIN))).is_ok());
        assert_eq!(check(&u128::MAX).unwrap_err().path, ".");
    }

    #[test]
    fn a_dynamic_spec_always_passes() {
        let resource = crate::DynamicResource {
            metadata: Metadata::new(crate::Pointer::new("ns", "Things.test.cosi.dev", "a")),
            spec: serde_json::json!({"x": [1.5, -0.0, u64::MAX, i64::MIN]}),
        };
        assert!(resource.check_spec().is_ok());
    }
}
