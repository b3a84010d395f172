//! [`Call`]: what a [`crate::State`] method returns — a future that may be complete already.
//!
//! A backend that answers from memory has its result the moment it is called; one that talks
//! to a disk, a server or another task has to wait. A trait object cannot return each
//! backend's own future type, and boxing a future for every call costs an allocation and a
//! free — on an in-memory store as much as a tenth of a call. So a call is either **done**
//! (its result, held inline, no allocation) or **pending** (a boxed future), and awaiting it
//! is the same either way.
//!
//! A done call did its work when the method was called: its effect does not wait for the
//! first poll, so dropping it unawaited does not undo a write. Treat a call like a request
//! sent — await it for the result. A pending call, like any future, does nothing until polled.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::Result;

/// The result of a [`crate::State`] method: complete already, or a future to await.
///
/// ```
/// use cosi_core::{Call, Error, Pointer};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// // A backend that has the answer at once returns it done; one that waits, pending.
/// let done: Call<'_, u32> = Call::done(Ok(7));
/// let pending: Call<'_, u32> = Call::pending(async { Ok(8) });
/// assert!(done.is_done() && !pending.is_done());
/// assert_eq!(done.await.unwrap() + pending.await.unwrap(), 15);
///
/// // `now` takes a done call's result without awaiting, and hands a pending call back.
/// let missing = Pointer::new("ns", "Things.test.cosi.dev", "x");
/// let call: Call<'_, u32> = Call::done(Err(Error::NotFound { pointer: missing }));
/// assert!(matches!(call.now(), Ok(Err(Error::NotFound { .. }))));
/// assert!(Call::<u32>::pending(async { Ok(1) }).now().is_err());
/// # });
/// ```
#[must_use = "a call's result is known only by awaiting it"]
pub struct Call<'a, T>(Inner<'a, T>);

enum Inner<'a, T> {
    /// The result; `None` once taken by a poll.
    Done(Option<Result<T>>),
    Pending(Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>),
}

impl<'a, T> Call<'a, T> {
    /// A call that completed when it was made.
    #[inline]
    pub fn done(result: Result<T>) -> Self {
        Call(Inner::Done(Some(result)))
    }

    /// A call whose result `future` will give (boxed).
    pub fn pending(future: impl Future<Output = Result<T>> + Send + 'a) -> Self {
        Call(Inner::Pending(Box::pin(future)))
    }

    /// The call `then` makes with the value of `first`, or `first`'s error as a done call: a
    /// wrapper that checks before it forwards (access rules, routing) keeps the wrapped
    /// store's done calls done.
    ///
    /// ```
    /// use cosi_core::{Call, Error};
    /// let allowed: Call<'_, u32> = Call::after(Ok(2), |n| Call::done(Ok(n * 10)));
    /// assert!(matches!(allowed.now(), Ok(Ok(20))));
    /// let refused: Call<'_, u32> =
    ///     Call::after(Err::<u32, _>(Error::invalid("ns/T/x", "id", "refused")), |n| Call::done(Ok(n)));
    /// assert!(matches!(refused.now(), Ok(Err(Error::InvalidArgument { .. }))));
    /// ```
    #[inline]
    pub fn after<U>(first: Result<U>, then: impl FnOnce(U) -> Self) -> Self {
        match first {
            Ok(value) => then(value),
            Err(error) => Call::done(Err(error)),
        }
    }

    /// Whether the result is here already (awaiting it will not wait).
    pub fn is_done(&self) -> bool {
        matches!(self.0, Inner::Done(Some(_)))
    }

    /// The result if the call is done, or the call itself to await.
    ///
    /// # Panics
    ///
    /// If the call was polled to completion before (its result is gone).
    pub fn now(self) -> std::result::Result<Result<T>, Self> {
        match self.0 {
            Inner::Done(Some(result)) => Ok(result),
            Inner::Done(None) => panic!("`Call::now` after the call completed"),
            pending => Err(Call(pending)),
        }
    }

    /// A call with `f` applied to this one's result: at once if it is done, else when it
    /// completes.
    ///
    /// ```
    /// use cosi_core::Call;
    /// let call: Call<'_, u32> = Call::done(Ok(2));
    /// assert!(matches!(call.map(|r| r.map(|n| n * 10)).now(), Ok(Ok(20))));
    /// ```
    pub fn map<U>(self, f: impl FnOnce(Result<T>) -> Result<U> + Send + 'a) -> Call<'a, U>
    where
        T: 'a,
    {
        match self.0 {
            Inner::Done(Some(result)) => Call::done(f(result)),
            Inner::Done(None) => panic!("`Call::map` after the call completed"),
            Inner::Pending(future) => Call::pending(async move { f(future.await) }),
        }
    }
}

// The result is moved out, never pinned in place, and the pending future is pinned in its box.
impl<T> Unpin for Call<'_, T> {}

impl<T> Future for Call<'_, T> {
    type Output = Result<T>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        match &mut self.0 {
            Inner::Done(result) => {
                Poll::Ready(result.take().expect("a `Call` polled after it completed"))
            }
            Inner::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

impl<T> fmt::Debug for Call<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Inner::Done(Some(_)) => "Call::Done",
            Inner::Done(None) => "Call::Taken",
            Inner::Pending(_) => "Call::Pending",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_done_call_gives_its_result_on_the_first_poll() {
        let call: Call<'_, u32> = Call::done(Ok(3));
        assert!(call.is_done());
        assert_eq!(block_on(call).unwrap(), 3);
    }

    #[test]
    fn a_pending_call_does_nothing_until_polled() {
        let ran = std::sync::atomic::AtomicBool::new(false);
        let call: Call<'_, ()> = Call::pending(async {
            ran.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        });
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        block_on(call).unwrap();
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn a_mapped_pending_call_maps_when_it_completes() {
        let call: Call<'_, u32> = Call::pending(async { Ok(4) });
        let mapped = call.map(|r| r.map(|n| n + 1));
        assert!(!mapped.is_done());
        assert_eq!(block_on(mapped).unwrap(), 5);
    }
}
