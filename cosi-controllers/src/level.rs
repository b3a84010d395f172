//! The task that runs one level-triggered [`Controller`]: waits for a wake-up, a requeue
//! deadline or the end of a restart backoff, runs one reconcile (catching panics), records the
//! outcome, and repeats until shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cosi_core::SharedResource;
use tokio::time::Instant;
use tracing::Instrument;

use crate::catch_panic::CatchPanic;
use crate::engine::{IdleProbe, TaskContext};
use crate::feed::FeedTarget;
use crate::wake::WakeSignal;
use crate::{Controller, Input, Reconciled};

/// Far enough to mean "never" for a timer that is disabled anyway.
const NEVER: Duration = Duration::from_secs(86400 * 365);

#[derive(Default, Debug)]
struct Due {
    requeue_at: Option<Instant>,
    backoff_until: Option<Instant>,
}

/// The scheduling state of one level-triggered controller.
#[derive(Debug)]
pub(crate) struct LevelActivity {
    wake: WakeSignal,
    running: AtomicBool,
    due: Mutex<Due>,
}

impl Default for LevelActivity {
    fn default() -> Self {
        let activity = LevelActivity {
            wake: WakeSignal::default(),
            running: AtomicBool::new(false),
            due: Mutex::new(Due::default()),
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
    fn changed(&self, _input: &Input, _resource: &SharedResource) {
        self.wake.wake();
    }

    fn resync(&self) {
        self.wake.wake();
    }
}

impl IdleProbe for LevelActivity {
    fn is_idle(&self, now: Instant) -> bool {
        if self.running.load(Ordering::SeqCst) {
            return false;
        }
        let due = self.due();
        match due.backoff_until {
            // Wake-ups wait for the backoff to end; the controller is idle until then.
            Some(until) => until > now,
            None => !self.wake.is_pending() && due.requeue_at.is_none_or(|at| at > now),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Trigger {
    Start,
    InputChanged,
    Requeue,
    Restart,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::InputChanged => "input-changed",
            Trigger::Requeue => "requeue",
            Trigger::Restart => "restart",
        }
    }
}

/// Runs `controller` until shutdown.
pub(crate) async fn run(
    mut controller: Box<dyn Controller>,
    activity: Arc<LevelActivity>,
    mut cx: TaskContext,
) {
    let name = cx.slot.name.clone();
    let mut backoff = cx.engine.options.restart_backoff.clone();
    // Subscribe before the first reconcile, so that it misses no change.
    loop {
        let inputs = cx.state.inputs();
        match cx
            .engine
            .feeds
            .subscribe(cx.slot.id, &inputs, activity.clone())
            .await
        {
            Ok(()) => break,
            Err(error) => {
                tracing::warn!(controller = %name, %error, "watching inputs failed; retrying");
                cx.slot.status.record_restart(error.to_string());
                cx.engine.status_changed();
                let delay = backoff.next_delay();
                let until = Instant::now() + delay;
                activity.due().backoff_until = Some(until);
                tokio::select! {
                    _ = cx.shutdown.changed() => return,
                    _ = tokio::time::sleep_until(until) => {}
                }
                activity.due().backoff_until = None;
            }
        }
    }
    backoff.reset();
    let mut first = true;
    loop {
        let Some(mut trigger) = next_trigger(&activity, &mut cx).await else {
            return;
        };
        if first {
            trigger = Trigger::Start;
            first = false;
        }
        cx.engine.bump();
        let span = tracing::info_span!(
            "reconcile",
            controller = %name,
            trigger = trigger.as_str(),
            duration_us = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = CatchPanic::new(controller.reconcile(&cx.state))
            .instrument(span.clone())
            .await;
        let elapsed = started.elapsed();
        let (outcome, failure) = match result {
            Ok(Ok(Reconciled::Done)) => ("done", None),
            Ok(Ok(Reconciled::RequeueAfter(delay))) => {
                activity.due().requeue_at = Some(Instant::now() + delay);
                ("requeue", None)
            }
            Ok(Err(error)) => ("error", Some(error.to_string())),
            Err(panic) => ("panic", Some(format!("reconcile panicked: {panic}"))),
        };
        span.record("duration_us", elapsed.as_micros() as u64);
        span.record("outcome", outcome);
        let failed = failure.is_some();
        if let Some(message) = &failure {
            let delay = backoff.next_delay();
            tracing::warn!(parent: &span, error = %message, backoff = ?delay, "reconcile failed; restarting the controller after backoff");
            activity.due().backoff_until = Some(Instant::now() + delay);
        } else {
            backoff.reset();
        }
        cx.slot.status.record(elapsed, failure, failed);
        cx.engine.status_changed();
        cx.engine.bump();
        activity.running.store(false, Ordering::SeqCst);
    }
}

/// Waits for the next reason to reconcile; `None` on shutdown. Marks the controller running
/// before consuming the wake-up, so that it never looks idle in between.
async fn next_trigger(activity: &LevelActivity, cx: &mut TaskContext) -> Option<Trigger> {
    loop {
        if *cx.shutdown.borrow() {
            return None;
        }
        let now = Instant::now();
        let (backoff_until, requeue_at) = {
            let due = activity.due();
            (due.backoff_until, due.requeue_at)
        };
        if let Some(until) = backoff_until {
            if until > now {
                tokio::select! {
                    biased;
                    _ = cx.shutdown.changed() => return None,
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            activity.running.store(true, Ordering::SeqCst);
            activity.wake.take();
            let mut due = activity.due();
            due.backoff_until = None;
            due.requeue_at = None;
            return Some(Trigger::Restart);
        }
        activity.running.store(true, Ordering::SeqCst);
        if activity.wake.take() {
            activity.due().requeue_at = None;
            return Some(Trigger::InputChanged);
        }
        if let Some(at) = requeue_at {
            if at <= now {
                activity.due().requeue_at = None;
                return Some(Trigger::Requeue);
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
