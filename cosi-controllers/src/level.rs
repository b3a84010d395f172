//! The runner of one level-triggered [`Controller`]: waits for a wake-up, a requeue deadline or
//! the end of a restart backoff, runs one reconcile (through [`run_reconcile`]), records the
//! outcome, and repeats until shutdown.
//!
//! It subscribes to the controller's inputs before the first reconcile, and again whenever
//! the subscriptions were lost ([`FeedTarget::unsubscribed`]): a controller never reconciles
//! while deaf to its inputs. Lost subscriptions are made again when the controller would
//! restart anyway: after the backoff of a retryable failure, at once otherwise (a controller
//! waiting for an input change cannot hear one). A subscription that fails is retried after
//! the restart backoff (each failure counts as a restart); once it holds, the controller runs
//! once more, as after a restart, with every input considered changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cosi_core::SharedResource;
use tokio::time::Instant;

use crate::input_changes::InputChanges;
use crate::runner::{
    deadline_after, run_reconcile, FeedTarget, IdleProbe, Outcome, Retry, TaskContext, Trigger,
    NEVER,
};
use crate::status::Failure;
use crate::wake::WakeSignal;
use crate::{Controller, Input};

/// A restart the controller waits for after a failure.
#[derive(Clone, Copy, Debug)]
struct Backoff {
    until: Instant,
    /// Whether an input change ends it early (after a non-retryable failure).
    on_change: bool,
}

#[derive(Default, Debug)]
struct Due {
    requeue_at: Option<Instant>,
    backoff: Option<Backoff>,
    /// The subscriptions were lost: subscribe again before the next reconcile.
    resubscribe: bool,
}

/// The scheduling state of one level-triggered controller.
#[derive(Debug)]
pub(crate) struct LevelActivity {
    wake: WakeSignal,
    running: AtomicBool,
    due: Mutex<Due>,
    /// The changes delivered since the last reconcile, for a controller that asks.
    changes: Arc<InputChanges>,
}

impl Default for LevelActivity {
    fn default() -> Self {
        let activity = LevelActivity {
            wake: WakeSignal::default(),
            running: AtomicBool::new(false),
            due: Mutex::new(Due::default()),
            changes: Arc::default(),
        };
        // The first reconcile is owed from registration on: a controller that has not run
        // yet is not idle.
        activity.wake.wake();
        activity
    }
}

impl LevelActivity {
    fn due(&self) -> std::sync::MutexGuard<'_, Due> {
        self.due.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl FeedTarget for LevelActivity {
    fn changed(&self, _input: &Input, resource: &SharedResource) {
        // Recorded before the wake-up, so the reconcile it triggers finds it.
        self.changes.record(resource.metadata().pointer());
        self.wake.wake();
    }

    fn resync(&self) {
        self.changes.everything();
        self.wake.wake();
    }

    fn unsubscribed(&self) {
        self.due().resubscribe = true;
        self.wake.wake();
    }

    fn satisfied(&self) -> bool {
        self.wake.is_pending()
    }

    fn taken(&self) -> Option<tokio::sync::futures::Notified<'_>> {
        Some(self.wake.taken())
    }
}

impl IdleProbe for LevelActivity {
    fn is_idle(&self, now: Instant) -> bool {
        if self.running.load(Ordering::SeqCst) {
            return false;
        }
        let due = self.due();
        match due.backoff {
            // A wake-up cuts this backoff short: it is due now. (Lost subscriptions ring it too:
            // such a controller subscribes again at once.)
            Some(backoff) if backoff.on_change && self.wake.is_pending() => false,
            // Wake-ups wait for the backoff to end; the controller is idle until then.
            Some(backoff) => backoff.until > now,
            None => !self.wake.is_pending() && due.requeue_at.is_none_or(|at| at > now),
        }
    }
}

