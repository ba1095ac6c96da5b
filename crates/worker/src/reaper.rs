//! The reaper: a maintenance service that retries (or dead-letters) the attempts whose lease
//! lapsed, whichever worker ran them (DESIGN.md decision 5), and fails the workflow runs past
//! their `run_timeout`.
//!
//! Invariants: a reaped attempt is completed only while its lease has lapsed by the store's
//! clock (`only_if_lapsed`), so a worker that renewed its lease meanwhile keeps it; a pass
//! handles lapsed attempts oldest first, [`REAP_BATCH`] at a time in one store transaction,
//! and goes on while batches come back full, for at most [`REAP_PASS_MAX`]: a worker that died
//! holding a burst (up to `max_claimed_ahead` executions) has it retried within seconds of
//! the leases lapsing, not at one batch a second.

use async_trait::async_trait;
use sundial_core::Dur;
use sundial_store::maintenance::Service;

use crate::Worker;

/// Most attempts one reaper batch handles, in one store transaction (1,000).
pub const REAP_BATCH: u32 = 1000;

/// Most workflow runs one pass fails past their `run_timeout` (100).
pub(crate) const RUN_EXPIRE_BATCH: u32 = 100;

/// How long one reaper pass goes on taking full batches of lapsed attempts (5 s, wall time:
/// a bound on the pass's work, not a schedule, so the process's monotonic clock).
pub const REAP_PASS_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// The reaper of one worker process, every `maintenance.reaper_every` (default 1 s,
/// [`sundial_store::maintenance::REAPER_EVERY_DEFAULT`]).
#[derive(Debug)]
pub struct Reaper {
    worker: Worker,
    every: Dur,
}

impl Reaper {
    /// The reaper of `worker`'s store, completing lapsed attempts as `worker` would (its retry
    /// policy, its node id), every `every`.
    pub fn new(worker: Worker, every: Dur) -> Self {
        Reaper { worker, every }
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

    /// One pass of [`Worker::reap_once`]; returns how many attempts it reaped.
    ///
    /// # Errors
    /// The store's, when listing or completing fails.
    async fn run_once(&self) -> sundial_store::Result<u64> {
        Ok(self.worker.reap_once().await? as u64)
    }
}
