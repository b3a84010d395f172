//! Checks that a server's answer is about what was asked: a resource of another kind or id than
//! the request named is refused, so a wrong or hostile server cannot hand a caller (a
//! controller, a view built from a watch) a resource it did not ask for.

use cosi_core::{Error, Kind, Pointer};

/// The error of an answer about `answered` to a call about `asked` (a pointer or a kind).
pub(super) fn foreign(asked: &dyn std::fmt::Display, answered: &Pointer) -> Error {
    Error::Backend {
        subject: asked.to_string(),
        message: format!("the server answered with {answered}, which was not asked for"),
        retryable: false,
        source: None,
    }
}

/// `answered` must be `asked`.
pub(super) fn same_resource(asked: &Pointer, answered: &Pointer) -> Result<(), Error> {
    if asked == answered {
        Ok(())
    } else {
        Err(foreign(asked, answered))
    }
}

/// `answered` must be of `asked`.
pub(super) fn same_kind(asked: &Kind, answered: &Pointer) -> Result<(), Error> {
    if asked == answered.kind() {
        Ok(())
    } else {
        Err(foreign(asked, answered))
    }
}

/// In a list, `next` must come after `previous` (a list is sorted by id, each id once).
pub(super) fn after(asked: &Kind, previous: &Pointer, next: &Pointer) -> Result<(), Error> {
    if next.id() > previous.id() {
        Ok(())
    } else {
        Err(Error::Backend {
            subject: asked.to_string(),
            message: format!(
                "the server listed {next} after {previous}; a list is sorted by id, each id once"
            ),
            retryable: false,
            source: None,
        })
    }
}
