//! Shared fixtures of the config tests: a valid base config, an applier over a memory state,
//! a restart hook that counts, and a snapshot of every config-family resource.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use cosi_core::{dynamic, ListOptions, ResourceSpec, State};
use cosi_node::config::restart::{NodeRuntime, RestartRequest};
use cosi_node::config::{
    ConfigApplier, ConfigHistory, Hostname, KubeletSpec, MachineConfig, MachineType, NodeLabels,
};
use cosi_state::MemoryState;

/// A valid worker config with a service.
pub const BASE: &str = "\
version: v1alpha1
machine:
  type: worker
  token: t0k3n
  install:
    disk: /dev/sda
    image: installer:v1
  nodeLabels:
    zone: eu-1a
  kubelet:
    image: kubelet:v1.31
    extraArgs:
      max-pods: '110'
  network:
    hostname: node-1
    interfaces:
    - interface: eth0
      addresses:
      - 192.0.2.10/24
      mtu: 1500
cluster:
  name: demo
  controlPlane:
    endpoint: https://192.0.2.1:6443
  network:
    podSubnets:
    - 10.244.0.0/16
    serviceSubnets:
    - 10.96.0.0/12
---
apiVersion: v1alpha1
kind: ServiceConfig
name: web
command: /usr/bin/python3
args:
- -m
- http.server
";

/// A patch that changes a live field only (a node label).
pub const LIVE_PATCH: &str = "machine:\n  nodeLabels:\n    tier: gold\n";
/// A patch that changes a restart field (the machine type).
pub const RESTART_PATCH: &str = "machine:\n  type: controlplane\n";

/// Restart requests the applier made.
#[derive(Default)]
pub struct Restarts(pub Mutex<Vec<RestartRequest>>);

impl NodeRuntime for Restarts {
    fn restart(&self, request: RestartRequest) {
        self.0.lock().unwrap().push(request);
    }
}

impl Restarts {
    pub fn taken(&self) -> Vec<RestartRequest> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// An applier over a fresh memory state.
pub struct Node {
    pub state: Arc<dyn State>,
    pub restarts: Arc<Restarts>,
    pub applier: ConfigApplier,
}

impl Node {
    pub fn new() -> Node {
        Self::over(Arc::new(MemoryState::default()))
    }

    pub fn over(state: Arc<dyn State>) -> Node {
        let restarts = Arc::new(Restarts::default());
        let applier = ConfigApplier::new(state.clone(), restarts.clone());
        Node {
            state,
            restarts,
            applier,
        }
    }

    /// A node whose active and persisted configs are [`BASE`] (versions 1), history cleared
    /// of nothing: one entry.
    pub async fn with_base() -> Node {
        let node = Node::new();
        node.applier
            .apply(cosi_node::config::ApplyRequest::config(
                BASE,
                cosi_node::config::ApplyMode::NoReboot,
                "setup",
            ))
            .await
            .unwrap();
        node
    }

    pub async fn config(&self, id: &str) -> Option<Arc<cosi_core::Resource<MachineConfig>>> {
        use cosi_core::StateExt;
        match self
            .state
            .get_typed::<MachineConfig>(&MachineConfig::pointer(id))
            .await
        {
            Ok(r) => Some(r),
            Err(e) if e.is_not_found() => None,
            Err(e) => panic!("{e}"),
        }
    }

    pub async fn version(&self, id: &str) -> Option<u64> {
        self.config(id).await.map(|r| r.metadata.version().get())
    }

    pub async fn history(&self) -> Vec<Arc<cosi_core::Resource<ConfigHistory>>> {
        use cosi_core::StateExt;
        self.state
            .list_typed::<ConfigHistory>(&ConfigHistory::kind(), &ListOptions::default())
            .await
            .unwrap()
    }

    /// Every resource of the config family, as YAML (timestamps included).
    pub async fn snapshot(&self) -> String {
        snapshot(&*self.state).await
    }
}

/// Every resource of the config family in `state`, as YAML.
pub async fn snapshot(state: &dyn State) -> String {
    let kinds = [
        MachineConfig::kind(),
        ConfigHistory::kind(),
        MachineType::kind(),
        Hostname::kind(),
        NodeLabels::kind(),
        KubeletSpec::kind(),
    ];
    let mut text = String::new();
    for kind in kinds {
        for r in state.list(&kind, &ListOptions::default()).await.unwrap() {
            text.push_str(&dynamic::to_yaml(&*r).unwrap());
            text.push_str("---\n");
        }
    }
    text
}
