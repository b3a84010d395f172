//! How long a call waits for the server ([`super::RemoteOptions::call_timeout`]): a server that
//! accepts a call and never answers must not hang its caller for good. HTTP/2 keepalives only
//! notice a dead connection, not a live server that says nothing.

use std::future::Future;
use std::time::Duration;

use tonic::Status;

/// `call`'s outcome, or `DeadlineExceeded` (retryable) once `limit` has passed.
pub(super) async fn within<T>(
    limit: Option<Duration>,
    call: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let Some(limit) = limit else {
        return call.await;
    };
    match tokio::time::timeout(limit, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "the server did not answer within {limit:?} (RemoteOptions::call_timeout)"
        ))),
    }
}
