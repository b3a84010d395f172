//! W8 — the remote API (`benches/WORKLOADS.md`): the loopback gRPC client (`cosi_api::RemoteState`,
//! plaintext HTTP/2) against a server on the in-memory backend, each figure beside the same
//! operation in process on the same kind of store, in the same run; the ratio is the API's
//! overhead.
//!
//! - get: one resource of 10,000, one call at a time (µs per call);
//! - list: all 10,000 (ms);
//! - create: 10,000 resources by 1 client, and by 16 clients at once (each its own connection;
//!   ops/s);
//! - watch: 10 kind watchers (each its own connection) while a writer updates 1,000 resources
//!   10 times in the store (10,000 events per watcher); events/s delivered across the watchers,
//!   clock from the first write until every watcher has the last one. The writer works in
//!   process, unpaced, so the store's history window is raised to 16,384 (as W2's
//!   `history16k` variant) for every event to be delivered exactly rather than caught up.
//!
//! Every result is checked: gets return the stored version, lists the full sorted contents,
//! creates version 1, and each watcher sees each resource's values in order, ending at the last.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_id, item_index, new_item, BenchItem};
use benches::report::Report;
use cosi_api::auth::StatePolicy;
use cosi_api::client::{channel, ClientSecurity, RemoteState};
use cosi_api::codec::Codec;
use cosi_api::server::{ApiServer, Security, ServerHandle, StateService};
use cosi_core::{
    downcast_ref, CreateOptions, Event, ListOptions, Registry, ResourceSpec, State, UpdateOptions,
    WatchKindOptions,
};
use cosi_state::{MemoryOptions, MemoryState};

const DEFAULT_ITEMS: usize = 10_000;
const GETS: usize = 5_000;
const CLIENTS: usize = 16;
const WATCHERS: usize = 10;
const WATCH_ITEMS: usize = 1_000;
const WATCH_ROUNDS: i64 = 10;
const DEADLINE: Duration = Duration::from_secs(300);
/// History window of the watch subject: more than the 10,000 events of the stream.
const WATCH_HISTORY: usize = 16_384;

fn main() -> ExitCode {
    exit_on_error("w8", run())
}

fn err(what: &str) -> impl Fn(cosi_core::Error) -> WorkloadError + '_ {
    move |e| WorkloadError::new(format!("{what}: {e}"))
}

fn codec() -> Codec {
    let mut registry = Registry::new();
    registry
        .register::<BenchItem>()
        .expect("the bench type registers");
    Codec::new(Arc::new(registry))
}

async fn serve(store: Arc<MemoryState>) -> Result<ServerHandle, WorkloadError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| WorkloadError::new(format!("bind: {e}")))?;
    ApiServer::new(Security::Plaintext)
        .with_state(StateService::new(store, codec(), StatePolicy::default()))
        .serve(listener)
        .map_err(|e| WorkloadError::new(format!("serve: {e}")))
}

fn client(server: &ServerHandle) -> Result<RemoteState, WorkloadError> {
    let channel =
        channel(server.local_addr(), None, ClientSecurity::Plaintext).map_err(err("connect"))?;
    Ok(RemoteState::new(channel, codec()))
}

/// Where an operation runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Local,
    Remote,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Local => "local",
            Side::Remote => "remote",
        }
    }
}

/// A fresh store, its server, and the state the side works through.
async fn subject(
    side: Side,
) -> Result<(Arc<MemoryState>, ServerHandle, Arc<dyn State>), WorkloadError> {
    subject_with(side, MemoryOptions::default()).await
}

async fn subject_with(
    side: Side,
    options: MemoryOptions,
) -> Result<(Arc<MemoryState>, ServerHandle, Arc<dyn State>), WorkloadError> {
    let store = Arc::new(MemoryState::new(options));
    let server = serve(store.clone()).await?;
    let state: Arc<dyn State> = match side {
        Side::Local => store.clone(),
        Side::Remote => Arc::new(client(&server)?),
    };
    Ok((store, server, state))
}

async fn fill(store: &MemoryState, count: usize) -> Result<(), WorkloadError> {
    for i in 0..count {
        store
            .create(
                new_item(i, i as i64).into_shared(),
                CreateOptions::default(),
            )
            .await
            .map_err(err("fill"))?;
    }
    Ok(())
}

