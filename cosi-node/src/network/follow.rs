//! [`Follower`]: the task that follows a controller's outside source (a kernel subscription, a
//! registry watch) and wakes the controller whenever the source reports a change. The
//! controller owns it: dropping the controller (engine shutdown) stops the task.
//!
//! The follower carries no data. The controller reads the current state of its source in its
//! reconcile, so a burst of outside changes costs one reconcile and nothing queues up.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cosi_controllers::Waker;
use tokio::task::JoinHandle;

/// A source of change notices (coalesced, carrying no data); `None` when it has ended.
pub(crate) trait Notices: Send + 'static {
    /// Waits for the next notice.
    fn changed(&mut self) -> impl Future<Output = Option<()>> + Send;
}

impl Notices for crate::network::Changes {
    fn changed(&mut self) -> impl Future<Output = Option<()>> + Send {
        crate::network::Changes::changed(self)
    }
}

impl Notices for crate::cluster::ViewChanges {
    fn changed(&mut self) -> impl Future<Output = Option<()>> + Send {
        crate::cluster::ViewChanges::changed(self)
    }
}

/// A running follow task, aborted when dropped.
#[derive(Debug, Default)]
pub(crate) struct Follower {
    task: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
}

impl Follower {
    /// Whether the task is still following its source.
    pub(crate) fn is_following(&self) -> bool {
        self.task
            .as_ref()
            .is_some_and(|(_, alive)| alive.load(Ordering::SeqCst))
    }

    /// Follows `notices`: every notice wakes the controller.
    pub(crate) fn follow<N: Notices>(&mut self, waker: Waker, mut notices: N) {
        let inner = waker.clone();
        self.start(waker, async move {
            while notices.changed().await.is_some() {
                inner.wake();
            }
        });
    }

    /// Starts following: `follow` runs until the source ends. When it returns, the controller
    /// is woken once more, so that its reconcile sees [`Follower::is_following`] false and
    /// subscribes again.
    pub(crate) fn start<F>(&mut self, waker: Waker, follow: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.stop();
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let task = tokio::spawn(async move {
            follow.await;
            flag.store(false, Ordering::SeqCst);
            waker.wake();
        });
        self.task = Some((task, alive));
    }

    /// Stops following.
    pub(crate) fn stop(&mut self) {
        if let Some((task, _)) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop();
    }
}
