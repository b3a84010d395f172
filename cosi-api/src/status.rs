//! The one place errors cross the wire, both directions: [`to_status`] on the server,
//! [`from_status`] on the client.
//!
//! Codes follow the original protocol, per call, so its clients read them as they expect:
//!
//! | error | code |
//! |---|---|
//! | not found | `NotFound` |
//! | already exists | `AlreadyExists` |
//! | version conflict, pending finalizers | `FailedPrecondition` |
//! | phase conflict | `InvalidArgument` on Update, `FailedPrecondition` elsewhere |
//! | owner conflict | `PermissionDenied` |
//! | refused by the API's authorization ([`not_authorized`]) or an access rule | `PermissionDenied` |
//! | invalid argument | `InvalidArgument` (`FailedPrecondition` for a bad bookmark at watch setup) |
//! | unsupported | `Unimplemented` |
//! | watch overrun | `Aborted` |
//! | backend failure | `Unavailable` when retryable, else `Internal` |
//!
//! Every status this crate sends also carries the exact error as an
//! `cosi_rs.ErrorDetail` ([`crate::proto::cosi_rs::ErrorDetail`]) inside a `google.rpc.Status` detail, so
//! this crate's client rebuilds the same variant, pointer and retryability — and tells an
//! authorization refusal (detail kind `NOT_AUTHORIZED`) from an owner conflict, which share a
//! code. Without a detail (a peer's server) the client reads the code per call, as the
//! original's client does.

use cosi_core::{Error, Phase, Pointer, Version};
use prost::Message;
use tonic::{Code, Status};

use crate::proto::cosi_rs::{error_detail::Kind as DetailKind, ErrorDetail};
use crate::proto::google::rpc;

/// The type URL of the error detail inside a `google.rpc.Status`.
pub const DETAIL_TYPE_URL: &str = "type.googleapis.com/cosi_rs.ErrorDetail";

/// The message of every authorization refusal (the original's wording).
pub const NOT_AUTHORIZED: &str = "not authorized";

/// The call an error belongs to: codes differ per call in the original protocol.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Call {
    /// `Get`.
    Get,
    /// `List`.
    List,
    /// `Create`.
    Create,
    /// `Update`.
    Update,
    /// `Destroy`.
    Destroy,
    /// `Watch` (setup and events).
    Watch,
    /// `Teardown`.
    Teardown,
    /// `TeardownAndDestroy`.
    TeardownAndDestroy,
    /// Any machine-service call.
    Machine,
}

/// What the client knows about the call, to rebuild an error from a bare code.
#[derive(Clone, Debug)]
pub struct CallContext {
    /// The call.
    pub call: Call,
    /// The resource (or the kind, as a pointer with an empty id) it was about.
    pub pointer: Pointer,
    /// Update: the version sent.
    pub version: Version,
    /// Update: the phase expected.
    pub expected_phase: Option<Phase>,
    /// The owner the caller wrote as.
    pub writer: Option<String>,
}

impl CallContext {
    /// A context for `call` about `pointer`.
    pub fn new(call: Call, pointer: Pointer) -> Self {
        CallContext {
            call,
            pointer,
            version: Version::UNSET,
            expected_phase: None,
            writer: None,
        }
    }
}

/// The refusal of the API's authorization: `PermissionDenied` "not authorized", with a detail
/// that tells it from an owner conflict. `reason` says which rule refused (for logs and for
/// this crate's client; the status message stays the original's).
pub fn not_authorized(subject: &str, reason: &str) -> Status {
    let detail = ErrorDetail {
        kind: DetailKind::NotAuthorized as i32,
        subject: subject.to_string(),
        message: reason.to_string(),
        ..Default::default()
    };
    with_detail(Code::PermissionDenied, NOT_AUTHORIZED.to_string(), &detail)
}

/// Whether `status` carries this crate's structured error (a peer's server sends none).
pub fn has_detail(status: &Status) -> bool {
    detail_of(status).is_some()
}

/// Whether `status` is an authorization refusal sent by [`not_authorized`].
pub fn is_not_authorized(status: &Status) -> bool {
    detail_of(status).is_some_and(|d| d.kind == DetailKind::NotAuthorized as i32)
}

