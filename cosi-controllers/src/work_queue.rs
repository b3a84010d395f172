//! The item queue of a queue controller: dedup of pending items, never the same item twice at
//! once (a change while it runs re-queues it afterwards), delayed re-queues, per-item failure
//! counts, the inbox of secondary changes waiting to be mapped to items, and the changes whose
//! mapping failed, waiting to be mapped again.
//!
//! Every collection is keyed by resource, so memory is bounded by the number of resources, not
//! by the number of events.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cosi_core::{Pointer, SharedResource};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::runner::{deadline_after, FeedTarget, IdleProbe, Retry};
use crate::wake::WakeSignal;
use crate::Input;

// Every dispatch hashes an item several times (queued? running? delayed?): std's SipHash was
// 3-5 % of a queue controller's profile. foldhash is seeded per process, like std's.
type HashSet<T> = foldhash::HashSet<T>;
type HashMap<K, V> = foldhash::HashMap<K, V>;

/// An item: the id of a primary resource (all items share the primary kind, so only the id is
/// hashed and compared).
type Id = Arc<str>;

/// Where an item queued or running stands (an item is never both).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    /// In `ready`, waiting for a worker.
    Queued,
    /// A worker runs it; nothing changed since it started.
    Running,
    /// A worker runs it and it changed since it started: it runs again once that run ends.
    Changed,
}

#[derive(Default)]
struct Items {
    ready: VecDeque<Id>,
    /// Every item queued or running, in one map: an item costs one lookup when it is added,
    /// one when it is taken and one when its run ends.
    status: HashMap<Id, Status>,
    /// How many items are running.
    running: usize,
    delayed: BTreeMap<(Instant, u64), Id>,
    delayed_at: HashMap<Id, (Instant, u64)>,
    seq: u64,
    failures: HashMap<Id, u32>,
    /// Failed items whose retry a change of the item cuts short (non-retryable failures).
    retry_on_change: HashSet<Id>,
    inbox: HashMap<Pointer, SharedResource>,
    /// Secondary changes whose mapping failed: back to the inbox at `remap_at`.
    unmapped: HashMap<Pointer, SharedResource>,
    remap_at: Option<Instant>,
    relist: bool,
    /// The subscriptions were lost: subscribe again, then relist.
    resubscribe: bool,
    busy: bool,
    blocked_until: Option<Instant>,
}

/// What the runner must do before it maps changes again ([`WorkQueue::take_rebuild`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Rebuild {
    /// Nothing: the changes it was told of are all there is.
    Nothing,
    /// Relist the inputs: changes may have been missed.
    Relist,
    /// Subscribe to the inputs again (the subscriptions were lost), then relist.
    Resubscribe,
}

/// How an item's run ended, for [`WorkQueue::done`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Finish {
    Done,
    RequeueAfter(Duration),
    /// It failed: retry after the delay (counting one more failure).
    Retry(Retry),
}

/// See the module docs.
pub(crate) struct WorkQueue {
    primary: Input,
    items: Mutex<Items>,
    /// Rings the runner: secondary changes to map, a relist, a new delayed item.
    pub(crate) bell: WakeSignal,
    /// Wakes a worker: an item became ready.
    pub(crate) work: Notify,
    /// Rung when the last ready item is taken.
    drained: Notify,
}

