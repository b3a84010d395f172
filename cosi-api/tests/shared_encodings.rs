//! The watches of a State service share the encoded resources they send (each event is encoded
//! once for all the watchers of a kind): what each watcher receives must be exactly, byte for
//! byte, what it receives from a service that shares nothing, where it is in effect alone.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use cosi_api::auth::StatePolicy;
use cosi_api::client::{channel, ClientSecurity};
use cosi_api::codec::Codec;
use cosi_api::events::API_EXTENDED;
use cosi_api::proto::encoded;
use cosi_api::proto::resource::{self as pb, state_client::StateClient, EventType};
use cosi_api::server::{ApiServer, Security, ServerHandle, StateService, OMIT_YAML_HEADER};
use cosi_core::{CreateOptions, Resource, ResourceSpec, State, StateExt, UpdateOptions};
use cosi_state::conformance::Widget;
use cosi_state::MemoryOptions;
use cosi_state::MemoryState;
use prost::Message;
use support::conformance_registry;
use tokio::net::TcpListener;

const ITEMS: u64 = 40;

/// A store whose window keeps every event of the test, watched or not, so that a watch from
/// the start replays them all exactly.
fn store() -> Arc<MemoryState> {
    Arc::new(MemoryState::new(MemoryOptions {
        history: 1024,
        history_min: 1024,
        ..MemoryOptions::default()
    }))
}

async fn serve(store: Arc<MemoryState>, shared_bytes: usize) -> ServerHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let codec = Codec::new(Arc::new(conformance_registry()));
    ApiServer::new(Security::Plaintext)
        .with_state(
            StateService::new(store, codec, StatePolicy::default())
                .with_shared_encodings(shared_bytes),
        )
        .serve(listener)
        .unwrap()
}

fn client(address: SocketAddr) -> StateClient<tonic::transport::Channel> {
    StateClient::new(channel(address, None, ClientSecurity::Plaintext).unwrap())
}

fn watch_request(options: pb::WatchOptions, yaml: bool) -> tonic::Request<pb::WatchRequest> {
    let kind = Widget::kind();
    let mut request = tonic::Request::new(pb::WatchRequest {
        namespace: kind.namespace().to_string(),
        r#type: kind.resource_type().to_string(),
        id: None,
        options: Some(options),
        api_version: API_EXTENDED,
    });
    if !yaml {
        request.metadata_mut().insert(
            OMIT_YAML_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
    }
    request
}

/// The kind's current position, from a watch that asks for it.
async fn head(address: SocketAddr) -> Vec<u8> {
    let options = pb::WatchOptions {
        bootstrap_bookmark: true,
        ..Default::default()
    };
    let mut stream = client(address)
        .watch(watch_request(options, false))
        .await
        .unwrap()
        .into_inner();
    loop {
        let response = stream.message().await.unwrap().expect("the watch ended");
        if let Some(event) = response.event.first() {
            assert_eq!(event.event_type, EventType::Noop as i32);
            return event.bookmark.clone().unwrap().to_vec();
        }
    }
}

/// Creates, updates twice and destroys a quarter of `ITEMS` widgets: 2.25 × ITEMS events, of
/// every kind that carries resources (an update carries two).
async fn write(store: &MemoryState) -> usize {
    let kind = Widget::kind();
    for i in 0..ITEMS {
        let widget = Resource::new(format!("w{i:03}"), Widget { value: i });
        store
            .create(widget.into_shared(), CreateOptions::default())
            .await
            .unwrap();
    }
    for round in 1..=2 {
        for i in 0..ITEMS {
            store
                .update_with_conflicts::<Widget, _>(
                    &kind.pointer(format!("w{i:03}")),
                    UpdateOptions::default(),
                    |w| {
                        w.spec.value = i * 10 + round;
                        Ok(())
                    },
                )
                .await
                .unwrap();
        }
    }
    for i in 0..ITEMS / 4 {
        store
            .destroy(&kind.pointer(format!("w{i:03}")), Default::default())
            .await
            .unwrap();
    }
    (ITEMS * 3 + ITEMS / 4) as usize
}

/// Opens a watch from `since` and returns it, established.
async fn open(
    address: SocketAddr,
    since: &[u8],
    yaml: bool,
) -> tonic::Streaming<encoded::WatchResponse> {
    let options = pb::WatchOptions {
        start_from_bookmark: Some(since.to_vec()),
        aggregated: true,
        ..Default::default()
    };
    let mut stream = client(address)
        .watch(watch_request(options, yaml))
        .await
        .unwrap()
        .into_inner();
    let established = stream.message().await.unwrap().unwrap();
    assert!(established.event.is_empty());
    stream
}

/// Each of `count` events exactly as it came over the wire.
async fn read(mut stream: tonic::Streaming<encoded::WatchResponse>, count: usize) -> Vec<Vec<u8>> {
    let mut events = Vec::with_capacity(count);
    while events.len() < count {
        let response = stream.message().await.unwrap().expect("the watch ended");
        for event in &response.event {
            // A catch-up or resync would not be the exact replay the test compares.
            assert!(!event.compacted && event.event_type <= EventType::Destroyed as i32);
            events.push(event.encode_to_vec());
        }
    }
    assert_eq!(events.len(), count, "more events than were written");
    events
}

/// The events of a watch from `since` on a service that shares no encodings.
async fn alone(store: &Arc<MemoryState>, since: &[u8], yaml: bool, count: usize) -> Vec<Vec<u8>> {
    let server = serve(store.clone(), 0).await;
    let events = read(open(server.local_addr(), since, yaml).await, count).await;
    server.shutdown().await.unwrap();
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_watchers_of_a_kind_receive_exactly_what_each_receives_alone() {
    let store = store();
    let server = serve(store.clone(), cosi_api::server::DEFAULT_SHARED_ENCODINGS).await;
    let since = head(server.local_addr()).await;
    let count = write(&store).await;

    let first = open(server.local_addr(), &since, true).await;
    let second = open(server.local_addr(), &since, true).await;
    let (first, second) = tokio::join!(read(first, count), read(second, count));

    let expected = alone(&store, &since, true, count).await;
    assert_eq!(first, expected);
    assert_eq!(second, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_with_and_without_yaml_each_receive_their_own_encoding() {
    let store = store();
    let server = serve(store.clone(), cosi_api::server::DEFAULT_SHARED_ENCODINGS).await;
    let since = head(server.local_addr()).await;
    let count = write(&store).await;

    let with_yaml = open(server.local_addr(), &since, true).await;
    let without = open(server.local_addr(), &since, false).await;
    let (with_yaml, without) = tokio::join!(read(with_yaml, count), read(without, count));

    assert_eq!(with_yaml, alone(&store, &since, true, count).await);
    assert_eq!(without, alone(&store, &since, false, count).await);
    assert_ne!(with_yaml, without);
}
