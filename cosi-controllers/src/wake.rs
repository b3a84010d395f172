//! The coalescing wake-up of a level-triggered controller: at most one pending wake-up, however
//! many input changes arrive before the controller runs.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// A doorbell with memory: [`WakeSignal::wake`] sets a flag and rings once; the controller task
/// takes the flag with [`WakeSignal::take`]. Notifying costs two atomic operations and never
/// allocates, so fan-out of a burst of events is cheap.
#[derive(Debug, Default)]
pub(crate) struct WakeSignal {
    pending: AtomicBool,
    bell: Notify,
    /// Rung when a pending wake-up is taken.
    taken: Notify,
}

impl WakeSignal {
    /// Marks a wake-up pending; returns whether it was not pending before.
    pub(crate) fn wake(&self) -> bool {
        if self.pending.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.bell.notify_one();
        true
    }

    /// Takes the pending wake-up, if any (ringing whoever waits in [`Self::taken`]).
    pub(crate) fn take(&self) -> bool {
        let taken = self.pending.swap(false, Ordering::SeqCst);
        if taken {
            self.taken.notify_waiters();
        }
        taken
    }

    /// Completes once a pending wake-up is taken after this call (enable it, then check
    /// [`Self::is_pending`], to miss none).
    pub(crate) fn taken(&self) -> Notified<'_> {
        self.taken.notified()
    }

    /// Whether a wake-up is pending.
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst)
    }

    /// Waits until a wake-up may be pending (spurious returns are possible: check [`Self::take`]).
    pub(crate) async fn rung(&self) {
        self.bell.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_wakes_coalesce_into_one_pending() {
        let signal = WakeSignal::default();
        assert!(signal.wake());
        assert!(!signal.wake());
        assert!(!signal.wake());
        assert!(signal.take());
        assert!(!signal.take());
    }

    #[tokio::test]
    async fn taking_a_pending_wake_up_rings_those_waiting_for_it() {
        let signal = WakeSignal::default();
        signal.wake();
        let taken = signal.taken();
        tokio::pin!(taken);
        taken.as_mut().enable();
        assert!(signal.take());
        tokio::time::timeout(std::time::Duration::from_secs(5), taken)
            .await
            .expect("the take rang");
    }

    #[test]
    fn taking_when_nothing_is_pending_rings_nobody() {
        use std::future::Future;
        use std::task::{Context, Waker};
        let signal = WakeSignal::default();
        let taken = signal.taken();
        tokio::pin!(taken);
        taken.as_mut().enable();
        assert!(!signal.take());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(taken.as_mut().poll(&mut cx).is_pending());
    }

    #[tokio::test]
    async fn a_wake_before_waiting_is_not_lost() {
        let signal = WakeSignal::default();
        signal.wake();
        tokio::time::timeout(std::time::Duration::from_secs(5), signal.rung())
            .await
            .expect("the stored permit rings immediately");
        assert!(signal.take());
    }
}
