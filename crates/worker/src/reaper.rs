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
//! ([`WorkerStore::worker_lease_reap`](sundial_store::WorkerStore::worker_lease_reap)), which marks every
//! attempt held under them lapsed, so the same pass retries them. A reaper takes leases over only
//! once it has itself been in touch with the store for [`reap_grace`] (passes no further apart than
//! twice its period): after an outage of the store, or a pause of its own process, every live
//! worker renews its lease within a renewal interval of the store's return, and what a store outage
//! made look lapsed is not taken from a live worker (docs/guarantees.md, "Workers").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sundial_core::Dur;
use sundial_core::execution::AttemptOutcome;
use sundial_store::completion::{AttemptEnd, next_after};
use sundial_store::maintenance::Service;
use sundial_store::{
    AttemptComplete, AttemptRef, ClaimedExecution, Error as StoreError, WorkerStore,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::completions::log_ending;
use crate::{Jitter, random_jitter};

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
pub struct Reaper {
    store: Arc<dyn WorkerStore>,
    /// Notified after a pass that returned attempts to the queue (this process's worker).
    wake: Arc<Notify>,
    /// The worker leases' `lease_ttl`, which sets [`reap_grace`].
    lease_ttl: Dur,
    every: Dur,
    jitter: Jitter,
    touch: Mutex<Touch>,
}

impl std::fmt::Debug for Reaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reaper")
            .field("lease_ttl", &self.lease_ttl)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
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
    /// The reaper of `store`, every `every`: it retries (or dead-letters) the attempts whose
    /// lease lapsed, by each execution's own retry policy, and takes over the worker leases
    /// that lapsed by the store's clock once in touch with the store for [`reap_grace`] of
    /// `lease_ttl` (the worker leases' TTL); it notifies `wake` after a pass that returned
    /// attempts to the queue.
    pub fn new(store: Arc<dyn WorkerStore>, wake: Arc<Notify>, lease_ttl: Dur, every: Dur) -> Self {
        Reaper {
            store,
            wake,
            lease_ttl,
            every,
            jitter: random_jitter(),
            touch: Mutex::default(),
        }
    }

    /// This reaper with `jitter` as the source of its retry delays' jitter.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// What the reaper writes for the lapsed attempt of `e`: outcome `lease_lapsed`, the
    /// execution retried by its policy or dead once its attempts are spent, fenced to apply
    /// only while the lease is still lapsed.
    fn lapsed(&self, e: &ClaimedExecution) -> AttemptComplete {
        let next = next_after(
            AttemptEnd::Transient { after: None },
            e.attempt,
            e.max_attempts,
            &e.run.retry,
            (self.jitter)(),
        );
        metrics::counter!("sundial_attempts_total", "outcome" => AttemptOutcome::LeaseLapsed.as_str())
            .increment(1);
        AttemptComplete {
            attempt: AttemptRef {
                id: e.id.clone(),
                attempt: e.attempt,
            },
            outcome: AttemptOutcome::LeaseLapsed,
            status_code: None,
            error: Some("the worker's lease lapsed (worker crashed or lost the store)".into()),
            detail: None,
            next,
            only_if_lapsed: true,
            output: None,
        }
    }

    /// Returns attempts whose lease lapsed to the queue with backoff (or dead-letters them),
    /// and fails the workflow runs past their `run_timeout`; returns how many attempts were
    /// reaped.
    ///
    /// # Errors
    /// The store's, when listing or completing fails.
    pub async fn reap_once(&self) -> Result<usize, StoreError> {
        let started = std::time::Instant::now();
        let mut reaped = 0;
        loop {
            let lapsed = self.store.attempt_list_lapsed(REAP_BATCH).await?;
            let completions: Vec<AttemptComplete> = lapsed.iter().map(|e| self.lapsed(e)).collect();
            // Each is fenced on its own: one its worker renewed meanwhile is left (false).
            let applied = self.store.attempt_complete_batch(&completions).await?;
            for ((e, completion), applied) in lapsed.iter().zip(&completions).zip(applied) {
                if applied {
                    reaped += 1;
                    tracing::debug!(execution = %e.id, attempt = e.attempt, "reaped an attempt whose lease lapsed");
                    log_ending(e, completion.next, completion.error.as_deref());
                }
            }
            // A full batch may have left more behind it (a worker that died holding a burst):
            // go on, within the pass's budget.
            if lapsed.len() < REAP_BATCH as usize || started.elapsed() >= REAP_PASS_MAX {
                break;
            }
        }
        if reaped > 0 {
            tracing::info!(attempts = reaped, "reaped attempts whose lease lapsed");
        }
        // Workflow runs past their `run_timeout` fail, their running tasks stopped
        // (docs/workflows.md#runs), by the store's clock.
        let expired = self.store.run_expire(RUN_EXPIRE_BATCH).await?;
        if expired > 0 {
            tracing::info!(
                runs = expired,
                "workflow runs failed past their run_timeout"
            );
        }
        if reaped > 0 {
            self.wake.notify_one();
        }
        Ok(reaped)
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
    /// then one pass of [`Reaper::reap_once`]; returns how many attempts it reaped.
    ///
    /// # Errors
    /// The store's, when taking over, listing or completing fails.
    async fn run_once(&self) -> sundial_store::Result<u64> {
        let started = Instant::now();
        let grace = reap_grace(self.lease_ttl);
        let take_over = self.touch.lock().unwrap_or_else(|p| p.into_inner()).begin(
            started,
            self.every.as_std(),
            grace,
        );
        let pass = async {
            if take_over {
                let epochs = self.store.worker_lease_reap(LEASE_REAP_BATCH).await?;
                if !epochs.is_empty() {
                    tracing::info!(epochs = ?epochs,
                        "worker leases lapsed and taken over; their attempts are retried");
                }
            }
            self.reap_once().await
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
