//! The contract between the engine and the runners that drive controllers (`level` runs a
//! [`crate::Controller`], `queue` a [`crate::QueueController`]).
//!
//! A runner is given a [`TaskContext`]: its controller's identity and state handle, a way to
//! subscribe to input changes ([`Subscriptions`], taking turns with the engine's changes of
//! inputs through [`Watched`]), the engine's [`Signals`] and its shutdown flag. It exposes an
//! [`IdleProbe`] (so the engine and the test harness can tell when it has nothing to do) and a
//! [`FeedTarget`] (where input changes arrive). Every reconcile of every runner goes through
//! [`run_reconcile`]: one span, one panic catch, one outcome.
//!
//! This module imports nothing from the engine or the runners: the engine composes the runners
//! through it, the way kube-runtime's controller composes its runner and scheduler.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cosi_core::{Result, SharedResource, State};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::catch_panic::CatchPanic;
use crate::status::{Failure, FailureSink, StatusCell};
use crate::wake::WakeSignal;
use crate::{Backoff, ControllerState, Input, Reconciled};

pub(crate) use crate::backoff::{deadline_after, NEVER};

/// The receiving side of an input subscription.
pub(crate) trait FeedTarget: Send + Sync {
    /// A resource covered by the input changed (or was destroyed: `resource` is its last state).
    fn changed(&self, input: &Input, resource: &SharedResource);
    /// Changes may have been missed: rebuild the view from the current state.
    fn resync(&self);
    /// The controller's subscriptions are gone (a change of its inputs failed, and so did the
    /// restore of the old ones): the runner must subscribe to its inputs again, with backoff,
    /// before the controller runs on — it would otherwise hear no change of them ever again.
    fn unsubscribed(&self);
    /// Whether the target has work that further events would not change yet: a level-triggered
    /// controller with a wake-up pending (it will reconcile and read the state afresh), a work
    /// queue with items ready (its workers are busy; what the events would add can come once
    /// they have taken the last one). A feed whose every subscriber is satisfied stops reading
    /// its watch until one of them takes up that work ([`FeedTarget::taken`]); the events wait
    /// in the store meanwhile (its window is bounded: past it, a compacted catch-up).
    fn satisfied(&self) -> bool {
        false
    }
    /// Completes once the target takes up its work after this call (the level controller its
    /// wake-up, the queue its last ready item); `None` for a target that is never
    /// [satisfied](FeedTarget::satisfied).
    fn taken(&self) -> Option<tokio::sync::futures::Notified<'_>> {
        None
    }
}

/// Whether a controller has nothing to do right now.
pub(crate) trait IdleProbe: Send + Sync {
    /// True when no wake-up is pending, no reconcile is running and nothing is due at `now`.
    fn is_idle(&self, now: Instant) -> bool;
}

/// Where a runner subscribes to its inputs (the engine's shared kind watches).
#[async_trait]
pub(crate) trait Subscriptions: Send + Sync {
    /// Subscribes `target` to `inputs` for `owner`. When this returns, every change stored from
    /// now on reaches the target. On error no subscription of `owner` is left behind.
    async fn subscribe(
        &self,
        owner: usize,
        inputs: &[Input],
        target: Arc<dyn FeedTarget>,
    ) -> Result<()>;
}

/// Whether a controller's inputs are watched, behind the lock that every change of its
/// subscriptions holds from reading the inputs until the feeds have them: the engine's change
/// of inputs ([`crate::ControllerState::set_inputs`]) and the runner's subscribing (at start,
/// and again after they were lost) take turns. A runner that read the inputs just before a
/// change of them, and subscribed while it ran, would otherwise leave the old ones watched
/// beside the new.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    /// `false` before the runner first subscribes, and while the subscriptions are lost.
    watched: tokio::sync::Mutex<bool>,
}

impl Watched {
    /// Takes the turn (held across the feeds' awaits: that is its purpose).
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, bool> {
        self.watched.lock().await
    }
}

/// What a runner tells the engine: progress (the harness's quiescence detection) and changed
/// counters (the status publisher).
#[derive(Clone, Debug, Default)]
pub(crate) struct Signals {
    activity: Arc<AtomicU64>,
    /// `None` when no statuses are published.
    status: Option<Arc<WakeSignal>>,
}

impl Signals {
    pub(crate) fn new(activity: Arc<AtomicU64>, status: Option<Arc<WakeSignal>>) -> Self {
        Signals { activity, status }
    }

    /// Counts progress.
    pub(crate) fn bump(&self) {
        self.activity.fetch_add(1, Ordering::SeqCst);
    }

    /// A controller's counters changed.
    pub(crate) fn status_changed(&self) {
        if let Some(status) = &self.status {
            status.wake();
        }
    }
}

/// Everything a runner task is given.
pub(crate) struct TaskContext {
    /// The controller's registration number (its subscriptions are filed under it).
    pub(crate) id: usize,
    pub(crate) name: Arc<str>,
    pub(crate) status: Arc<StatusCell>,
    /// The controller's state handle, with its access rules.
    pub(crate) state: ControllerState,
    /// The state without access rules (a queue runner lists single-id inputs through it).
    pub(crate) raw: Arc<dyn State>,
    pub(crate) feeds: Arc<dyn Subscriptions>,
    /// Whether the inputs are watched; shared with the engine's changes of inputs.
    pub(crate) watched: Arc<Watched>,
    pub(crate) signals: Signals,
    pub(crate) restart_backoff: Backoff,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) failures: Option<FailureSink>,
}