impl WorkQueue {
    pub(crate) fn new(primary: Input) -> Self {
        WorkQueue {
            primary,
            items: Mutex::new(Items {
                // Until the runner has started, the controller is not idle.
                busy: true,
                relist: true,
                ..Items::default()
            }),
            bell: WakeSignal::default(),
            work: Notify::new(),
            drained: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Items> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item` now (deduplicated; deferred until its running reconcile ends; a failed
    /// item waiting for its backoff keeps waiting). An item of another kind than the primary
    /// input is ignored with a warning.
    pub(crate) fn add(&self, item: Pointer) {
        if item.kind() != &self.primary.kind {
            tracing::warn!(item = %item, primary = %self.primary.kind, "ignoring a queue item that is not of the primary kind");
            return;
        }
        let item: Id = item.shared_id().clone();
        {
            let mut guard = self.lock();
            let items = &mut *guard;
            let entry = match items.status.entry(item) {
                Entry::Occupied(mut entry) => {
                    if *entry.get() == Status::Running {
                        entry.insert(Status::Changed);
                    }
                    return;
                }
                Entry::Vacant(entry) => entry,
            };
            // Most items were never delayed: no lookup while nothing is.
            let delayed = match items.delayed_at.is_empty() {
                true => None,
                false => items.delayed_at.get(entry.key()).copied(),
            };
            if let Some(key) = delayed {
                // A failed item keeps its backoff, unless it failed in a way only a change can
                // mend; a requeue-after is cut short by a change.
                if items.failures.contains_key(entry.key())
                    && !items.retry_on_change.contains(entry.key())
                {
                    return;
                }
                items.delayed_at.remove(entry.key());
                items.delayed.remove(&key);
            }
            items.ready.push_back(entry.key().clone());
            entry.insert(Status::Queued);
        }
        self.work.notify_one();
    }

    /// Queues `item` after `delay` (kept at the earlier time if already delayed).
    fn add_after_locked(items: &mut Items, item: Id, at: Instant) {
        if items.status.get(&item) == Some(&Status::Queued) {
            return;
        }
        if let Some(&key) = items.delayed_at.get(&item) {
            if key.0 <= at {
                return;
            }
            items.delayed.remove(&key);
        }
        items.seq += 1;
        let key = (at, items.seq);
        items.delayed.insert(key, item.clone());
        items.delayed_at.insert(item, key);
    }

    /// Takes the next ready item and marks it running.
    pub(crate) fn pop(&self) -> Option<Pointer> {
        let mut items = self.lock();
        let item = items.ready.pop_front()?;
        let drained = items.ready.is_empty();
        // Every ready item is recorded as queued; were it not, it is recorded now.
        match items.status.get_mut(&item) {
            Some(status) => *status = Status::Running,
            None => {
                items.status.insert(item.clone(), Status::Running);
            }
        }
        items.running += 1;
        drop(items);
        let pointer = self.primary.kind.pointer(item);
        if drained {
            self.drained.notify_waiters();
        }
        Some(pointer)
    }

    /// Ends the run of `item`. A change that arrived while it ran re-queues it now, unless it
    /// failed with a retry that changes do not cut short.
    pub(crate) fn done(&self, item: &Pointer, finish: Finish) {
        let item = item.shared_id();
        let mut items = self.lock();
        // One lookup: the item's run ends, and whether it changed meanwhile.
        let (ran, changed) = match items.status.remove(item) {
            Some(Status::Running) => (true, false),
            Some(Status::Changed) => (true, true),
            // Not running (the runner ends only what it took): a queued item stays queued.
            Some(Status::Queued) => {
                items.status.insert(item.clone(), Status::Queued);
                (false, false)
            }
            None => (false, false),
        };
        if ran {
            items.running -= 1;
        }
        let (retry_after, now_if_changed) = match finish {
            Finish::Done => (None, true),
            Finish::RequeueAfter(delay) => (Some(delay), true),
            Finish::Retry(retry) => (Some(retry.after), retry.on_change),
        };
        // The failure sets are empty in the common case: no hashing then.
        if let Finish::Retry(retry) = finish {
            *items.failures.entry(item.clone()).or_default() += 1;
            if retry.on_change {
                items.retry_on_change.insert(item.clone());
            } else {
                items.retry_on_change.remove(item);
            }
        } else if !items.failures.is_empty() {
            items.failures.remove(item);
            items.retry_on_change.remove(item);
        }
        if changed && now_if_changed {
            items.status.insert(item.clone(), Status::Queued);
            items.ready.push_back(item.clone());
            drop(items);
            self.work.notify_one();
        } else if let Some(delay) = retry_after {
            Self::add_after_locked(
                &mut items,
                item.clone(),
                deadline_after(Instant::now(), delay),
            );
            drop(items);
            // The runner may be sleeping towards a later deadline.
            self.bell.wake();
        }
    }

    /// Consecutive failures of `item`.
    pub(crate) fn failures(&self, item: &Pointer) -> u32 {
        self.lock().failures.get(item.id()).copied().unwrap_or(0)
    }

    /// Maps the secondary change `resource` again at `at`, its mapping having failed (a
    /// newer change of the same resource waiting in the inbox replaces it).
    pub(crate) fn remap_at(&self, resource: &SharedResource, at: Instant) {
        let mut items = self.lock();
        let pointer = resource.metadata().pointer();
        if !items.inbox.contains_key(pointer) {
            items
                .unmapped
                .entry(pointer.clone())
                .or_insert_with(|| resource.clone());
        }
        items.remap_at = Some(items.remap_at.map_or(at, |earlier| earlier.min(at)));
    }

    /// Moves due delayed items to ready, and due unmapped changes to the inbox (ringing the
    /// runner); returns the next deadline.
    pub(crate) fn promote_due(&self, now: Instant) -> Option<Instant> {
        let mut items = self.lock();
        let remap_at = match items.remap_at {
            Some(at) if at <= now => {
                let items = &mut *items;
                for (pointer, resource) in items.unmapped.drain() {
                    items.inbox.entry(pointer).or_insert(resource);
                }
                items.remap_at = None;
                self.bell.wake();
                None
            }
            later => later,
        };
        let next_delayed = self.promote_delayed(&mut items, now);
        match (next_delayed, remap_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn promote_delayed(&self, items: &mut Items, now: Instant) -> Option<Instant> {
        while let Some((&key, _)) = items.delayed.first_key_value() {
            if key.0 > now {
                return Some(key.0);
            }
            let (_, item) = items.delayed.pop_first()?;
            items.delayed_at.remove(&item);
            match items.status.entry(item) {
                Entry::Occupied(mut entry) => {
                    if *entry.get() == Status::Running {
                        entry.insert(Status::Changed);
                    }
                }
                Entry::Vacant(entry) => {
                    items.ready.push_back(entry.key().clone());
                    entry.insert(Status::Queued);
                    self.work.notify_one();
                }
            }
        }
        None
    }

    pub(crate) fn take_inbox(&self) -> Vec<SharedResource> {
        self.lock().inbox.drain().map(|(_, r)| r).collect()
    }

    /// Takes the pending relist or re-subscription, if any.
    pub(crate) fn take_rebuild(&self) -> Rebuild {
        let mut items = self.lock();
        let relist = std::mem::take(&mut items.relist);
        if std::mem::take(&mut items.resubscribe) {
            Rebuild::Resubscribe
        } else if relist {
            Rebuild::Relist
        } else {
            Rebuild::Nothing
        }
    }

    pub(crate) fn request_relist(&self) {
        self.lock().relist = true;
        self.bell.wake();
    }

    pub(crate) fn set_busy(&self, busy: bool) {
        self.lock().busy = busy;
    }

    pub(crate) fn block_until(&self, until: Option<Instant>) {
        let mut items = self.lock();
        items.blocked_until = until;
        items.busy = until.is_none();
    }
}

impl FeedTarget for WorkQueue {
    fn changed(&self, input: &Input, resource: &SharedResource) {
        let pointer = resource.metadata().pointer();
        if *input == self.primary {
            self.add(pointer.clone());
        } else {
            self.lock().inbox.insert(pointer.clone(), resource.clone());
            self.bell.wake();
        }
    }

    fn resync(&self) {
        self.request_relist();
    }

    fn unsubscribed(&self) {
        {
            let mut items = self.lock();
            items.resubscribe = true;
            // Also what the idle probe sees: the runner has work.
            items.relist = true;
        }
        self.bell.wake();
    }

    fn satisfied(&self) -> bool {
        !self.lock().ready.is_empty()
    }

    fn taken(&self) -> Option<tokio::sync::futures::Notified<'_>> {
        Some(self.drained.notified())
    }
}

impl IdleProbe for WorkQueue {
    fn is_idle(&self, now: Instant) -> bool {
        let items = self.lock();
        if let Some(until) = items.blocked_until {
            return until > now;
        }
        !items.busy
            && !self.bell.is_pending()
            && items.ready.is_empty()
            && items.running == 0
            && items.inbox.is_empty()
            && !items.relist
            && items.remap_at.is_none_or(|at| at > now)
            && items
                .delayed
                .first_key_value()
                .is_none_or(|(key, _)| key.0 > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosi_core::Kind;

    fn p(id: &str) -> Pointer {
        Kind::new("ns", "T").pointer(id)
    }

    fn queue() -> WorkQueue {
        WorkQueue::new(Input::weak(Kind::new("ns", "T")))
    }

    fn retry(after: Duration, on_change: bool) -> Finish {
        Finish::Retry(Retry { after, on_change })
    }

    #[test]
    fn an_item_of_another_kind_is_ignored() {
        let q = queue();
        q.add(Kind::new("ns", "Other").pointer("a"));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn pending_items_are_deduplicated() {
        let q = queue();
        q.add(p("a"));
        q.add(p("a"));
        q.add(p("b"));
        assert_eq!(q.pop(), Some(p("a")));
        assert_eq!(q.pop(), Some(p("b")));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn an_item_changed_while_running_is_requeued_after_it_ends_not_before() {
        let q = queue();
        q.add(p("a"));
        assert_eq!(q.pop(), Some(p("a")));
        q.add(p("a"));
        assert_eq!(q.pop(), None, "never the same item twice at once");
        q.done(&p("a"), Finish::Done);
        assert_eq!(q.pop(), Some(p("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_item_waits_for_its_delay_even_if_changed_meanwhile() {
        let q = queue();
        q.add(p("a"));
        q.pop();
        q.add(p("a"));
        q.done(&p("a"), retry(Duration::from_secs(1), false));
        assert_eq!(q.failures(&p("a")), 1);
        assert_eq!(
            q.promote_due(Instant::now()),
            Some(Instant::now() + Duration::from_secs(1))
        );
        assert_eq!(q.pop(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(q.promote_due(Instant::now()), None);
        assert_eq!(q.pop(), Some(p("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn an_item_failed_in_a_way_only_a_change_mends_retries_at_its_next_change() {
        let q = queue();
        q.add(p("a"));
        q.pop();
        q.done(&p("a"), retry(Duration::from_secs(30), true));
        assert_eq!(q.pop(), None, "waits while nothing changes");
        q.add(p("a"));
        assert_eq!(q.pop(), Some(p("a")), "a change retries it at once");
        assert_eq!(q.failures(&p("a")), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn adding_a_delayed_item_makes_it_ready_now() {
        let q = queue();
        q.add(p("a"));
        q.pop();
        q.done(&p("a"), Finish::RequeueAfter(Duration::from_secs(10)));
        q.add(p("a"));
        assert_eq!(q.pop(), Some(p("a")));
        assert_eq!(q.promote_due(Instant::now()), None);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        #[derive(Debug, Clone)]
        enum Op {
            Add(u8),
            Pop,
            Finish { ok: bool },
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0u8..6).prop_map(Op::Add),
                Just(Op::Pop),
                any::<bool>().prop_map(|ok| Op::Finish { ok }),
            ]
        }

        proptest! {
            /// Whatever the interleaving: an item never runs twice at once, pending items are
            /// never duplicated, and every item added is run after its last addition.
            #[test]
            fn items_are_deduplicated_exclusive_and_never_lost(ops in proptest::collection::vec(op(), 1..80)) {
                let q = queue();
                let mut running: Vec<Pointer> = Vec::new();
                // Items added since their last run started: they must run again.
                let mut owed: HashSet<Pointer> = HashSet::default();
                for op in ops {
                    match op {
                        Op::Add(i) => {
                            let item = p(&i.to_string());
                            owed.insert(item.clone());
                            q.add(item);
                        }
                        Op::Pop => {
                            if let Some(item) = q.pop() {
                                prop_assert!(!running.contains(&item), "{item} ran twice at once");
                                owed.remove(&item);
                                running.push(item);
                            }
                        }
                        Op::Finish { ok } => {
                            if !running.is_empty() {
                                let item = running.remove(0);
                                // Failures retry immediately here: the model checks ordering,
                                // not delays.
                                q.done(&item, if ok { Finish::Done } else { retry(Duration::ZERO, false) });
                                if !ok {
                                    owed.insert(item);
                                }
                            }
                        }
                    }
                    let items = q.lock();
                    let unique: HashSet<_> = items.ready.iter().collect();
                    prop_assert_eq!(unique.len(), items.ready.len(), "duplicate pending items");
                }
                // Drain: finish everything running, promote delays, run what is ready.
                for item in running.drain(..) {
                    q.done(&item, Finish::Done);
                }
                q.promote_due(Instant::now());
                while let Some(item) = q.pop() {
                    owed.remove(&item);
                    q.done(&item, Finish::Done);
                    q.promote_due(Instant::now());
                }
                prop_assert!(owed.is_empty(), "never run after being added: {owed:?}");
                // Nothing left ready or running: the queue says it is idle.
                q.take_rebuild();
                q.bell.take();
                q.set_busy(false);
                prop_assert!(q.is_idle(Instant::now()), "not idle once everything ran");
            }
        }
    }
}
