//! How long a call waits for the server ([`super::RemoteOptions::call_timeout`],
//! [`super::MachineClient::with_call_timeout`]): a server that accepts a call and never answers
//! must not hang its caller for good. HTTP/2 keepalives only notice a dead connection, not a
//! live server that says nothing.

use std::future::Future;
use std::time::Duration;

use tonic::Status;

/// The deadline a client has unless told otherwise: long enough for a node under load to
/// answer, short enough that a stuck one is noticed.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// `call`'s outcome, or `DeadlineExceeded` (retryable) once `limit` has passed; its message
/// names `setting`, where the caller sets the limit.
pub(super) async fn within<T>(
    limit: Option<Duration>,
    setting: &str,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let Some(limit) = limit else {
        return call.await;
    };
    match tokio::time::timeout(limit, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "the server did not answer within {limit:?} ({setting})"
        ))),
    }
}
