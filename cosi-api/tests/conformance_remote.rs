//! The backend conformance suite and the model test against `RemoteState`: every rule of the
//! State contract holds over the network (loopback gRPC to a server on the in-memory backend).
//!
//! The suite's lag rules stop reading a watch while writing past the store's 32-event window.
//! A remote watch has transport buffers in between (the HTTP/2 receive window, a batch in each
//! process), which would absorb that lag and turn the required catch-up into exact events; the
//! subject therefore runs with tight buffers (a 1 KiB window, one event per step and per
//! buffer), so a consumer that stops reading falls behind the store's window, and the rules
//! check that the catch-up (`compacted` events) and the strict overrun error travel the wire.

mod support;

use std::sync::Arc;

use cosi_api::codec::Codec;
use cosi_state::conformance::Subject;

async fn remote() -> Subject {
    let codec = Codec::new(Arc::new(support::conformance_registry()));
    let server = support::tight_server(
        support::conformance_memory(),
        codec.clone(),
        support::any_port(),
    )
    .await;
    let client = support::tight_client(server.local_addr(), codec);
    Subject::new(Arc::new(client)).with_guard(server)
}

cosi_state::conformance_tests!(remote);
