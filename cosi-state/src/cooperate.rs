//! [`cooperate`] and [`at_once`]: the yield point of store calls that complete at once.
//!
//! The in-memory store (and the disk store's reads, served from memory) never wait, so a task
//! calling them in a loop would never return to its tokio worker: the tasks queued behind it
//! there — a watch feed woken by its own writes, the controllers that react, an API stream —
//! would wait for the whole loop. tokio's cooperative budget prevents that for its own
//! resources: each operation spends a unit of the task's budget of 128, and a task that has
//! spent it yields once. A store call is far cheaper than a socket operation, and a writer's
//! stream broken into small pieces makes everyone reacting to it spend its time waking up (W2,
//! a writer and 100 watchers: 3 to 7 times slower at a unit per call, every watcher woken for
//! about six events; 40 % slower at a unit per 16 calls). So a store call spends a unit every
//! [`CALLS_PER_UNIT`] calls on a thread: a looping task yields every 32,768 calls, about ten
//! milliseconds of store calls — a bound on how long a task keeps its worker, where without
//! this there would be none.

use std::cell::Cell;

use cosi_core::{Call, Result};

/// Store calls per unit of tokio's budget.
pub const CALLS_PER_UNIT: u32 = 256;

thread_local! {
    static CALLS: Cell<u32> = const { Cell::new(0) };
}

/// Counts a store call that completes at once and, every [`CALLS_PER_UNIT`] calls on this
/// thread, spends a unit of the running task's tokio budget — yielding first if it is used
/// up. Call it before the call's effect, so a call cancelled at the yield has done nothing.
/// Outside a tokio runtime there is no budget and it never waits.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// for _ in 0..10_000 {
///     cosi_state::cooperate().await; // yields now and then, so other tasks run
///     // ... a store call that completes at once ...
/// }
/// # });
/// ```
pub async fn cooperate() {
    if unit_due() {
        tokio::task::coop::consume_budget().await;
    }
}

/// A store call that completes at once, as a [`Call`]: `op` runs now and the call is done —
/// except every [`CALLS_PER_UNIT`]-th call on a thread, which is pending: when awaited it
/// spends a unit of the task's budget (yielding first if it is used up), then runs `op`. So a
/// call cancelled at its yield has done nothing, and the calls in between cost no allocation.
///
/// ```
/// use cosi_core::Call;
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let calls: Vec<Call<'_, u32>> = (0..cosi_state::CALLS_PER_UNIT).map(|n| cosi_state::at_once(move || Ok(n))).collect();
/// // Exactly one of any CALLS_PER_UNIT calls in a row on a thread waits for the budget.
/// assert_eq!(calls.iter().filter(|call| !call.is_done()).count(), 1);
/// for (n, call) in calls.into_iter().enumerate() {
///     assert_eq!(call.await.unwrap(), n as u32);
/// }
/// # });
/// ```
#[inline]
pub fn at_once<'a, T: Send + 'a>(op: impl FnOnce() -> Result<T> + Send + 'a) -> Call<'a, T> {
    if unit_due() {
        Call::pending(async move {
            tokio::task::coop::consume_budget().await;
            op()
        })
    } else {
        Call::done(op())
    }
}

/// Counts a call; true on every [`CALLS_PER_UNIT`]-th of this thread.
#[inline]
fn unit_due() -> bool {
    CALLS
        .try_with(|calls| {
            let next = calls.get() + 1;
            let due = next >= CALLS_PER_UNIT;
            calls.set(if due { 0 } else { next });
            due
        })
        .unwrap_or(false)
}
