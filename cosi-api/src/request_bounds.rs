//! Requests are bounded in their count of repeated entries before they are built: the
//! generated services decode every message with a codec of their own (`bounded_codec`, named
//! in build.rs), which first counts, on the received bytes, the entries of each repeated field
//! this module names for the request's type, and refuses the request with `InvalidArgument`,
//! naming the resource or kind and the field, past its limit; only then does prost build the
//! message. A message of 2-byte empty entries would otherwise cost the server some 13 to 20
//! times its size (a heap value per entry) before any handler could look at it: 80 MiB for one
//! 4 MiB Create of empty finalizers; and ApplyConfiguration is open to any caller of a node in
//! maintenance mode.
//!
//! The limits, per request: [`MAX_FINALIZERS`] finalizers, [`MAX_LABELS`] labels and
//! [`MAX_ANNOTATIONS`] annotations in the resource of a Create or Update;
//! [`MAX_LABEL_QUERIES`] label queries in a List or Watch, of [`MAX_LABEL_TERMS`] terms each,
//! each term listing at most [`MAX_LABEL_VALUES`] values and all of them together at most
//! [`MAX_LABEL_VALUES_IN_ALL`]; [`MAX_PATCHES`] patches in an ApplyConfiguration. Entries are
//! counted as they are on the wire, over every occurrence of the enclosing messages (protobuf
//! merges them); counting allocates nothing. Bytes that stop being a well-formed message are
//! counted up to there and left to prost, which refuses them as before.

use cosi_core::Error;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use tonic::Status;

use crate::bounded_codec::Bounded;
use crate::proto::{machine, resource};
use crate::status::{to_status, Call};

/// The most finalizers the resource of one Create or Update request may carry.
pub const MAX_FINALIZERS: usize = 1024;
/// The most label entries the resource of one Create or Update request may carry (counted on
/// the wire: an entry sent twice counts twice).
pub const MAX_LABELS: usize = 4096;
/// The most annotation entries the resource of one Create or Update request may carry, counted
/// as labels are.
pub const MAX_ANNOTATIONS: usize = 4096;
/// The most label queries one List or Watch request may carry (a resource matches if any
/// matches).
pub const MAX_LABEL_QUERIES: usize = 64;
/// The most terms one label query may have.
pub const MAX_LABEL_TERMS: usize = 64;
/// The most values one label term may list (`in`).
pub const MAX_LABEL_VALUES: usize = 1024;
/// The most values all the label terms of one List or Watch request may list together.
pub const MAX_LABEL_VALUES_IN_ALL: usize = 4 * MAX_LABEL_VALUES;
/// The most patches one ApplyConfiguration request may carry.
pub const MAX_PATCHES: usize = 256;

/// A field of a message on the wire: its tag, and its content if it is length-delimited.
type Field<'a> = (u32, Option<&'a [u8]>);

/// The fields of `message` in order; ends early (no error) at bytes that are not a message.
fn fields(mut message: &[u8]) -> impl Iterator<Item = Field<'_>> {
    std::iter::from_fn(move || {
        if message.is_empty() {
            return None;
        }
        let (tag, wire_type) = decode_key(&mut message).ok()?;
        if wire_type != WireType::LengthDelimited {
            skip_field(wire_type, tag, &mut message, DecodeContext::default()).ok()?;
            return Some((tag, None));
        }
        let len = usize::try_from(decode_varint(&mut message).ok()?).ok()?;
        if len > message.len() {
            message = &[];
            return None;
        }
        let (content, rest) = message.split_at(len);
        message = rest;
        Some((tag, Some(content)))
    })
}

/// The embedded messages of field `tag` of `message`, every occurrence.
fn embedded(message: &[u8], tag: u32) -> impl Iterator<Item = &[u8]> {
    fields(message).filter_map(move |(t, content)| if t == tag { content } else { None })
}

/// The entries of the field whose tag ends `path`, in the messages `path` leads to.
fn count(message: &[u8], path: &[u32]) -> usize {
    match path {
        [] => 0,
        [tag] => fields(message).filter(|(t, _)| t == tag).count(),
        [tag, rest @ ..] => embedded(message, *tag)
            .map(|inner| count(inner, rest))
            .sum(),
    }
}

