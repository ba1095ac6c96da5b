//! The reaper: a maintenance service that retries (or dead-letters) the attempts whose lease
//! lapsed, whichever worker ran them (ARCHITECTURE.md, "The shape"), and fails the workflow runs past
//! their `run_timeout`.
//!
//! Invariants: a reaped attempt is completed only while its lease has lapsed by the store's
//! clock (`only_if_lapsed`), so a worker that renewed its lease meanwhile keeps it; a pass
//! handles lapsed attempts oldest first, [`REAP_BATCH`] at a time in one store transaction,
//! and goes on while batches come back full, for at most [`REAP_PASS_MAX`]: a worker that died
//! holding a burst (up to `max_claimed_ahead` executions) has it retried within seconds of
//! the leases lapsing, not at one batch a second.
//!
//! Worker leases (docs/guarantees.md, "Workers"): each pass first takes over the worker leases that
//! lapsed by the store's clock
//! ([`Store::worker_lease_reap`](sundial_store::Store::worker_lease_reap)), which marks every
//! attempt held under them lapsed, so the same pass retries them. A reaper takes leases over only
//! once it has itself been in touch with the store for [`reap_grace`] (passes no further apart than
//! twice its period): after an outage of the store, or a pause of its own process, every live
//! worker renews its lease within a renewal interval of the store's return, and what a store outage
//! made look lapsed is not taken from a live worker (docs/guarantees.md, "Workers").

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use sundial_core::Dur;
use sundial_store::maintenance::Service;
use tokio::time::Instant;

use crate::Worker;

/// Most attempts one reaper batch handles, in one store transaction (1,000).
pub const REAP_BATCH: u32 = 1000;

/// Most workflow runs one pass fails past their `run_timeout` (100).
pub(crate) const RUN_EXPIRE_BATCH: u32 = 100;

/// How long one reaper pass goes on taking full batches of lapsed attempts (5 s, wall time:
/// a bound on the pass's work, not a schedule, so the process's monotonic clock).
pub const REAP_PASS_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Most worker leases one pass takes over (100).
pub const LEASE_REAP_BATCH: u32 = 100;

/// How long a reaper must have been in touch with the store before it takes worker leases
/// over: a renewal interval (a third of `lease_ttl`) and one second, so that every live worker
/// has renewed its lease since the store answered again (4.3 s for the default 10 s).
pub fn reap_grace(lease_ttl: Dur) -> Duration {
    lease_ttl.as_std() / 3 + Duration::from_secs(1)
}

/// The reaper of one worker process, every `maintenance.reaper_every` (default 1 s,
/// [`sundial_store::maintenance::REAPER_EVERY_DEFAULT`]).
#[derive(Debug)]
pub struct Reaper {
    worker: Worker,
    every: Dur,
    touch: Mutex<Touch>,
}

/// Since when the reaper has been in touch with the store without a gap, and its last pass
/// that reached it (this process's monotonic clock).
#[derive(Debug, Default, Clone, Copy)]
struct Touch {
    since: Option<Instant>,
    last: Option<Instant>,
}

impl Touch {
    /// At the start of a pass at `now`: whether worker leases may be taken over, given the
    /// reaper's `period` and `grace`. A gap of more than two periods since the last pass that
    /// reached the store (the store away, or this process paused) starts the grace again.
    fn begin(&mut self, now: Instant, period: Duration, grace: Duration) -> bool {
        if self
            .last
            .is_none_or(|last| now.saturating_duration_since(last) > period * 2)
        {
            self.since = None;
        }
        self.since
            .is_some_and(|since| now.saturating_duration_since(since) >= grace)
    }

    /// After a pass that started at `started`: `reached` tells whether its store calls succeeded.
    fn end(&mut self, started: Instant, reached: bool) {
        if reached {
            self.last = Some(started);
            self.since.get_or_insert(started);
        } else {
            self.since = None;
        }
    }
}

impl Reaper {
    /// The reaper of `worker`'s store, completing lapsed attempts as `worker` would (its retry
    /// policy, its node id), every `every`; it takes over the worker leases that lapsed by the
    /// store's clock, once in touch with the store for [`reap_grace`] of `worker`'s `lease_ttl`.
    pub fn new(worker: Worker, every: Dur) -> Self {
        Reaper {
            worker,
            every,
            touch: Mutex::default(),
        }
    }
}

#[async_trait]
impl Service for Reaper {
    fn name(&self) -> &'static str {
        "reaper"
    }

    fn every(&self) -> Dur {
        self.every
    }

    /// Takes over the lapsed worker leases (once in touch with the store for [`reap_grace`]),
    /// then one pass of [`Worker::reap_once`]; returns how many attempts it reaped.
    ///
    /// # Errors
    /// The store's, when taking over, listing or completing fails.
    async fn run_once(&self) -> sundial_store::Result<u64> {
        let started = Instant::now();
        let grace = reap_grace(self.worker.config.lease_ttl);
        let take_over = self.touch.lock().unwrap_or_else(|p| p.into_inner()).begin(
            started,
            self.every.as_std(),
            grace,
        );
        let pass = async {
            if take_over {
                let epochs = self
                    .worker
                    .store
                    .worker_lease_reap(LEASE_REAP_BATCH)
                    .await?;
                if !epochs.is_empty() {
                    tracing::info!(epochs = ?epochs,
                        "worker leases lapsed and taken over; their attempts are retried");
                }
            }
            self.worker.reap_once().await
        };
        let reaped = pass.await;
        self.touch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .end(started, reaped.is_ok());
        Ok(reaped? as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_taken_over_only_after_the_grace_of_an_unbroken_touch_with_the_store() {
        let (period, grace) = (Duration::from_secs(1), Duration::from_millis(4300));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut touch = Touch::default();
        // A new reaper: in touch from its first pass, takes over once the grace is past.
        assert!(!touch.begin(at(0), period, grace));
        touch.end(at(0), true);
        for ms in [1000, 2000, 3000, 4000] {
            assert!(!touch.begin(at(ms), period, grace), "{ms}");
            touch.end(at(ms), true);
        }
        assert!(touch.begin(at(5000), period, grace));
        touch.end(at(5000), true);
        // The store away: a failed pass starts the grace again from the next one that reaches it.
        assert!(touch.begin(at(6000), period, grace));
        touch.end(at(6000), false);
        for ms in [7000, 8000, 9000, 10_000, 11_000] {
            assert!(!touch.begin(at(ms), period, grace), "{ms}");
            touch.end(at(ms), true);
        }
        assert!(touch.begin(at(11_400), period, grace));
        touch.end(at(11_400), true);
        // A gap of more than two periods (this process paused): the grace again.
        assert!(!touch.begin(at(30_000), period, grace));
        touch.end(at(30_000), true);
        assert!(!touch.begin(at(31_000), period, grace));
        touch.end(at(31_000), true);
    }
}
