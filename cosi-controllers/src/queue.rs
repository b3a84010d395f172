//! Queue controllers: a reconcile per item of a primary input instead of one per controller.
//!
//! The runner keeps a [`crate::work_queue`] of primary resources: every existing primary is
//! queued at start, every change of a primary queues it, and changes of secondary inputs are
//! mapped to primary items by [`QueueController::map_input`]. Up to
//! [`QueueController::concurrency`] items reconcile at once, never the same item twice; an item
//! that fails is retried with its own exponential backoff, and one slow item holds up only
//! itself.
//!
//! Subscriptions that were lost (a change of inputs failed, and so did the restore of the old
//! ones: [`crate::runner::FeedTarget::unsubscribed`]) are made again by the runner, retrying
//! after the restart backoff (each failure counts as a restart); the queue is relisted once
//! they hold, so no change made meanwhile is missed. Items already queued still run while it
//! retries; one of them that changes the inputs meanwhile waits for the attempt under way,
//! and a change that succeeds ends the retries (the new inputs are watched).
//!
//! A primary destroyed while its kind watch resyncs is not queued again: see "Primaries
//! destroyed inside a resync" in [`QueueController`]'s docs for the exact limitation and what
//! a controller does about it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cosi_core::{ListOptions, Pointer, Result, SharedResource};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::runner::{
    deadline_after, run_reconcile, run_step, Outcome, Retry, TaskContext, Trigger, NEVER,
};
use crate::status::Failure;
use crate::work_queue::{Finish, Rebuild, WorkQueue};
use crate::{ControllerState, Input, Output, Reconciled};