impl TaskContext {
    /// Subscribes `target` to the controller's current inputs, unless they are watched already
    /// (a change of inputs made since they were lost watches them). Returns `Ok(false)` if the
    /// engine shut down first: a store that does not answer does not hold up the shutdown,
    /// and a runner does not go on as if subscribed (what it subscribed before it gave up is
    /// left to the feeds, which end on the same signal). On error nothing is subscribed.
    pub(crate) async fn watch_inputs(&self, target: Arc<dyn FeedTarget>) -> Result<bool> {
        let mut shutdown = self.shutdown.clone();
        let subscribe = async {
            let mut watched = self.watched.lock().await;
            if !*watched {
                let inputs = self.state.inputs();
                self.feeds.subscribe(self.id, &inputs, target).await?;
                *watched = true;
            }
            Ok(())
        };
        tokio::select! {
            biased;
            // Also when the signal was seen before: the value, not a change, decides.
            _ = shutdown.wait_for(|&down| down) => Ok(false),
            result = subscribe => result.map(|()| true),
        }
    }

    /// Records a reconcile's outcome in the controller's counters.
    pub(crate) fn record(&self, elapsed: Duration, outcome: &Outcome, restart: bool) {
        if let (Some(sink), Some(failure)) = (&self.failures, outcome.failure()) {
            sink(&self.name, failure);
        }
        self.status.record(elapsed, outcome.failure(), restart);
        self.signals.status_changed();
        self.signals.bump();
    }

    /// Records a failure outside a reconcile (subscribing, a hook, a relist, a mapping).
    pub(crate) fn record_failure(&self, failure: &Failure, restart: bool) {
        if let Some(sink) = &self.failures {
            sink(&self.name, failure);
        }
        if restart {
            self.status.record_restart(failure);
        } else {
            self.status.record(Duration::ZERO, Some(failure), false);
        }
        self.signals.status_changed();
    }
}

/// How one reconcile ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    Done,
    RequeueAfter(Duration),
    Failed(Failure),
}

impl Outcome {
    fn name(&self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::RequeueAfter(_) => "requeue",
            Outcome::Failed(Failure::Error(_)) => "error",
            Outcome::Failed(Failure::Panic(_)) => "panic",
        }
    }

    /// The failure, if it failed.
    pub(crate) fn failure(&self) -> Option<&Failure> {
        match self {
            Outcome::Failed(failure) => Some(failure),
            _ => None,
        }
    }
}

/// When a failed reconcile runs again.
///
/// A retryable error (a version conflict, an unreachable backend) is likely to pass: the next
/// attempt waits for the exponential backoff, and input changes do not cut it short (the
/// backoff also protects a struggling backend). A non-retryable error (invalid input, an access
/// violation) or a panic will fail the same way until something changes: the next attempt
/// waits for the next change of an input, or for the backoff's maximum delay, whichever comes
/// first, so a fixed input is picked up at once and nothing spins meanwhile.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Retry {
    pub(crate) after: Duration,
    /// Whether an input change ends the wait early.
    pub(crate) on_change: bool,
}

impl Retry {
    /// The retry policy for `failure` after `failures` consecutive failures.
    pub(crate) fn of(failure: &Failure, backoff: &Backoff, failures: u32) -> Self {
        match failure {
            Failure::Error(error) if error.is_retryable() => Retry {
                after: backoff.delay_after(failures),
                on_change: false,
            },
            _ => Retry {
                after: backoff.max_delay(),
                on_change: true,
            },
        }
    }
}

/// What a reconcile is about, for its span.
pub(crate) struct Trigger<'a> {
    pub(crate) controller: &'a str,
    /// Why it runs: `start`, `input-changed`, `requeue`, `restart`, `item`.
    pub(crate) reason: &'static str,
    /// The item of a queue controller.
    pub(crate) item: Option<&'a str>,
}

/// Runs one reconcile inside its span, catching a panic; returns the outcome and the time it
/// took. The span records `controller`, `trigger`, `item`, `duration_us`, `outcome`, and, on
/// failure, `error` and `error_kind`.
pub(crate) async fn run_reconcile(
    trigger: Trigger<'_>,
    reconcile: impl Future<Output = Result<Reconciled>>,
) -> (Outcome, Duration) {
    let span = tracing::info_span!(
        "reconcile",
        controller = %trigger.controller,
        trigger = trigger.reason,
        item = trigger.item,
        duration_us = tracing::field::Empty,
        outcome = tracing::field::Empty,
        error = tracing::field::Empty,
        error_kind = tracing::field::Empty,
    );
    let started = Instant::now();
    let result = CatchPanic::new(reconcile).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let outcome = match result {
        Ok(Ok(Reconciled::Done)) => Outcome::Done,
        Ok(Ok(Reconciled::RequeueAfter(delay))) => Outcome::RequeueAfter(delay),
        Ok(Err(error)) => Outcome::Failed(Failure::Error(error)),
        Err(panic) => Outcome::Failed(Failure::Panic(panic)),
    };
    span.record("duration_us", elapsed.as_micros() as u64);
    span.record("outcome", outcome.name());
    if let Some(failure) = outcome.failure() {
        span.record("error", tracing::field::display(failure));
        span.record("error_kind", failure.kind());
    }
    (outcome, elapsed)
}

/// A failure of a step that is not a reconcile (a hook, a mapping), with its panic caught.
pub(crate) async fn run_step<T>(step: impl Future<Output = Result<T>>) -> Result<T, Failure> {
    match CatchPanic::new(step).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Failure::Error(error)),
        Err(panic) => Err(Failure::Panic(panic)),
    }
}
