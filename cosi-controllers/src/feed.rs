//! Shared kind watches: one watch per watched kind, fanned out to every controller input on
//! that kind.
//!
//! A feed filters each event by the subscribing input (id, destroy-ready) and hands it to the
//! subscriber's [`FeedTarget`]; it never waits for a subscriber, so one slow controller cannot
//! hold up the others. A watch that ends or errors is re-established and every subscriber is
//! told to resync (level-triggered consumers simply re-read the state). When the last
//! subscriber of a kind leaves (its controller changed inputs), the kind's watch and task end:
//! the feeds hold only the kinds someone reads.
//!
//! A feed paces itself to its subscribers: while every one of them already has work that more
//! events would not change — a level-triggered controller due to reconcile (its wake-up
//! pending), a queue controller with items ready — the feed stops reading and the events wait
//! in the store until one of them takes that work up (the level controller its wake-up, the
//! queue its last ready item). A writer's stream then wakes the feed's task about once per
//! reconcile or queue drain instead of once per write — on a busy machine, the difference
//! between a few hundred thread wake-ups and several thousand — and the events that waited
//! arrive together, where a queue coalesces repeated items.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::Poll;
use std::time::Duration;

use async_trait::async_trait;
use cosi_core::{AnyResource, Event, Kind, Phase, State, Watch, WatchKindOptions};
use tokio::sync::futures::Notified;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::runner::{FeedTarget, Subscriptions};
use crate::{Backoff, Input, InputStrength};

/// Events taken from a watch per delivery round.
const BATCH: usize = 1024;

struct Subscription {
    owner: usize,
    input: Input,
    target: Arc<dyn FeedTarget>,
}

#[derive(Default)]
struct Feed {
    // Copy-on-write: the feed task clones the `Arc` once per batch, so subscribing never
    // blocks delivery and delivery never holds the lock while calling targets.
    subscriptions: RwLock<Arc<Vec<Subscription>>>,
    /// Rung when the feed lost its last subscriber: its task ends.
    retired: Notify,
    /// Rung whenever the subscriptions change (a paused feed looks again).
    edited: Notify,
}