/// A controller reconciled per item of its primary input.
///
/// Its asynchronous methods return their futures unboxed (the runner is generic over the
/// controller): implement them with `async fn`, no attribute needed. Their futures must be
/// `Send`, as the runner's tasks move between threads.
///
/// ```
/// use cosi_controllers::{ControllerState, Input, Output, QueueController, Reconciled};
/// use cosi_core::{Pointer, Resource, ResourceSpec, Result, StateExt};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct Link { up: bool }
/// # impl ResourceSpec for Link { const TYPE: &'static str = "Links.net.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "network"; }
/// # #[derive(Clone, PartialEq, Debug, Default, Serialize, Deserialize)]
/// # struct LinkStatus { up: bool }
/// # impl ResourceSpec for LinkStatus { const TYPE: &'static str = "LinkStatuses.net.cosi.dev"; const DEFAULT_NAMESPACE: &'static str = "network"; }
///
/// struct LinkStatusController;
///
/// impl QueueController for LinkStatusController {
///     fn name(&self) -> &str { "LinkStatusController" }
///     fn primary(&self) -> Input { Input::weak_of::<Link>() }
///     fn outputs(&self) -> Vec<Output> { vec![Output::exclusive_of::<LinkStatus>()] }
///     fn concurrency(&self) -> usize { 4 }
///     async fn reconcile(&self, state: &ControllerState, item: &Pointer) -> Result<Reconciled> {
///         match state.get_typed::<Link>(item).await {
///             Ok(link) => {
///                 let up = link.spec.up;
///                 state
///                     .modify_output(Resource::new(item.id().to_string(), LinkStatus::default()), |s| {
///                         s.spec.up = up;
///                         Ok(())
///                     })
///                     .await?;
///             }
///             Err(e) if e.is_not_found() => {
///                 state.teardown_output(&LinkStatus::kind().pointer(item.id().to_string())).await?;
///             }
///             Err(e) => return Err(e),
///         }
///         Ok(Reconciled::Done)
///     }
/// }
/// ```
///
/// # Primaries destroyed inside a resync
///
/// The runner learns that a primary was destroyed only from its destroyed event. When a kind
/// watch falls so far behind that the store cannot compute a catch-up any more (the destroy
/// markers it needed were compacted away: `MemoryOptions::max_destroy_markers` in the memory
/// backend), the watch resyncs and the runner relists: it queues every primary that exists,
/// and a primary destroyed in that gap is never queued again. A controller that cleans up an
/// item's outputs when its reconcile finds the item gone then keeps them for ever, unless
///
/// - it holds a finalizer on each primary (a strong primary input, its finalizer added by the
///   reconcile): the primary cannot be destroyed before the controller has seen it tear down,
///   cleaned up and released it; or
/// - it watches its outputs: declare the output kind as a secondary input
///   ([`Input::destroy_ready`] is enough, and wakes it least) and map each output to its item
///   in [`QueueController::map_input`]. The relist maps every existing output, so the item of
///   each orphaned one is reconciled and finds its primary gone.
///   [`QueueTransform`](crate::QueueTransform) does exactly this; the level-triggered
///   [`Transform`](crate::Transform) lists its outputs in every reconcile and is not affected.
///
/// The runner does not remember every item it has seen to find the missing ones itself: that
/// would cost a hash operation per event on the dispatch path for a rare resync, and memory
/// for every item ever seen.
pub trait QueueController: Send + Sync + 'static {
    /// The unique name; also the owner of everything the controller writes.
    fn name(&self) -> &str;

    /// The primary input: each of its resources is an item.
    fn primary(&self) -> Input;

    /// Secondary inputs: their changes are mapped to items by [`Self::map_input`].
    fn secondary(&self) -> Vec<Input> {
        Vec::new()
    }

    /// The outputs.
    fn outputs(&self) -> Vec<Output>;

    /// How many items may reconcile at once (at least one).
    fn concurrency(&self) -> usize {
        1
    }

    /// Runs once before any item (and again after a restart if it failed).
    fn run_hook(&self, state: &ControllerState) -> impl Future<Output = Result<()>> + Send {
        let _ = state;
        async { Ok(()) }
    }

    /// Runs once at shutdown, after the running items finished.
    fn shutdown_hook(&self, state: &ControllerState) -> impl Future<Output = ()> + Send {
        let _ = state;
        async {}
    }

    /// Maps a changed secondary resource (its latest state, or its last one if destroyed) to
    /// the primary items it affects.
    fn map_input(
        &self,
        state: &ControllerState,
        resource: &SharedResource,
    ) -> impl Future<Output = Result<Vec<Pointer>>> + Send {
        let _ = (state, resource);
        async { Ok(Vec::new()) }
    }

    /// Reconciles one item. The item may no longer exist (it was destroyed): read it and act on
    /// `NotFound`. An error retries the item after its backoff; `RequeueAfter` runs it again
    /// after the delay.
    fn reconcile(
        &self,
        state: &ControllerState,
        item: &Pointer,
    ) -> impl Future<Output = Result<Reconciled>> + Send;
}

