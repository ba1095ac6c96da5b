//! A worker's completions: the decision of where an execution goes after an attempt
//! ([`Worker::completion`]), and the completions, written in batches by
//! [`Worker::completion_batcher`], deferred while a burst waits for delivery slots
//! ([`defer_budget`]), with the bounds they keep (the unwritten completions per delivery slot,
//! batch sizes and gathers) and the log line of an ending. The invariants are the crate's (lib.rs).

use super::*;
use sundial_store::completion::{AttemptEnd, next_after};

/// Claimed attempts whose completion is not yet written, per delivery slot (4): the bound on
/// the work a worker holds while the store catches up with its completions.
pub const UNWRITTEN_PER_SLOT: usize = 4;

/// Attempts a worker holds from claim to written completion: [`UNWRITTEN_PER_SLOT`] per
/// delivery slot, and one for each execution it may hold after a claim ahead, so that a burst
/// it claimed ahead is delivered whole while its completions wait
/// ([`defer_budget`]): such an execution is in the worker's memory already.
pub(crate) fn unwritten_capacity(config: &WorkerConfig) -> usize {
    config
        .max_in_flight
        .saturating_mul(UNWRITTEN_PER_SLOT)
        .saturating_add(config.max_claimed_ahead)
}

/// Most completions written in one store call.
pub const COMPLETION_BATCH: usize = 256;

/// How long the completion writer lets completions gather when fewer than a full
/// [`COMPLETION_BATCH`] are waiting (10 ms): group commit. Without it, a worker keeping up
/// with a steady 6,000 executions/s wrote its completions about 20 at a time, some 300
/// transactions a second, each paying a commit's fixed cost (the log pages it rewrites, its
/// round trips to the store). A full batch is written at once. The wait delays when an
/// outcome is recorded, never when an attempt starts. Wall time (tokio's timer), not the
/// injected clock: it paces store calls and has nothing to do with when anything is due.
pub const COMPLETION_GATHER: Duration = Duration::from_millis(10);

/// How long the completion writer defers its writes while attempts wait to start, for a
/// few waiting (500 ms): the floor of [`defer_budget`], counted from when the writer last
/// caught up with its queue. Deliveries before bookkeeping.
///
/// A 10,000 burst claimed ahead starts all its attempts at once; writing their completions
/// meanwhile kept a store backend busy on one of the two cores for most of the burst and
/// delivered it at half the rate HTTP alone reaches (BENCHMARKS.md, "Deliveries before
/// bookkeeping"). Deferred, the outcome is recorded that much later; the attempt's lease
/// is renewed all the while, and each completion is still fenced on its own. The writer
/// defers only while some attempt past its start waits for a delivery slot or room for its
/// completion, never once the room for unwritten completions is down to `max_in_flight`, and,
/// past its budget, writes back to back until it has caught up, so under a lasting backlog
/// it writes as fast as it did without deferring. Wall time (tokio's timer), as
/// [`COMPLETION_GATHER`].
pub const COMPLETION_DEFER_MIN: Duration = Duration::from_millis(500);

/// The longest the completion writer defers (5 s): [`defer_budget`] for a burst of
/// 100,000 waiting attempts or more.
pub const COMPLETION_DEFER_MAX: Duration = Duration::from_secs(5);

/// The delivery rate the completion writer counts on while a burst's attempts wait
/// (20,000 a second), below what HTTP delivery alone reached on the benchmark machines
/// (38,000–72,000 a second; BENCHMARKS.md, "The delivery ceiling").
pub const BURST_DELIVERY_RATE: u32 = 20_000;

/// How long the completion writer may defer since it last caught up, given the most attempts
/// seen waiting to start meanwhile (`peak_waiting`): the time their deliveries take at
/// [`BURST_DELIVERY_RATE`], within [`COMPLETION_DEFER_MIN`]–[`COMPLETION_DEFER_MAX`]. A
/// burst's completions then wait until its deliveries are done, whatever its size: writing
/// those of a 100,000 burst held whole during its deliveries kept a PostgreSQL backend busy
/// on one of the two cores and drained it at 36,000 a second instead of 53,000
/// (BENCHMARKS.md, "Bookkeeping after the whole burst"). A few waiting (a slow target, a
/// small burst) get the floor, as before.
pub fn defer_budget(peak_waiting: usize) -> Duration {
    let rate = u64::from(BURST_DELIVERY_RATE);
    let ms = (peak_waiting as u64).saturating_mul(1000) / rate;
    Duration::from_millis(ms).clamp(COMPLETION_DEFER_MIN, COMPLETION_DEFER_MAX)
}