async fn get_and_list(side: Side, items: usize, report: &mut Report) -> Result<(), WorkloadError> {
    let (store, _server, state) = subject(side).await?;
    fill(&store, items).await?;
    let kind = BenchItem::kind();
    // A fixed pseudo-random order of ids, made before the clock starts.
    let ids: Vec<_> = (0..GETS)
        .map(|i| kind.pointer(item_id((i * 7919) % items)))
        .collect();
    // Warm the connection.
    state.get(&ids[0]).await.map_err(err("get"))?;
    let start = Instant::now();
    for pointer in &ids {
        let got = state.get(pointer).await.map_err(err("get"))?;
        ensure(got.metadata().version().get() == 1, || {
            format!("get {pointer}: version {}", got.metadata().version())
        })?;
    }
    let per_get = start.elapsed().as_secs_f64() * 1e6 / GETS as f64;
    report.record(&format!("w8.get.{}", side.name()), per_get, "us");

    let start = Instant::now();
    let listed = state
        .list(&kind, &ListOptions::default())
        .await
        .map_err(err("list"))?;
    let elapsed = start.elapsed();
    ensure(listed.len() == items, || {
        format!("list: {} items", listed.len())
    })?;
    for (i, r) in listed.iter().enumerate() {
        let item = downcast_ref::<BenchItem>(&**r).map_err(err("list"))?;
        ensure(
            item_index(item.metadata.id()) == Some(i) && item.spec.value == i as i64,
            || format!("list: item {i} is {}", item.metadata.id()),
        )?;
    }
    report.record_ms(&format!("w8.list.{}", side.name()), elapsed);
    Ok(())
}