/// The status for `error` in answer to `call`.
pub fn to_status(error: &Error, call: Call) -> Status {
    let code = match error {
        Error::NotFound { .. } => Code::NotFound,
        Error::AlreadyExists { .. } => Code::AlreadyExists,
        Error::VersionConflict { .. } | Error::PendingFinalizers { .. } => Code::FailedPrecondition,
        Error::PhaseConflict { .. } if call == Call::Update => Code::InvalidArgument,
        Error::PhaseConflict { .. } => Code::FailedPrecondition,
        Error::OwnerConflict { .. } | Error::AccessDenied { .. } => Code::PermissionDenied,
        // A bookmark the store refuses, at watch setup: the original's code for it.
        Error::InvalidArgument { field, .. } if call == Call::Watch && is_bookmark_field(field) => {
            Code::FailedPrecondition
        }
        Error::InvalidArgument { .. } => Code::InvalidArgument,
        Error::Unsupported { .. } => Code::Unimplemented,
        Error::WatchOverrun { .. } => Code::Aborted,
        Error::Backend {
            retryable: true, ..
        } => Code::Unavailable,
        Error::Backend { .. } => Code::Internal,
        _ => Code::Unknown,
    };
    with_detail(code, error.to_string(), &error_detail(error))
}

fn is_bookmark_field(field: &str) -> bool {
    field == "since" || field.ends_with("bookmark")
}

/// The most bytes of text a status carries in its message, and in each text field of its
/// detail: a status travels in HTTP/2 trailers, which clients refuse past a few KiB (16 KiB of
/// headers by default), and text quoting what a caller sent (an id, a pattern) may be megabytes.
pub const MAX_STATUS_TEXT: usize = 1024;

/// `text`, cut at [`MAX_STATUS_TEXT`] bytes (on a character boundary) with an ellipsis.
pub(crate) fn clipped(text: &str) -> String {
    if text.len() <= MAX_STATUS_TEXT {
        return text.to_string();
    }
    format!("{}…", cosi_core::text::prefix_within(text, MAX_STATUS_TEXT))
}

/// `detail` with every text clipped; a pointer too long to carry is left out (empty), and the
/// client reads the pointer of its own call in its place.
pub(crate) fn clipped_detail(detail: &ErrorDetail) -> ErrorDetail {
    let mut d = detail.clone();
    if d.namespace.len() + d.r#type.len() + d.id.len() > MAX_STATUS_TEXT {
        d.namespace.clear();
        d.r#type.clear();
        d.id.clear();
    }
    for text in [
        &mut d.subject,
        &mut d.field,
        &mut d.message,
        &mut d.expected,
        &mut d.actual,
    ] {
        if text.len() > MAX_STATUS_TEXT {
            *text = clipped(text);
        }
    }
    for text in [&mut d.owner, &mut d.writer].into_iter().flatten() {
        if text.len() > MAX_STATUS_TEXT {
            *text = clipped(text);
        }
    }
    d
}

fn with_detail(code: Code, message: String, detail: &ErrorDetail) -> Status {
    let message = clipped(&message);
    let detail = &clipped_detail(detail);
    let status = rpc::Status {
        code: code as i32,
        message: message.clone(),
        details: vec![prost_types::Any {
            type_url: DETAIL_TYPE_URL.to_string(),
            value: detail.encode_to_vec(),
        }],
    };
    Status::with_details(code, message, status.encode_to_vec().into())
}

fn detail_of(status: &Status) -> Option<ErrorDetail> {
    if status.details().is_empty() {
        return None;
    }
    let rich = rpc::Status::decode(status.details()).ok()?;
    rich.details
        .iter()
        .find(|any| any.type_url == DETAIL_TYPE_URL)
        .and_then(|any| ErrorDetail::decode(&*any.value).ok())
}

