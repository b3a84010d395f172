//! [`AddressConfigController`]: the producers of the lower layers. It writes the default layer
//! (`lo` 127.0.0.1/8, host scope) and the kernel-command-line layer (the daemon's `ip=`
//! arguments) as [`AddressSpec`]s in `network-config`, and tears down the ones it no longer
//! produces.

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceSpec, Result};

use crate::namespaces;
use crate::network::{AddressScope, AddressSpec, Cmdline, ConfigLayer};

/// Writes the `default` and `cmdline` layers. See the module docs.
#[derive(Debug, Clone)]
pub struct AddressConfigController {
    cmdline: Cmdline,
    loopback: bool,
}

impl AddressConfigController {
    /// The controller's name (the owner of what it writes).
    pub const NAME: &'static str = "AddressConfigController";

    /// Produces the default loopback address and the addresses of `cmdline`.
    pub fn new(cmdline: Cmdline) -> Self {
        AddressConfigController {
            cmdline,
            loopback: true,
        }
    }

    /// Leaves out the default `lo` address (for a node in a container, where the runtime
    /// manages loopback).
    pub fn without_loopback(mut self) -> Self {
        self.loopback = false;
        self
    }

    fn specs(&self) -> Vec<AddressSpec> {
        let mut specs = Vec::new();
        if self.loopback {
            specs.push(
                AddressSpec::new("lo", loopback(), ConfigLayer::Default)
                    .with_scope(AddressScope::Host),
            );
        }
        specs.extend(
            self.cmdline
                .addresses
                .iter()
                .map(|a| AddressSpec::new(a.link.clone(), a.address, ConfigLayer::Cmdline)),
        );
        specs
    }
}

fn loopback() -> ipnet::IpNet {
    ipnet::IpNet::V4(ipnet::Ipv4Net::new(std::net::Ipv4Addr::LOCALHOST, 8).expect("/8 is valid"))
}

#[async_trait]
impl Controller for AddressConfigController {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn inputs(&self) -> Vec<Input> {
        Vec::new()
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<AddressSpec>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        state.start_tracking();
        for spec in self.specs() {
            let template =
                Resource::new_in(namespaces::NETWORK_CONFIG, spec.layered_id(), spec.clone());
            state
                .modify_output(template, |r| {
                    r.spec = spec.clone();
                    Ok(())
                })
                .await?;
        }
        state
            .cleanup_outputs(&[AddressSpec::kind_in(namespaces::NETWORK_CONFIG)])
            .await?;
        Ok(Reconciled::Done)
    }
}
