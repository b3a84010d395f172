//! `store`: the runtime's store alone, in a small node-daemon-shaped program on the embedded
//! default backend, the durable redb store ([`DiskState`]) in a fresh temporary directory. It
//! watches a resource kind, creates,
//! updates and destroys resources, prints what the watcher saw, the resources as a table and one
//! of them as YAML, then closes the store, reopens the file and shows the same contents.
//!
//! Run it with `cargo run -p examples --bin store`. (The main demo, `demo`, tells a whole
//! node's life through its API.)

use std::process::ExitCode;
use std::time::Duration;

use cosi_core::{
    dynamic, table, CreateOptions, DestroyOptions, Event, ListOptions, Registry, Resource,
    ResourceDefinition, ResourceSpec, State, StateExt, UpdateOptions, WatchKindOptions,
};
use cosi_state::{DiskOptions, DiskState};
use serde::{Deserialize, Serialize};

/// The status of one system service, as a node daemon would publish it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
struct Service {
    /// Container image the service runs.
    image: String,
    /// `waiting`, `running`, `finished`, ...
    state: String,
    /// Whether its health check passes.
    healthy: bool,
    /// Restarts since boot.
    restarts: u32,
}

impl ResourceSpec for Service {
    const TYPE: &'static str = "Services.runtime.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "runtime";

    fn definition() -> ResourceDefinition {
        ResourceDefinition::new(Self::TYPE, Self::DEFAULT_NAMESPACE)
            .with_aliases(["svc"])
            .with_print_column("State", ".state")
            .with_print_column("Healthy", ".healthy")
            .with_print_column("Restarts", ".restarts")
            .with_print_column("Image", ".image")
    }
}

fn service(image: &str, state: &str) -> Service {
    Service {
        image: image.to_string(),
        state: state.to_string(),
        healthy: false,
        restarts: 0,
    }
}

/// Every event the watcher must see: the bootstrap marker, three creates, two updates, one
/// destroy.
const EXPECTED_EVENTS: usize = 7;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("store failed: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("state.redb");
    println!("== opening the store at {}", path.display());
    let state = DiskState::open(
        &path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new().with::<Service>().unwrap()),
    )
    .await?;
    let mut registry = Registry::new();
    registry.register::<Service>()?;
    // Tools name types however the user typed them; the registry resolves aliases.
    let definition = registry.resolve("svc")?.clone();
    let kind = Service::kind();

    println!("== watching {} (with bootstrap)", definition.resource_type);
    let mut watch = state
        .watch_kind(
            &kind,
            WatchKindOptions {
                bootstrap: true,
                ..WatchKindOptions::default()
            },
        )
        .await?;

    println!("== create apid, etcd, kubelet");
    for (id, image) in [
        ("apid", "ghcr.io/cosi/apid:v1.0"),
        ("etcd", "gcr.io/etcd:v3.5.16"),
        ("kubelet", "ghcr.io/cosi/kubelet:v1.31.1"),
    ] {
        let created = state
            .create(
                Resource::new(id, service(image, "waiting")).into_shared(),
                CreateOptions::default(),
            )
            .await?;
        println!("   {} at version {}", id, created.metadata().version());
    }

    println!("== update etcd: read, change a copy, write it with the version it was read at");
    let etcd = state.get_typed::<Service>(&kind.pointer("etcd")).await?;
    let mut next = Resource::clone(&etcd);
    next.spec.state = "running".into();
    next.spec.healthy = true;
    let stored = state
        .update(next.into_shared(), UpdateOptions::default())
        .await?;
    println!("   etcd now at version {}", stored.metadata().version());

    println!("== update etcd again from the stale copy: refused");
    let mut stale = Resource::clone(&etcd);
    stale.spec.restarts = 1;
    match state
        .update(stale.into_shared(), UpdateOptions::default())
        .await
    {
        Err(error) if error.is_version_conflict() => println!("   {error}"),
        other => return Err(format!("a stale update must conflict, got {other:?}").into()),
    }

    println!("== modify kubelet: create-or-update through a closure");
    let kubelet = state
        .modify(
            Resource::new("kubelet", service("", "waiting")),
            UpdateOptions::default(),
            |r| {
                r.spec.state = "running".into();
                r.spec.restarts += 1;
                Ok(())
            },
        )
        .await?;
    println!("   kubelet now at version {}", kubelet.metadata.version());
    let unchanged = state
        .modify(
            Resource::new("kubelet", service("", "waiting")),
            UpdateOptions::default(),
            |r| {
                r.spec.state = "running".into();
                Ok(())
            },
        )
        .await?;
    println!(
        "   modify with nothing to change writes nothing: still version {}",
        unchanged.metadata.version()
    );

    println!("== destroy apid");
    state
        .destroy(&kind.pointer("apid"), DestroyOptions::default())
        .await?;

    println!("== what the watcher saw");
    let mut seen = 0;
    while seen < EXPECTED_EVENTS {
        let batch = tokio::time::timeout(Duration::from_secs(5), watch.recv_batch(64))
            .await
            .map_err(|_| format!("the watcher saw only {seen} of {EXPECTED_EVENTS} events"))?
            .ok_or("the watch ended early")?;
        for event in batch {
            seen += 1;
            match &event {
                Event::Bootstrapped { bookmark } => {
                    println!(
                        "   {:<12} (initial contents delivered) @{bookmark}",
                        "bootstrapped"
                    )
                }
                _ => match event.resource() {
                    Some(resource) => println!(
                        "   {:<12} {} version {}",
                        event.type_name(),
                        resource.metadata().pointer(),
                        resource.metadata().version()
                    ),
                    None => println!("   {}", event.type_name()),
                },
            }
        }
    }

    println!("== table");
    let services = state.list(&kind, &ListOptions::default()).await?;
    print!("{}", table::render(&definition, &services)?);

    println!("== etcd as YAML");
    let etcd = state.get(&kind.pointer("etcd")).await?;
    print!("{}", dynamic::to_yaml(&*etcd)?);

    println!("== close the store and reopen the file: every acknowledged write is there");
    drop(watch);
    state.close().await;
    let reopened = DiskState::open(
        &path,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new().with::<Service>().unwrap()),
    )
    .await?;
    let services = reopened.list(&kind, &ListOptions::default()).await?;
    print!("{}", table::render(&definition, &services)?);
    reopened.close().await;
    Ok(())
}
