//! [`AddressMergeController`]: folds the layered [`AddressSpec`]s of `network-config` into one
//! spec per address in `network` (id `<link>/<prefix>`), the highest layer winning.
//!
//! An address no longer wanted is torn down; it is destroyed once the spec controller has
//! removed the address from the OS and released its finalizer (this controller watches its own
//! outputs through a destroy-ready input for that moment). An address wanted again while its
//! old spec is still tearing down waits for that teardown to finish and is then created anew,
//! so the OS never sees a removal racing an add of the same address.
//!
//! A layered spec whose id does not match its content (`<layer>/<link>/<prefix>`), or whose
//! content is invalid, is skipped with a warning: an operator's typo changes nothing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{
    DestroyOptions, ListOptions, Phase, Resource, ResourceSpec, Result, State, StateExt,
};

use crate::namespaces;
use crate::network::AddressSpec;

/// Merges layered address specs. See the module docs.
#[derive(Debug, Default, Clone)]
pub struct AddressMergeController;

impl AddressMergeController {
    /// The controller's name (the owner of what it writes).
    pub const NAME: &'static str = "AddressMergeController";
}

/// The winning spec per merged id among `layered` (id, spec) pairs; invalid ones are skipped
/// with a warning.
pub(crate) fn merge_layers<'a>(
    layered: impl IntoIterator<Item = (&'a str, &'a AddressSpec)>,
) -> BTreeMap<String, AddressSpec> {
    let mut wanted: BTreeMap<String, AddressSpec> = BTreeMap::new();
    for (id, spec) in layered {
        let subject = format!("{}/{}/{id}", namespaces::NETWORK_CONFIG, AddressSpec::TYPE);
        if let Err(error) = spec.validate(&subject) {
            tracing::warn!(%error, "skipping an invalid address spec");
            continue;
        }
        if id != spec.layered_id() {
            tracing::warn!(
                spec = %subject,
                expected = %spec.layered_id(),
                "skipping an address spec whose id does not match its layer, link and address"
            );
            continue;
        }
        match wanted.get(&spec.id()) {
            Some(winner) if winner.layer >= spec.layer => {}
            _ => {
                wanted.insert(spec.id(), spec.clone());
            }
        }
    }
    wanted
}

#[async_trait]
impl Controller for AddressMergeController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        vec![
            Input::weak(AddressSpec::kind_in(namespaces::NETWORK_CONFIG)),
            Input::destroy_ready(AddressSpec::kind_in(namespaces::NETWORK)),
        ]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<AddressSpec>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let layered = state
            .list_typed::<AddressSpec>(
                &AddressSpec::kind_in(namespaces::NETWORK_CONFIG),
                &ListOptions::default(),
            )
            .await?;
        let wanted = merge_layers(
            layered
                .iter()
                .filter(|r| r.metadata.phase() == Phase::Running)
                .map(|r| (r.metadata.id(), &r.spec)),
        );

        let merged_kind = AddressSpec::kind_in(namespaces::NETWORK);
        let existing = state
            .list_typed::<AddressSpec>(&merged_kind, &ListOptions::default())
            .await?;
        let mut still_tearing_down = Vec::new();
        for resource in &existing {
            let metadata = &resource.metadata;
            if metadata.owner() != Some(Self::NAME) || metadata.phase() != Phase::TearingDown {
                continue;
            }
            if metadata.finalizers().is_empty() {
                match state
                    .destroy(
                        metadata.pointer(),
                        DestroyOptions {
                            owner: Some(Self::NAME.into()),
                        },
                    )
                    .await
                {
                    Ok(()) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            } else {
                still_tearing_down.push(metadata.id().to_string());
            }
        }

        state.start_tracking();
        for (id, spec) in &wanted {
            if still_tearing_down.iter().any(|t| t == id) {
                // Recreated once its teardown is done (a destroy-ready wake-up).
                continue;
            }
            let template = Resource::new_in(namespaces::NETWORK, id.clone(), spec.clone());
            state
                .modify_output(template, |r| {
                    r.spec = spec.clone();
                    Ok(())
                })
                .await?;
        }
        state.cleanup_outputs(&[merged_kind]).await?;
        Ok(Reconciled::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::ConfigLayer;

    fn spec(layer: ConfigLayer, link: &str, address: &str) -> AddressSpec {
        AddressSpec::new(link, address.parse().unwrap(), layer)
    }

    #[test]
    fn the_highest_layer_wins_whatever_the_order() {
        let low = spec(ConfigLayer::Cmdline, "eth0", "192.0.2.1/24");
        let high = spec(ConfigLayer::Configuration, "eth0", "192.0.2.1/24")
            .with_scope(crate::network::AddressScope::Link);
        let (low_id, high_id) = (low.layered_id(), high.layered_id());
        for order in [
            vec![(low_id.as_str(), &low), (high_id.as_str(), &high)],
            vec![(high_id.as_str(), &high), (low_id.as_str(), &low)],
        ] {
            let merged = merge_layers(order);
            assert_eq!(merged.len(), 1);
            assert_eq!(merged["eth0/192.0.2.1/24"], high);
        }
    }

    #[test]
    fn a_spec_whose_id_does_not_match_its_content_is_skipped() {
        let good = spec(ConfigLayer::Operator, "eth0", "192.0.2.1/24");
        let merged = merge_layers([("operator/eth1/192.0.2.1/24", &good)]);
        assert!(merged.is_empty());
    }

    #[test]
    fn a_spec_with_a_bad_link_name_is_skipped() {
        let bad = spec(ConfigLayer::Operator, "eth 0", "192.0.2.1/24");
        let id = bad.layered_id();
        assert!(merge_layers([(id.as_str(), &bad)]).is_empty());
    }
}