/// The string field at the end of `path`, as prost reads it: the last occurrence, over every
/// occurrence of the messages `path` leads to.
fn last_string<'a>(message: &'a [u8], path: &[u32]) -> Option<&'a [u8]> {
    match path {
        [] => None,
        [tag] => embedded(message, *tag).last(),
        [tag, rest @ ..] => embedded(message, *tag)
            .filter_map(|inner| last_string(inner, rest))
            .last(),
    }
}

/// The text of a string field, or empty.
fn text(bytes: Option<&[u8]>) -> String {
    String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned()
}

/// `count` entries of `field` against `limit`: refused past it, as the handler refuses what it
/// reads (`what` names the entries).
fn within(
    (subject, call): (&str, Call),
    field: &str,
    (count, limit): (usize, usize),
    what: &str,
) -> Result<(), Status> {
    if count <= limit {
        return Ok(());
    }
    Err(to_status(
        &Error::invalid(
            subject,
            field,
            format!("{count} {what}, more than the {limit} allowed"),
        ),
        call,
    ))
}

/// A Create (`resource` is field 1) or Update (`new_resource`, field 2) request: the
/// resource's finalizers, labels and annotations (`Resource.metadata` is field 1, and
/// `Metadata`'s fields 9, 10 and 11), named by the resource's pointer.
fn check_resource_request(
    message: &[u8],
    call: Call,
    (tag, name): (u32, &str),
) -> Result<(), Status> {
    for (field, what, limit) in [
        (9, "finalizers", MAX_FINALIZERS),
        (10, "labels", MAX_LABELS),
        (11, "annotations", MAX_ANNOTATIONS),
    ] {
        let entries = count(message, &[tag, 1, field]);
        if entries > limit {
            let metadata = |field| text(last_string(message, &[tag, 1, field]));
            let subject = format!("{}/{}/{}", metadata(1), metadata(2), metadata(3));
            return within(
                (&subject, call),
                &format!("{name}.metadata.{what}"),
                (entries, limit),
                what,
            );
        }
    }
    Ok(())
}

/// A List (`options` field 3, `ListOptions.label_query` field 1) or Watch (`options` field 4,
/// `WatchOptions.label_query` field 3) request's label queries (`LabelQuery.terms` is field 1,
/// `LabelTerm.value` field 3), named by the call and kind as the handler names them.
fn check_label_queries(
    message: &[u8],
    call: (&str, Call),
    options: u32,
    label_query: u32,
) -> Result<(), Status> {
    let subject = || {
        let field = |tag| text(last_string(message, &[tag]));
        format!("{} {}/{}", call.0, field(1), field(2))
    };
    let queries = count(message, &[options, label_query]);
    if queries > MAX_LABEL_QUERIES {
        return within(
            (&subject(), call.1),
            "label_query",
            (queries, MAX_LABEL_QUERIES),
            "queries",
        );
    }
    let all = embedded(message, options).flat_map(|options| embedded(options, label_query));
    let mut values_in_all = 0;
    for (i, query) in all.enumerate() {
        let terms = count(query, &[1]);
        if terms > MAX_LABEL_TERMS {
            return within(
                (&subject(), call.1),
                &format!("label_query[{i}].terms"),
                (terms, MAX_LABEL_TERMS),
                "terms",
            );
        }
        for (j, term) in embedded(query, 1).enumerate() {
            let values = count(term, &[3]);
            if values > MAX_LABEL_VALUES {
                return within(
                    (&subject(), call.1),
                    &format!("label_query[{i}].terms[{j}].value"),
                    (values, MAX_LABEL_VALUES),
                    "values",
                );
            }
            values_in_all += values;
        }
    }
    within(
        (&subject(), call.1),
        "label_query",
        (values_in_all, MAX_LABEL_VALUES_IN_ALL),
        "values in all its terms",
    )
}

impl Bounded for resource::CreateRequest {
    fn check(message: &[u8]) -> Result<(), Status> {
        check_resource_request(message, Call::Create, (1, "resource"))
    }
}

impl Bounded for resource::UpdateRequest {
    fn check(message: &[u8]) -> Result<(), Status> {
        check_resource_request(message, Call::Update, (2, "new_resource"))
    }
}

