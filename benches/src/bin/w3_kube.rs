//! W3 — reconcile chain (`benches/WORKLOADS.md`) — driven through kube-runtime's [`applier`], the
//! peer comparison of this crate's `w3`. Same workload, same checks: C1 reads A and writes B (same
//! name, B.value = A.value + 1), C2 reads B and writes C (C.value = B.value + 1). Phase 1:
//! create N = 10,000 A (value = i); time until every C exists with value i + 2. Phase 2: 5
//! rounds of updating every A (value = i + round·10⁶); time from the first update until every C
//! equals i + 5·10⁶ + 2. Figures: `w3.kube.phase1` (s), `w3.kube.phase1_rate` (items/s),
//! `w3.kube.phase2` (s), `w3.kube.reconciles_c1` and `w3.kube.reconciles_c2`.
//!
//! No API server: each kind lives in a [`MemoryApi`], a map of objects by name that stamps a
//! resource version on every change and sends it as a [`watcher::Event`] to a bounded watch
//! channel. Each controller is wired as `kube_runtime::Controller` wires itself over a real
//! watch: the watch events go through [`reflector::reflector`] into the controller's
//! [`Store`] (a `reflector::store::Writer`), their applied objects through [`trigger_self`]
//! into the [`applier`]'s queue, so the store always holds an object before its reconcile
//! request is queued. The reconcilers apply B and C to the next [`MemoryApi`], which feeds
//! the next controller. Like the API server on an unchanged apply, a write that does not change
//! an object's spec is a no-op: no new version, no event. Both appliers run with
//! kube-runtime's default [`Config`] (no debounce, unbounded concurrency; one reconcile per
//! object at a time) on a multi-threaded tokio runtime with default options, as `w3`.
//!
//! As a same-process baseline (as in `w3`), each run also times the writes the chain implies
//! done directly on fresh in-memory APIs, without controllers, their watches drained by a task
//! each: phase 1 = N creates each of A, B and C; phase 2 = 5 rounds of N updates each.
//! `vs_raw` is chain time / raw time: what the appliers add over the fake API server's cost.
//!
//! Completion is observed through a watch on C; afterwards every B and C is read back from the
//! in-memory API and checked, every applier result must be `Ok`, and both appliers must shut
//! down once their watches end.
//!
//! Run with `cargo run --release -p benches --features kube-peer --bin w3_kube`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use benches::args::RunArgs;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::item::{item_id, item_index};
use futures::{stream, StreamExt};
use kube_core::{NamespaceResourceScope, ObjectMeta, Resource};
use kube_runtime::controller::{trigger_self, Action};
use kube_runtime::reflector::{self, Store};
use kube_runtime::{applier, watcher, Config, WatchStreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const DEFAULT_ITEMS: usize = 10_000;
const ROUNDS: i64 = 5;
const ROUND_STEP: i64 = 1_000_000;
/// A phase that takes longer than this has lost a change: fail instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);
/// Events a watch channel holds before the writer waits for its reader (as a slow watcher
/// of a real API server applies back-pressure on its connection).
const WATCH_BUFFER: usize = 1024;
const NAMESPACE: &str = "bench";
const GROUP: &str = "bench.cosi.dev";

/// The spec of every link of the chain, `{ value, label }` like the benchmark resource.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct ChainSpec {
    value: i64,
    label: String,
}

/// An object of one of the chain's kinds.
trait ChainObject: Resource<DynamicType = ()> + Clone + fmt::Debug + Send + Sync + 'static {
    fn from_parts(metadata: ObjectMeta, spec: ChainSpec) -> Self;
    fn spec(&self) -> &ChainSpec;
}