/// The structured form of `error` (also sent in `ERRORED` watch events).
pub fn error_detail(error: &Error) -> ErrorDetail {
    let mut d = ErrorDetail::default();
    let at = |d: &mut ErrorDetail, kind: DetailKind, p: &Pointer| {
        d.kind = kind as i32;
        d.namespace = p.namespace().to_string();
        d.r#type = p.resource_type().to_string();
        d.id = p.id().to_string();
    };
    match error {
        Error::NotFound { pointer } => at(&mut d, DetailKind::NotFound, pointer),
        Error::AlreadyExists { pointer } => at(&mut d, DetailKind::AlreadyExists, pointer),
        Error::VersionConflict {
            pointer,
            expected,
            actual,
        } => {
            at(&mut d, DetailKind::VersionConflict, pointer);
            d.expected = expected.get().to_string();
            d.actual = actual.get().to_string();
        }
        Error::OwnerConflict {
            pointer,
            owner,
            writer,
        } => {
            at(&mut d, DetailKind::OwnerConflict, pointer);
            d.owner = owner.clone();
            d.writer = writer.clone();
        }
        Error::PhaseConflict {
            pointer,
            expected,
            actual,
        } => {
            at(&mut d, DetailKind::PhaseConflict, pointer);
            d.expected = expected.to_string();
            d.actual = actual.to_string();
        }
        Error::PendingFinalizers {
            pointer,
            finalizers,
        } => {
            at(&mut d, DetailKind::PendingFinalizers, pointer);
            d.finalizers = finalizers.iter().cloned().collect();
        }
        Error::InvalidArgument {
            subject,
            field,
            message,
        } => {
            d.kind = DetailKind::InvalidArgument as i32;
            d.subject = subject.clone();
            d.field = field.clone();
            d.message = message.clone();
        }
        Error::AccessDenied { subject, message } => {
            d.kind = DetailKind::AccessDenied as i32;
            d.subject = subject.clone();
            d.message = message.clone();
        }
        Error::Unsupported { subject, message } => {
            d.kind = DetailKind::Unsupported as i32;
            d.subject = subject.clone();
            d.message = message.clone();
        }
        Error::WatchOverrun { kind, position } => {
            d.kind = DetailKind::WatchOverrun as i32;
            d.namespace = kind.namespace().to_string();
            d.r#type = kind.resource_type().to_string();
            d.position = position.to_bytes();
            d.retryable = true;
        }
        Error::Backend {
            subject,
            message,
            retryable,
            source,
        } => {
            d.kind = DetailKind::Backend as i32;
            d.subject = subject.clone();
            d.message = match source {
                Some(source) => format!("{message}: {source}"),
                None => message.clone(),
            };
            d.retryable = *retryable;
        }
        other => {
            d.kind = DetailKind::Unspecified as i32;
            d.message = other.to_string();
            d.retryable = other.is_retryable();
        }
    }
    d
}

