//! What one caller's responses hold in the server, in bytes: a budget per caller over all its
//! streams (watches, lists, log follows, event streams) and the answers of its unary calls, so
//! that a caller that reads slowly or not at all pins at most its budget, however many calls
//! it holds and however large the resources they carry. Counting calls alone
//! ([`super::per_caller`]) let 256 unread watches of 1 MiB resources hold a gigabyte, and 256
//! unread Gets of a 32 MiB resource eight.
//!
//! A response is counted from the moment its stream makes it until HTTP/2 has written it to
//! the caller's socket and dropped it: a stream [`StreamBytes::admit`]s each response before it
//! encodes it, which waits while the caller holds more than its budget less the largest
//! response ([`LARGEST_RESPONSE`]), and reserves that much until the response's real size is
//! [`Admission::charge`]d; the response body hands HTTP/2 each frame as bytes that give their
//! count back when dropped ([`StreamBytes::frame`]). So the caller never holds more than its
//! budget, and a stream waiting for room holds no encoded response: a watch simply stops reading
//! the store, which treats it as any lagging watcher (its window, then a compacted catch-up or a
//! resync, DESIGN §4), and nothing is ended. What a stream still holds while it waits is the
//! store's own values it was handed (shared with the store) and its small fixed parts.
//!
//! A unary call's answer counts the same way, from when its service builds it until HTTP/2 has
//! written it: a Get, Create or Update answer (a resource), an ApplyConfiguration answer (a
//! diff and warnings) and the service list are admitted after the store or machine call and
//! before the answer is built, then [`counted`] at their size (the ledger is the call's own).
//! Until HTTP/2 can write it, the built answer sits in the call's response body (HTTP/2 flow
//! control: a client that gives no window gets nothing more), counted. Answers of a few bytes
//! whatever the call (Destroy, Teardown, TeardownAndDestroy, service actions, Version) are not
//! counted: 256 of them hold a few KiB.
//!
//! A unary call with no room waits, as a stream does, rather than being refused: the room is
//! held by the caller's own unread answers and streams, so a client that reads is only slowed,
//! while a refusal would fail the large Gets of a client that reads them at its own pace, and
//! would misreport a write the store has already applied. While it waits a call keeps its place
//! among the caller's calls, and: a Get nothing of the resource (it lets go of what it read and
//! reads again once it has room, [`StreamBytes::try_admit`] first), a write the resource it
//! stored (the store's own while it is current), a machine call its outcome. The wait ends when
//! the caller cancels the call, or when the server stops ([`StreamBytes::admit_or_stop`]), with
//! `Unavailable` and the stop's reason (a write's says that it was applied), so that a caller
//! that never reads cannot hold a graceful stop; a list waiting for room ends the same way.
//!
//! A stream holds no encoding buffer between responses: the State service frames its watch and
//! list responses itself ([`super::framing`]), each frame a fresh allocation that HTTP/2 frees
//! once written (tonic's encoder kept each stream's largest message allocated while it lived).
//!
//! The bytes a call has charged and not yet seen written are given back when its ledger drops
//! (its body and its producer gone, and every frame HTTP/2 held), so a cancelled or ended call
//! leaves nothing counted. A caller past its budget waits on itself only: other callers have
//! budgets of their own, and trusted plaintext callers (loopback) are not counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use tokio::sync::Notify;

use super::stop::{stopped, StopSignal};

/// The largest response a call sends: one message at the limit with its gRPC frame header.
pub(crate) const LARGEST_RESPONSE: usize = super::MAX_MESSAGE_SIZE + FRAME_HEADER;

/// The gRPC frame header before each message (a flag and a 4-byte length).
const FRAME_HEADER: usize = 5;

/// The bytes a response takes in its frame: the message and the gRPC frame header.
pub(crate) fn framed_len(message: &impl prost::Message) -> usize {
    message.encoded_len() + FRAME_HEADER
}

/// The budgets of the callers that hold responses now, by caller key.
#[derive(Debug)]
pub(crate) struct BytesPerCaller {
    limit: usize,
    callers: Mutex<Callers>,
}

#[derive(Debug, Default)]
struct Callers {
    by_key: HashMap<String, Weak<CallerBytes>>,
    /// The map's size after it was last pruned of ended callers: it is pruned again at twice
    /// that, so pruning costs O(1) per lookup.
    pruned_at: usize,
}

impl BytesPerCaller {
    /// Budgets of `limit` bytes per caller, taken as at least [`LARGEST_RESPONSE`] so that any
    /// one response fits (a server refuses a smaller budget, [`super::MIN_BYTES_PER_CALLER`];
    /// tests give 0 for the smallest).
    pub(crate) fn new(limit: usize) -> Self {
        BytesPerCaller {
            limit: limit.max(LARGEST_RESPONSE),
            callers: Mutex::default(),
        }
    }