macro_rules! chain_object {
    ($name:ident, $kind:literal, $plural:literal) => {
        /// A link of the chain, as a namespaced custom resource.
        #[derive(Clone, Debug, Default)]
        struct $name {
            metadata: ObjectMeta,
            spec: ChainSpec,
        }

        impl Resource for $name {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl ChainObject for $name {
            fn from_parts(metadata: ObjectMeta, spec: ChainSpec) -> Self {
                $name { metadata, spec }
            }
            fn spec(&self) -> &ChainSpec {
                &self.spec
            }
        }
    };
}

chain_object!(ChainA, "ChainA", "chainas");
chain_object!(ChainB, "ChainB", "chainbs");
chain_object!(ChainC, "ChainC", "chaincs");

/// A write to the in-memory API or a reconcile failed.
#[derive(Debug)]
enum ApiError {
    /// The watch the change must be sent to has no reader any more.
    WatchClosed { kind: String, name: String },
    /// A reconciled object has no name.
    Unnamed { kind: String },
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::WatchClosed { kind, name } => {
                write!(f, "{kind} {name}: the watch on {kind} is closed")
            }
            ApiError::Unnamed { kind } => write!(f, "a {kind} without metadata.name"),
        }
    }
}

impl std::error::Error for ApiError {}

/// One kind's objects in the in-memory API server, and the watches told about each change.
struct MemoryApi<K> {
    contents: Mutex<ApiContents<K>>,
    watches: Vec<mpsc::Sender<watcher::Event<K>>>,
}

struct ApiContents<K> {
    objects: HashMap<String, K>,
    resource_version: u64,
}

impl<K: ChainObject> MemoryApi<K> {
    /// An empty kind with `watches` watch channels; returns their receiving ends.
    fn new(watches: usize) -> (Arc<Self>, Vec<mpsc::Receiver<watcher::Event<K>>>) {
        let (senders, receivers) = (0..watches).map(|_| mpsc::channel(WATCH_BUFFER)).unzip();
        let api = MemoryApi {
            contents: Mutex::new(ApiContents {
                objects: HashMap::new(),
                resource_version: 0,
            }),
            watches: senders,
        };
        (Arc::new(api), receivers)
    }

    /// Creates or updates `name` with `spec` (an apply), then tells every watch.
    ///
    /// The lock is released before the events are sent, so two writers of one object could
    /// send their events out of order; in this workload each object has one writer at a time
    /// (the phase loop for A, and an applier, which never runs two reconciles of one object at
    /// once, for B and C), so each watch sees an object's versions in order.
    async fn apply(&self, name: &str, spec: ChainSpec) -> Result<(), ApiError> {
        let object = {
            // A panic while the lock was held cannot leave a half-written entry: the map is
            // changed by one `insert`.
            let mut contents = self.contents.lock().unwrap_or_else(PoisonError::into_inner);
            if contents
                .objects
                .get(name)
                .is_some_and(|existing| *existing.spec() == spec)
            {
                return Ok(());
            }
            contents.resource_version += 1;
            let metadata = ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(NAMESPACE.to_owned()),
                resource_version: Some(contents.resource_version.to_string()),
                ..ObjectMeta::default()
            };
            let object = K::from_parts(metadata, spec);
            contents.objects.insert(name.to_owned(), object.clone());
            object
        };
        for watch in &self.watches {
            watch
                .send(watcher::Event::Apply(object.clone()))
                .await
                .map_err(|_| ApiError::WatchClosed {
                    kind: K::kind(&()).into_owned(),
                    name: name.to_owned(),
                })?;
        }
        Ok(())
    }

    /// Every object's spec, by item index; fails on a name that is not an item's.
    fn specs(&self, items: usize) -> Result<Vec<Option<ChainSpec>>, WorkloadError> {
        let contents = self.contents.lock().unwrap_or_else(PoisonError::into_inner);
        let mut specs = vec![None; items];
        for (name, object) in &contents.objects {
            let index = item_index(name)
                .filter(|&i| i < items)
                .ok_or_else(|| WorkloadError::new(format!("unexpected {} {name}", K::kind(&()))))?;
            specs[index] = Some(object.spec().clone());
        }
        Ok(specs)
    }
}

/// The watch stream of a kind as kube's `watcher` yields it: an initial (empty) listing, then
/// every change.
fn watch_stream<K: ChainObject>(
    receiver: mpsc::Receiver<watcher::Event<K>>,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send {
    let changes = stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (event, receiver))
    });
    stream::iter([watcher::Event::Init, watcher::Event::InitDone])
        .chain(changes)
        .map(Ok)
}

