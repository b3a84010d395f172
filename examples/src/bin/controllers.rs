//! Controllers on the disk store, until Ctrl-C or SIGTERM: a generic transform and a queue
//! controller under the [`Engine`], then a graceful shutdown and the store closed.
//!
//! ```text
//! cargo run -p examples --bin controllers -- /tmp/cosi-example
//! ```
//!
//! The store (`state.redb` in the directory given) holds disks, one quota and what the
//! controllers derive from them. On its first start the program writes three disks and a quota
//! of 300 GiB; on every start it prints what the store already holds, then one line per change
//! of a derived resource:
//!
//! - `DiskLabels` (a [`Transform`]): a label per disk, `sda: 100 GiB`.
//! - `DiskUsage` (a [`QueueController`], one reconcile per disk): whether the disk fits the
//!   quota. A change of the quota concerns every disk ([`ControllerState::items_of`]); the
//!   usage of a disk that is gone is destroyed ([`ControllerState::destroy_output`]).
//!
//! On Ctrl-C or SIGTERM the engine lets running reconciles finish, then the store finishes its
//! writes and releases the file ([`DiskState::close`]), so the next start finds everything.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use cosi_controllers::{
    ControllerState, Engine, Input, Output, QueueController, Reconciled, Transform,
};
use cosi_core::{
    Event, ListOptions, Pointer, Registry, Resource, ResourceSpec, Result, SharedResource, State,
    StateExt, UpdateOptions, WatchKindOptions,
};
use cosi_state::{DiskOptions, DiskState};
use serde::{Deserialize, Serialize};

/// A disk of the node (written by the user).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Disk {
    size_gib: u64,
}

impl ResourceSpec for Disk {
    const TYPE: &'static str = "Disks.block.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "block";
}

/// The most a disk may hold (written by the user, id `quota`).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct Quota {
    max_gib: u64,
}

impl ResourceSpec for Quota {
    const TYPE: &'static str = "Quotas.block.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "block";
}

/// A disk as a person reads it (derived by the transform).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct DiskLabel {
    text: String,
}

impl ResourceSpec for DiskLabel {
    const TYPE: &'static str = "DiskLabels.block.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "block";
}

/// Whether a disk fits the quota (derived by the queue controller).
#[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
struct DiskUsage {
    size_gib: u64,
    within_quota: bool,
}

impl ResourceSpec for DiskUsage {
    const TYPE: &'static str = "DiskUsages.block.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = "block";
}

/// One reconcile per disk: its usage against the quota.
struct DiskUsageController;

impl QueueController for DiskUsageController {
    fn name(&self) -> &str {
        "DiskUsage"
    }
    fn primary(&self) -> Input {
        Input::weak_of::<Disk>()
    }
    fn secondary(&self) -> Vec<Input> {
        vec![Input::weak_of::<Quota>().with_id("quota")]
    }
    fn outputs(&self) -> Vec<Output> {
        vec![Output::exclusive_of::<DiskUsage>()]
    }
    async fn map_input(&self, state: &ControllerState, _: &SharedResource) -> Result<Vec<Pointer>> {
        // The quota concerns every disk.
        state.items_of(&self.primary()).await
    }
    async fn reconcile(&self, state: &ControllerState, item: &Pointer) -> Result<Reconciled> {
        let usage = DiskUsage::kind().pointer(item.id().to_string());
        let disk = match state.get_typed::<Disk>(item).await {
            Ok(disk) => disk,
            Err(e) if e.is_not_found() => {
                state.destroy_output(&usage).await?;
                return Ok(Reconciled::Done);
            }
            Err(e) => return Err(e),
        };
        let max_gib = match state
            .get_typed::<Quota>(&Quota::kind().pointer("quota"))
            .await
        {
            Ok(quota) => quota.spec.max_gib,
            Err(e) if e.is_not_found() => u64::MAX,
            Err(e) => return Err(e),
        };
        let size_gib = disk.spec.size_gib;
        state
            .modify_output(
                Resource::new(item.id().to_string(), DiskUsage::default()),
                |u| {
                    u.spec = DiskUsage {
                        size_gib,
                        within_quota: size_gib <= max_gib,
                    };
                    Ok(())
                },
            )
            .await?;
        Ok(Reconciled::Done)
    }
}

