//! Crash safety of the disk backend, tested for real: a writer process is killed with SIGKILL
//! at random moments, and after each kill the store must hold every acknowledged write, no
//! half-written resource, consistent versions — and keep working.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cosi_core::{
    AnyResource, Bookmark, CreateOptions, DynamicResource, Event, Kind, ListOptions, Metadata,
    Pointer, State, UpdateOptions, Version, WatchKindOptions,
};
use cosi_state::{DiskOptions, DiskState};

const NAMESPACE: &str = "crash";
const TYPE: &str = "Entries.test.cosi.dev";
const ROUNDS: u64 = 24;
const WRITERS: u64 = 4;

/// xorshift64*: enough randomness to pick kill moments, reproducible from the printed seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// What the killed writer acknowledged.
#[derive(Default)]
struct Acks {
    created: BTreeMap<String, u64>,
    destroyed: BTreeSet<String>,
    counters: BTreeMap<String, u64>,
    lines: usize,
}

impl Acks {
    fn record(&mut self, line: &str) {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["created", id, value] => {
                self.created.insert(id.to_string(), value.parse().unwrap());
            }
            ["updated", id, version] => {
                self.counters
                    .insert(id.to_string(), version.parse().unwrap());
            }
            ["destroyed", id] => {
                self.destroyed.insert(id.to_string());
            }
            _ => panic!("unexpected line from the writer: {line:?}"),
        }
        self.lines += 1;
    }
}

/// Runs the writer until it has acknowledged `kill_after` writes, kills it, and returns every
/// write it acknowledged (including lines still in the pipe when it died).
fn run_and_kill(store: &Path, round: u64, kill_after: usize) -> Acks {
    let mut child = Command::new(env!("CARGO_BIN_EXE_disk-crash-writer"))
        .arg(store)
        .arg(round.to_string())
        .arg(WRITERS.to_string())
        .arg(checkpoint_interval(round).to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the crash writer");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut acks = Acks::default();
    while acks.lines < kill_after {
        match lines.next() {
            Some(line) => acks.record(&line.unwrap()),
            None => break,
        }
    }
    child.kill().expect("SIGKILL the writer");
    for line in lines {
        acks.record(&line.unwrap());
    }
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        stderr.is_empty() && acks.lines >= kill_after,
        "round {round}: the writer failed before it was killed ({status}): {stderr}"
    );
    acks
}

/// The writer's `checkpoint_interval` in `round`: odd rounds fold the log into the resources
/// table every few changes, so kills land before, inside and after checkpoint commits; even
/// rounds keep the default, far above what one round writes, so the reopen replays every change
/// of the round from the log.
fn checkpoint_interval(round: u64) -> usize {
    if round % 2 == 1 {
        3
    } else {
        DiskOptions::default().checkpoint_interval
    }
}

/// Whether the writer of `id` may have been killed between committing its destroy and printing
/// the acknowledgement: `r-w-i` is destroyed (sequentially) right after `r-w-(i+2)` is created,
/// when `i % 3 == 0`, and before `r-w-(i+3)` is created.
fn destroy_in_flight(acks: &Acks, id: &str) -> bool {
    let (prefix, index) = id.rsplit_once('-').unwrap();
    let index: u64 = index.parse().unwrap();
    index % 3 == 0
        && acks
            .created
            .contains_key(&format!("{prefix}-{}", index + 2))
        && !acks
            .created
            .contains_key(&format!("{prefix}-{}", index + 3))
}

fn value(resource: &dyn AnyResource) -> u64 {
    let dynamic = resource
        .as_any()
        .downcast_ref::<DynamicResource>()
        .expect("no type is registered, so every resource loads in dynamic form");
    dynamic.spec["value"].as_u64().unwrap_or_else(|| {
        panic!(
            "{}: half-written spec {}",
            dynamic.metadata.pointer(),
            dynamic.spec
        )
    })
}

/// What the change log must replay: the kind's contents (id → version) at a bookmark.
#[derive(Default)]
struct LogPosition {
    /// `None` before the first round that left a store behind.
    bookmark: Option<Bookmark>,
    contents: BTreeMap<String, u64>,
}

/// The kind's contents and head bookmark, read by a bootstrap watch.
async fn bootstrap(state: &DiskState, round: u64) -> LogPosition {
    let kind = Kind::new(NAMESPACE, TYPE);
    let guard = Duration::from_secs(10);
    let options = WatchKindOptions {
        bootstrap: true,
        ..WatchKindOptions::default()
    };
    let mut watch = state.watch_kind(&kind, options).await.unwrap();
    let mut contents = BTreeMap::new();
    loop {
        match tokio::time::timeout(guard, watch.recv())
            .await
            .unwrap()
            .unwrap()
        {
            Event::Bootstrapped { bookmark } => {
                return LogPosition {
                    bookmark: Some(bookmark),
                    contents,
                }
            }
            Event::Created { resource, .. } => {
                let id = resource.metadata().id().to_string();
                contents.insert(id, resource.metadata().version().get());
            }
            other => panic!("round {round}: unexpected {other:?}"),
        }
    }
}