/// What a running controller reports when its applier has stopped.
struct ControllerEnd {
    reconciles: u64,
    failures: u64,
    first_failure: Option<String>,
}

/// Starts a controller that reconciles every `In` into an `Out` of the same name with
/// `value + 1`, fed by the `In` watch.
fn start_controller<In: ChainObject, Out: ChainObject>(
    watch: mpsc::Receiver<watcher::Event<In>>,
    output: Arc<MemoryApi<Out>>,
) -> JoinHandle<ControllerEnd> {
    let (store, writer): (Store<In>, _) = reflector::store();
    let queue = trigger_self(
        reflector::reflector(writer, watch_stream(watch)).applied_objects(),
        (),
    );
    let reconciles = Arc::new(AtomicU64::new(0));
    let counted = reconciles.clone();
    let results = applier(
        move |object: Arc<In>, output: Arc<MemoryApi<Out>>| {
            counted.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move {
                let name = object
                    .meta()
                    .name
                    .as_deref()
                    .ok_or_else(|| ApiError::Unnamed {
                        kind: In::kind(&()).into_owned(),
                    })?;
                let spec = object.spec();
                output
                    .apply(
                        name,
                        ChainSpec {
                            value: spec.value + 1,
                            label: spec.label.clone(),
                        },
                    )
                    .await?;
                Ok::<_, ApiError>(Action::await_change())
            })
        },
        |_object, _error: &ApiError, _output| Action::await_change(),
        output,
        store,
        queue,
        Config::default(),
    );
    tokio::spawn(async move {
        let mut results = std::pin::pin!(results);
        let (mut failures, mut first_failure) = (0, None);
        while let Some(result) = results.next().await {
            if let Err(error) = result {
                failures += 1;
                first_failure.get_or_insert_with(|| error.to_string());
            }
        }
        ControllerEnd {
            reconciles: reconciles.load(Ordering::Relaxed),
            failures,
            first_failure,
        }
    })
}