/// The longest the completion writer may defer a completion whose attempt's lease is
/// `heartbeat_timeout` long: a sixth of it (5 s for the default 30 s), so that a renewal late
/// by its whole interval (a third) still finds the lease live. A burst of attempts with a
/// short `heartbeat_timeout` renews many leases while its outcomes wait; a trial with a 3 s
/// `heartbeat_timeout` saw renewals fall behind and leases lapse while completions were
/// deferred. An attempt under a worker lease that has no lease of its own (it ended before its
/// first heartbeat) is not capped: the worker's lease, renewed on its own, covers its outcome.
pub fn lease_cap(heartbeat_timeout: Duration) -> Duration {
    heartbeat_timeout / 6
}

/// Whether the completion writer defers its next batch: some attempt past its start is
/// `waiting` for a delivery slot or room for its completion, more than `reserve` unwritten
/// completions can still be held (`room`), and the writer has deferred (`deferred`) for less
/// than its `budget` ([`defer_budget`]) since it last caught up with its queue.
pub(crate) fn defers_writing(
    waiting: usize,
    room: usize,
    reserve: usize,
    deferred: Duration,
    budget: Duration,
) -> bool {
    waiting > 0 && room > reserve && deferred < budget
}

impl Worker {
    /// The completion of an attempt of `e` that ended with `result`: its outcome and error as
    /// recorded, and where the execution goes ([`sundial_store::completion::next_after`], with
    /// this worker's jitter source).
    pub(crate) fn completion(
        &self,
        e: &ClaimedExecution,
        attempt: AttemptRef,
        result: Result<sundial_target::Outcome, Failure>,
        only_if_lapsed: bool,
    ) -> AttemptComplete {
        let (mut detail, mut output) = (None, None);
        let (outcome, status_code, error, end) = match result {
            Ok(ok) => {
                detail = ok.detail;
                output = ok.output;
                (
                    AttemptOutcome::Succeeded,
                    ok.status_code,
                    None,
                    AttemptEnd::Succeeded,
                )
            }
            Err(Failure::Target(TargetError::Permanent {
                status_code,
                message,
            })) => (
                AttemptOutcome::PermanentFailure,
                status_code,
                Some(message),
                AttemptEnd::Permanent,
            ),
            Err(Failure::Target(TargetError::Retryable {
                after,
                status_code,
                message,
            })) => (
                AttemptOutcome::TransientFailure,
                status_code,
                Some(message),
                AttemptEnd::Transient { after },
            ),
            Err(Failure::TimedOut) => (
                AttemptOutcome::TimedOut,
                None,
                Some(format!("attempt timed out after {}", e.run.timeout)),
                AttemptEnd::Transient { after: None },
            ),
        };
        let next = next_after(
            end,
            e.attempt,
            e.max_attempts,
            &e.run.retry,
            (self.jitter)(),
        );
        metrics::counter!("sundial_attempts_total", "outcome" => outcome.as_str()).increment(1);
        AttemptComplete {
            detail,
            attempt,
            outcome,
            status_code,
            error,
            next,
            only_if_lapsed,
            output,
        }
    }

