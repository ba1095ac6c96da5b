//! A worker's claims: when to look again (`next_look`), the claim window
//! widened for a burst (`burst_window`), a round of claims side by side, and the
//! start (or hold) of what they handed out. The invariants are the crate's (lib.rs).

use super::*;

impl Worker {
    /// When to look again, on this node's clock, after a round that started `started`
    /// attempts and was handed less than it asked for: [`next_look`]'s wait for the next
    /// execution's due time by the store's clock, or one poll interval when the store cannot
    /// say. The wait is computed as a duration on the store's clock, so a node whose own
    /// clock is skewed neither busy-loops nor oversleeps.
    pub(crate) async fn idle_deadline(&self, started: usize) -> Timestamp {
        let poll = self.config.poll.as_signed();
        let wait = match (
            self.store.execution_next_due().await,
            self.store.now().await,
        ) {
            (Ok(Some(due)), Ok(now)) => {
                let until_due = due.duration_since(now);
                let window = self.claim_window(due, until_due).await;
                let before = self.window_ms.swap(window.as_millis(), Ordering::Relaxed);
                if window.as_millis() > before && until_due <= window.as_signed() {
                    // A burst came within the widened window: claim it now, not once it is
                    // within `claim_ahead`.
                    jiff::SignedDuration::ZERO
                } else {
                    next_look(started, until_due, window.as_signed(), poll)
                }
            }
            _ => poll,
        };
        self.clock.now() + wait
    }

    /// The window for the next claims ahead: `claim_ahead`, widened for a burst by
    /// [`burst_window`] when the next execution `due` (in `until_due`, by the store's clock)
    /// is beyond it, from how many executions come due within `claim_ahead` of it (counted
    /// up to `max_claimed_ahead`). A failed count keeps `claim_ahead`.
    pub(crate) async fn claim_window(
        &self,
        due: Timestamp,
        until_due: jiff::SignedDuration,
    ) -> Dur {
        let near = self.config.claim_ahead;
        if near.as_millis() == 0
            || self.config.max_claimed_ahead == 0
            || until_due <= near.as_signed()
        {
            return near;
        }
        let cap = u32::try_from(self.config.max_claimed_ahead).unwrap_or(u32::MAX);
        match self
            .store
            .execution_due_count(due, due + near.as_signed(), cap)
            .await
        {
            Ok(mass) => burst_window(near, mass, self.config.burst_claim_rate),
            Err(_) => near,
        }
    }

    /// One round of claims: up to [`CLAIMS_AT_ONCE`] claims of up to `claim_batch` each, run
    /// at once (each on a store connection of its own) and asking together for no more than
    /// [`Worker::free`]; returns what it asked for and was handed. A failed claim is logged
    /// and counts as handing none. A claim asks ahead for no more executions than can still
    /// be held beside those its round's earlier claims may be handed; once none can, the
    /// round's other claims ask for due executions only.
    ///
    /// The claims of a round run side by side because a worker busy starting the attempts of
    /// one claim serves the store round trips of a claim sent after it late, tens of
    /// milliseconds a round trip when 512 attempts have just started (BENCHMARKS.md, "Claims
    /// side by side"). Each claim's attempts start as soon as it returns.
    pub(crate) async fn claim_round(&self) -> Round {
        let batch = self.config.claim_batch.max(1) as usize;
        let mut left = self.free().min(batch.saturating_mul(CLAIMS_AT_ONCE));
        let mut round = Round::default();
        let mut claims = tokio::task::JoinSet::new();
        while left > 0 && claims.len() < CLAIMS_AT_ONCE {
            let mut limit = left.min(batch);
            // A claim ahead asks for no more than can still be held (the executions it is
            // handed may all be ahead), and reserves that room before it asks, so that
            // nothing else (another claim, the scheduler's handoff) takes it meanwhile; with no
            // room left, a claim asks for due ones only.
            let room = self.ahead.available_permits();
            let reserved = u32::try_from(limit.min(room))
                .ok()
                .filter(|n| *n > 0)
                .and_then(|n| self.ahead.clone().try_acquire_many_owned(n).ok());
            if let Some(reserved) = &reserved {
                limit = reserved.num_permits();
            }
            let ahead = reserved.is_some();
            left -= limit;
            round.asked += limit;
            let worker = self.clone();
            claims.spawn(async move {
                let asked = std::time::Instant::now();
                let claimed = worker.claim(limit, ahead).await;
                if let Ok(claimed) = &claimed {
                    tracing::debug!(
                        limit,
                        ahead,
                        claimed = claimed.len(),
                        ms = asked.elapsed().as_secs_f64() * 1e3,
                        "claim returned"
                    );
                }
                (claimed, worker.clock.now(), reserved)
            });
        }
        while let Some(done) = claims.join_next().await {
            match done {
                Ok((Ok(claimed), returned_at, reserved)) => {
                    self.store_reached(true);
                    round.handed += claimed.len();
                    round.started += self.start(claimed, returned_at, reserved);
                }
                Ok((Err(StoreError::StaleFence(reason)), _, _)) => {
                    // The worker lease was taken over: the liveness loop learns it at once.
                    tracing::warn!(reason = %reason, "claim refused under this worker's lease; renewing it");
                    self.liveness.check();
                }
                Ok((Err(e), _, _)) if e.is_retryable_when_idempotent() => {
                    self.store_reached(false);
                    tracing::warn!(error = %e, "claiming executions failed; trying again");
                }
                Ok((Err(e), _, _)) => {
                    // A defect: the claim is retried on the next round all the same (the
                    // worker must go on), but said louder.
                    tracing::error!(error = %e, "claiming executions failed");
                }
                Err(e) => {
                    // The claim panicked (a defect): what it claimed, if anything, is
                    // retried by the reaper once its lease lapses.
                    tracing::error!(error = %e, "a claim did not finish");
                }
            }
        }
        round
    }