/// Runs `controller` until shutdown.
pub(crate) async fn run(
    mut controller: Box<dyn Controller>,
    activity: Arc<LevelActivity>,
    mut cx: TaskContext,
) {
    let mut backoff = cx.restart_backoff.clone();
    // Subscribe before the first reconcile, so that it misses no change.
    if !subscribe(&activity, &mut cx, &mut backoff).await {
        return;
    }
    backoff.reset();
    let mut first = true;
    let mut spare = None;
    loop {
        let Some(mut reason) = next_trigger(&activity, &mut cx, &mut backoff).await else {
            return;
        };
        if first {
            reason = "start";
            first = false;
        }
        cx.signals.bump();
        let state = cx
            .state
            .for_reconcile(spare.take())
            .with_input_changes(&activity.changes);
        let trigger = Trigger {
            controller: &cx.name,
            reason,
            item: None,
        };
        // Called inside the caught future, like a queue item's reconcile.
        let reconcile = async { controller.reconcile(&state).await };
        let (outcome, elapsed) = run_reconcile(trigger, reconcile).await;
        match &outcome {
            Outcome::Done => backoff.reset(),
            Outcome::RequeueAfter(delay) => {
                backoff.reset();
                activity.due().requeue_at = Some(deadline_after(Instant::now(), *delay));
            }
            Outcome::Failed(failure) => {
                // The changes this reconcile took may not have been acted on.
                activity.changes.everything();
                let retry = Retry::of(failure, &backoff, backoff.failures() + 1);
                backoff.next_delay();
                tracing::warn!(controller = %cx.name, error = %failure, backoff = ?retry.after, on_change = retry.on_change, "reconcile failed; restarting the controller after backoff");
                activity.due().backoff = Some(Backoff {
                    until: deadline_after(Instant::now(), retry.after),
                    on_change: retry.on_change,
                });
            }
        }
        let failed = outcome.failure().is_some();
        cx.record(elapsed, &outcome, failed);
        activity.running.store(false, Ordering::SeqCst);
        spare = Some(state);
    }
}

/// Subscribes the controller to its current inputs (unless a change of them watches them
/// already), retrying after the restart `backoff` (each failure recorded as a restart); `false`
/// on shutdown, also one that comes while the store is slow to answer. On error the feeds keep
/// no subscription of the controller, so every attempt starts from scratch.
async fn subscribe(
    activity: &Arc<LevelActivity>,
    cx: &mut TaskContext,
    backoff: &mut crate::Backoff,
) -> bool {
    loop {
        match cx.watch_inputs(activity.clone()).await {
            Ok(up) => return up,
            Err(error) => {
                tracing::warn!(controller = %cx.name, %error, "watching inputs failed; retrying");
                cx.record_failure(&Failure::Error(error), true);
                let until = deadline_after(Instant::now(), backoff.next_delay());
                activity.due().backoff = Some(Backoff {
                    until,
                    on_change: false,
                });
                tokio::select! {
                    _ = cx.shutdown.changed() => return false,
                    _ = tokio::time::sleep_until(until) => {}
                }
                activity.due().backoff = None;
            }
        }
    }
}

/// Waits for the next reason to reconcile; `None` on shutdown. Marks the controller running
/// before consuming the wake-up, so that it never looks idle in between. Subscriptions that
/// were lost are made again first, once the restart backoff of a failure allows it.
async fn next_trigger(
    activity: &Arc<LevelActivity>,
    cx: &mut TaskContext,
    restart: &mut crate::Backoff,
) -> Option<&'static str> {
    // A trigger that is due at once (a zero requeue, the controller's own waker rung in its
    // reconcile) awaits nothing below: without spending the task's budget, a reconcile that
    // awaits nothing either would loop without yielding and starve every task of its worker.
    tokio::task::coop::consume_budget().await;
    loop {
        if *cx.shutdown.borrow() {
            return None;
        }
        let now = Instant::now();
        let (backoff, requeue_at, resubscribe) = {
            let due = activity.due();
            (due.backoff, due.requeue_at, due.resubscribe)
        };
        if backoff.is_some() || resubscribe {
            if let Some(backoff) = backoff {
                // A wake-up cuts short a backoff that waits for a change. Lost subscriptions
                // ring it too: a controller that waits for a change it cannot hear subscribes
                // again at once; one that waits out a retryable failure subscribes after it.
                let cut_short = backoff.on_change && activity.wake.is_pending();
                if backoff.until > now && !cut_short {
                    tokio::select! {
                        biased;
                        _ = cx.shutdown.changed() => return None,
                        _ = tokio::time::sleep_until(backoff.until) => {}
                        _ = activity.wake.rung(), if backoff.on_change => {}
                    }
                    continue;
                }
            }
            if resubscribe {
                activity.due().resubscribe = false;
                if !subscribe(activity, cx, restart).await {
                    return None;
                }
                // Whatever changed while nothing was subscribed is unknown.
                activity.changes.everything();
            }
            activity.running.store(true, Ordering::SeqCst);
            activity.wake.take();
            let mut due = activity.due();
            due.backoff = None;
            due.requeue_at = None;
            return Some("restart");
        }
        activity.running.store(true, Ordering::SeqCst);
        if activity.wake.take() {
            activity.due().requeue_at = None;
            return Some("input-changed");
        }
        if let Some(at) = requeue_at {
            if at <= now {
                activity.due().requeue_at = None;
                return Some("requeue");
            }
        }
        activity.running.store(false, Ordering::SeqCst);
        let deadline = requeue_at.unwrap_or(now + NEVER);
        tokio::select! {
            biased;
            _ = cx.shutdown.changed() => return None,
            _ = activity.wake.rung() => {}
            _ = tokio::time::sleep_until(deadline), if requeue_at.is_some() => {}
        }
    }
}
