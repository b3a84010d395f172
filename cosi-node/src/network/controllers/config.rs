//! [`AddressConfigController`]: the producers of the default, cmdline and configuration
//! layers. It writes the default layer (`lo` 127.0.0.1/8, host scope), the kernel-command-line
//! layer (the daemon's `ip=` arguments) and the configuration layer (the addresses of
//! `machine.network.interfaces` in the active machine config) as [`AddressSpec`]s in
//! `network-config`, and tears down the ones it no longer produces (an address removed from
//! the config leaves the link).
//!
//! The config was validated when it was applied (every address a CIDR, every interface
//! named); an entry that still does not read as an address on a valid link is skipped with a
//! warning rather than failing the other layers.

use async_trait::async_trait;
use cosi_controllers::{Controller, ControllerState, Input, Output, Reconciled};
use cosi_core::{Resource, ResourceSpec, Result, StateExt};

use crate::config::{Config, MachineConfig, ACTIVE};
use crate::namespaces;
use crate::network::{found, validate_link_name, AddressScope, AddressSpec, Cmdline, ConfigLayer};

/// The configuration layer of `config`: one spec per address of each named interface.
///
/// ```
/// use cosi_node::config::MachineConfig;
/// use cosi_node::network::controllers::configuration_addresses;
/// let text = "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    interfaces:\n    - interface: eth0\n      addresses: [192.0.2.10/24]\n";
/// let mc = MachineConfig::from_text(text).unwrap();
/// let specs = configuration_addresses(mc.config());
/// assert_eq!(specs[0].layered_id(), "configuration/eth0/192.0.2.10/24");
/// ```
pub fn configuration_addresses(config: &Config) -> Vec<AddressSpec> {
    let mut specs = Vec::new();
    for (index, interface) in config.machine().network.interfaces.iter().enumerate() {
        let Some(link) = interface.interface.as_deref() else {
            continue;
        };
        if let Err(error) = validate_link_name(link) {
            tracing::warn!(field = %format!("machine.network.interfaces[{index}].interface"), %error, "skipping an interface");
            continue;
        }
        for (at, text) in interface.addresses.iter().enumerate() {
            match text.parse::<ipnet::IpNet>() {
                Ok(address) => {
                    specs.push(AddressSpec::new(link, address, ConfigLayer::Configuration))
                }
                Err(error) => tracing::warn!(
                    field = %format!("machine.network.interfaces[{index}].addresses[{at}]"),
                    %error,
                    "skipping an address"
                ),
            }
        }
    }
    specs
}

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
        vec![Input::weak_of::<MachineConfig>().with_id(ACTIVE)]
    }

    fn outputs(&self) -> Vec<Output> {
        vec![Output::shared_of::<AddressSpec>()]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> Result<Reconciled> {
        let config = found(
            state
                .get_typed::<MachineConfig>(&MachineConfig::kind().pointer(ACTIVE))
                .await,
        )?;
        let mut specs = self.specs();
        if let Some(config) = config {
            specs.extend(configuration_addresses(config.spec.config()));
        }
        state.start_tracking();
        for spec in specs {
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
