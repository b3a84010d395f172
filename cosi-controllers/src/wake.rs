//! The coalescing wake-up of a level-triggered controller: at most one pending wake-up, however
//! many input changes arrive before the controller runs.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A doorbell with memory: [`WakeSignal::wake`] sets a flag and rings once; the controller task
/// takes the flag with [`WakeSignal::take`]. Notifying costs two atomic operations and never
/// allocates, so fan-out of a burst of events is cheap.
#[derive(Debug, Default)]
pub(crate) struct WakeSignal {
    pending: AtomicBool,
    bell: Notify,
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

    /// Takes the pending wake-up, if any.
    pub(crate) fn take(&self) -> bool {
        self.pending.swap(false, Ordering::SeqCst)
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
    async fn a_wake_before_waiting_is_not_lost() {
        let signal = WakeSignal::default();
        signal.wake();
        tokio::time::timeout(std::time::Duration::from_secs(5), signal.rung())
            .await
            .expect("the stored permit rings immediately");
        assert!(signal.take());
    }
}