impl Bounded for resource::ListRequest {
    fn check(message: &[u8]) -> Result<(), Status> {
        check_label_queries(message, ("list", Call::List), 3, 1)
    }
}

impl Bounded for resource::WatchRequest {
    fn check(message: &[u8]) -> Result<(), Status> {
        check_label_queries(message, ("watch", Call::Watch), 4, 3)
    }
}

impl Bounded for machine::ApplyConfigurationRequest {
    /// Its patches (field 6).
    fn check(message: &[u8]) -> Result<(), Status> {
        within(
            ("apply configuration", Call::Machine),
            "patches",
            (count(message, &[6]), MAX_PATCHES),
            "patches",
        )
    }
}

/// Messages without repeated fields of their own, and the answers the generated clients
/// receive (the crate's own client reads its answers in place, `client::raw_answer`).
macro_rules! unbounded {
    ($($message:ty),* $(,)?) => {
        $(impl Bounded for $message {})*
    };
}

unbounded!(
    resource::GetRequest,
    resource::GetResponse,
    crate::proto::encoded::ListResponse,
    resource::CreateResponse,
    resource::UpdateResponse,
    resource::DestroyRequest,
    resource::DestroyResponse,
    crate::proto::encoded::WatchResponse,
    resource::TeardownRequest,
    resource::TeardownResponse,
    resource::TeardownAndDestroyRequest,
    resource::TeardownAndDestroyResponse,
    machine::ApplyConfigurationResponse,
    machine::ServiceListRequest,
    machine::ServiceListResponse,
    machine::ServiceRequest,
    machine::ServiceActionResponse,
    machine::LogsRequest,
    machine::LogData,
    machine::EventsRequest,
    machine::MachineEvent,
    machine::VersionRequest,
    machine::VersionResponse,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Field `tag`, length-delimited `content`.
    fn field(tag: u32, content: &[u8], out: &mut Vec<u8>) {
        prost::encoding::encode_key(tag, WireType::LengthDelimited, out);
        prost::encoding::encode_varint(content.len() as u64, out);
        out.extend_from_slice(content);
    }

    fn entries(tag: u32, count: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for _ in 0..count {
            field(tag, &[], &mut out);
        }
        out
    }

    #[test]
    fn finalizers_are_counted_over_every_occurrence_of_the_resource() {
        let mut metadata = Vec::new();
        field(1, b"ns", &mut metadata);
        field(2, b"T", &mut metadata);
        field(3, b"a", &mut metadata);
        metadata.extend(entries(9, MAX_FINALIZERS / 2));
        let mut resource = Vec::new();
        field(1, &metadata, &mut resource);
        let mut request = Vec::new();
        field(1, &resource, &mut request);
        let twice = [request.clone(), request.clone()].concat();
        resource::CreateRequest::check(&twice).unwrap();
        let thrice = [twice, request].concat();
        let refused = resource::CreateRequest::check(&thrice).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            refused.message(),
            "ns/T/a: invalid resource.metadata.finalizers: 1536 finalizers, more than the 1024 \
             allowed"
        );
    }

    #[test]
    fn label_values_are_bounded_per_term_and_in_all() {
        let mut term = Vec::new();
        field(1, b"k", &mut term);
        term.extend(entries(3, MAX_LABEL_VALUES));
        let mut query = Vec::new();
        for _ in 0..4 {
            field(1, &term, &mut query);
        }
        let mut options = Vec::new();
        field(1, &query, &mut options);
        let mut request = Vec::new();
        field(1, b"ns", &mut request);
        field(2, b"T", &mut request);
        field(3, &options, &mut request);
        resource::ListRequest::check(&request).unwrap();
        // Another occurrence of the options: merged, one more query of one value.
        let mut one_more = Vec::new();
        field(1, &entries(3, 1), &mut one_more);
        let mut options = Vec::new();
        field(1, &one_more, &mut options);
        field(3, &options, &mut request);
        let refused = resource::ListRequest::check(&request).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            refused.message(),
            "list ns/T: invalid label_query: 4097 values in all its terms, more than the 4096 \
             allowed"
        );
    }

    #[test]
    fn a_malformed_message_is_left_to_prost() {
        // Field 6 of a length past the end: no entries counted, no error.
        machine::ApplyConfigurationRequest::check(&[0x32, 0x05, 0x00]).unwrap();
    }
}
