//! What a caller sends is bounded: messages up to 32 MiB pass both ways, a larger one is
//! refused with an error and stores nothing; an unregistered type is refused by name before
//! anything is created for it. A server is not started with a byte budget per caller too small
//! for one such message.

mod support;

use std::sync::Arc;

use cosi_api::client::{channel, ClientSecurity, RemoteOptions, RemoteState};
use cosi_api::codec::Codec;
use cosi_core::{
    CreateOptions, Error, ListOptions, Resource, ResourceSpec, State, StateExt, WatchKindOptions,
};

use support::{Blob, Stranger};

fn server_codec() -> Codec {
    let mut registry = cosi_core::Registry::new();
    registry.register::<Blob>().unwrap();
    Codec::new(Arc::new(registry))
}

fn client_codec() -> Codec {
    support::blob_codec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_up_to_32_mib_pass_both_ways_and_larger_ones_change_nothing() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server =
        support::plaintext_server(store.clone(), server_codec(), support::any_port()).await;
    // Specs as JSON only (no YAML copy), so the sizes below are the messages' sizes.
    let channel = channel(server.local_addr(), None, ClientSecurity::Plaintext).unwrap();
    let options = RemoteOptions {
        yaml_on_write: false,
        ..RemoteOptions::default()
    };
    let client = RemoteState::with_options(channel, client_codec(), options);

    // 30 MiB: far above gRPC's usual 4 MiB default, under the 32 MiB limit both ways.
    let big = Resource::new(
        "big",
        Blob {
            data: "x".repeat(30 << 20),
        },
    );
    let stored = client
        .create(big.into_shared(), CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(stored.metadata().version().get(), 1);
    let read = client.get(&Blob::kind().pointer("big")).await.unwrap();
    assert_eq!(
        cosi_core::downcast_ref::<Blob>(&*read)
            .unwrap()
            .spec
            .data
            .len(),
        30 << 20
    );

    let huge = Resource::new(
        "huge",
        Blob {
            data: "x".repeat(33 << 20),
        },
    );
    let err = client
        .create(huge.into_shared(), CreateOptions::default())
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    let ids: Vec<_> = store
        .list(&Blob::kind(), &ListOptions::default())
        .await
        .unwrap()
        .iter()
        .map(|r| r.metadata().id().to_string())
        .collect();
    assert_eq!(ids, ["big"]);
}

#[tokio::test]
async fn unregistered_type_is_refused_by_name_for_every_call() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server =
        support::plaintext_server(store.clone(), server_codec(), support::any_port()).await;
    let client = support::plaintext_client(server.local_addr(), client_codec());
    let expected =
        "\"Strangers.test.cosi.dev\": invalid type: not a registered resource type (full \
                    names only, e.g. Services.runtime.cosi.dev)";
    let create = client
        .create(
            Resource::new("s", Stranger::default()).into_shared(),
            CreateOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(create.to_string(), expected);
    let get = client
        .get(&Stranger::kind().pointer("s"))
        .await
        .unwrap_err();
    assert_eq!(get.to_string(), expected);
    let list = client
        .list(&Stranger::kind(), &ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(list.to_string(), expected);
    let watch = client
        .watch_kind(&Stranger::kind(), WatchKindOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(watch, Error::InvalidArgument { .. }), "{watch:?}");
}

/// `status` is an invalid-argument refusal whose message says `expected`.
fn assert_invalid(status: &tonic::Status, expected: &str) {
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains(expected), "{}", status.message());
}

/// A raw client of the State service on `server`.
async fn raw_client(
    server: &cosi_api::server::ServerHandle,
) -> cosi_api::proto::resource::state_client::StateClient<tonic::transport::Channel> {
    cosi_api::proto::resource::state_client::StateClient::connect(format!(
        "http://{}",
        server.local_addr()
    ))
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_of_one_resource_by_an_id_too_long_for_a_pattern_is_refused_and_the_server_serves_on(
) {
    use cosi_api::proto::resource as pb;
    let store = Arc::new(cosi_state::MemoryState::default());
    let server = support::plaintext_server(store, server_codec(), support::any_port()).await;
    let mut raw = raw_client(&server).await;
    // Tail events make the server select the one id by a pattern of the escaped id.
    let id = "a".repeat(2 << 20);
    let status = raw
        .watch(pb::WatchRequest {
            namespace: "test".into(),
            r#type: Blob::TYPE.into(),
            id: Some(id),
            options: Some(pb::WatchOptions {
                tail_events: 1,
                ..pb::WatchOptions::default()
            }),
            api_version: 2,
        })
        .await
        .unwrap_err();
    assert_invalid(
        &status,
        "invalid id: 2097152 bytes: a watch of one resource",
    );
    assert!(status.message().len() < 400, "{}", status.message());
    // The same connection still serves.
    let listed = raw
        .list(pb::ListRequest {
            namespace: "test".into(),
            r#type: Blob::TYPE.into(),
            options: None,
        })
        .await
        .unwrap();
    let mut listed = listed.into_inner();
    assert!(listed.message().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_with_more_label_terms_than_the_limit_is_refused_before_it_reads_the_store() {
    use cosi_api::proto::resource as pb;
    let store = Arc::new(cosi_state::MemoryState::default());
    let server = support::plaintext_server(store, server_codec(), support::any_port()).await;
    let mut raw = raw_client(&server).await;
    // Each term is a few bytes on the wire: a 32 MiB message could carry millions.
    let terms = vec![
        pb::LabelTerm {
            key: String::new(),
            op: pb::label_term::Operation::Exists as i32,
            value: Vec::new(),
            invert: true,
        };
        100_000
    ];
    let status = raw
        .list(pb::ListRequest {
            namespace: "test".into(),
            r#type: Blob::TYPE.into(),
            options: Some(pb::ListOptions {
                label_query: vec![pb::LabelQuery { terms }],
                id_query: None,
            }),
        })
        .await
        .unwrap_err();
    assert_invalid(
        &status,
        "invalid label_query[0].terms: 100000 terms, more than the 64 allowed",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_with_more_label_values_in_all_than_the_limit_is_refused() {
    use cosi_api::proto::resource as pb;
    use cosi_api::request_bounds::{MAX_LABEL_VALUES, MAX_LABEL_VALUES_IN_ALL};
    let store = Arc::new(cosi_state::MemoryState::default());
    let server = support::plaintext_server(store, server_codec(), support::any_port()).await;
    let mut raw = raw_client(&server).await;
    // Every term within its own limit; all of them together one value past theirs.
    let term = |values: usize| pb::LabelTerm {
        key: "k".into(),
        op: pb::label_term::Operation::In as i32,
        value: vec![String::new(); values],
        invert: false,
    };
    let terms = (MAX_LABEL_VALUES_IN_ALL / MAX_LABEL_VALUES) + 1;
    let mut terms: Vec<_> = (0..terms).map(|_| term(MAX_LABEL_VALUES)).collect();
    terms.last_mut().unwrap().value.truncate(1);
    let status = raw
        .list(pb::ListRequest {
            namespace: "test".into(),
            r#type: Blob::TYPE.into(),
            options: Some(pb::ListOptions {
                label_query: vec![pb::LabelQuery { terms }],
                id_query: None,
            }),
        })
        .await
        .unwrap_err();
    assert_invalid(
        &status,
        "list test/Blobs.test.cosi.dev: invalid label_query: 4097 values in all its terms, more \
         than the 4096 allowed",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_query_pattern_longer_than_the_limit_is_refused_quoting_only_its_start() {
    use cosi_api::proto::resource as pb;
    let store = Arc::new(cosi_state::MemoryState::default());
    let server = support::plaintext_server(store, server_codec(), support::any_port()).await;
    let mut raw = raw_client(&server).await;
    let status = raw
        .list(pb::ListRequest {
            namespace: "test".into(),
            r#type: Blob::TYPE.into(),
            options: Some(pb::ListOptions {
                label_query: Vec::new(),
                id_query: Some(pb::IdQuery {
                    regexp: "a".repeat(20 << 20),
                }),
            }),
        })
        .await
        .unwrap_err();
    assert_invalid(&status, "(20971520 bytes) is longer than the 4096 bytes");
    assert!(status.message().len() < 400, "{}", status.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_about_an_overlong_id_reaches_the_client_as_that_error_not_a_transport_failure() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server = support::plaintext_server(store, server_codec(), support::any_port()).await;
    let client = support::plaintext_client(server.local_addr(), client_codec());
    // The status would quote the id several times: far beyond what HTTP/2 trailers carry.
    let pointer = Blob::kind().pointer("x".repeat(100 << 10));
    match client.get(&pointer).await {
        Err(Error::NotFound { pointer: missing }) => assert_eq!(missing, pointer),
        other => panic!("expected NotFound for the long id, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_bootstrap_larger_in_sum_than_a_message_arrives_whole() {
    let store = Arc::new(cosi_state::MemoryState::default());
    // 300 resources of 200 KB: 60 MB in all, one batch of the store's events (256) alone
    // 51 MB, past the 32 MiB message limit if sent as one aggregated response.
    let count = 300;
    for i in 0..count {
        put_blob(&store, &format!("b{i:03}"), "x".repeat(200_000)).await;
    }
    let server =
        support::plaintext_server(store.clone(), server_codec(), support::any_port()).await;
    let client = support::plaintext_client(server.local_addr(), client_codec());
    let mut watch = client
        .watch_kind(
            &Blob::kind(),
            WatchKindOptions {
                bootstrap: true,
                ..WatchKindOptions::default()
            },
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    loop {
        match watch.recv().await {
            Some(cosi_core::Event::Created { resource, .. }) => {
                assert_eq!(
                    cosi_core::downcast_ref::<Blob>(&*resource)
                        .unwrap()
                        .spec
                        .data
                        .len(),
                    200_000
                );
                ids.push(resource.metadata().id().to_string());
            }
            Some(cosi_core::Event::Bootstrapped { .. }) => break,
            other => panic!("after {} resources: {other:?}", ids.len()),
        }
    }
    let expected: Vec<String> = (0..count).map(|i| format!("b{i:03}")).collect();
    assert_eq!(ids, expected);
}

/// A watch of blobs from our client (which asks for no YAML) on `server`.
async fn blob_watch(server: &cosi_api::server::ServerHandle) -> cosi_core::Watch {
    support::plaintext_client(server.local_addr(), client_codec())
        .watch_kind(&Blob::kind(), WatchKindOptions::default())
        .await
        .unwrap()
}

async fn put_blob(store: &cosi_state::MemoryState, id: &str, data: String) {
    store
        .modify(
            Resource::new(id, Blob::default()),
            cosi_core::UpdateOptions::default(),
            |blob| {
                blob.spec.data.clone_from(&data);
                Ok(())
            },
        )
        .await
        .unwrap();
}

fn blob_data(resource: &cosi_core::SharedResource) -> &str {
    &cosi_core::downcast_ref::<Blob>(&**resource)
        .unwrap()
        .spec
        .data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_too_large_to_carry_both_copies_reaches_watchers_without_the_old_one() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server =
        support::plaintext_server(store.clone(), server_codec(), support::any_port()).await;
    put_blob(&store, "big", "x".repeat(20 << 20)).await;
    let mut watch = blob_watch(&server).await;
    // Old and new together: 40 MiB, past the 32 MiB message limit.
    put_blob(&store, "big", "y".repeat(20 << 20)).await;
    put_blob(&store, "small", "s".into()).await;
    match watch.recv().await {
        Some(cosi_core::Event::Updated { old, resource, .. }) => {
            assert!(old.is_none(), "the old copy does not fit");
            assert_eq!(resource.metadata().id(), "big");
            assert_eq!(blob_data(&resource), "y".repeat(20 << 20));
        }
        other => panic!("expected the update of big, got {other:?}"),
    }
    // The watch goes on.
    match watch.recv().await {
        Some(cosi_core::Event::Created { resource, .. }) => {
            assert_eq!(resource.metadata().id(), "small")
        }
        other => panic!("expected the creation of small, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_too_large_with_yaml_copies_reaches_watchers_without_them() {
    use cosi_api::proto::resource as pb;
    let store = Arc::new(cosi_state::MemoryState::default());
    let server =
        support::plaintext_server(store.clone(), server_codec(), support::any_port()).await;
    put_blob(&store, "big", "x".repeat(10 << 20)).await;
    // The original's client: specs as bytes and as YAML, 20 MiB a copy here.
    let mut raw = raw_client(&server)
        .await
        .max_decoding_message_size(64 << 20);
    let mut stream = raw
        .watch(pb::WatchRequest {
            namespace: "test".into(),
            r#type: Blob::TYPE.into(),
            options: Some(pb::WatchOptions {
                bootstrap_contents: false,
                ..Default::default()
            }),
            api_version: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let established = stream.message().await.unwrap().unwrap();
    assert!(established.event.is_empty());
    put_blob(&store, "big", "y".repeat(10 << 20)).await;
    put_blob(&store, "small", "s".into()).await;
    let update = &stream.message().await.unwrap().unwrap().event[0];
    assert_eq!(update.event_type, pb::EventType::Updated as i32);
    let yaml_of = |bytes: &prost::bytes::Bytes| {
        let resource = <pb::Resource as prost::Message>::decode(&bytes[..]).unwrap();
        resource.spec.unwrap().yaml_spec.len()
    };
    assert_eq!(yaml_of(update.resource.as_ref().unwrap()), 0);
    assert_eq!(
        yaml_of(update.old.as_ref().unwrap()),
        0,
        "the old copy fits without YAML"
    );
    let created = &stream.message().await.unwrap().unwrap().event[0];
    assert_eq!(created.event_type, pb::EventType::Created as i32);
    assert_eq!(
        yaml_of(created.resource.as_ref().unwrap()),
        "data: s\n".len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_too_large_for_any_event_ends_the_watch_with_an_error_naming_it() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server =
        support::plaintext_server(store.clone(), server_codec(), support::any_port()).await;
    let mut watch = blob_watch(&server).await;
    // Written in process: the API itself takes no request this large.
    put_blob(&store, "huge", "x".repeat(33 << 20)).await;
    match watch.recv().await {
        Some(cosi_core::Event::Errored {
            error:
                Error::Backend {
                    subject,
                    message,
                    retryable: false,
                    ..
                },
        }) => {
            assert_eq!(subject, Blob::kind().pointer("huge").to_string());
            assert!(
                message.contains("more than a watch event can carry"),
                "{message}"
            );
        }
        other => panic!("expected an error naming the resource, got {other:?}"),
    }
}

/// A client that cannot trust its server (an operator's CLI) bounds what one List may bring
/// in: past the bound the list is an error naming it, instead of a vector that grows as long
/// as the server keeps sending (a hostile node's list need never end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_past_the_client_s_bound_is_an_error_naming_the_bound() {
    let store = Arc::new(cosi_state::MemoryState::default());
    for id in ["a", "b", "c"] {
        let blob = Resource::new(
            id,
            Blob {
                data: "x".repeat(1000),
            },
        );
        store
            .create(blob.into_shared(), CreateOptions::default())
            .await
            .unwrap();
    }
    let server =
        support::plaintext_server(store.clone(), server_codec(), support::any_port()).await;
    let client = |bound: usize| {
        let channel = channel(server.local_addr(), None, ClientSecurity::Plaintext).unwrap();
        let options = RemoteOptions {
            max_list_bytes: Some(bound),
            ..RemoteOptions::default()
        };
        RemoteState::with_options(channel, client_codec(), options)
    };
    let kind = Blob::kind();
    let all = client(1 << 20)
        .list(&kind, &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 3);
    let error = client(2500)
        .list(&kind, &ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}: backend failure: the list passed 2500 bytes, the most this client reads in \
             one list (RemoteOptions::max_list_bytes)",
            kind.pointer("")
        )
    );
    assert!(!error.is_retryable());
}

#[tokio::test]
async fn a_byte_budget_per_caller_below_one_message_is_refused_naming_the_least() {
    use cosi_api::server::{ApiServer, Security, ServeError, MIN_BYTES_PER_CALLER};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = ApiServer::new(Security::Plaintext)
        .with_max_bytes_per_caller(16 << 20)
        .serve(listener)
        .unwrap_err();
    assert!(
        matches!(refused, ServeError::BytesPerCallerBelowMessage { max } if max == 16 << 20),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        "max bytes per caller: 16777216 is less than one message at the limit with its frame \
         header (33554437 bytes), so a caller's largest responses could never be sent; give at \
         least that"
    );
    assert_eq!(MIN_BYTES_PER_CALLER, (32 << 20) + 5);

    // The least is taken.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = ApiServer::new(Security::Plaintext)
        .with_max_bytes_per_caller(MIN_BYTES_PER_CALLER)
        .serve(listener)
        .unwrap();
    server.shutdown().await.unwrap();
}