    /// A new stream of the caller `key`, counted against the caller's budget (shared with every
    /// other stream of the caller that still holds bytes).
    pub(crate) fn stream(&self, key: &str) -> Arc<StreamBytes> {
        let mut callers = self.callers.lock().unwrap_or_else(|e| e.into_inner());
        let caller = match callers.by_key.get(key).and_then(Weak::upgrade) {
            Some(caller) => caller,
            None => {
                let caller = Arc::new(CallerBytes {
                    limit: self.limit,
                    held: Mutex::new(0),
                    released: Notify::new(),
                });
                callers
                    .by_key
                    .insert(key.to_string(), Arc::downgrade(&caller));
                if callers.by_key.len() >= 2 * callers.pruned_at.max(8) {
                    callers.by_key.retain(|_, c| c.strong_count() > 0);
                    callers.pruned_at = callers.by_key.len();
                }
                caller
            }
        };
        Arc::new(StreamBytes {
            caller,
            outstanding: Mutex::new(0),
        })
    }

    /// Callers with an entry, live or not yet pruned.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.callers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .len()
    }
}

/// One caller's budget.
#[derive(Debug)]
struct CallerBytes {
    limit: usize,
    /// Bytes charged and reserved by the caller's streams and not yet given back.
    held: Mutex<usize>,
    released: Notify,
}

impl CallerBytes {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn give_back(&self, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let mut held = self.lock();
        *held = held.saturating_sub(bytes);
        drop(held);
        self.released.notify_waiters();
    }
}

/// One call's bytes (a stream's responses, or a unary call's answer), counted against its
/// caller's budget.
#[derive(Debug)]
pub(crate) struct StreamBytes {
    caller: Arc<CallerBytes>,
    /// Bytes this stream has charged and not yet seen dropped.
    outstanding: Mutex<usize>,
}

impl StreamBytes {
    /// Reserves room for one more response of any size if the caller has it now (it holds at
    /// most its budget less [`LARGEST_RESPONSE`]), until the response is charged.
    pub(crate) fn try_admit(self: &Arc<Self>) -> Option<Admission> {
        let mut held = self.caller.lock();
        if *held + LARGEST_RESPONSE > self.caller.limit {
            return None;
        }
        *held += LARGEST_RESPONSE;
        drop(held);
        Some(Admission {
            stream: Some(self.clone()),
        })
    }

    /// Waits until the caller has room for one more response of any size, and reserves it
    /// ([`StreamBytes::try_admit`]). Cancel-safe: a wait dropped reserves nothing.
    pub(crate) async fn admit(self: &Arc<Self>) -> Admission {
        if let Some(admission) = self.try_admit() {
            return admission;
        }
        loop {
            let released = self.caller.released.notified();
            tokio::pin!(released);
            // Registered before the check, so a release between the check and the wait wakes it.
            released.as_mut().enable();
            if let Some(admission) = self.try_admit() {
                return admission;
            }
            released.await;
        }
    }

    /// [`StreamBytes::admit`], unless `shutdown` fires first: then the stop's reason (a call
    /// waiting for room must not hold the server's stop for as long as its caller does not read).
    pub(crate) async fn admit_or_stop(
        self: &Arc<Self>,
        shutdown: &StopSignal,
    ) -> Result<Admission, Arc<str>> {
        if let Some(admission) = self.try_admit() {
            return Ok(admission);
        }
        let mut shutdown = shutdown.clone();
        tokio::select! {
            admission = self.admit() => Ok(admission),
            reason = stopped(&mut shutdown) => Err(reason),
        }
    }

    /// Counts `bytes` sent without an admission (a watch's empty "established" message: a
    /// stream's first few bytes never wait).
    pub(crate) fn charge_small(&self, bytes: usize) {
        *self.caller.lock() += bytes;
        *self.lock_outstanding() += bytes;
    }

    /// `data`, as bytes that give their count back to this stream when HTTP/2 drops them.
    pub(crate) fn frame(self: &Arc<Self>, data: Bytes) -> Bytes {
        Bytes::from_owner(Sent {
            data,
            stream: self.clone(),
        })
    }

