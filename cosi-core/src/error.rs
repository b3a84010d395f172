//! The one error type of the runtime. Every variant names what it is about, and
//! [`Error::is_retryable`] tells a caller whether trying again can help.
//!
//! An error's text stays short whatever a caller sent: each piece of caller text it shows (a
//! pointer, a subject, a field path, an owner) is [`clipped`] to
//! [`QUOTED_BYTES`](crate::text::QUOTED_BYTES), a message to
//! [`MESSAGE_BYTES`], each with how many bytes were cut. The variants keep every value whole.

use std::sync::Arc;

use crate::text::{clipped, clipped_to, MESSAGE_BYTES};
use crate::{Bookmark, Finalizers, Kind, Phase, Pointer, Version};

/// Result alias used across the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A boxed error source shared between clones of an [`Error`].
pub type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in a state or runtime call.
///
/// ```
/// use cosi_core::{Error, Pointer, Version};
/// let err = Error::VersionConflict {
///     pointer: Pointer::new("ns", "T.test.cosi.dev", "a"),
///     expected: Version::new(1),
///     actual: Version::new(2),
/// };
/// assert!(err.is_retryable());
/// assert_eq!(err.to_string(), "ns/T.test.cosi.dev/a: version conflict: expected 1, stored 2");
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The resource does not exist.
    #[error("{}: not found", shown(pointer))]
    NotFound {
        /// The missing resource.
        pointer: Pointer,
    },
    /// A create found the resource already there.
    #[error("{}: already exists", shown(pointer))]
    AlreadyExists {
        /// The existing resource.
        pointer: Pointer,
    },
    /// An update carried a version other than the stored one.
    #[error(
        "{}: version conflict: expected {expected}, stored {actual}",
        shown(pointer)
    )]
    VersionConflict {
        /// The resource.
        pointer: Pointer,
        /// The version the writer read.
        expected: Version,
        /// The version stored.
        actual: Version,
    },
    /// The writer is not the resource's owner.
    ///
    /// ```
    /// use cosi_core::{Error, Pointer};
    /// let pointer = Pointer::new("runtime", "Services.runtime.cosi.dev", "etcd");
    /// let user_write = Error::OwnerConflict {
    ///     pointer: pointer.clone(),
    ///     owner: Some("ServiceController".into()),
    ///     writer: None,
    /// };
    /// assert_eq!(
    ///     user_write.to_string(),
    ///     "runtime/Services.runtime.cosi.dev/etcd: owner conflict: owned by ServiceController; \
    ///      this write has no owner — change ServiceController's inputs instead"
    /// );
    /// let other = Error::OwnerConflict { pointer, owner: Some("A".into()), writer: Some("B".into()) };
    /// assert_eq!(
    ///     other.to_string(),
    ///     "runtime/Services.runtime.cosi.dev/etcd: owner conflict: owned by \"A\", written by \"B\""
    /// );
    /// ```
    #[error("{}: owner conflict: {}", shown(pointer), owner_conflict(.owner, .writer))]
    OwnerConflict {
        /// The resource.
        pointer: Pointer,
        /// The stored owner.
        owner: Option<String>,
        /// The owner the writer claimed.
        writer: Option<String>,
    },
    /// The resource is not in the phase the writer expected.
    #[error(
        "{}: phase conflict: expected {expected}, stored {actual}",
        shown(pointer)
    )]
    PhaseConflict {
        /// The resource.
        pointer: Pointer,
        /// The phase the writer expected.
        expected: Phase,
        /// The stored phase.
        actual: Phase,
    },
    /// A destroy found finalizers still present.
    ///
    /// ```
    /// use cosi_core::{Error, Finalizers, Pointer};
    /// let err = Error::PendingFinalizers {
    ///     pointer: Pointer::new("ns", "Volumes.test.cosi.dev", "v"),
    ///     finalizers: Finalizers::from(["MountController".to_string()]),
    /// };
    /// assert_eq!(
    ///     err.to_string(),
    ///     "ns/Volumes.test.cosi.dev/v: finalizers pending: MountController; tear it down first \
    ///      (StateExt::teardown) and destroy it once they are removed, or let \
    ///      StateExt::teardown_and_destroy do both, waiting for them"
    /// );
    /// ```
    #[error("{}: finalizers pending: {}; tear it down first (StateExt::teardown) and destroy it once they are removed, or let StateExt::teardown_and_destroy do both, waiting for them", shown(pointer), clipped(&finalizers.iter().cloned().collect::<Vec<_>>().join(", ")))]
    PendingFinalizers {
        /// The resource.
        pointer: Pointer,
        /// The finalizers that block destruction.
        finalizers: Finalizers,
    },
    /// Bad input: `subject` names the resource or input, `field` the offending path inside it.
    #[error(
        "{}: invalid {}: {}",
        clipped(subject),
        clipped(field),
        clipped_to(message, MESSAGE_BYTES)
    )]
    InvalidArgument {
        /// What was being processed: a pointer, a type name, "selector", a file name.
        subject: String,
        /// Path of the offending field, e.g. `spec.network.interfaces[0].cidr` or `column 7`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The caller may not do this (controller access rules, sensitive resources).
    #[error(
        "{}: access denied: {}",
        clipped(subject),
        clipped_to(message, MESSAGE_BYTES)
    )]
    AccessDenied {
        /// What was being accessed.
        subject: String,
        /// Why it is denied.
        message: String,
    },
    /// The backend or runtime does not support this operation.
    #[error(
        "{}: unsupported: {}",
        clipped(subject),
        clipped_to(message, MESSAGE_BYTES)
    )]
    Unsupported {
        /// What was asked of.
        subject: String,
        /// What is unsupported.
        message: String,
    },
    /// A strict watcher fell behind the exact history window and its watch was ended.
    #[error("{}: watch fell behind the history window at bookmark {}", clipped(&kind.to_string()), clipped(&position.to_string()))]
    WatchOverrun {
        /// The kind being watched.
        kind: Kind,
        /// The last bookmark the watcher received (or where it started).
        position: Bookmark,
    },
    /// The storage engine failed.
    #[error(
        "{}: backend failure: {}",
        clipped(subject),
        clipped_to(message, MESSAGE_BYTES)
    )]
    Backend {
        /// What was being accessed.
        subject: String,
        /// What failed.
        message: String,
        /// Whether the same call may succeed later (e.g. a server was unreachable).
        retryable: bool,
        /// The underlying error, if any.
        #[source]
        source: Option<Source>,
    },
}

