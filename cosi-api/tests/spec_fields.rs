//! Spec fields over the API: a server refuses a write whose spec has a field the type does not
//! have (`InvalidArgument` naming the resource and the field's path, nothing stored), while a
//! client reads a newer server's extra fields without error.

mod support;

use std::sync::Arc;

use cosi_api::codec::Codec;
use cosi_api::proto::resource as pb;
use cosi_core::{
    downcast_ref, CreateOptions, Error, ListOptions, Registry, Resource, ResourceSpec, State,
    UpdateOptions, Version, WatchKindOptions,
};
use serde::{Deserialize, Serialize};

/// The type as the server knows it.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Note {
    text: String,
}

impl ResourceSpec for Note {
    const TYPE: &'static str = "Notes.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

/// The same type in a later version of the program, with a field the earlier one lacks.
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct NoteV2 {
    text: String,
    colour: String,
}

impl ResourceSpec for NoteV2 {
    const TYPE: &'static str = Note::TYPE;
    const DEFAULT_NAMESPACE: &'static str = Note::DEFAULT_NAMESPACE;
}

fn codec<S: ResourceSpec>() -> Codec {
    let mut registry = Registry::new();
    registry.register::<S>().unwrap();
    Codec::new(Arc::new(registry))
}

fn note_v2(id: &str) -> Resource<NoteV2> {
    Resource::new(
        id,
        NoteV2 {
            text: "hello".into(),
            colour: "red".into(),
        },
    )
}

const UNKNOWN_COLOUR: &str = "test/Notes.test.cosi.dev/a: invalid spec.colour: unknown field: \
                              Notes.test.cosi.dev has no such field (check its spelling)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_with_an_unknown_spec_field_is_invalid_argument_and_stores_nothing() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server =
        support::plaintext_server(store.clone(), codec::<Note>(), support::any_port()).await;
    let client = support::plaintext_client(server.local_addr(), codec::<NoteV2>());

    let err = client
        .create(note_v2("a").into_shared(), CreateOptions::default())
        .await
        .unwrap_err();

    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert_eq!(err.to_string(), UNKNOWN_COLOUR);
    let stored = store
        .list(&Note::kind(), &ListOptions::default())
        .await
        .unwrap();
    assert!(stored.is_empty(), "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_of_an_unknown_spec_field_is_invalid_argument_with_the_message_intact() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server = support::plaintext_server(store, codec::<Note>(), support::any_port()).await;
    let mut raw = pb::state_client::StateClient::connect(format!("http://{}", server.local_addr()))
        .await
        .unwrap();
    // What a generic client sends: the spec as YAML only.
    let resource = pb::Resource {
        metadata: Some(pb::Metadata {
            namespace: "test".into(),
            r#type: Note::TYPE.into(),
            id: "a".into(),
            ..pb::Metadata::default()
        }),
        spec: Some(pb::Spec {
            proto_spec: Vec::new(),
            yaml_spec: "text: hello\ncolour: red\n".into(),
        }),
    };

    let status = raw
        .create(pb::CreateRequest {
            resource: Some(resource),
            options: None,
        })
        .await
        .unwrap_err();

    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(status.message(), UNKNOWN_COLOUR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_with_an_unknown_spec_field_is_refused_and_leaves_the_stored_version() {
    let store = Arc::new(cosi_state::MemoryState::default());
    let server =
        support::plaintext_server(store.clone(), codec::<Note>(), support::any_port()).await;
    let note = Resource::new("a", Note { text: "v1".into() });
    store
        .create(note.into_shared(), CreateOptions::default())
        .await
        .unwrap();
    let client = support::plaintext_client(server.local_addr(), codec::<NoteV2>());
    let mut update = note_v2("a");
    update.metadata.set_version(Version::new(1));

    let err = client
        .update(update.into_shared(), UpdateOptions::default())
        .await
        .unwrap_err();

    assert_eq!(err.to_string(), UNKNOWN_COLOUR);
    let stored = store.get(&Note::kind().pointer("a")).await.unwrap();
    assert_eq!(stored.metadata().version(), Version::new(1));
    assert_eq!(downcast_ref::<Note>(&*stored).unwrap().spec.text, "v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_client_reads_a_newer_servers_extra_fields_in_get_list_and_watch() {
    let store = Arc::new(cosi_state::MemoryState::default());
    store
        .create(note_v2("a").into_shared(), CreateOptions::default())
        .await
        .unwrap();
    let server = support::plaintext_server(store, codec::<NoteV2>(), support::any_port()).await;
    let client = support::plaintext_client(server.local_addr(), codec::<Note>());
    let expected = Note {
        text: "hello".into(),
    };

    let got = client.get(&Note::kind().pointer("a")).await.unwrap();
    assert_eq!(downcast_ref::<Note>(&*got).unwrap().spec, expected);

    let listed = client
        .list(&Note::kind(), &ListOptions::default())
        .await
        .unwrap();
    assert_eq!(downcast_ref::<Note>(&*listed[0]).unwrap().spec, expected);

    let options = WatchKindOptions {
        bootstrap: true,
        ..WatchKindOptions::default()
    };
    let mut watch = client.watch_kind(&Note::kind(), options).await.unwrap();
    match watch.recv().await {
        Some(cosi_core::Event::Created { resource, .. }) => {
            assert_eq!(downcast_ref::<Note>(&*resource).unwrap().spec, expected)
        }
        other => panic!("expected the bootstrap's created event, got {other:?}"),
    }
}