async fn create(
    side: Side,
    items: usize,
    clients: usize,
    report: &mut Report,
) -> Result<(), WorkloadError> {
    let (_store, server, local) = subject(side).await?;
    let states: Vec<Arc<dyn State>> = (0..clients)
        .map(|_| match side {
            Side::Local => Ok(local.clone()),
            Side::Remote => Ok(Arc::new(client(&server)?) as Arc<dyn State>),
        })
        .collect::<Result<_, WorkloadError>>()?;
    // Connect every client before the clock starts.
    for state in &states {
        state
            .list(&BenchItem::kind(), &ListOptions::default())
            .await
            .map_err(err("connect"))?;
    }
    let per_client = items / clients;
    let items: Vec<Vec<_>> = (0..clients)
        .map(|c| {
            (0..per_client)
                .map(|i| new_item(c * per_client + i, 0).into_shared())
                .collect()
        })
        .collect();
    let start = Instant::now();
    let tasks: Vec<_> = states
        .into_iter()
        .zip(items)
        .map(|(state, items)| {
            tokio::spawn(async move {
                for item in items {
                    let stored = state.create(item, CreateOptions::default()).await?;
                    if stored.metadata().version().get() != 1 {
                        return Err(cosi_core::Error::invalid("create", "version", "not 1"));
                    }
                }
                Ok::<_, cosi_core::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await
            .map_err(|e| WorkloadError::new(format!("create task: {e}")))?
            .map_err(err("create"))?;
    }
    let elapsed = start.elapsed();
    report.record_rate(
        &format!("w8.create.{clients}.{}", side.name()),
        per_client * clients,
        elapsed,
        "ops/s",
    );
    Ok(())
}

async fn watch(side: Side, report: &mut Report) -> Result<(), WorkloadError> {
    let history = MemoryOptions {
        history: WATCH_HISTORY,
        ..MemoryOptions::default()
    };
    let (store, server, _) = subject_with(side, history).await?;
    fill(&store, WATCH_ITEMS).await?;
    let kind = BenchItem::kind();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let state: Arc<dyn State> = match side {
            Side::Local => store.clone(),
            Side::Remote => Arc::new(client(&server)?),
        };
        let watch = state
            .watch_kind(&kind, WatchKindOptions::default())
            .await
            .map_err(err("watch"))?;
        watchers.push((state, watch));
    }
    let expected = WATCH_ITEMS * WATCH_ROUNDS as usize;
    let tasks: Vec<_> = watchers
        .into_iter()
        .map(|(state, mut watch)| {
            tokio::spawn(async move {
                let _keep = state;
                let mut last = vec![0i64; WATCH_ITEMS];
                let mut seen = 0usize;
                while seen < expected {
                    let batch = watch
                        .recv_batch(1024)
                        .await
                        .ok_or_else(|| "the watch ended".to_string())?;
                    for event in batch {
                        let Event::Updated {
                            resource,
                            compacted,
                            ..
                        } = event
                        else {
                            return Err(format!("unexpected {}", event.type_name()));
                        };
                        if compacted {
                            return Err("a watcher fell behind the history window".into());
                        }
                        let item =
                            downcast_ref::<BenchItem>(&*resource).map_err(|e| e.to_string())?;
                        let i = item_index(item.metadata.id()).ok_or("bad id")?;
                        if item.spec.value != last[i] + 1 {
                            return Err(format!(
                                "{}: {} after {}",
                                item.metadata.id(),
                                item.spec.value,
                                last[i]
                            ));
                        }
                        last[i] = item.spec.value;
                        seen += 1;
                    }
                }
                Ok::<_, String>(Instant::now())
            })
        })
        .collect();
    let start = Instant::now();
    for round in 1..=WATCH_ROUNDS {
        for i in 0..WATCH_ITEMS {
            let pointer = kind.pointer(item_id(i));
            let stored = store.get(&pointer).await.map_err(err("get"))?;
            let mut next = (*downcast_ref::<BenchItem>(&*stored).map_err(err("get"))?).clone();
            next.spec.value = round;
            store
                .update(next.into_shared(), UpdateOptions::default())
                .await
                .map_err(err("update"))?;
        }
    }
    let mut finished = start;
    for task in tasks {
        let done = tokio::time::timeout(DEADLINE, task)
            .await
            .map_err(|_| WorkloadError::new("a watcher did not finish in time"))?
            .map_err(|e| WorkloadError::new(format!("watcher: {e}")))?
            .map_err(|e| WorkloadError::new(format!("watcher: {e}")))?;
        finished = finished.max(done);
    }
    let wall = finished - start;
    report.record_rate(
        &format!("w8.watch.{}", side.name()),
        WATCHERS * expected,
        wall,
        "events/s",
    );
    Ok(())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    let items = args.n.unwrap_or(DEFAULT_ITEMS).max(CLIENTS);
    let runtime = args.runtime()?;
    println!(
        "# w8: remote API over loopback gRPC (plaintext HTTP/2) against the in-memory backend, \
         beside the same operations in process; {items} resources, {} runs",
        args.runs
    );
    println!("# machine: {}", benches::machine::describe());
    let mut report = Report::default();
    for run in 1..=args.runs {
        runtime.block_on(async {
            // Alternate which side goes first, so warm-up favours neither.
            let sides = if run % 2 == 1 {
                [Side::Local, Side::Remote]
            } else {
                [Side::Remote, Side::Local]
            };
            for side in sides {
                get_and_list(side, items, &mut report).await?;
                create(side, items, 1, &mut report).await?;
                create(side, items, CLIENTS, &mut report).await?;
                watch(side, &mut report).await?;
            }
            Ok::<_, WorkloadError>(())
        })?;
        println!("# run {run} done");
    }
    let ratio = |report: &mut Report, name: &str, higher_is_better: bool| {
        let local = report
            .figure(&format!("w8.{name}.local"))
            .map(|f| f.values.clone());
        let remote = report
            .figure(&format!("w8.{name}.remote"))
            .map(|f| f.values.clone());
        if let (Some(local), Some(remote)) = (local, remote) {
            for (l, r) in local.iter().zip(&remote) {
                let overhead = if higher_is_better { l / r } else { r / l };
                report.record(&format!("w8.{name}.overhead"), overhead, "x");
            }
        }
    };
    ratio(&mut report, "get", false);
    ratio(&mut report, "list", false);
    ratio(&mut report, "create.1", true);
    ratio(&mut report, &format!("create.{CLIENTS}"), true);
    ratio(&mut report, "watch", true);
    println!(
        "# *.overhead: remote cost over local cost in the same run (time ratio; 1 = no overhead)"
    );
    report.print();
    Ok(())
}