/// The durable change log survives the crash consistently with the resources: a watch resumed
/// at the previous round's bookmark replays every change of this round exactly (no resync, no
/// catch-up, contiguous bookmarks), and applying them to the previous contents gives the stored
/// contents. The first round that left a store behind only records where the log stands.
async fn check_change_log(
    state: &DiskState,
    round: u64,
    previous: &LogPosition,
    stored: &BTreeMap<String, Arc<dyn AnyResource>>,
) -> LogPosition {
    let Some(start) = &previous.bookmark else {
        return bootstrap(state, round).await;
    };
    let kind = Kind::new(NAMESPACE, TYPE);
    let guard = Duration::from_secs(10);
    let options = WatchKindOptions {
        since: Some(start.clone()),
        ..WatchKindOptions::default()
    };
    let mut watch = state.watch_kind(&kind, options).await.unwrap();
    let mut contents = previous.contents.clone();
    let mut bookmark = start.clone();
    while contents.len() != stored.len()
        || contents
            .iter()
            .any(|(id, v)| stored.get(id).map(|r| r.metadata().version().get()) != Some(*v))
    {
        let event = tokio::time::timeout(guard, watch.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "round {round}: the change log ends at {bookmark} before the stored contents"
                )
            })
            .unwrap();
        assert!(!event.is_compacted(), "round {round}: {event:?}");
        let next = event.bookmark().unwrap().clone();
        // A disk bookmark displays as its sequence number: the log is contiguous.
        assert_eq!(
            next.to_string().parse::<u64>().unwrap(),
            bookmark.to_string().parse::<u64>().unwrap() + 1,
            "round {round}: {event:?}"
        );
        bookmark = next;
        match event {
            Event::Created { resource, .. } | Event::Updated { resource, .. } => {
                let id = resource.metadata().id().to_string();
                contents.insert(id, resource.metadata().version().get());
            }
            Event::Destroyed { resource, .. } => {
                contents.remove(resource.metadata().id());
            }
            other => panic!("round {round}: unexpected {other:?}"),
        }
    }
    // ... and it ends exactly at the kind's head.
    let head = bootstrap(state, round).await;
    assert_eq!(
        Some(bookmark.clone()),
        head.bookmark,
        "round {round}: replay end vs head"
    );
    LogPosition {
        bookmark: Some(bookmark),
        contents,
    }
}

async fn check_round(
    store: &Path,
    round: u64,
    acks: &Acks,
    counters: &mut BTreeMap<String, u64>,
    log: &mut LogPosition,
) {
    let state = DiskState::open(
        store,
        DiskOptions::default(),
        std::sync::Arc::new(cosi_core::Registry::new()),
    )
    .await
    .unwrap_or_else(|e| panic!("round {round}: reopen after SIGKILL failed: {e}"));
    let kind = Kind::new(NAMESPACE, TYPE);
    let all = state.list(&kind, &ListOptions::default()).await.unwrap();
    let stored: BTreeMap<String, Arc<dyn AnyResource>> = all
        .into_iter()
        .map(|r| (r.metadata().id().to_string(), r))
        .collect();

    // Every acknowledged create is there with its value, unless its destroy was acknowledged.
    for (id, v) in &acks.created {
        if acks.destroyed.contains(id) {
            assert!(
                !stored.contains_key(id),
                "round {round}: acknowledged destroy of {id} lost"
            );
        } else if let Some(r) = stored.get(id) {
            assert_eq!(value(&**r), *v, "round {round}: {id}");
        } else {
            assert!(
                destroy_in_flight(acks, id),
                "round {round}: acknowledged create of {id} lost"
            );
        }
    }
    for (id, r) in &stored {
        if let Some(counter) = id.strip_prefix('c') {
            // Counters: the value always equals the version, and the stored version is the last
            // acknowledged one or at most one unacknowledged write later.
            let version = r.metadata().version().get();
            assert_eq!(
                value(&**r),
                version,
                "round {round}: counter {id} value/version"
            );
            let acked = acks
                .counters
                .get(id)
                .copied()
                .max(counters.get(id).copied())
                .unwrap_or(0);
            assert!(
                version == acked || version == acked + 1,
                "round {round}: counter c{counter} at version {version}, last acknowledged {acked}"
            );
            counters.insert(id.clone(), version);
        } else {
            // Creates store version 1; a created value is its index in the id.
            assert_eq!(
                r.metadata().version(),
                Version::FIRST,
                "round {round}: {id}"
            );
            let index: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
            assert_eq!(value(&**r), index, "round {round}: {id}");
        }
    }

    *log = check_change_log(&state, round, log, &stored).await;

    // The store keeps working: a create and an update after recovery.
    let probe = Pointer::new(NAMESPACE, "Probes.test.cosi.dev", format!("after-{round}"));
    let fresh = Arc::new(DynamicResource {
        metadata: Metadata::new(probe.clone()),
        spec: serde_json::json!({ "value": 0 }),
    });
    let created = state.create(fresh, CreateOptions::default()).await.unwrap();
    let updated = state
        .update(created, UpdateOptions::default())
        .await
        .unwrap();
    assert_eq!(updated.metadata().version(), Version::new(2));
    state.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill_at_random_moments() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store.redb");
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let mut counters = BTreeMap::new();
    let mut log = LogPosition::default();
    let mut total = 0;
    for round in 0..ROUNDS {
        // Round 0 is killed before any acknowledgement (possibly while the file is created);
        // later rounds after a random number of acknowledged writes.
        let kill_after = if round % 8 == 0 {
            0
        } else {
            (rng.next() % 400) as usize
        };
        let started = std::time::Instant::now();
        let acks = run_and_kill(&store, round, kill_after);
        let killed = started.elapsed();
        total += acks.lines;
        check_round(&store, round, &acks, &mut counters, &mut log).await;
        println!(
            "round {round}: {} acknowledged writes, killed after {killed:?}, checked after {:?}",
            acks.lines,
            started.elapsed()
        );
    }
    println!("{ROUNDS} rounds, {total} acknowledged writes checked");
}
