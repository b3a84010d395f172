//! Exponential backoff for restarting failed controllers and retrying failed items.

use std::time::Duration;

/// Doubling delays from `initial` up to `max`; [`Backoff::reset`] after a success. The
/// default is 100 ms doubling up to 30 s.
///
/// ```
/// use std::time::Duration;
/// use cosi_controllers::Backoff;
/// let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
/// assert_eq!(b.next_delay(), Duration::from_millis(100));
/// assert_eq!(b.next_delay(), Duration::from_millis(200));
/// assert_eq!(b.next_delay(), Duration::from_millis(350));
/// b.reset();
/// assert_eq!(b.next_delay(), Duration::from_millis(100));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// A backoff starting at `initial`, doubling, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            failures: 0,
        }
    }

    /// The delay before the next attempt; each call counts one more failure.
    pub fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.delay_after(self.failures)
    }

    /// The delay after `failures` consecutive failures (1 → `initial`), without counting one.
    pub fn delay_after(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// The longest delay it waits.
    pub fn max_delay(&self) -> Duration {
        self.max
    }

    /// Consecutive failures counted so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Forgets past failures.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

impl Default for Backoff {
    /// 100 ms doubling up to 30 s.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(30))
    }
}

/// Far enough to mean "never" for a timer: the deadline of a delay too long for the clock.
pub(crate) const NEVER: Duration = Duration::from_secs(86400 * 365);

/// `delay` from `now`. A reconcile may ask for any delay (`Duration::MAX` for "not by time")
/// and a backoff may be configured without bound, but an `Instant` overflows (and the `+`
/// panics, outside any reconcile) long before: such a delay waits [`NEVER`].
pub(crate) fn deadline_after(now: tokio::time::Instant, delay: Duration) -> tokio::time::Instant {
    now.checked_add(delay).unwrap_or(now + NEVER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_never_exceeds_max_even_after_many_failures() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        for _ in 0..100 {
            assert!(b.next_delay() <= Duration::from_secs(10));
        }
        assert_eq!(b.failures(), 100);
    }
}
