//! `Registry::publish`: a node's types, discoverable as `ResourceDefinition` resources.

use cosi_core::registry::PUBLISHER;
use cosi_core::{
    downcast_ref, DynamicResource, ListOptions, Metadata, Registry, ResourceDefinition,
    ResourceSpec, StateExt,
};
use cosi_state::MemoryState;
use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Hostname {
    name: String,
}

impl ResourceSpec for Hostname {
    const TYPE: &'static str = "Hostnames.net.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "network";
    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE).with_aliases(["hn"])
    }
}

async fn published(state: &MemoryState) -> Vec<(String, u64, Vec<String>)> {
    state
        .list_typed::<ResourceDefinition>(
            &ResourceDefinition::definition().kind(),
            &ListOptions::default(),
        )
        .await
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r.metadata.owner(), Some(PUBLISHER));
            (
                r.metadata.id().to_string(),
                r.metadata.version().get(),
                r.spec.aliases.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn publish_writes_every_definition_and_its_own() {
    let state = MemoryState::default();
    let registry = Registry::new().with::<Hostname>().unwrap();

    registry.publish(&state).await.unwrap();

    assert_eq!(
        published(&state).await,
        [
            (
                "Hostnames.net.cosi.dev".to_string(),
                1,
                vec!["hn".to_string()]
            ),
            (
                "ResourceDefinitions.meta.cosi.dev".to_string(),
                1,
                vec!["rd".to_string(), "rds".to_string()]
            ),
        ]
    );
}

#[tokio::test]
async fn publishing_again_writes_nothing() {
    let state = MemoryState::default();
    let registry = Registry::new().with::<Hostname>().unwrap();
    registry.publish(&state).await.unwrap();

    registry.publish(&state).await.unwrap();

    let versions: Vec<u64> = published(&state).await.iter().map(|p| p.1).collect();
    assert_eq!(versions, [1, 1]);
}

#[tokio::test]
async fn a_type_no_longer_registered_loses_its_published_definition() {
    let state = MemoryState::default();
    Registry::new()
        .with::<Hostname>()
        .unwrap()
        .publish(&state)
        .await
        .unwrap();

    Registry::new().publish(&state).await.unwrap();

    let ids: Vec<String> = published(&state).await.into_iter().map(|p| p.0).collect();
    assert_eq!(ids, ["ResourceDefinitions.meta.cosi.dev"]);
}

#[test]
fn a_dynamic_resource_of_the_asked_type_says_to_register_it() {
    let resource = DynamicResource {
        metadata: Metadata::new(Hostname::kind().pointer("h")),
        spec: serde_json::json!({"name": "node-1"}),
    };
    let err = downcast_ref::<Hostname>(&resource).unwrap_err();
    assert_eq!(
        err.to_string(),
        "network/Hostnames.net.cosi.dev/h: invalid spec: loaded as a dynamic resource: register \
         Hostnames.net.cosi.dev in the Registry the store was opened with (or check that its \
         stored spec still decodes as publish::Hostname)"
    );
}
