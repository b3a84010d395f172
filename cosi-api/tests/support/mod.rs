//! What the integration tests share: a State server over a memory store on a loopback port,
//! the registry of the backend conformance suite's fixture types, two spec types of their own
//! (`Blob`, `Stranger`), (`hostile`) a State server that answers with crafted messages,
//! (`hostile_machine`) a machine server that answers late or never, (`raw_state`) one that
//! answers with raw bytes, and (`memory`) what the tests measuring a process's memory share.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use cosi_api::auth::StatePolicy;
use cosi_api::client::{
    channel, channel_with, ChannelOptions, ClientSecurity, RemoteOptions, RemoteState,
};
use cosi_api::codec::Codec;
use cosi_api::server::{ApiServer, Security, ServerHandle, StateService};
use cosi_core::{Registry, State};
use cosi_state::conformance::{Gadget, Widget, HISTORY_WINDOW, MIN_DESTROY_MARKERS};
use cosi_state::{MemoryOptions, MemoryState};
use tokio::net::TcpListener;

pub mod hostile;
pub mod hostile_machine;
pub mod memory;
pub mod raw_state;

/// A spec of one string, as large as a test makes it.
#[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Blob {
    pub data: String,
}
impl cosi_core::ResourceSpec for Blob {
    const TYPE: &'static str = "Blobs.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// A second type, for answers and clients that know one type and not the other.
#[derive(Clone, PartialEq, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Stranger {
    pub data: String,
}
impl cosi_core::ResourceSpec for Stranger {
    const TYPE: &'static str = "Strangers.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// A codec that knows [`Blob`] and [`Stranger`].
pub fn blob_codec() -> Codec {
    let mut registry = Registry::new();
    registry.register::<Blob>().unwrap();
    registry.register::<Stranger>().unwrap();
    Codec::new(Arc::new(registry))
}

/// The fixture types of the conformance suite.
pub fn conformance_registry() -> Registry {
    let mut registry = Registry::new();
    registry.register::<Widget>().unwrap();
    registry.register::<Gadget>().unwrap();
    registry
}

/// A memory store sized as the conformance suite requires.
pub fn conformance_memory() -> Arc<MemoryState> {
    Arc::new(MemoryState::new(MemoryOptions {
        history: HISTORY_WINDOW,
        max_destroy_markers: MIN_DESTROY_MARKERS,
        ..MemoryOptions::default()
    }))
}

/// A plaintext State server over `state` on `address` (port 0: any).
pub async fn plaintext_server(
    state: Arc<dyn State>,
    codec: Codec,
    address: SocketAddr,
) -> ServerHandle {
    let listener = TcpListener::bind(address)
        .await
        .expect("bind a loopback port");
    ApiServer::new(Security::Plaintext)
        .with_state(StateService::new(state, codec, StatePolicy::default()))
        .serve(listener)
        .expect("serve")
}

/// A plaintext server whose watches run at most a few events ahead of their consumer (one
/// event per step), so a consumer that stops reading falls behind the store's window as it
/// would in process.
pub async fn tight_server(
    state: Arc<dyn State>,
    codec: Codec,
    address: SocketAddr,
) -> ServerHandle {
    let listener = TcpListener::bind(address)
        .await
        .expect("bind a loopback port");
    ApiServer::new(Security::Plaintext)
        .with_state(StateService::new(state, codec, StatePolicy::default()).with_watch_batch(1))
        .serve(listener)
        .expect("serve")
}

/// A client of [`tight_server`]: a 1 KiB receive window and a one-event buffer per watch.
pub fn tight_client(address: SocketAddr, codec: Codec) -> RemoteState {
    let channel = channel_with(
        address,
        None,
        ClientSecurity::Plaintext,
        ChannelOptions {
            stream_window: Some(1024),
            ..Default::default()
        },
    )
    .unwrap();
    let options = RemoteOptions {
        watch_buffer: 1,
        ..RemoteOptions::default()
    };
    RemoteState::with_options(channel, codec, options)
}

/// A client of a plaintext server.
pub fn plaintext_client(address: SocketAddr, codec: Codec) -> RemoteState {
    RemoteState::new(
        channel(address, None, ClientSecurity::Plaintext).unwrap(),
        codec,
    )
}

/// Any free loopback port.
pub fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}