    fn lock_outstanding(&self) -> std::sync::MutexGuard<'_, usize> {
        self.outstanding.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives back `bytes` written (at most what the stream has charged: a frame may carry bytes
    /// no admission counted).
    fn written(&self, bytes: usize) {
        let mut outstanding = self.lock_outstanding();
        let given = bytes.min(*outstanding);
        *outstanding -= given;
        drop(outstanding);
        self.caller.give_back(given);
    }

    /// Bytes the caller holds now, over all its streams.
    #[cfg(test)]
    pub(crate) fn caller_holds(&self) -> usize {
        *self.caller.lock()
    }
}

impl Drop for StreamBytes {
    fn drop(&mut self) {
        let outstanding = std::mem::take(&mut *self.lock_outstanding());
        self.caller.give_back(outstanding);
    }
}

/// Room reserved for one response; [`Admission::charge`] counts its real size instead, and
/// dropping it uncharged gives the room back.
#[derive(Debug)]
pub(crate) struct Admission {
    stream: Option<Arc<StreamBytes>>,
}

impl Admission {
    /// Counts the response of `bytes` (see [`framed_len`]) in place of the reservation.
    pub(crate) fn charge(mut self, bytes: usize) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        {
            let mut held = stream.caller.lock();
            *held = held.saturating_sub(LARGEST_RESPONSE) + bytes;
        }
        *stream.lock_outstanding() += bytes;
        if bytes < LARGEST_RESPONSE {
            stream.caller.released.notify_waiters();
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            stream.caller.give_back(LARGEST_RESPONSE);
        }
    }
}

/// A unary call's `answer`, counted against its caller's budget in place of `admission` (none:
/// a caller that is not counted).
#[inline]
pub(crate) fn counted<M: prost::Message>(
    admission: Option<Admission>,
    answer: M,
) -> tonic::Response<M> {
    if let Some(admission) = admission {
        admission.charge(framed_len(&answer));
    }
    tonic::Response::new(answer)
}

/// A frame's bytes in HTTP/2's hands: dropping them gives their count back.
struct Sent {
    data: Bytes,
    stream: Arc<StreamBytes>,
}

impl AsRef<[u8]> for Sent {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        self.stream.written(self.data.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_response_waits_while_its_caller_holds_its_budget() {
        let budgets = BytesPerCaller::new(2 * LARGEST_RESPONSE);
        let first = budgets.stream("a");
        let second = budgets.stream("a");
        // Two admissions fit a budget of twice the largest response; a third waits.
        let one = first.admit().now_or_never().unwrap();
        let two = second.admit().now_or_never().unwrap();
        let mut third = Box::pin(second.admit());
        assert!(third.as_mut().now_or_never().is_none());
        // Another caller has a budget of its own.
        let other = budgets.stream("b");
        drop(other.admit().now_or_never().unwrap());

        // Charged at their real sizes, the two leave room: the third is admitted.
        one.charge(1000);
        two.charge(LARGEST_RESPONSE);
        assert_eq!(first.caller_holds(), 1000 + LARGEST_RESPONSE);
        assert!(third.as_mut().now_or_never().is_none());
        let frame = second.frame(Bytes::from(vec![0; LARGEST_RESPONSE]));
        assert!(third.as_mut().now_or_never().is_none());
        drop(frame);
        let three = third.now_or_never().unwrap();
        assert_eq!(first.caller_holds(), 1000 + LARGEST_RESPONSE);
        drop(three);
        assert_eq!(first.caller_holds(), 1000);
    }

    #[tokio::test]
    async fn a_waiting_response_is_woken_when_bytes_are_written() {
        let budgets = BytesPerCaller::new(LARGEST_RESPONSE);
        let stream = budgets.stream("a");
        stream.admit().await.charge(10);
        let waiting = tokio::spawn({
            let stream = stream.clone();
            async move { stream.admit().await.charge(20) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(stream.frame(Bytes::from_static(&[0; 10])));
        waiting.await.unwrap();
        assert_eq!(stream.caller_holds(), 20);
    }

    #[test]
    fn a_stream_s_unwritten_bytes_are_given_back_when_it_ends() {
        let budgets = BytesPerCaller::new(LARGEST_RESPONSE);
        let stream = budgets.stream("a");
        let other = budgets.stream("a");
        stream.admit().now_or_never().unwrap().charge(300);
        stream.charge_small(5);
        // A frame larger than what was charged gives back only what was.
        drop(stream.frame(Bytes::from(vec![0; 100])));
        assert_eq!(other.caller_holds(), 205);
        drop(stream.frame(Bytes::from(vec![0; 1000])));
        assert_eq!(other.caller_holds(), 0);
        other.admit().now_or_never().unwrap().charge(50);
        drop(stream);
        assert_eq!(other.caller_holds(), 50);
        drop(other);
        // The caller's entry goes once no stream holds it (pruned lazily).
        for i in 0..16 {
            drop(budgets.stream(&format!("c{i}")));
        }
        assert!(budgets.entries() < 16, "{}", budgets.entries());
    }
}