fn registry() -> Result<Registry> {
    Registry::new()
        .with::<Disk>()?
        .with::<Quota>()?
        .with::<DiskLabel>()?
        .with::<DiskUsage>()
}

/// Writes the first disks and the quota, once: a later start keeps what is stored.
async fn seed(state: &dyn State) -> Result<()> {
    let stored = state.list(&Disk::kind(), &ListOptions::default()).await?;
    if !stored.is_empty() {
        return Ok(());
    }
    for (id, size_gib) in [("sda", 100), ("sdb", 400), ("sdc", 250)] {
        let disk = Resource::new(id, Disk { size_gib });
        state
            .modify(disk, UpdateOptions::default(), |d| {
                d.spec.size_gib = size_gib;
                Ok(())
            })
            .await?;
    }
    let quota = Resource::new("quota", Quota { max_gib: 300 });
    state
        .modify(quota, UpdateOptions::default(), |_| Ok(()))
        .await?;
    Ok(())
}

/// Prints every change of the derived kinds from now on, one line each. The watches are open
/// when it returns, so no change made after it is missed.
async fn print_changes(state: &dyn State) -> Result<()> {
    for kind in [DiskLabel::kind(), DiskUsage::kind()] {
        let mut watch = state.watch_kind(&kind, WatchKindOptions::default()).await?;
        tokio::spawn(async move {
            while let Some(event) = watch.recv().await {
                if let Some(line) = describe(&event) {
                    println!("{line}");
                }
            }
        });
    }
    Ok(())
}

fn describe(event: &Event) -> Option<String> {
    let (verb, resource) = match event {
        Event::Created { resource, .. } => ("created", resource),
        Event::Updated { resource, .. } => ("updated", resource),
        Event::Destroyed { resource, .. } => ("destroyed", resource),
        _ => return None,
    };
    let id = resource.metadata().id();
    let what = if let Ok(label) = cosi_core::downcast_ref::<DiskLabel>(&**resource) {
        format!("label {id}: {}", label.spec.text)
    } else if let Ok(usage) = cosi_core::downcast_ref::<DiskUsage>(&**resource) {
        let fits = if usage.spec.within_quota {
            "within"
        } else {
            "over"
        };
        format!("usage {id}: {} GiB, {fits} quota", usage.spec.size_gib)
    } else {
        return None;
    };
    Some(format!("{verb} {what}"))
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM. Both are caught from the moment it returns: a signal
/// that arrives before the engine waits for it still stops it gracefully.
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

async fn run(dir: PathBuf) -> Result<()> {
    let registry = Arc::new(registry()?);
    let state = Arc::new(
        DiskState::open(
            dir.join("state.redb"),
            DiskOptions::default(),
            registry.clone(),
        )
        .await?,
    );
    let disks = state.list(&Disk::kind(), &ListOptions::default()).await?;
    let usages = state
        .list(&DiskUsage::kind(), &ListOptions::default())
        .await?;
    println!(
        "store {}: {} disks, {} usages",
        state.path().display(),
        disks.len(),
        usages.len()
    );
    seed(&*state).await?;

    let engine = Engine::new(state.clone());
    engine.register(Transform::<Disk, DiskLabel>::same_id(
        "DiskLabels",
        |disk: &Disk| {
            Some(DiskLabel {
                text: format!("{} GiB", disk.size_gib),
            })
        },
    ))?;
    engine.register_queue(DiskUsageController)?;
    print_changes(&*state).await?;
    let stop = stop_signal().map_err(|e| cosi_core::Error::Unsupported {
        subject: "controllers".into(),
        message: format!("cannot catch SIGTERM and SIGINT: {e}"),
    })?;
    println!(
        "running {} controllers; Ctrl-C or SIGTERM stops",
        engine.controllers().len()
    );

    let report = engine.run_until(stop).await;
    println!(
        "engine stopped: {} tasks stopped, {} aborted",
        report.stopped, report.aborted
    );
    // The engine and the watchers still hold the store; closing it is one call all the same.
    state.close().await;
    println!("store closed");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: controllers STATE_DIR");
        return ExitCode::from(2);
    };
    match run(dir).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("controllers: {error}");
            ExitCode::FAILURE
        }
    }
}
