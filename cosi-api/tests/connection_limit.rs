//! The server holds at most its limit of connections open: a caller beyond it waits in the
//! listen queue, unserved, and is served as soon as an open connection closes. The clock is
//! paused, so "unserved" means unserved through seconds of virtual time that pass only while
//! nothing else can run.

mod support;

use std::sync::Arc;

use cosi_api::auth::StatePolicy;
use cosi_api::server::{ApiServer, Security, ServerHandle, StateService};
use cosi_core::{Error, ResourceSpec, SharedResource, State};
use cosi_state::conformance::Widget;
use tokio::net::TcpListener;
use tokio::time::{timeout, Duration};

fn codec() -> cosi_api::codec::Codec {
    cosi_api::codec::Codec::new(Arc::new(support::conformance_registry()))
}

async fn server_with_limit(max: usize) -> ServerHandle {
    let listener = TcpListener::bind(support::any_port()).await.unwrap();
    ApiServer::new(Security::Plaintext)
        .with_state(StateService::new(
            Arc::new(cosi_state::MemoryState::default()),
            codec(),
            StatePolicy::default(),
        ))
        .with_max_connections(max)
        .serve(listener)
        .unwrap()
}

fn assert_answered(result: Result<SharedResource, Error>) {
    match result {
        Err(Error::NotFound { pointer }) => assert_eq!(pointer, Widget::kind().pointer("absent")),
        other => panic!("expected NotFound from the server, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_caller_beyond_the_connection_limit_is_served_once_a_connection_closes() {
    let server = server_with_limit(1).await;
    let first = support::plaintext_client(server.local_addr(), codec());
    assert_answered(first.get(&Widget::kind().pointer("absent")).await);
    let second = support::plaintext_client(server.local_addr(), codec());
    let mut waiting =
        tokio::spawn(async move { second.get(&Widget::kind().pointer("absent")).await });
    // Less than the clients' 5 s connect timeout and 10 s keep-alive, so nothing but an
    // answer could end the call.
    assert!(
        timeout(Duration::from_secs(4), &mut waiting).await.is_err(),
        "a second connection was served beyond the limit of one"
    );
    drop(first);
    let served = timeout(Duration::from_secs(4), waiting)
        .await
        .expect("the waiting caller is served once the first connection closes");
    assert_answered(served.unwrap());
}