/// A pointer as an error shows it: its id (or a type or namespace) may be whatever a caller
/// sent, so it is [`clipped`] as every quoted piece of caller text is. The variants keep the
/// pointer whole.
fn shown(pointer: &Pointer) -> String {
    clipped(&pointer.to_string()).to_string()
}

/// An owner conflict in words; a write without an owner (a user's) to a controller's resource
/// says what to do instead: the controller rewrites it from its inputs.
fn owner_conflict(owner: &Option<String>, writer: &Option<String>) -> String {
    match (owner, writer) {
        (Some(owner), None) => {
            let owner = clipped(owner);
            format!("owned by {owner}; this write has no owner — change {owner}'s inputs instead")
        }
        _ => format!(
            "owned by {}, written by {}",
            display_owner(owner),
            display_owner(writer)
        ),
    }
}

fn display_owner(owner: &Option<String>) -> String {
    match owner {
        Some(o) => format!("{:?}", clipped(o)),
        None => "no owner".to_string(),
    }
}

impl Error {
    /// Whether repeating the call (after re-reading, for conflicts) can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::VersionConflict { .. } | Error::WatchOverrun { .. } => true,
            Error::Backend { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// The variant's name, in camelCase (`notFound`, `versionConflict`, `invalidArgument`, ...):
    /// what status resources and logs record, so a reader can tell kinds of failure apart
    /// without parsing messages.
    ///
    /// ```
    /// use cosi_core::Error;
    /// assert_eq!(Error::invalid("x", "spec", "bad").kind_name(), "invalidArgument");
    /// ```
    pub fn kind_name(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "notFound",
            Error::AlreadyExists { .. } => "alreadyExists",
            Error::VersionConflict { .. } => "versionConflict",
            Error::OwnerConflict { .. } => "ownerConflict",
            Error::PhaseConflict { .. } => "phaseConflict",
            Error::PendingFinalizers { .. } => "pendingFinalizers",
            Error::InvalidArgument { .. } => "invalidArgument",
            Error::AccessDenied { .. } => "accessDenied",
            Error::Unsupported { .. } => "unsupported",
            Error::WatchOverrun { .. } => "watchOverrun",
            Error::Backend { .. } => "backend",
        }
    }

    /// Whether this is [`Error::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Whether this is [`Error::AlreadyExists`].
    pub fn is_already_exists(&self) -> bool {
        matches!(self, Error::AlreadyExists { .. })
    }

    /// Whether this is [`Error::VersionConflict`].
    pub fn is_version_conflict(&self) -> bool {
        matches!(self, Error::VersionConflict { .. })
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(
        subject: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::InvalidArgument {
            subject: subject.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// The error a store returns when asked to resume after a bookmark it did not issue: an
    /// invalid argument on `since`.
    ///
    /// ```
    /// use cosi_core::{Bookmark, Error};
    /// let err = Error::bookmark_not_issued_here("ns/T", &Bookmark::from_bytes(&[1, 2]));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "ns/T: invalid since: bookmark 0x0102 was not issued by this store (another store, \
    ///      or one that restarted): watch again without it"
    /// );
    /// ```
    pub fn bookmark_not_issued_here(subject: impl Into<String>, bookmark: &Bookmark) -> Self {
        Error::invalid(
            subject,
            "since",
            format!(
                "bookmark {} was not issued by this store (another store, or one that \
                 restarted): watch again without it",
                clipped(&bookmark.to_string())
            ),
        )
    }

    /// Shorthand for a [`Error::Backend`] failure with a source.
    pub fn backend(
        subject: impl Into<String>,
        message: impl Into<String>,
        retryable: bool,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Backend {
            subject: subject.into(),
            message: message.into(),
            retryable,
            source: Some(Arc::new(source)),
        }
    }
}
