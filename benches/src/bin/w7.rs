//! W7 — node scale (`benches/WORKLOADS.md`): one engine with 250 controllers over 200 resource
//! types, the size of the reference's biggest user (247 controllers over 197 types), generated in
//! that user's shape: a fan-out tree of small derived resources rooted at one config resource,
//! plus merge controllers (several inputs, one output) and controllers sharing output types.
//! Figures: start to settled (s), peak RSS, and the time for one change of the root to settle
//! through the whole graph, with the reconciles it took.
//!
//! # The graph
//!
//! - Type 0 holds the root: one resource `root`, spec `{ generation, value }`.
//! - Types 1–179 form a tree with fan-out 6 (the parent of type `t` is `(t - 1) / 6`): one
//!   level-triggered controller per type reads its parent type (a weak input) and writes
//!   [`PER_TYPE`] resources `0`..`3` of its own type (an exclusive output); resource `k` of type
//!   `t` has `value = sum of the parent's values + t + k` and the parent's generation.
//! - Types 180–189 are merge outputs: controller `merge-m` reads four tree types and writes one
//!   resource `merged` whose value is the sum of their values.
//! - Types 190–199 are shared outputs: 61 `report-j` controllers each read one tree type and
//!   write one resource `report-j` into shared type `190 + j % 10` (six or seven writers per
//!   type, each owning its own resource).
//!
//! That is 179 + 10 + 61 = 250 controllers and 1 + 179 + 10 + 10 = 200 types, holding
//! 179 × 4 + 10 + 61 = 787 derived resources. Every value is computed ahead of time from the
//! root's value, so "settled" is exact: every derived resource holds its expected value. The
//! controllers report each write to a tracker that counts resources at their expected value and
//! wakes the clock when all 787 are (no polling); afterwards every resource is listed and checked
//! again, with its owner.
//!
//! The controllers are written by hand, as most of the reference user's controllers are: each
//! lists its inputs and `modify`s its outputs (an unchanged output writes nothing). One Rust
//! spec type serves every resource type: types are names declared at registration, and the store
//! and engine key on them, not on the Rust type.
//!
//! The engine runs on the in-memory state with default options, as the node's runtime
//! namespaces do; controller statuses are published (as in production).

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use benches::args::RunArgs;
use benches::backend::memory_state;
use benches::check::{ensure, exit_on_error, WorkloadError};
use benches::peak_rss;
use benches::report::Report;
use cosi_controllers::{Controller, ControllerState, Engine, Input, Output, Reconciled};
use cosi_core::{
    downcast_ref, CreateOptions, Kind, ListOptions, Metadata, Resource, ResourceSpec, State,
    StateExt, UpdateOptions,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// The namespace every W7 type lives in.
const NAMESPACE: &str = "w7";
/// Types in the fan-out tree, the root's type included.
const TREE_TYPES: usize = 180;
/// Children per tree type.
const FAN_OUT: usize = 6;
/// Resources each tree controller writes.
const PER_TYPE: usize = 4;
/// Merge controllers (one output type each) and the tree types each reads.
const MERGES: usize = 10;
const MERGE_INPUTS: usize = 4;
/// Shared output types and the controllers writing them.
const SHARED_TYPES: usize = 10;
const REPORTERS: usize = 61;
/// Controllers in all: one per tree type but the root's, the merges, the reporters.
const CONTROLLERS: usize = TREE_TYPES - 1 + MERGES + REPORTERS;
/// A phase that takes longer than this has lost a change: fail instead of hanging.
const DEADLINE: Duration = Duration::from_secs(120);

/// Every resource of the workload: the root's generation and value, carried down the graph.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
struct Node {
    generation: u64,
    value: i64,
}

impl ResourceSpec for Node {
    // The root's type; the other 199 types are names given at registration.
    const TYPE: &'static str = "W7Type000s.w7.bench.cosi.dev";
    const DEFAULT_NAMESPACE: &'static str = NAMESPACE;
}

fn type_name(t: usize) -> String {
    format!("W7Type{t:03}s.w7.bench.cosi.dev")
}

fn node(kind: &Kind, id: &str, spec: Node) -> Resource<Node> {
    Resource::with_metadata(Metadata::new(kind.pointer(id)), spec)
}

/// What one controller reads and writes, and how its values follow from its inputs.
#[derive(Clone, Debug)]
enum Role {
    /// Tree type `t`: [`PER_TYPE`] resources from the parent type.
    Tree { t: usize },
    /// Merge output type `t`: one resource from several tree types.
    Merge { t: usize, inputs: Vec<usize> },
    /// Reporter `j`: one resource in a shared type from one tree type.
    Report { j: usize, t: usize, input: usize },
}

/// The whole graph: every controller's role, and the kinds by type index.
struct Graph {
    roles: Vec<Role>,
    kinds: Vec<Kind>,
}

impl Graph {
    fn new() -> Self {
        let types = TREE_TYPES + MERGES + SHARED_TYPES;
        let kinds = (0..types)
            .map(|t| Kind::new(NAMESPACE, &type_name(t)))
            .collect();
        let mut roles: Vec<Role> = (1..TREE_TYPES).map(|t| Role::Tree { t }).collect();
        // Merges read leaves spread over the deepest level (types 43..179).
        roles.extend((0..MERGES).map(|m| Role::Merge {
            t: TREE_TYPES + m,
            inputs: (0..MERGE_INPUTS).map(|i| 43 + m * 13 + i * 3).collect(),
        }));
        roles.extend((0..REPORTERS).map(|j| Role::Report {
            j,
            t: TREE_TYPES + MERGES + j % SHARED_TYPES,
            input: 1 + (j * 7) % (TREE_TYPES - 1),
        }));
        Graph { roles, kinds }
    }

    /// Every derived resource's expected value when the root's value is `root`, keyed by
    /// (type, id).
    fn expected(&self, root: i64) -> HashMap<(usize, String), i64> {
        let mut tree = vec![Vec::new(); TREE_TYPES];
        tree[0] = vec![root];
        for t in 1..TREE_TYPES {
            let parent: i64 = tree[(t - 1) / FAN_OUT].iter().sum();
            tree[t] = (0..PER_TYPE).map(|k| parent + (t + k) as i64).collect();
        }
        let mut expected = HashMap::new();
        for role in &self.roles {
            match role {
                Role::Tree { t } => {
                    for (k, value) in tree[*t].iter().enumerate() {
                        expected.insert((*t, k.to_string()), *value);
                    }
                }
                Role::Merge { t, inputs } => {
                    let sum = inputs.iter().flat_map(|i| &tree[*i]).sum();
                    expected.insert((*t, "merged".to_string()), sum);
                }
                Role::Report { j, t, input } => {
                    let sum: i64 = tree[*input].iter().sum();
                    expected.insert((*t, format!("report-{j}")), sum + *j as i64);
                }
            }
        }
        expected
    }
}

/// Counts derived resources at their expected value; wakes the clock when all are.
struct Tracker {
    inner: Mutex<TrackerInner>,
    settled: Notify,
}

struct TrackerInner {
    expected: Arc<HashMap<(usize, String), i64>>,
    /// Whether each resource's last written value was the expected one.
    at_target: HashMap<(usize, String), bool>,
    matching: usize,
}

impl Tracker {
    fn new(expected: HashMap<(usize, String), i64>) -> Self {
        Tracker {
            inner: Mutex::new(TrackerInner {
                expected: Arc::new(expected),
                at_target: HashMap::new(),
                matching: 0,
            }),
            settled: Notify::new(),
        }
    }

    /// A new target: resources already at their new value count at once.
    fn retarget(
        &self,
        expected: HashMap<(usize, String), i64>,
        current: &[((usize, String), i64)],
    ) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.expected = Arc::new(expected);
        inner.at_target.clear();
        inner.matching = 0;
        for (key, value) in current {
            inner.record(key.clone(), *value);
        }
    }

    fn record(&self, key: (usize, String), value: i64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.record(key, value);
        if inner.matching == inner.expected.len() {
            self.settled.notify_one();
        }
    }

    fn is_settled(&self) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.matching == inner.expected.len()
    }

    async fn wait(&self) -> Result<(), WorkloadError> {
        let wait = async {
            loop {
                let notified = self.settled.notified();
                if self.is_settled() {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(DEADLINE, wait).await.map_err(|_| {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            WorkloadError::new(format!(
                "not settled after {DEADLINE:?}: {} of {} resources at their expected value",
                inner.matching,
                inner.expected.len()
            ))
        })
    }
}

impl TrackerInner {
    fn record(&mut self, key: (usize, String), value: i64) {
        let Some(expected) = self.expected.get(&key) else {
            return;
        };
        let now = *expected == value;
        let before = self.at_target.insert(key, now).unwrap_or(false);
        match (before, now) {
            (false, true) => self.matching += 1,
            (true, false) => self.matching -= 1,
            _ => {}
        }
    }
}

/// One generated controller.
struct Generated {
    name: String,
    role: Role,
    kinds: Arc<Vec<Kind>>,
    tracker: Arc<Tracker>,
}

impl Generated {
    fn input_types(&self) -> Vec<usize> {
        match &self.role {
            Role::Tree { t } => vec![(t - 1) / FAN_OUT],
            Role::Merge { inputs, .. } => inputs.clone(),
            Role::Report { input, .. } => vec![*input],
        }
    }

    fn output_type(&self) -> usize {
        match &self.role {
            Role::Tree { t } | Role::Merge { t, .. } | Role::Report { t, .. } => *t,
        }
    }

    /// Sum of values and highest generation of every resource of the input types; `None` while
    /// an input type is still empty (its controller has not run yet).
    async fn read_inputs(&self, state: &ControllerState) -> cosi_core::Result<Option<Node>> {
        let mut total = Node::default();
        for t in self.input_types() {
            let list = state.list(&self.kinds[t], &ListOptions::default()).await?;
            if list.is_empty() {
                return Ok(None);
            }
            for resource in &list {
                let spec = &downcast_ref::<Node>(&**resource)?.spec;
                total.value += spec.value;
                total.generation = total.generation.max(spec.generation);
            }
        }
        Ok(Some(total))
    }

    async fn write(&self, state: &ControllerState, id: &str, spec: Node) -> cosi_core::Result<()> {
        let t = self.output_type();
        let value = spec.value;
        state
            .modify_output(node(&self.kinds[t], id, Node::default()), move |r| {
                r.spec = spec.clone();
                Ok(())
            })
            .await?;
        self.tracker.record((t, id.to_string()), value);
        Ok(())
    }
}

#[async_trait]
impl Controller for Generated {
    fn name(&self) -> &str {
        &self.name
    }

    fn inputs(&self) -> Vec<Input> {
        self.input_types()
            .into_iter()
            .map(|t| Input::weak(self.kinds[t].clone()))
            .collect()
    }

    fn outputs(&self) -> Vec<Output> {
        let name = type_name(self.output_type());
        vec![match self.role {
            Role::Report { .. } => Output::shared(name),
            _ => Output::exclusive(name),
        }]
    }

    async fn reconcile(&mut self, state: &ControllerState) -> cosi_core::Result<Reconciled> {
        let Some(input) = self.read_inputs(state).await? else {
            return Ok(Reconciled::Done);
        };
        match &self.role {
            Role::Tree { t } => {
                for k in 0..PER_TYPE {
                    let spec = Node {
                        generation: input.generation,
                        value: input.value + (t + k) as i64,
                    };
                    self.write(state, &k.to_string(), spec).await?;
                }
            }
            Role::Merge { .. } => self.write(state, "merged", input).await?,
            Role::Report { j, .. } => {
                let spec = Node {
                    generation: input.generation,
                    value: input.value + *j as i64,
                };
                self.write(state, &format!("report-{j}"), spec).await?;
            }
        }
        Ok(Reconciled::Done)
    }
}

fn controller_name(role: &Role) -> String {
    match role {
        Role::Tree { t } => format!("derive-{t:03}"),
        Role::Merge { t, .. } => format!("merge-{}", t - TREE_TYPES),
        Role::Report { j, .. } => format!("report-{j}"),
    }
}

fn main() -> ExitCode {
    exit_on_error("w7", run())
}

fn run() -> Result<(), WorkloadError> {
    let args = RunArgs::from_env()?;
    // The size is fixed; `--n` may name it (the suite passes every workload its size).
    ensure(args.n.is_none_or(|n| n == CONTROLLERS), || {
        format!("w7 has a fixed size ({CONTROLLERS} controllers over 200 types): --n can only be {CONTROLLERS}")
    })?;
    let runtime = args.runtime()?;
    let graph = Graph::new();
    println!(
        "# w7: node scale, {} controllers over {} types ({} derived resources), {} runs, \
         in-memory state and engine with default options",
        graph.roles.len(),
        graph.kinds.len(),
        graph.expected(0).len(),
        args.runs
    );
    let mut report = Report::default();
    for run in 1..=args.runs {
        let outcome = runtime.block_on(run_node(&graph))?;
        println!(
            "# run {run}: start {:.1} ms (registration {:.1} ms), change {:.1} ms with {} \
             reconciles and {} writes, peak RSS {:.1} MiB (process before {:.1} MiB)",
            outcome.start.as_secs_f64() * 1e3,
            outcome.registration.as_secs_f64() * 1e3,
            outcome.change.as_secs_f64() * 1e3,
            outcome.change_reconciles,
            outcome.change_writes,
            outcome.peak_rss_mib,
            outcome.rss_before_mib,
        );
        report.record("w7.start_to_settled", outcome.start.as_secs_f64(), "s");
        report.record_ms("w7.registration", outcome.registration);
        report.record(
            "w7.start_reconciles",
            outcome.start_reconciles as f64,
            "reconciles",
        );
        report.record(
            "w7.change_to_settled",
            outcome.change.as_secs_f64() * 1e3,
            "ms",
        );
        report.record(
            "w7.change_reconciles",
            outcome.change_reconciles as f64,
            "reconciles",
        );
        report.record("w7.change_writes", outcome.change_writes as f64, "writes");
        report.record("w7.peak_rss", outcome.peak_rss_mib, "MiB");
    }
    report.print();
    Ok(())
}

struct NodeRun {
    registration: Duration,
    start: Duration,
    start_reconciles: u64,
    change: Duration,
    change_reconciles: u64,
    change_writes: u64,
    peak_rss_mib: f64,
    rss_before_mib: f64,
}

async fn run_node(graph: &Graph) -> Result<NodeRun, WorkloadError> {
    let rss_before_mib = peak_rss::current_rss_bytes()? as f64 / (1024.0 * 1024.0);
    peak_rss::reset();
    let kinds = Arc::new(graph.kinds.clone());
    let tracker = Arc::new(Tracker::new(graph.expected(1)));
    let state = memory_state();
    state
        .create(
            node(
                &kinds[0],
                "root",
                Node {
                    generation: 1,
                    value: 1,
                },
            )
            .into_shared(),
            CreateOptions::default(),
        )
        .await?;

    let start = Instant::now();
    let engine = Engine::new(state.clone());
    for role in &graph.roles {
        engine
            .register(Generated {
                name: controller_name(role),
                role: role.clone(),
                kinds: kinds.clone(),
                tracker: tracker.clone(),
            })
            .map_err(|e| WorkloadError::new(format!("registration failed: {e}")))?;
    }
    let registration = start.elapsed();
    engine.start();
    tracker.wait().await?;
    let started = start.elapsed();
    let peak_rss_mib = peak_rss::peak_rss_mib()?;
    check_graph(&*state, graph, 1).await?;
    let before = totals(&engine, graph)?;

    // One change of the root (read-modify-write), settled through the whole graph.
    let current = current_values(&*state, graph).await?;
    tracker.retarget(graph.expected(2), &current);
    let writes_before = writes(&*state, graph).await?;
    let clock = Instant::now();
    state
        .modify(
            node(&kinds[0], "root", Node::default()),
            UpdateOptions::default(),
            |r| {
                r.spec = Node {
                    generation: r.spec.generation + 1,
                    value: r.spec.value + 1,
                };
                Ok(())
            },
        )
        .await?;
    tracker.wait().await?;
    let change = clock.elapsed();
    check_graph(&*state, graph, 2).await?;
    let after = totals(&engine, graph)?;
    let change_writes = writes(&*state, graph).await? - writes_before;

    let shutdown = engine.shutdown().await;
    ensure(shutdown.aborted == 0, || {
        format!("{} controller tasks did not stop", shutdown.aborted)
    })?;
    Ok(NodeRun {
        registration,
        start: started,
        start_reconciles: before.0,
        change,
        change_reconciles: after.0 - before.0,
        change_writes,
        peak_rss_mib,
        rss_before_mib,
    })
}

/// Reconciles and errors summed over every controller.
fn totals(engine: &Engine, graph: &Graph) -> Result<(u64, u64), WorkloadError> {
    let mut sum = (0, 0);
    for role in &graph.roles {
        let name = controller_name(role);
        let status = engine
            .status(&name)
            .ok_or_else(|| WorkloadError::new(format!("no status for controller {name}")))?;
        ensure(status.errors == 0, || {
            format!(
                "controller {name} failed {} times: {:?}",
                status.errors, status.last_error
            )
        })?;
        sum.0 += status.reconciles;
        sum.1 += status.errors;
    }
    Ok(sum)
}

/// Every derived resource's current value.
async fn current_values(
    state: &dyn State,
    graph: &Graph,
) -> Result<Vec<((usize, String), i64)>, WorkloadError> {
    let mut values = Vec::new();
    for (t, kind) in graph.kinds.iter().enumerate().skip(1) {
        for resource in state.list(kind, &ListOptions::default()).await? {
            let spec = &downcast_ref::<Node>(&*resource)?.spec;
            values.push(((t, resource.metadata().id().to_string()), spec.value));
        }
    }
    Ok(values)
}

/// The sum of every derived resource's version: how many writes made them.
async fn writes(state: &dyn State, graph: &Graph) -> Result<u64, WorkloadError> {
    let mut sum = 0;
    for kind in graph.kinds.iter().skip(1) {
        for resource in state.list(kind, &ListOptions::default()).await? {
            sum += resource.metadata().version().get();
        }
    }
    Ok(sum)
}

/// Lists every derived type and checks each resource's value, generation and owner, and that
/// nothing else exists.
async fn check_graph(state: &dyn State, graph: &Graph, root: i64) -> Result<(), WorkloadError> {
    let expected = graph.expected(root);
    let mut seen = 0;
    let owners: HashMap<(usize, String), String> = graph
        .roles
        .iter()
        .flat_map(|role| {
            let name = controller_name(role);
            let keys: Vec<(usize, String)> = match role {
                Role::Tree { t } => (0..PER_TYPE).map(|k| (*t, k.to_string())).collect(),
                Role::Merge { t, .. } => vec![(*t, "merged".to_string())],
                Role::Report { j, t, .. } => vec![(*t, format!("report-{j}"))],
            };
            keys.into_iter().map(move |key| (key, name.clone()))
        })
        .collect();
    for (t, kind) in graph.kinds.iter().enumerate().skip(1) {
        for resource in state.list(kind, &ListOptions::default()).await? {
            let key = (t, resource.metadata().id().to_string());
            let spec = &downcast_ref::<Node>(&*resource)?.spec;
            ensure(expected.get(&key) == Some(&spec.value), || {
                format!(
                    "{}: value {} but expected {:?}",
                    resource.metadata().pointer(),
                    spec.value,
                    expected.get(&key)
                )
            })?;
            ensure(spec.generation == root as u64, || {
                format!(
                    "{}: generation {} but the root's is {root}",
                    resource.metadata().pointer(),
                    spec.generation
                )
            })?;
            ensure(
                resource.metadata().owner() == owners.get(&key).map(String::as_str),
                || {
                    format!(
                        "{}: owner {:?}, expected {:?}",
                        resource.metadata().pointer(),
                        resource.metadata().owner(),
                        owners.get(&key)
                    )
                },
            )?;
            seen += 1;
        }
    }
    ensure(seen == expected.len(), || {
        format!("{seen} derived resources, expected {}", expected.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_graph_has_the_reference_users_size() {
        let graph = Graph::new();
        assert_eq!(graph.roles.len(), CONTROLLERS);
        assert_eq!(CONTROLLERS, 250);
        assert_eq!(graph.kinds.len(), 200);
        assert_eq!(graph.expected(1).len(), 179 * PER_TYPE + MERGES + REPORTERS);
    }

    #[test]
    fn every_input_type_is_written_by_a_tree_controller_or_is_the_root() {
        let graph = Graph::new();
        for role in &graph.roles {
            let inputs = match role {
                Role::Tree { t } => vec![(t - 1) / FAN_OUT],
                Role::Merge { inputs, .. } => inputs.clone(),
                Role::Report { input, .. } => vec![*input],
            };
            assert!(inputs.iter().all(|&t| t < TREE_TYPES), "{role:?}");
        }
    }
}
