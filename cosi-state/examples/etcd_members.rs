//! Two node processes share cluster membership through etcd.
//!
//! Each node publishes its own *affiliate* (hostname, addresses, machine type) into the shared
//! etcd state and watches the affiliates of the cluster. From them it derives its *members*,
//! keyed by node name, in its own local in-memory state: shared facts live in etcd, each node's
//! view of them lives locally. A node is done when it sees every expected node as a member.
//!
//! ```sh
//! # Starts a private etcd on loopback and two node processes of this example:
//! cargo run -p cosi-state --features etcd --example etcd_members
//! # Or run one node against an etcd of your own, waiting for the given nodes:
//! cargo run -p cosi-state --features etcd --example etcd_members -- \
//!     node node-1 http://127.0.0.1:2379 node-1,node-2
//! ```

use std::collections::BTreeSet;
use std::process::{Command, ExitCode};
use std::time::Duration;

use cosi_core::{
    downcast, Event, Resource, ResourceSpec, State, StateExt, UpdateOptions, WatchKindOptions,
};
use cosi_state::etcd::{EtcdOptions, EtcdState};
use cosi_state::MemoryState;
use cosi_test_support::etcd::EtcdServer;
use serde::{Deserialize, Serialize};

/// What a node says about itself to the cluster (shared, in etcd).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Affiliate {
    hostname: String,
    addresses: Vec<String>,
    machine_type: String,
}

impl ResourceSpec for Affiliate {
    const TYPE: &'static str = "Affiliates.cluster.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "cluster";
}

/// A cluster member as one node sees it (local, in memory).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Member {
    addresses: Vec<String>,
    machine_type: String,
}

impl ResourceSpec for Member {
    const TYPE: &'static str = "Members.cluster.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "cluster";
}

/// A made-up address from the node name's number (`node-2` → `10.5.0.12`).
fn address_of(name: &str) -> String {
    let number: u8 = name
        .trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0);
    format!("10.5.0.{}", 10 + u16::from(number))
}

const PREFIX: &str = "/cosi-example/";
const PATIENCE: Duration = Duration::from_secs(30);

async fn run_node(
    name: &str,
    endpoint: &str,
    expected: &BTreeSet<String>,
) -> cosi_core::Result<()> {
    let registry = std::sync::Arc::new(cosi_core::Registry::new().with::<Affiliate>()?);
    let shared =
        EtcdState::connect(EtcdOptions::new([endpoint]).with_prefix(PREFIX), registry).await?;
    let local = MemoryState::default();

    // Publish (or refresh) this node's affiliate.
    let me = Affiliate {
        hostname: name.to_string(),
        addresses: vec![address_of(name)],
        machine_type: "worker".into(),
    };
    let template = Resource::new(name, me.clone());
    shared
        .modify(template, UpdateOptions::default(), |r| {
            r.spec = me.clone();
            Ok(())
        })
        .await?;

    // Follow every affiliate; mirror them into local members until all expected nodes are in.
    let options = WatchKindOptions {
        bootstrap: true,
        ..WatchKindOptions::default()
    };
    let mut affiliates = shared.watch_kind(&Affiliate::kind(), options).await?;
    let follow = async {
        loop {
            let Some(event) = affiliates.recv().await else {
                return Err(cosi_core::Error::Backend {
                    subject: "affiliates".into(),
                    message: "watch ended".into(),
                    retryable: true,
                    source: None,
                });
            };
            match event {
                Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                    let affiliate = downcast::<Affiliate>(resource)?;
                    let member = Member {
                        addresses: affiliate.spec.addresses.clone(),
                        machine_type: affiliate.spec.machine_type.clone(),
                    };
                    let id = affiliate.spec.hostname.clone();
                    let template = Resource::new(id.as_str(), member.clone());
                    local
                        .modify(template, UpdateOptions::default(), |r| {
                            r.spec = member.clone();
                            Ok(())
                        })
                        .await?;
                }
                Event::Destroyed { resource, .. } => {
                    let pointer = Member::kind().pointer(resource.metadata().id());
                    local.teardown_and_destroy(&pointer, None).await?;
                }
                Event::Errored { error } => return Err(error),
                _ => {}
            }
            let members = local
                .list_typed::<Member>(&Member::kind(), &Default::default())
                .await?;
            let names: BTreeSet<String> = members
                .iter()
                .map(|m| m.metadata.id().to_string())
                .collect();
            if expected.is_subset(&names) {
                for m in &members {
                    println!(
                        "{name}: member {} {:?} {}",
                        m.metadata.id(),
                        m.spec.addresses,
                        m.spec.machine_type
                    );
                }
                return Ok(());
            }
        }
    };
    match tokio::time::timeout(PATIENCE, follow).await {
        Ok(result) => result,
        Err(_) => Err(cosi_core::Error::Backend {
            subject: name.to_string(),
            message: format!("did not see {expected:?} within {PATIENCE:?}"),
            retryable: true,
            source: None,
        }),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let [_, mode, name, endpoint, expected] = &args[..] {
        if mode == "node" {
            let expected = expected.split(',').map(str::to_string).collect();
            let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
            return match runtime.block_on(run_node(name, endpoint, &expected)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{name}: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    }
    if args.len() != 1 {
        eprintln!("usage: etcd_members [node NAME ENDPOINT NODE,NODE...]");
        return ExitCode::from(2);
    }

    // Demo: a private etcd and two node processes of this very program.
    let server = match EtcdServer::start() {
        Ok(server) => server,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let program = std::env::current_exe().expect("the path of this program");
    let nodes = ["node-1", "node-2"];
    let children: Vec<_> = nodes
        .iter()
        .map(|name| {
            Command::new(&program)
                .args(["node", name, &server.endpoint(), &nodes.join(",")])
                .spawn()
                .expect("a node process starts")
        })
        .collect();
    let mut ok = true;
    for (name, mut child) in nodes.iter().zip(children) {
        let status = child.wait().expect("a node process ends");
        ok &= status.success();
        println!("{name} exited with {status}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
