//! The clock Sundial reads time from.
//!
//! Every component that needs "now" or needs to wait for an instant takes an `Arc<dyn Clock>`
//! instead of reading the wall clock, so that tests drive time by hand ([`ManualClock`]) and
//! never sleep to wait for a schedule.
//!
//! Invariants:
//! - [`Clock::now`] returns a UTC instant truncated to whole milliseconds, the resolution at
//!   which Sundial stores every instant.
//! - [`ManualClock::now`] never goes backwards unless a test calls [`ManualClock::set`] with an
//!   earlier instant on purpose.
//! - A future returned by [`Clock::sleep_until`] completes once `now() >= deadline`, and not
//!   before (it may complete late, never early).

#![warn(missing_docs)]

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

/// A boxed future returned by [`Clock::sleep_until`].
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A source of the current instant and of timed waits.
pub trait Clock: Send + Sync + Debug {
    /// The current instant in UTC, truncated to whole milliseconds.
    fn now(&self) -> Timestamp;

    /// Waits until `now() >= deadline`; returns at once when the deadline has passed.
    ///
    /// # Cancel safety
    /// Dropping the future cancels the wait and has no other effect.
    fn sleep_until(&self, deadline: Timestamp) -> Sleep<'_>;
}

/// Truncates an instant to whole milliseconds (toward the past).
pub fn truncate_ms(t: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond()).unwrap_or(t)
}

/// The operating system's real-time clock, waited on with tokio's timer.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        truncate_ms(Timestamp::now())
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep<'_> {
        Box::pin(async move {
            // Re-check after each wake: the wall clock may have been stepped meanwhile.
            loop {
                let remaining = deadline.duration_since(Timestamp::now());
                if remaining <= SignedDuration::ZERO {
                    return;
                }
                let std = std::time::Duration::try_from(remaining).unwrap_or_default();
                tokio::time::sleep(std).await;
            }
        })
    }
}

/// The system clock shifted by a fixed offset: a node whose own clock is wrong, for failure
/// tests of the guarantee that the store's clock, not the node's, decides what is due.
#[derive(Debug, Clone, Copy)]
pub struct OffsetClock {
    offset: SignedDuration,
}

impl OffsetClock {
    /// The system clock plus `offset` (negative: behind).
    pub fn new(offset: SignedDuration) -> Self {
        OffsetClock { offset }
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> Timestamp {
        truncate_ms(
            Timestamp::now()
                .saturating_add(self.offset)
                .unwrap_or_else(|_| Timestamp::now()),
        )
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep<'_> {
        SystemClock.sleep_until(deadline.saturating_sub(self.offset).unwrap_or(deadline))
    }
}

/// A clock that only moves when a test moves it, waking every sleeper whose deadline it passes.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
    changed: watch::Sender<Timestamp>,
}

impl ManualClock {
    /// A manual clock reading `start` (truncated to milliseconds).
    pub fn new(start: Timestamp) -> Self {
        let start = truncate_ms(start);
        let (changed, _) = watch::channel(start);
        Self {
            now: Mutex::new(start),
            changed,
        }
    }

    /// Moves the clock forward by `by` and wakes the sleepers whose deadline has come.
    pub fn advance(&self, by: SignedDuration) {
        let next = {
            let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
            *now = truncate_ms(now.saturating_add(by).unwrap_or(*now));
            *now
        };
        self.changed.send_replace(next);
    }

    /// Sets the clock to `to` (which may be earlier, to simulate a clock step).
    pub fn set(&self, to: Timestamp) {
        let to = truncate_ms(to);
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
        self.changed.send_replace(to);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep<'_> {
        let mut rx = self.changed.subscribe();
        Box::pin(async move {
            loop {
                if self.now() >= deadline {
                    return;
                }
                if rx.changed().await.is_err() {
                    // The clock is gone; nothing will ever wake us.
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn manual_clock_wakes_sleeper_only_when_deadline_passes() {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = Arc::new(ManualClock::new(start));
        let deadline = start + SignedDuration::from_secs(10);
        let c = clock.clone();
        let sleeper = tokio::spawn(async move { c.sleep_until(deadline).await });
        clock.advance(SignedDuration::from_secs(5));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(SignedDuration::from_secs(5));
        sleeper.await.unwrap();
        assert_eq!(clock.now(), deadline);
    }

    #[test]
    fn now_is_truncated_to_milliseconds() {
        let t = SystemClock.now();
        assert_eq!(t.subsec_nanosecond() % 1_000_000, 0);
    }
}
