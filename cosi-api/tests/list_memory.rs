//! A List is encoded as the caller reads it: callers that open lists and never read them hold
//! what HTTP/2 buffers per stream, not each a full encoded copy of the kind. Its own test
//! binary, as it measures this process's resident memory.

mod support;

use std::sync::Arc;

use cosi_api::proto::resource as pb;
use cosi_core::{CreateOptions, Resource, ResourceSpec, State};
use serde::{Deserialize, Serialize};
use support::memory::status_kib;

#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Page {
    text: String,
}
impl ResourceSpec for Page {
    const TYPE: &'static str = "Pages.test.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "test";
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_that_nobody_reads_do_not_each_hold_the_kind_encoded() {
    let store = Arc::new(cosi_state::MemoryState::default());
    // 200 resources of 80 KB: 16 MB of specs, about 32 MB encoded with their YAML.
    for i in 0..200 {
        let page = Resource::new(
            format!("p{i:03}"),
            Page {
                text: "x".repeat(80_000),
            },
        );
        store
            .create(page.into_shared(), CreateOptions::default())
            .await
            .unwrap();
    }
    let mut registry = cosi_core::Registry::new();
    registry.register::<Page>().unwrap();
    let codec = cosi_api::codec::Codec::new(Arc::new(registry));
    let server = support::plaintext_server(store, codec, support::any_port()).await;
    let mut raw = cosi_api::proto::resource::state_client::StateClient::connect(format!(
        "http://{}",
        server.local_addr()
    ))
    .await
    .unwrap();
    let before = status_kib("VmRSS") as f64 / 1024.0;
    // 50 lists opened and never read: encoded up front, they would hold ~1.6 GB.
    let mut unread = Vec::new();
    for _ in 0..50 {
        let response = raw
            .list(pb::ListRequest {
                namespace: Page::kind().namespace().to_string(),
                r#type: Page::TYPE.to_string(),
                options: None,
            })
            .await
            .unwrap();
        unread.push(response.into_inner());
    }
    let grown = status_kib("VmRSS") as f64 / 1024.0 - before;
    assert!(
        grown < 400.0,
        "50 unread lists grew the process by {grown:.0} MiB"
    );
    // The unread streams hold the connection's flow-control window: a list read on another
    // connection delivers the whole kind.
    drop(unread);
    let mut other = cosi_api::proto::resource::state_client::StateClient::connect(format!(
        "http://{}",
        server.local_addr()
    ))
    .await
    .unwrap();
    let mut read = other
        .list(pb::ListRequest {
            namespace: Page::kind().namespace().to_string(),
            r#type: Page::TYPE.to_string(),
            options: None,
        })
        .await
        .unwrap()
        .into_inner();
    let mut count = 0;
    while let Some(item) = read.message().await.unwrap() {
        assert!(item.resource.is_some());
        count += 1;
    }
    assert_eq!(count, 200);
}