/// Rebuilds an error from its structured form. `None` if the detail is malformed (an unknown
/// kind, an unparsable version); the caller then falls back to the code.
pub fn from_detail(detail: &ErrorDetail) -> Option<Error> {
    let kind = DetailKind::try_from(detail.kind).ok()?;
    let pointer = || Pointer::new(&detail.namespace, &detail.r#type, detail.id.as_str());
    let version = |text: &str| text.parse::<u64>().ok().map(Version::new);
    let phase = |text: &str| crate::codec::decode_phase(text).ok();
    Some(match kind {
        DetailKind::NotFound => Error::NotFound { pointer: pointer() },
        DetailKind::AlreadyExists => Error::AlreadyExists { pointer: pointer() },
        DetailKind::VersionConflict => Error::VersionConflict {
            pointer: pointer(),
            expected: version(&detail.expected)?,
            actual: version(&detail.actual)?,
        },
        DetailKind::OwnerConflict => Error::OwnerConflict {
            pointer: pointer(),
            owner: detail.owner.clone(),
            writer: detail.writer.clone(),
        },
        DetailKind::PhaseConflict => Error::PhaseConflict {
            pointer: pointer(),
            expected: phase(&detail.expected)?,
            actual: phase(&detail.actual)?,
        },
        DetailKind::PendingFinalizers => Error::PendingFinalizers {
            pointer: pointer(),
            finalizers: detail.finalizers.iter().cloned().collect(),
        },
        DetailKind::InvalidArgument => Error::InvalidArgument {
            subject: detail.subject.clone(),
            field: detail.field.clone(),
            message: detail.message.clone(),
        },
        DetailKind::AccessDenied => Error::AccessDenied {
            subject: detail.subject.clone(),
            message: detail.message.clone(),
        },
        DetailKind::NotAuthorized => Error::AccessDenied {
            subject: detail.subject.clone(),
            message: format!("{NOT_AUTHORIZED}: {}", detail.message),
        },
        DetailKind::Unsupported => Error::Unsupported {
            subject: detail.subject.clone(),
            message: detail.message.clone(),
        },
        DetailKind::WatchOverrun => Error::WatchOverrun {
            kind: cosi_core::Kind::new(&detail.namespace, &detail.r#type),
            position: cosi_core::Bookmark::from_bytes(&detail.position),
        },
        DetailKind::Backend | DetailKind::Unspecified => Error::Backend {
            subject: detail.subject.clone(),
            message: detail.message.clone(),
            retryable: detail.retryable,
            source: None,
        },
    })
}

/// The error a client reports for `status`: the exact one from the detail when the server sent
/// one, otherwise the original client's reading of the code for this call.
pub fn from_status(status: &Status, context: &CallContext) -> Error {
    if let Some(mut detail) = detail_of(status) {
        // A pointer too long for a status is left out by the server: it is this call's own.
        if detail.namespace.is_empty() && detail.r#type.is_empty() && detail.id.is_empty() {
            let pointer = &context.pointer;
            detail.namespace = pointer.namespace().to_string();
            detail.r#type = pointer.resource_type().to_string();
            detail.id = pointer.id().to_string();
        }
        if let Some(error) = from_detail(&detail) {
            return about_the_call(error, context);
        }
    }
    let pointer = context.pointer.clone();
    let mut message = status.message().to_string();
    // A status the client made itself (the connection failed) carries the transport's error
    // chain; its innermost cause (a TLS alert, a refused connection) is what tells a caller why.
    let mut cause = std::error::Error::source(status);
    while let Some(error) = cause {
        let text = error.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        cause = error.source();
    }
    let write = matches!(
        context.call,
        Call::Create | Call::Update | Call::Destroy | Call::Teardown | Call::TeardownAndDestroy
    );
    match status.code() {
        Code::NotFound => Error::NotFound { pointer },
        Code::AlreadyExists => Error::AlreadyExists { pointer },
        Code::PermissionDenied if write => Error::OwnerConflict {
            pointer,
            owner: None,
            writer: context.writer.clone(),
        },
        Code::PermissionDenied => Error::AccessDenied {
            subject: pointer.to_string(),
            message,
        },
        Code::InvalidArgument if context.call == Call::Update => {
            let expected = context.expected_phase.unwrap_or(Phase::Running);
            let actual = match expected {
                Phase::Running => Phase::TearingDown,
                Phase::TearingDown => Phase::Running,
            };
            Error::PhaseConflict {
                pointer,
                expected,
                actual,
            }
        }
        Code::FailedPrecondition if context.call == Call::Update => Error::VersionConflict {
            pointer,
            expected: context.version,
            // The original's code carries no stored version.
            actual: Version::UNSET,
        },
        Code::FailedPrecondition if context.call == Call::Watch => {
            Error::invalid(pointer.kind().to_string(), "start_from_bookmark", message)
        }
        Code::FailedPrecondition if write => Error::PendingFinalizers {
            pointer,
            finalizers: Default::default(),
        },
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => {
            Error::invalid(pointer.to_string(), "request", message)
        }
        Code::Unimplemented => Error::Unsupported {
            subject: pointer.to_string(),
            message,
        },
        Code::Unauthenticated => Error::AccessDenied {
            subject: pointer.to_string(),
            message,
        },
        code => Error::Backend {
            subject: pointer.to_string(),
            message: format!("{code:?}: {message}"),
            retryable: is_transient(code),
            source: None,
        },
    }
}

/// `error`, from a server's detail, if it is about the resource `context` names; an error of a
/// call on one resource that names another (a wrong or hostile server) is not taken for one
/// about the asked resource (a caller would read "b: not found" as "a is absent").
fn about_the_call(error: Error, context: &CallContext) -> Error {
    let on_a_resource = matches!(
        context.call,
        Call::Get
            | Call::Create
            | Call::Update
            | Call::Destroy
            | Call::Teardown
            | Call::TeardownAndDestroy
    );
    let named = match &error {
        Error::NotFound { pointer }
        | Error::AlreadyExists { pointer }
        | Error::VersionConflict { pointer, .. }
        | Error::OwnerConflict { pointer, .. }
        | Error::PhaseConflict { pointer, .. }
        | Error::PendingFinalizers { pointer, .. } => pointer,
        _ => return error,
    };
    if !on_a_resource || *named == context.pointer {
        return error;
    }
    Error::Backend {
        subject: context.pointer.to_string(),
        message: format!("the server answered with an error about another resource: {error}"),
        retryable: false,
        source: None,
    }
}

/// Whether a code means "try again later" (the network or the server, not the request).
pub fn is_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Cancelled
            | Code::Unknown
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::Kind;

    fn p() -> Pointer {
        Pointer::new("ns", "Things.test.cosi.dev", "a")
    }

    fn round_trip(error: Error, call: Call) -> (Code, Error) {
        let status = to_status(&error, call);
        let back = from_status(&status, &CallContext::new(call, p()));
        (status.code(), back)
    }

    fn every_error() -> Vec<(Error, Call, Code)> {
        vec![
            (Error::NotFound { pointer: p() }, Call::Get, Code::NotFound),
            (
                Error::AlreadyExists { pointer: p() },
                Call::Create,
                Code::AlreadyExists,
            ),
            (
                Error::VersionConflict {
                    pointer: p(),
                    expected: Version::new(1),
                    actual: Version::new(2),
                },
                Call::Update,
                Code::FailedPrecondition,
            ),
            (
                Error::OwnerConflict {
                    pointer: p(),
                    owner: Some("C".into()),
                    writer: None,
                },
                Call::Update,
                Code::PermissionDenied,
            ),
            (
                Error::PhaseConflict {
                    pointer: p(),
                    expected: Phase::Running,
                    actual: Phase::TearingDown,
                },
                Call::Update,
                Code::InvalidArgument,
            ),
            (
                Error::PendingFinalizers {
                    pointer: p(),
                    finalizers: ["f".to_string()].into(),
                },
                Call::Destroy,
                Code::FailedPrecondition,
            ),
            (
                Error::invalid("ns/T/a", "spec.port", "too big"),
                Call::Create,
                Code::InvalidArgument,
            ),
            (
                Error::invalid("ns/T", "since", "bookmark 9 is in the future"),
                Call::Watch,
                Code::FailedPrecondition,
            ),
            (
                Error::AccessDenied {
                    subject: "x".into(),
                    message: "no".into(),
                },
                Call::Get,
                Code::PermissionDenied,
            ),
            (
                Error::Unsupported {
                    subject: "x".into(),
                    message: "tail".into(),
                },
                Call::Watch,
                Code::Unimplemented,
            ),
            (
                Error::WatchOverrun {
                    kind: Kind::new("ns", "Things.test.cosi.dev"),
                    position: cosi_core::Bookmark::at(3, 42),
                },
                Call::Watch,
                Code::Aborted,
            ),
            (
                Error::Backend {
                    subject: "etcd".into(),
                    message: "unreachable".into(),
                    retryable: true,
                    source: None,
                },
                Call::Get,
                Code::Unavailable,
            ),
            (
                Error::Backend {
                    subject: "disk".into(),
                    message: "corrupt".into(),
                    retryable: false,
                    source: None,
                },
                Call::List,
                Code::Internal,
            ),
        ]
    }

    #[test]
    fn every_error_round_trips_with_its_code_variant_pointer_and_retryability() {
        for (error, call, code) in every_error() {
            let (sent, back) = round_trip(error.clone(), call);
            assert_eq!(sent, code, "{error:?}");
            assert_eq!(back.to_string(), error.to_string(), "{error:?}");
            assert_eq!(back.is_retryable(), error.is_retryable(), "{error:?}");
            assert_eq!(
                std::mem::discriminant(&back),
                std::mem::discriminant(&error),
                "{error:?}"
            );
        }
    }

    #[test]
    fn authorization_refusal_is_not_an_owner_conflict() {
        let status = not_authorized("ns/T/a", "os:reader may not write");
        assert_eq!(status.code(), Code::PermissionDenied);
        assert_eq!(status.message(), "not authorized");
        assert!(is_not_authorized(&status));
        let owner = to_status(
            &Error::OwnerConflict {
                pointer: p(),
                owner: Some("C".into()),
                writer: None,
            },
            Call::Update,
        );
        assert!(!is_not_authorized(&owner));
        let back = from_status(&status, &CallContext::new(Call::Update, p()));
        assert!(matches!(back, Error::AccessDenied { .. }), "{back:?}");
        assert_eq!(
            back.to_string(),
            "ns/T/a: access denied: not authorized: os:reader may not write"
        );
    }

    #[test]
    fn bare_codes_are_read_as_the_original_client_reads_them() {
        let mut ctx = CallContext::new(Call::Update, p());
        ctx.version = Version::new(3);
        let conflict = from_status(&Status::failed_precondition("x"), &ctx);
        assert!(matches!(
            conflict,
            Error::VersionConflict { expected, .. } if expected == Version::new(3)
        ));
        assert!(conflict.is_retryable());
        assert!(matches!(
            from_status(&Status::permission_denied("x"), &ctx),
            Error::OwnerConflict { .. }
        ));
        assert!(matches!(
            from_status(&Status::invalid_argument("x"), &ctx),
            Error::PhaseConflict { .. }
        ));
        let get = CallContext::new(Call::Get, p());
        assert!(matches!(
            from_status(&Status::permission_denied("x"), &get),
            Error::AccessDenied { .. }
        ));
        let down = from_status(&Status::unavailable("connection refused"), &get);
        assert!(down.is_retryable(), "{down:?}");
        assert!(!from_status(&Status::internal("x"), &get).is_retryable());
    }
}