    /// Claims up to `limit` due executions (0: none, without asking the store), and, when
    /// `ahead`, executions due within `claim_ahead`.
    ///
    /// # Errors
    /// The store's, when the claim fails.
    pub(crate) async fn claim(
        &self,
        limit: usize,
        ahead: bool,
    ) -> Result<Vec<ClaimedExecution>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let ahead_ms = if ahead {
            u32::try_from(self.window_ms.load(Ordering::Relaxed)).unwrap_or(u32::MAX)
        } else {
            0
        };
        let epoch = self.liveness.epoch();
        if epoch.is_none() && self.leased.load(Ordering::Relaxed) {
            // Between a lost lease and the next: nothing is claimed.
            return Ok(Vec::new());
        }
        self.store
            .execution_claim(&ExecutionClaim {
                worker: self.config.node.clone(),
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
                rate_limits: self.config.rate_limits.clone(),
                ahead_ms,
                epoch,
                on_time_first: self.claims_on_time_first(),
            })
            .await
    }

    /// Starts the attempt of each `claimed` execution due now, with its delivery slot and its
    /// `unwritten` permit, and holds each one claimed ahead until its start ([`Worker::hold`]),
    /// counting from `returned_at` (this node's clock when the claim returned), with one
    /// permit of `reserved`, the room its claim reserved (the rest is given back); returns how
    /// many it took on.
    pub(crate) fn start(
        &self,
        claimed: Vec<ClaimedExecution>,
        returned_at: Timestamp,
        mut reserved: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> usize {
        let mut started = 0;
        for execution in claimed {
            let hold = execution.started_at.duration_since(execution.claimed_at);
            let worker = self.clone();
            if hold.is_positive() {
                // The claim asked for no more than its reservation; should the store hand out
                // more, the excess is held all the same (past `max_claimed_ahead`) rather than
                // left running under a lease that stands, where nothing would retry it.
                let held = reserved.as_mut().and_then(|r| r.split(1));
                if held.is_none() {
                    tracing::error!(execution = %execution.id,
                        "claimed ahead past the room reserved for the claim; holding it beyond max_claimed_ahead");
                }
                tokio::spawn(async move {
                    worker.hold(execution, returned_at + hold, held).await;
                });
            } else if let (Ok(slot), Ok(unwritten)) = (
                self.slots.clone().try_acquire_owned(),
                self.unwritten.clone().try_acquire_owned(),
            ) {
                tokio::spawn(async move {
                    worker.attempt(execution, slot).await;
                    drop(unwritten);
                });
            } else {
                // The claims asked for no more than were free, but an execution held after a
                // claim ahead may have taken the permits since: this one waits for them as
                // held ones do, renewing its lease.
                tokio::spawn(async move {
                    worker.hold(execution, returned_at, None).await;
                });
            }
            started += 1;
        }
        started
    }

    /// Whether a held attempt that waited `waited` for its permits (two readings of this
    /// worker's clock, never compared with a store instant) starts: at once unless it
    /// may be past its misfire threshold ([`ClaimedExecution::may_be_late`]); then as its
    /// store judges it ([`Worker::judge_late`]).
    async fn starts_late(
        &self,
        e: &ClaimedExecution,
        waited: jiff::SignedDuration,
        cancelled: &Notify,
    ) -> bool {
        if !e.may_be_late(waited) {
            return true;
        }
        match self.judge_late(e, cancelled).await {
            LateVerdict::Start => true,
            LateVerdict::Missed => false,
            LateVerdict::Stale => {
                log_dropped_before_start(e);
                false
            }
        }
    }

    /// How many more attempts this worker may claim now: free delivery slots, bounded by the
    /// room left for unwritten completions.
    pub(crate) fn free(&self) -> usize {
        self.slots
            .available_permits()
            .min(self.unwritten.available_permits())
    }

    /// Holds a claimed execution until `start_at` (this node's clock), then runs its attempt
    /// once it has a delivery slot and room for its completion, unless it waited for them so
    /// long that its store judges it by its job's misfire policy and it does not start
    /// ([`Worker::starts_late`]); a cancel at any point before drops it. While it waits for the permits its lease is renewed, and a refused renewal
    /// abandons it (the reaper has given the execution to another attempt). `held` is the
    /// `ahead` permit of an execution claimed ahead, given back once it has its `unwritten`
    /// one.
    pub(crate) async fn hold(
        &self,
        e: ClaimedExecution,
        start_at: Timestamp,
        held: Option<tokio::sync::OwnedSemaphorePermit>,
    ) {
        let cancelled = self.register(&e.id);
        // A lease lost meanwhile is found at the start ([`Worker::may_start`]): no watch per
        // held execution (a burst holds up to `max_claimed_ahead`).
        let due = tokio::select! {
            _ = self.clock.sleep_until(start_at) => true,
            _ = cancelled.notified() => false,
        };
        let attempt = AttemptRef {
            id: e.id.clone(),
            attempt: e.attempt,
        };
        // An attempt starts only while its worker's lease is known good (docs/guarantees.md,
        // "Workers"); while the store is presumed unreachable, only after it confirmed a
        // renewal asked for now, so that an outage does not turn it into a delivery whose
        // completion cannot be written.
        let due = due
            && tokio::select! {
                reached = self.may_start(&attempt, e.worker_epoch) => reached,
                _ = cancelled.notified() => false,
            };
        if due {
            let permits = async {
                let waiting = Waiting::new(self);
                let unwritten = self.unwritten.clone().acquire_owned().await;
                let slot = self.slots.clone().acquire_owned().await;
                drop(waiting);
                (unwritten, slot)
            };
            // Under a worker lease, waiting for the permits writes nothing: the lease covers
            // the attempt. Outside one, the attempt's own lease is renewed meanwhile.
            let renewed = async {
                match e.worker_epoch {
                    Some(_) => std::future::pending::<LeaseLost>().await,
                    None => {
                        self.heartbeat(&attempt, e.run.heartbeat_timeout, start_at)
                            .await
                    }
                }
            };
            tokio::select! {
                (unwritten, slot) = permits => {
                    if let (Ok(unwritten), Ok(slot)) = (unwritten, slot) {
                        drop(held);
                        // A lease lost while it waited drops it now.
                        if e.worker_epoch.is_some() && self.liveness.epoch() != e.worker_epoch {
                            log_dropped_before_start(&e);
                        } else if self.starts_late(&e, self.clock.now().duration_since(start_at), &cancelled).await {
                            self.attempt_inner(&e, &cancelled, slot).await;
                        }
                        drop(unwritten);
                    }
                }
                lost = renewed => {
                    tracing::warn!(execution = %e.id, attempt = e.attempt, reason = %lost,
                        "attempt lease lost while waiting for a delivery slot; abandoning it");
                }
                _ = cancelled.notified() => log_dropped_before_start(&e),
            }
        } else {
            log_dropped_before_start(&e);
        }
        self.unregister(&e.id);
    }
}
