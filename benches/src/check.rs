//! Result checks. A workload checks its own result (counts, values, versions) and stops with a
//! [`WorkloadError`] when it is wrong; [`exit_on_error`] prints it to stderr and exits non-zero.

use std::fmt;
use std::process::ExitCode;

/// A workload's result was wrong, or the workload could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadError {
    message: String,
}

impl WorkloadError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        WorkloadError {
            message: message.into(),
        }
    }
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WorkloadError {}

impl From<cosi_core::Error> for WorkloadError {
    fn from(error: cosi_core::Error) -> Self {
        WorkloadError::new(format!("state call failed: {error}"))
    }
}

/// Fails with `message` unless `condition` holds.
///
/// ```
/// use benches::check::ensure;
/// assert!(ensure(1 + 1 == 2, || "arithmetic".to_string()).is_ok());
/// assert_eq!(
///     ensure(false, || "expected 3 items, got 2".to_string()).unwrap_err().to_string(),
///     "expected 3 items, got 2",
/// );
/// ```
pub fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), WorkloadError> {
    if condition {
        Ok(())
    } else {
        Err(WorkloadError::new(message()))
    }
}

/// Ends the process: success, or the error on stderr (`FAILED: <workload>: <message>`) and exit
/// code 1.
pub fn exit_on_error(workload: &str, result: Result<(), WorkloadError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("FAILED: {workload}: {error}");
            ExitCode::FAILURE
        }
    }
}