/// Runs `controller` until shutdown.
pub(crate) async fn run<Q: QueueController>(
    controller: Arc<Q>,
    queue: Arc<WorkQueue>,
    cx: TaskContext,
) {
    let cx = Arc::new(cx);
    let mut restart = cx.restart_backoff.clone();
    let mut shutdown = cx.shutdown.clone();
    // Start: subscribe, run the hook; a failure restarts after backoff.
    loop {
        match start(&*controller, &queue, &cx).await {
            Ok(true) => break,
            Ok(false) => return,
            Err(failure) => {
                let delay = restart.next_delay();
                tracing::warn!(controller = %cx.name, error = %failure, backoff = ?delay, "queue controller failed to start; restarting after backoff");
                cx.record_failure(&failure, true);
                queue.block_until(Some(deadline_after(Instant::now(), delay)));
                tokio::select! {
                    biased;
                    _ = shutdown.changed() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                queue.block_until(None);
            }
        }
    }

    // Items run on a fixed pool of workers: at most `concurrency` at once, no task per item.
    let concurrency = controller.concurrency().max(1);
    let mut workers = JoinSet::new();
    for _ in 0..concurrency {
        workers.spawn(work(controller.clone(), queue.clone(), cx.clone()));
    }
    loop {
        queue.set_busy(true);
        if *shutdown.borrow() {
            break;
        }
        let rebuild = queue.take_rebuild();
        if rebuild == Rebuild::Resubscribe && !resubscribe(&queue, &cx, &mut shutdown).await {
            break;
        }
        if rebuild != Rebuild::Nothing {
            if let Err(error) = relist(&*controller, &queue, &cx).await {
                tracing::warn!(controller = %cx.name, %error, "listing inputs failed; retrying");
                cx.record_failure(&Failure::Error(error), false);
                queue.request_relist();
                let delay = cx.restart_backoff.delay_after(1);
                queue.block_until(Some(deadline_after(Instant::now(), delay)));
                tokio::select! {
                    biased;
                    _ = shutdown.changed() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
                queue.block_until(None);
                continue;
            }
        }
        for resource in queue.take_inbox() {
            map(&*controller, &queue, &cx, &resource).await;
        }
        let next_due = queue.promote_due(Instant::now());
        cx.signals.bump();
        queue.set_busy(false);
        let deadline = next_due.unwrap_or_else(|| Instant::now() + NEVER);
        tokio::select! {
            biased;
            _ = shutdown.changed() => {}
            _ = queue.bell.rung() => { queue.bell.take(); }
            _ = tokio::time::sleep_until(deadline), if next_due.is_some() => {}
        }
    }

    // Shutdown: running items finish (the engine bounds this with its timeout), then the hook.
    while workers.join_next().await.is_some() {}
    if let Err(failure) = run_step(async {
        controller.shutdown_hook(&cx.state).await;
        Ok(())
    })
    .await
    {
        tracing::warn!(controller = %cx.name, error = %failure.during("shutdown hook"), "shutdown hook failed");
    }
    queue.set_busy(false);
}

/// One worker: takes ready items one at a time until shutdown.
async fn work<Q: QueueController>(controller: Arc<Q>, queue: Arc<WorkQueue>, cx: Arc<TaskContext>) {
    let mut shutdown = cx.shutdown.clone();
    let mut spare = None;
    loop {
        if *shutdown.borrow() {
            return;
        }
        // While items are ready, no waiter is registered (registering and dropping one takes
        // the `Notify`'s lock twice per item); only an empty queue registers one, before
        // looking again, so an item queued in between is not missed.
        let item = match queue.pop() {
            Some(item) => item,
            None => {
                let ready = queue.work.notified();
                tokio::pin!(ready);
                ready.as_mut().enable();
                match queue.pop() {
                    Some(item) => item,
                    None => {
                        tokio::select! {
                            biased;
                            _ = shutdown.changed() => {}
                            _ = ready => {}
                        }
                        continue;
                    }
                }
            }
        };
        // Each item gets its own handle: output tracking is per reconcile.
        let state = cx.state.for_reconcile(spare.take());
        let trigger = Trigger {
            controller: &cx.name,
            reason: "item",
            item: Some(item.id()),
        };
        let (outcome, elapsed) = {
            // Called inside the caught future: an implementation that panics before it returns
            // its future fails this item, not the worker. Pinned where it is built: the future
            // is large (a reconcile's nested calls), and handing it on by value copied all of
            // it into each wrapper (three copies of ~1.8 KiB per item in W3).
            let reconcile = std::pin::pin!(async { controller.reconcile(&state, &item).await });
            run_reconcile(trigger, reconcile).await
        };
        finish_item(&queue, &cx, &item, outcome, elapsed);
        spare = Some(state);
    }
}

/// Subscribes (unless a restart finds the inputs watched already) and runs the hook; `false`
/// on shutdown.
async fn start<Q: QueueController>(
    controller: &Q,
    queue: &Arc<WorkQueue>,
    cx: &TaskContext,
) -> std::result::Result<bool, Failure> {
    if !cx
        .watch_inputs(queue.clone())
        .await
        .map_err(Failure::Error)?
    {
        return Ok(false);
    }
    run_step(async { controller.run_hook(&cx.state).await })
        .await
        .map_err(|failure| failure.during("run hook"))?;
    Ok(true)
}

/// Subscribes the controller to its inputs again after they were lost (unless a change of
/// inputs made meanwhile watches them), retrying after the restart backoff (each failure
/// recorded as a restart); `false` on shutdown, also one that comes while the store is slow
/// to answer.
async fn resubscribe(
    queue: &Arc<WorkQueue>,
    cx: &TaskContext,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    let mut backoff = cx.restart_backoff.clone();
    loop {
        let error = match cx.watch_inputs(queue.clone()).await {
            Ok(up) => return up,
            Err(error) => error,
        };
        let delay = backoff.next_delay();
        tracing::warn!(controller = %cx.name, %error, backoff = ?delay, "watching inputs again failed; retrying after backoff");
        cx.record_failure(&Failure::Error(error), true);
        queue.block_until(Some(deadline_after(Instant::now(), delay)));
        tokio::select! {
            biased;
            _ = shutdown.changed() => return false,
            _ = tokio::time::sleep(delay) => {}
        }
        queue.block_until(None);
    }
}

/// Queues every primary and maps every secondary: used at start and after a resync.
async fn relist<Q: QueueController>(
    controller: &Q,
    queue: &WorkQueue,
    cx: &TaskContext,
) -> Result<()> {
    let inputs = cx.state.inputs();
    let primary = controller.primary();
    for input in &inputs {
        // Read through the raw state: a single-id input is read by a get (any id, however
        // long), a kind by a list.
        let resources = match &input.id {
            Some(id) => match cx.raw.get(&input.kind.pointer(id.clone())).await {
                Ok(resource) => vec![resource],
                Err(e) if e.is_not_found() => Vec::new(),
                Err(e) => return Err(e),
            },
            None => cx.raw.list(&input.kind, &ListOptions::default()).await?,
        };
        for resource in resources {
            if *input == primary {
                queue.add(resource.metadata().pointer().clone());
            } else {
                map(controller, queue, cx, &resource).await;
            }
        }
    }
    Ok(())
}

async fn map<Q: QueueController>(
    controller: &Q,
    queue: &WorkQueue,
    cx: &TaskContext,
    resource: &SharedResource,
) {
    match run_step(async { controller.map_input(&cx.state, resource).await }).await {
        Ok(items) => {
            for item in items {
                queue.add(item);
            }
        }
        Err(failure) => {
            let failure = failure.during("map_input");
            // A retryable failure after the first delay; any other after the longest (a new
            // change of the resource is mapped at once meanwhile).
            let delay = Retry::of(&failure, &cx.restart_backoff, 1).after;
            tracing::warn!(controller = %cx.name, error = %failure, retry = ?delay, "mapping a secondary input failed; mapping it again after the delay");
            cx.record_failure(&failure, false);
            // Dropped, the change would be lost for good: the items it concerns are unknown.
            queue.remap_at(resource, deadline_after(Instant::now(), delay));
        }
    }
}

fn finish_item(
    queue: &WorkQueue,
    cx: &TaskContext,
    item: &Pointer,
    outcome: Outcome,
    elapsed: Duration,
) {
    let finish = match &outcome {
        Outcome::Done => Finish::Done,
        Outcome::RequeueAfter(delay) => Finish::RequeueAfter(*delay),
        Outcome::Failed(failure) => {
            let retry = Retry::of(failure, &cx.restart_backoff, queue.failures(item) + 1);
            tracing::warn!(controller = %cx.name, item = %item, error = %failure, backoff = ?retry.after, on_change = retry.on_change, "item reconcile failed; retrying after backoff");
            Finish::Retry(retry)
        }
    };
    queue.done(item, finish);
    cx.record(elapsed, &outcome, false);
}