fn main() -> ExitCode {
    exit_on_error("w3_kube", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    let items = args.n.unwrap_or(DEFAULT_ITEMS);
    let runtime = args.runtime()?;
    println!(
        "# w3_kube: reconcile chain A -> C1 -> B -> C2 -> C through kube-runtime's applier, \
         N = {items}, {ROUNDS} update rounds, {} runs, in-memory API, default applier config",
        args.runs
    );
    let mut report = benches::report::Report::default();
    for run in 1..=args.runs {
        let outcome = runtime.block_on(run_chain(items))?;
        let (raw1, raw2) = runtime.block_on(raw_writes(items))?;
        println!(
            "# kube run {run}: phase 1 {:.1} ms, phase 2 {:.1} ms, reconciles C1 {} C2 {}; \
             raw writes: phase 1 {:.1} ms, phase 2 {:.1} ms",
            outcome.phase1.as_secs_f64() * 1e3,
            outcome.phase2.as_secs_f64() * 1e3,
            outcome.reconciles_c1,
            outcome.reconciles_c2,
            raw1.as_secs_f64() * 1e3,
            raw2.as_secs_f64() * 1e3,
        );
        report.record("w3.kube.phase1", outcome.phase1.as_secs_f64(), "s");
        report.record_rate("w3.kube.phase1_rate", items, outcome.phase1, "items/s");
        report.record("w3.kube.phase2", outcome.phase2.as_secs_f64(), "s");
        report.record(
            "w3.kube.phase1_vs_raw",
            outcome.phase1.as_secs_f64() / raw1.as_secs_f64(),
            "x",
        );
        report.record(
            "w3.kube.phase2_vs_raw",
            outcome.phase2.as_secs_f64() / raw2.as_secs_f64(),
            "x",
        );
        report.record(
            "w3.kube.reconciles_c1",
            outcome.reconciles_c1 as f64,
            "reconciles",
        );
        report.record(
            "w3.kube.reconciles_c2",
            outcome.reconciles_c2 as f64,
            "reconciles",
        );
    }
    report.print();
    Ok(())
}

struct ChainRun {
    phase1: Duration,
    phase2: Duration,
    reconciles_c1: u64,
    reconciles_c2: u64,
}

async fn run_chain(items: usize) -> Result<ChainRun, WorkloadError> {
    let (api_a, mut watches_a) = MemoryApi::<ChainA>::new(1);
    let (api_b, mut watches_b) = MemoryApi::<ChainB>::new(1);
    let (api_c, mut watches_c) = MemoryApi::<ChainC>::new(1);
    let (Some(watch_a), Some(watch_b), Some(watch_c)) =
        (watches_a.pop(), watches_b.pop(), watches_c.pop())
    else {
        return Err(WorkloadError::new("a kind was made without its watch"));
    };
    let c1 = start_controller(watch_a, api_b.clone());
    let c2 = start_controller(watch_b, api_c.clone());

    // Phase 1
    let waiter = tokio::spawn(wait_for_values(watch_c, items, |i| i as i64 + 2));
    let start = Instant::now();
    for i in 0..items {
        api_a
            .apply(&item_id(i), spec(i, i as i64))
            .await
            .map_err(write_failed)?;
    }
    let (watch_c, phase1_done) = join(waiter).await?;
    let phase1 = phase1_done - start;
    check_chain(&api_b, &api_c, items, 0)?;

    // Phase 2: every C is at i + 2 and C2 has nothing left to write, so the watch on C is
    // quiet until the first update reaches it.
    let final_value = move |i: usize| i as i64 + ROUNDS * ROUND_STEP + 2;
    let waiter = tokio::spawn(wait_for_values(watch_c, items, final_value));
    let start = Instant::now();
    for round in 1..=ROUNDS {
        for i in 0..items {
            api_a
                .apply(&item_id(i), spec(i, i as i64 + round * ROUND_STEP))
                .await
                .map_err(write_failed)?;
        }
    }
    let (watch_c, phase2_done) = join(waiter).await?;
    let phase2 = phase2_done - start;
    check_chain(&api_b, &api_c, items, ROUNDS * ROUND_STEP)?;

    // Shutdown: a controller's applier ends when its watch does, which ends when the last
    // handle on the watched kind is gone (C1 holds B's, C2 holds C's).
    drop(api_a);
    let c1 = stop(c1, "C1").await?;
    drop(api_b);
    let c2 = stop(c2, "C2").await?;
    drop((api_c, watch_c));
    Ok(ChainRun {
        phase1,
        phase2,
        reconciles_c1: c1.reconciles,
        reconciles_c2: c2.reconciles,
    })
}

/// The writes the chain implies, done directly on fresh in-memory APIs whose watches are
/// drained: returns the phase 1 and phase 2 times.
async fn raw_writes(items: usize) -> Result<(Duration, Duration), WorkloadError> {
    let (api_a, watches_a) = MemoryApi::<ChainA>::new(1);
    let (api_b, watches_b) = MemoryApi::<ChainB>::new(1);
    let (api_c, watches_c) = MemoryApi::<ChainC>::new(1);
    let drains = [
        tokio::spawn(drain(watches_a)),
        tokio::spawn(drain(watches_b)),
        tokio::spawn(drain(watches_c)),
    ];
    let write = |i: usize, value: i64| {
        let (api_a, api_b, api_c) = (&api_a, &api_b, &api_c);
        async move {
            let name = item_id(i);
            api_a.apply(&name, spec(i, value)).await?;
            api_b.apply(&name, spec(i, value + 1)).await?;
            api_c.apply(&name, spec(i, value + 2)).await
        }
    };
    let start = Instant::now();
    for i in 0..items {
        write(i, i as i64).await.map_err(write_failed)?;
    }
    let phase1 = start.elapsed();
    let start = Instant::now();
    for round in 1..=ROUNDS {
        for i in 0..items {
            write(i, i as i64 + round * ROUND_STEP)
                .await
                .map_err(write_failed)?;
        }
    }
    let phase2 = start.elapsed();
    drop((api_a, api_b, api_c));
    let mut received = 0;
    for drain in drains {
        received += drain
            .await
            .map_err(|e| WorkloadError::new(format!("a watch drain failed: {e}")))?;
    }
    let expected = 3 * items * (1 + ROUNDS as usize);
    ensure(received == expected, || {
        format!("raw writes: the watches received {received} events, expected {expected}")
    })?;
    Ok((phase1, phase2))
}

/// Reads watch channels until they close; returns how many events they carried.
async fn drain<K>(watches: Vec<mpsc::Receiver<watcher::Event<K>>>) -> usize {
    let mut received = 0;
    for mut watch in watches {
        while watch.recv().await.is_some() {
            received += 1;
        }
    }
    received
}

fn spec(i: usize, value: i64) -> ChainSpec {
    ChainSpec {
        value,
        label: format!("item {i}"),
    }
}

fn write_failed(error: ApiError) -> WorkloadError {
    WorkloadError::new(format!("write to the in-memory API failed: {error}"))
}

/// Waits for a controller's applier to stop and checks that none of its results was an error.
async fn stop(
    controller: JoinHandle<ControllerEnd>,
    name: &str,
) -> Result<ControllerEnd, WorkloadError> {
    let end = tokio::time::timeout(DEADLINE, controller)
        .await
        .map_err(|_| {
            WorkloadError::new(format!(
                "{name} did not stop within {DEADLINE:?} of its watch ending"
            ))
        })?
        .map_err(|e| WorkloadError::new(format!("{name}'s task failed: {e}")))?;
    ensure(end.failures == 0, || {
        format!(
            "{name} failed: {} errors, the first: {}",
            end.failures,
            end.first_failure.as_deref().unwrap_or("?")
        )
    })?;
    Ok(end)
}

/// Follows the watch on C until every item `i` has `target(i)`; returns the watch and when the
/// last item got there.
async fn wait_for_values(
    mut watch: mpsc::Receiver<watcher::Event<ChainC>>,
    items: usize,
    target: impl Fn(usize) -> i64 + Send + 'static,
) -> Result<(mpsc::Receiver<watcher::Event<ChainC>>, Instant), WorkloadError> {
    let follow = async {
        let mut reached = vec![false; items];
        let mut count = 0;
        while let Some(event) = watch.recv().await {
            let watcher::Event::Apply(c) = event else {
                continue;
            };
            let Some(i) = c.metadata.name.as_deref().and_then(item_index) else {
                continue;
            };
            let Some(was) = reached.get_mut(i) else {
                continue;
            };
            let now = c.spec.value == target(i);
            if now != *was {
                *was = now;
                if now {
                    count += 1;
                } else {
                    count -= 1;
                }
                if count == items {
                    return Ok(Instant::now());
                }
            }
        }
        Err(WorkloadError::new("the watch on C ended early"))
    };
    let done = tokio::time::timeout(DEADLINE, follow)
        .await
        .map_err(|_| WorkloadError::new(format!("C did not converge within {DEADLINE:?}")))??;
    Ok((watch, done))
}

/// Reads every B and C back and checks their values, labels and count.
fn check_chain(
    api_b: &MemoryApi<ChainB>,
    api_c: &MemoryApi<ChainC>,
    items: usize,
    offset: i64,
) -> Result<(), WorkloadError> {
    let (bs, cs) = (api_b.specs(items)?, api_c.specs(items)?);
    for (i, (b, c)) in bs.iter().zip(&cs).enumerate() {
        let expected_b = spec(i, i as i64 + offset + 1);
        let expected_c = spec(i, i as i64 + offset + 2);
        ensure(
            b.as_ref() == Some(&expected_b) && c.as_ref() == Some(&expected_c),
            || {
                format!(
                    "item {i}: B = {b:?}, C = {c:?}, expected {expected_b:?} and {expected_c:?}"
                )
            },
        )?;
    }
    Ok(())
}

async fn join<T>(handle: JoinHandle<Result<T, WorkloadError>>) -> Result<T, WorkloadError> {
    handle
        .await
        .map_err(|e| WorkloadError::new(format!("task failed: {e}")))?
}
