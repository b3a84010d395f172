//! What the harness makes of controller failures: every one is recorded
//! ([`ControllerFailure`]), and one the test did not say it expects fails the next
//! `settle`/`quiesce` with the failure's own message.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::status::{Failure, FailureSink};

/// The most failures a harness keeps; later ones are counted, not kept (a controller failing on
/// every retry of a long test must not grow memory without bound).
const KEPT: usize = 1024;

/// One failure of a controller the harness saw: a reconcile (or hook, mapping, subscription)
/// that returned an error or panicked, or an access violation — also one the controller went
/// on from.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ControllerFailure {
    /// The controller's name.
    pub controller: String,
    /// The error's kind ([`cosi_core::Error::kind_name`]: `accessDenied`, `versionConflict`,
    /// `backend`, ...) or `panic`.
    pub kind: String,
    /// The error's message, or the panic's.
    pub message: String,
}

impl fmt::Display for ControllerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "controller {:?} failed ({}): {}",
            self.controller, self.kind, self.message
        )
    }
}

/// Which failures a test expects.
#[derive(Debug)]
enum Expected {
    /// Those of these controllers.
    Of(BTreeSet<String>),
    /// Any.
    All,
}

#[derive(Debug)]
struct Book {
    kept: Vec<ControllerFailure>,
    /// Failures seen beyond [`KEPT`].
    dropped: usize,
    /// The first failure not expected when it happened, not yet reported.
    unexpected: Option<ControllerFailure>,
    expected: Expected,
}

/// The harness's record of failures, shared with the engine's failure sink.
#[derive(Debug)]
pub(crate) struct Failures {
    book: Mutex<Book>,
}

impl Failures {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Failures {
            book: Mutex::new(Book {
                kept: Vec::new(),
                dropped: 0,
                unexpected: None,
                expected: Expected::Of(BTreeSet::new()),
            }),
        })
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sink the engine tells of each failure.
    pub(crate) fn sink(self: &Arc<Self>) -> FailureSink {
        let failures = self.clone();
        Arc::new(move |controller: &str, failure: &Failure| {
            failures.record(ControllerFailure {
                controller: controller.to_string(),
                kind: failure.kind().to_string(),
                message: failure.to_string(),
            })
        })
    }

    fn record(&self, failure: ControllerFailure) {
        let mut book = self.book();
        let expected = match &book.expected {
            Expected::All => true,
            Expected::Of(controllers) => controllers.contains(&failure.controller),
        };
        if !expected && book.unexpected.is_none() {
            book.unexpected = Some(failure.clone());
        }
        if book.kept.len() < KEPT {
            book.kept.push(failure);
        } else {
            book.dropped += 1;
        }
    }

    pub(crate) fn expect_of(&self, controller: &str) {
        if let Expected::Of(controllers) = &mut self.book().expected {
            controllers.insert(controller.to_string());
        }
    }

    pub(crate) fn expect_all(&self) {
        self.book().expected = Expected::All;
    }

    pub(crate) fn seen(&self) -> Vec<ControllerFailure> {
        self.book().kept.clone()
    }

    /// Panics, once, with the first failure the test did not expect.
    pub(crate) fn check(&self, during: &str) {
        let Some(failure) = self.book().unexpected.take() else {
            return;
        };
        panic!(
            "{during}: {failure}\n\
             The test did not expect this failure. If it provokes it, say so before: \
             `harness.expect_errors({:?})` (or `harness.allow_errors()` for any controller); \
             `harness.failures()` lists what was seen.",
            failure.controller
        );
    }
}