impl Feed {
    fn snapshot(&self) -> Arc<Vec<Subscription>> {
        self.subscriptions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn is_empty(&self) -> bool {
        self.snapshot().is_empty()
    }

    fn edit(&self, f: impl FnOnce(&mut Vec<Subscription>)) {
        let mut guard = self
            .subscriptions
            .write()
            .unwrap_or_else(|e| e.into_inner());
        let mut next: Vec<Subscription> = guard
            .iter()
            .map(|s| Subscription {
                owner: s.owner,
                input: s.input.clone(),
                target: s.target.clone(),
            })
            .collect();
        f(&mut next);
        *guard = Arc::new(next);
        drop(guard);
        self.edited.notify_waiters();
    }

    /// Returns at once unless every subscriber is [satisfied](FeedTarget::satisfied); then
    /// waits until one takes up its work ([`FeedTarget::taken`]) or the subscriptions change.
    /// While they have work anyway, a writer's stream wakes no task.
    async fn until_wanted(&self) {
        let subs = &self.snapshot();
        if subs.is_empty() || !subs.iter().all(|s| s.target.satisfied()) {
            return;
        }
        let edited = self.edited.notified();
        tokio::pin!(edited);
        edited.as_mut().enable();
        let mut taken: Vec<Pin<Box<Notified<'_>>>> = Vec::with_capacity(subs.len());
        for sub in subs.iter() {
            let Some(notified) = sub.target.taken() else {
                return;
            };
            let mut notified = Box::pin(notified);
            notified.as_mut().enable();
            taken.push(notified);
        }
        // Looked at again once registered: a wake-up taken or an edit made meanwhile counts.
        if !Arc::ptr_eq(&self.snapshot(), subs) || !subs.iter().all(|s| s.target.satisfied()) {
            return;
        }
        std::future::poll_fn(|cx| {
            if edited.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            for notified in &mut taken {
                if notified.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// Every feed of one engine.
pub(crate) struct KindFeeds {
    state: Arc<dyn State>,
    feeds: Mutex<HashMap<Kind, Arc<Feed>>>,
    shutdown: watch::Receiver<bool>,
    activity: Arc<AtomicU64>,
    /// The feeds' tasks, so that the engine's shutdown can wait for them: each holds the
    /// state, which its owner may want to close once the engine is down. Finished ones are
    /// dropped as new ones start.
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl KindFeeds {
    pub(crate) fn new(
        state: Arc<dyn State>,
        shutdown: watch::Receiver<bool>,
        activity: Arc<AtomicU64>,
    ) -> Self {
        KindFeeds {
            state,
            feeds: Mutex::new(HashMap::new()),
            shutdown,
            activity,
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Subscribes `target` to `inputs`. When this returns, every change stored from now on
    /// reaches the target, so a reconcile that starts afterwards misses nothing. On error no
    /// subscription of `owner` is left behind.
    pub(crate) async fn subscribe(
        &self,
        owner: usize,
        inputs: &[Input],
        target: Arc<dyn FeedTarget>,
    ) -> cosi_core::Result<()> {
        let result = self.subscribe_each(owner, inputs, target).await;
        if result.is_err() {
            self.unsubscribe(owner);
        }
        result
    }

    async fn subscribe_each(
        &self,
        owner: usize,
        inputs: &[Input],
        target: Arc<dyn FeedTarget>,
    ) -> cosi_core::Result<()> {
        for input in inputs {
            let subscription = Subscription {
                owner,
                input: input.clone(),
                target: target.clone(),
            };
            // Joined under the map lock, so a feed found here cannot be retired meanwhile.
            let joined = match self.lock().get(&input.kind) {
                Some(feed) => {
                    feed.edit(|subs| subs.push(subscription));
                    None
                }
                None => Some(subscription),
            };
            if let Some(subscription) = joined {
                self.start_feed(&input.kind, subscription).await?;
            }
        }
        Ok(())
    }

    /// Removes every subscription of `owner`; a feed left without subscribers is retired (its
    /// watch and task end).
    pub(crate) fn unsubscribe(&self, owner: usize) {
        let mut feeds = self.lock();
        feeds.retain(|_, feed| {
            feed.edit(|subs| subs.retain(|s| s.owner != owner));
            if feed.is_empty() {
                feed.retired.notify_one();
                return false;
            }
            true
        });
    }

    /// The watched kinds.
    pub(crate) fn kinds(&self) -> Vec<Kind> {
        let mut kinds: Vec<_> = self.lock().keys().cloned().collect();
        kinds.sort();
        kinds
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Kind, Arc<Feed>>> {
        self.feeds.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn start_feed(&self, kind: &Kind, first: Subscription) -> cosi_core::Result<()> {
        // Establish the watch before publishing the feed: whoever finds it in the map may rely
        // on it covering every later change.
        let watch = self
            .state
            .watch_kind(kind, WatchKindOptions::default())
            .await?;
        let feed = {
            let mut feeds = self.lock();
            if let Some(raced) = feeds.get(kind) {
                // Another subscriber established the same kind meanwhile; use theirs.
                raced.edit(|subs| subs.push(first));
                return Ok(());
            }
            let feed = Arc::new(Feed::default());
            feed.edit(|subs| subs.push(first));
            feeds.insert(kind.clone(), feed.clone());
            feed
        };
        let runner = FeedRunner {
            kind: kind.clone(),
            state: self.state.clone(),
            feed,
            shutdown: self.shutdown.clone(),
            activity: self.activity.clone(),
        };
        let task = tokio::spawn(runner.run(watch));
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
        Ok(())
    }

    /// The inputs subscribed for `owner`, one entry per subscription (a repeated entry is a
    /// change delivered twice), sorted by kind and id.
    #[cfg(feature = "testing")]
    pub(crate) fn inputs_of(&self, owner: usize) -> Vec<Input> {
        let mut inputs: Vec<Input> = self
            .lock()
            .values()
            .flat_map(|feed| {
                feed.snapshot()
                    .iter()
                    .filter(|s| s.owner == owner)
                    .map(|s| s.input.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        inputs.sort_by(|a, b| (&a.kind, &a.id).cmp(&(&b.kind, &b.id)));
        inputs
    }

    /// The feed tasks started so far (they end on the engine's shutdown signal).
    pub(crate) fn take_tasks(&self) -> Vec<JoinHandle<()>> {
        std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait]
impl Subscriptions for KindFeeds {
    async fn subscribe(
        &self,
        owner: usize,
        inputs: &[Input],
        target: Arc<dyn FeedTarget>,
    ) -> cosi_core::Result<()> {
        KindFeeds::subscribe(self, owner, inputs, target).await
    }
}

struct FeedRunner {
    kind: Kind,
    state: Arc<dyn State>,
    feed: Arc<Feed>,
    shutdown: watch::Receiver<bool>,
    activity: Arc<AtomicU64>,
}

impl FeedRunner {
    async fn run(self, watch: Watch) {
        let feed = self.feed.clone();
        let retired = feed.retired.notified();
        tokio::pin!(retired);
        // Registered before the first poll, so a retirement right after start is not missed.
        retired.as_mut().enable();
        tokio::select! {
            biased;
            _ = retired => {}
            _ = self.deliver(watch) => {}
        }
    }

    /// Delivers events until shutdown, re-establishing the watch whenever it breaks.
    async fn deliver(mut self, mut watch: Watch) {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        loop {
            self.deliver_until_broken(&mut watch).await;
            if *self.shutdown.borrow() {
                return;
            }
            // The watch broke: re-establish it, then have everyone re-read what they missed.
            loop {
                let delay = backoff.next_delay();
                tokio::select! {
                    _ = self.shutdown.changed() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                match self
                    .state
                    .watch_kind(&self.kind, WatchKindOptions::default())
                    .await
                {
                    Ok(w) => {
                        watch = w;
                        break;
                    }
                    Err(error) => {
                        tracing::warn!(kind = %self.kind, %error, "re-establishing kind watch failed")
                    }
                }
            }
            backoff.reset();
            self.activity.fetch_add(1, Ordering::SeqCst);
            for sub in self.feed.snapshot().iter() {
                sub.target.resync();
            }
        }
    }

    /// Delivers events until the watch ends, errors, or the engine shuts down.
    async fn deliver_until_broken(&mut self, watch: &mut Watch) {
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.changed() => return,
                _ = self.feed.until_wanted() => {}
            }
            let batch = tokio::select! {
                biased;
                _ = self.shutdown.changed() => return,
                batch = watch.recv_batch(BATCH) => batch,
            };
            let Some(events) = batch else {
                tracing::warn!(kind = %self.kind, "kind watch ended; re-establishing");
                return;
            };
            self.activity.fetch_add(1, Ordering::SeqCst);
            let subs = self.feed.snapshot();
            for event in &events {
                match event {
                    Event::Created { resource, .. }
                    | Event::Updated { resource, .. }
                    | Event::Destroyed { resource, .. } => {
                        let destroyed = matches!(event, Event::Destroyed { .. });
                        for sub in subs.iter() {
                            if wants(&sub.input, &**resource, destroyed) {
                                sub.target.changed(&sub.input, resource);
                            }
                        }
                    }
                    Event::Resync { .. } => {
                        for sub in subs.iter() {
                            sub.target.resync();
                        }
                    }
                    Event::Errored { error } => {
                        tracing::warn!(kind = %self.kind, %error, "kind watch failed; re-establishing");
                        return;
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Whether an event about `resource` concerns `input`.
fn wants(input: &Input, resource: &dyn AnyResource, destroyed: bool) -> bool {
    let metadata = resource.metadata();
    if !input.covers_id(metadata.id()) {
        return false;
    }
    match input.strength {
        InputStrength::Weak | InputStrength::Strong => true,
        InputStrength::DestroyReady => {
            destroyed
                || (metadata.phase() == Phase::TearingDown && metadata.finalizers().is_empty())
        }
    }
}