    /// Writes a completion, retrying while the store is unavailable (if it never lands, the
    /// lease lapses and the reaper re-runs the attempt: at least once, docs/guarantees.md#g2-at-least-once). Completions
    /// of concurrent attempts are written together, one transaction per batch (group commit,
    /// see [`Worker::completion_batcher`]).
    pub(crate) async fn complete(
        &self,
        completion: AttemptComplete,
        heartbeat_timeout: Duration,
        epoch: Option<i64>,
    ) -> bool {
        let mut backoff = Duration::from_millis(50);
        // Under a worker lease the completion is tried until it is written or refused, however
        // long the store is away: the lease stands until a reaper takes it over, and then the
        // store refuses it. Outside one, eight tries, then the attempt's lease lapses.
        let tries = if epoch.is_some() { usize::MAX } else { 8 };
        for _ in 0..tries {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let result = match self
                .batcher
                .send((completion.clone(), heartbeat_timeout, reply))
            {
                Ok(()) => answer.await.unwrap_or(Err(CompletionError::WriterStopped)),
                // No batcher running (the worker is driven by hand): write it alone.
                Err(_) => self
                    .store
                    .attempt_complete_batch(std::slice::from_ref(&completion))
                    .await
                    .map(|v| v.first().copied().unwrap_or(false))
                    .map_err(|e| CompletionError::from(&e)),
            };
            match result {
                Ok(true) => {
                    self.store_reached(true);
                    return true;
                }
                Ok(false) => {
                    self.store_reached(true);
                    tracing::warn!(execution = %completion.attempt.id, attempt = completion.attempt.attempt,
                        "completion refused: the attempt is no longer current");
                    return false;
                }
                Err(CompletionError::Store {
                    retry: true,
                    message,
                }) => {
                    self.store_reached(false);
                    tracing::warn!(error = %message, execution = %completion.attempt.id, "completion failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    // Not retryable (a defect, or the writer stopped): the lease lapses and the
                    // reaper retries the attempt.
                    tracing::error!(error = %e, execution = %completion.attempt.id,
                        "completion not written; the reaper will retry the attempt");
                    return false;
                }
            }
        }
        false
    }

    /// Waits while [`defers_writing`] says to, `behind` being since when the writer is behind
    /// its queue and the most attempts it saw waiting meanwhile, for no longer than
    /// [`lease_cap`] of the batch's `shortest_lease` (`heartbeat_timeout`); looks again as soon as no
    /// attempt waits, and every [`DEFER_LOOK`] for the room left.
    pub(crate) async fn defer_writing(&self, behind: &mut Behind, shortest_lease: Duration) {
        let reserve = self.config.max_in_flight;
        loop {
            let waiting = self.waiting.load(Ordering::SeqCst);
            behind.peak_waiting = behind.peak_waiting.max(waiting);
            let room = self.unwritten.available_permits();
            let budget = defer_budget(behind.peak_waiting).min(lease_cap(shortest_lease));
            if !defers_writing(waiting, room, reserve, behind.since.elapsed(), budget) {
                return;
            }
            tokio::select! {
                _ = self.none_waiting.notified() => {}
                _ = tokio::time::sleep(DEFER_LOOK) => {}
            }
        }
    }

    /// Writes the completions waiting in the queue, up to [`COMPLETION_BATCH`] per store call,
    /// and answers each with whether it applied; defers while attempts wait to start
    /// ([`defer_budget`]).
    pub(crate) async fn completion_batcher(
        self,
        mut queue: tokio::sync::mpsc::UnboundedReceiver<Completion>,
    ) {
        let mut batch = Vec::with_capacity(COMPLETION_BATCH);
        // Since when the writer has had more queued than the batch it wrote: its deferrals
        // since then count against the budget.
        let mut behind: Option<Behind> = None;
        while gather(&mut queue, &mut batch, COMPLETION_BATCH, COMPLETION_GATHER).await > 0 {
            let shortest_lease = batch.iter().map(|(_, lease, _)| *lease).min();
            self.defer_writing(
                behind.get_or_insert_with(Behind::now),
                shortest_lease.unwrap_or(Duration::ZERO),
            )
            .await;
            let completions: Vec<AttemptComplete> =
                batch.iter().map(|(c, _, _)| c.clone()).collect();
            let asked = std::time::Instant::now();
            let written = self.store.attempt_complete_batch(&completions).await;
            tracing::debug!(
                completions = completions.len(),
                ms = asked.elapsed().as_secs_f64() * 1e3,
                "completion batch returned"
            );
            match written {
                Ok(applied) => {
                    for ((_, _, reply), ok) in batch
                        .drain(..)
                        .zip(applied.into_iter().chain(std::iter::repeat(false)))
                    {
                        let _ = reply.send(Ok(ok));
                    }
                }
                Err(e) => {
                    let error = CompletionError::from(&e);
                    for (_, _, reply) in batch.drain(..) {
                        let _ = reply.send(Err(error.clone()));
                    }
                }
            }
            if queue.is_empty() {
                behind = None;
            }
        }
    }
}

/// Logs how an execution's attempt ended, once its completion is written: one INFO line per
/// execution that ended `failed` or `dead` (namespace, job, slot, state, attempt, error), so
/// an operator can follow failures in the log; DEBUG for a success or a retry, which at peak
/// would be thousands of lines a second. A dead letter also counts in
/// `sundial_dead_letters_total{namespace}`.
pub(crate) fn log_ending(e: &ClaimedExecution, next: NextStep, error: Option<&str>) {
    let (state, retry_in) = next.state();
    match next {
        NextStep::Failed | NextStep::Dead => {
            if next == NextStep::Dead {
                metrics::counter!("sundial_dead_letters_total", "namespace" => e.namespace.clone())
                    .increment(1);
            }
            tracing::info!(
                namespace = %e.namespace, job = %e.job, slot = %e.scheduled_at, execution = %e.id,
                state = state.as_str(), attempt = e.attempt, error = error.unwrap_or(""),
                "execution ended"
            )
        }
        NextStep::Succeeded => tracing::debug!(
            namespace = %e.namespace, job = %e.job, slot = %e.scheduled_at, execution = %e.id,
            state = state.as_str(), attempt = e.attempt, "execution ended"
        ),
        NextStep::RetryAfter(_) => tracing::debug!(
            namespace = %e.namespace, job = %e.job, slot = %e.scheduled_at, execution = %e.id,
            attempt = e.attempt, error = error.unwrap_or(""), retry_in = ?retry_in,
            "attempt failed; retrying"
        ),
    }
}
