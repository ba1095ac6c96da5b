//! A worker's attempts: the delivery of a claimed execution to its target under its lease,
//! with its heartbeat, its timeout and its cancellation; the checks before a held execution
//! starts (the worker lease known good, the store reachable); the stop of the attempts of
//! executions cancelled anywhere in the cluster; and the settling of an attempt whose task
//! panics. The invariants are the crate's (lib.rs).

use super::*;

/// Settles an attempt whose task panics: dropped while unwinding, it writes the attempt's end
/// as a transient failure (retried, or dead once attempts are exhausted) from a task of its
/// own. An attempt under a worker lease has no lease of its own before its first heartbeat, so
/// without it a panicked attempt would stay `running` as long as its worker lives.
pub(crate) struct Unwinding<'a> {
    worker: &'a Worker,
    execution: &'a ClaimedExecution,
}

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let (worker, e) = (self.worker.clone(), self.execution.clone());
        worker.unregister(&e.id);
        tokio::spawn(async move {
            let attempt = AttemptRef {
                id: e.id.clone(),
                attempt: e.attempt,
            };
            let failure = Failure::Target(TargetError::Retryable {
                after: None,
                status_code: None,
                message: "the attempt's task panicked in the worker".into(),
            });
            let completion = worker.completion(&e, attempt, Err(failure), false);
            let (next, error) = (completion.next, completion.error.clone());
            let written = worker
                .complete(completion, e.run.heartbeat_timeout.as_std(), e.worker_epoch)
                .await;
            tracing::error!(execution = %e.id, attempt = e.attempt, written,
                "an attempt's task panicked; its end is recorded as a transient failure");
            if written {
                log_ending(&e, next, error.as_deref());
            }
        });
    }
}

/// How an attempt failed in this worker (a lapsed lease is the reaper's, [`Reaper`]).
pub(crate) enum Failure {
    Target(TargetError),
    TimedOut,
}

/// The first pause before a failed judgement of a late attempt is asked again (100 ms).
pub(crate) const JUDGE_RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest pause between two asks of a failed judgement of a late attempt (5 s).
pub(crate) const JUDGE_RETRY_MOST: Duration = Duration::from_secs(5);

/// Most late attempts judged in one store call (512).
pub const JUDGEMENT_BATCH: usize = 512;

/// A late attempt waiting for its judgement, with where to send the store's answer.
pub(crate) type Judgement = (
    AttemptRef,
    tokio::sync::oneshot::Sender<Result<LateVerdict, JudgeFailed>>,
);

/// A failed store call of a judgement: whether asking again may succeed (the call is
/// idempotent, [`StoreError::is_retryable_when_idempotent`]) and what the store said.
#[derive(Debug, Clone)]
pub(crate) struct JudgeFailed {
    retry: bool,
    message: String,
}

impl From<&StoreError> for JudgeFailed {
    fn from(e: &StoreError) -> Self {
        JudgeFailed {
            retry: e.is_retryable_when_idempotent(),
            message: e.to_string(),
        }
    }
}

/// Logs a claimed execution dropped before its attempt started: cancelled, or its lease
/// refused after the store was unreachable.
pub(crate) fn log_dropped_before_start(e: &ClaimedExecution) {
    tracing::info!(namespace = %e.namespace, job = %e.job, slot = %e.scheduled_at,
        execution = %e.id, attempt = e.attempt,
        "attempt dropped before it started: the execution was cancelled or its lease lost");
}

impl Worker {
    /// Asks the store to judge a held first attempt that may have waited past its job's
    /// misfire threshold for a delivery slot ([`ClaimedExecution::may_be_late`],
    /// docs/policies.md, "Late in the worker"): whether it starts, was recorded `missed`, or is
    /// no longer this worker's. A failure a retry may fix (a lost commit included: the
    /// judgement is idempotent) is asked again once the store confirmed this worker's lease
    /// ([`Worker::may_start`]); a lease lost meanwhile, or a cancel, ends it as stale. Any
    /// other failure wrote nothing, and the attempt starts, late, rather than stay `running`
    /// with nothing to retry it. Its delivery slot stays taken meanwhile: under a store outage
    /// nothing could record its outcome anyway. The pauses between two asks double from
    /// [`JUDGE_RETRY_FIRST`] to [`JUDGE_RETRY_MOST`] (wall time).
    pub(crate) async fn judge_late(&self, e: &ClaimedExecution, cancelled: &Notify) -> LateVerdict {
        let attempt = AttemptRef {
            id: e.id.clone(),
            attempt: e.attempt,
        };
        let mut pause = JUDGE_RETRY_FIRST;
        loop {
            match self.judge(&attempt).await {
                Ok(verdict) => {
                    self.store_reached(true);
                    if verdict == LateVerdict::Missed {
                        metrics::counter!("sundial_attempts_judged_late_total", "verdict" => "missed")
                            .increment(1);
                        tracing::info!(namespace = %e.namespace, job = %e.job, slot = %e.scheduled_at,
                            execution = %e.id, state = "missed",
                            "slot recorded missed: it waited in the worker past its misfire threshold");
                    } else if verdict == LateVerdict::Start {
                        metrics::counter!("sundial_attempts_judged_late_total", "verdict" => "start")
                            .increment(1);
                    }
                    return verdict;
                }
                Err(err) if err.retry => {
                    self.store_reached(false);
                    tracing::warn!(error = %err.message, execution = %e.id,
                        "judging a late attempt failed; asking again once the store answers");
                    let again = tokio::select! {
                        good = async {
                            tokio::time::sleep(pause).await;
                            self.may_start(&attempt, e.worker_epoch).await
                        } => good,
                        _ = cancelled.notified() => false,
                    };
                    pause = (pause * 2).min(JUDGE_RETRY_MOST);
                    if !again {
                        return LateVerdict::Stale;
                    }
                }
                Err(err) => {
                    tracing::error!(error = %err.message, execution = %e.id,
                        "judging a late attempt failed for a reason retrying cannot fix; starting it");
                    return LateVerdict::Start;
                }
            }
        }
    }

    /// One late attempt's judgement, asked with the others waiting ([`Worker::judgement_writer`]),
    /// or alone when no writer runs (the worker is driven by hand).
    async fn judge(&self, attempt: &AttemptRef) -> Result<LateVerdict, JudgeFailed> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        if self.judgements.send((attempt.clone(), reply)).is_ok()
            && let Ok(answer) = answer.await
        {
            return answer;
        }
        match self
            .store
            .attempt_judge_late(std::slice::from_ref(attempt))
            .await
        {
            Ok(verdicts) => Ok(verdicts.first().copied().unwrap_or(LateVerdict::Stale)),
            Err(e) => Err(JudgeFailed::from(&e)),
        }
    }

    /// Asks the judgements waiting in the queue, up to [`JUDGEMENT_BATCH`] per store call after
    /// at most [`RENEWAL_GATHER`] for a batch to fill, and answers each: under overload many
    /// held attempts come late at once, and one transaction each would spend the store's
    /// writes exactly when they are short. Each is judged on its own
    /// ([`WorkerStore::attempt_judge_late`]); a failed call fails every judgement of it.
    pub(crate) async fn judgement_writer(
        self,
        mut queue: tokio::sync::mpsc::UnboundedReceiver<Judgement>,
    ) {
        let mut batch = Vec::with_capacity(JUDGEMENT_BATCH);
        while gather(&mut queue, &mut batch, JUDGEMENT_BATCH, RENEWAL_GATHER).await > 0 {
            let attempts: Vec<AttemptRef> = batch.iter().map(|(a, _)| a.clone()).collect();
            match self.store.attempt_judge_late(&attempts).await {
                Ok(verdicts) => {
                    for ((_, reply), verdict) in batch.drain(..).zip(
                        verdicts
                            .into_iter()
                            .chain(std::iter::repeat(LateVerdict::Stale)),
                    ) {
                        let _ = reply.send(Ok(verdict));
                    }
                }
                Err(e) => {
                    let failed = JudgeFailed::from(&e);
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(Err(failed.clone()));
                    }
                }
            }
        }
    }

    /// Runs one claimed attempt to its completion (or abandons it when the lease is lost),
    /// giving back its delivery `slot` as soon as the target has answered.
    pub(crate) async fn attempt(
        &self,
        e: ClaimedExecution,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let cancelled = self.register(&e.id);
        self.attempt_inner(&e, &cancelled, slot).await;
        self.unregister(&e.id);
    }

    /// Resolves once the worker lease `epoch` is lost (never for `None`, an attempt outside
    /// any worker lease).
    pub(crate) async fn lost(&self, epoch: Option<i64>) {
        match epoch {
            Some(epoch) => self.liveness.lost(epoch).await,
            None => std::future::pending().await,
        }
    }

    /// Whether a held attempt may start now: under a worker lease, once the lease is known
    /// good ([`Liveness::confirm`], afresh while the store is presumed unreachable); outside
    /// one, once the store is reachable and the attempt's lease renewed
    /// ([`Worker::store_reachable`]). `false` when the lease was lost or refused.
    pub(crate) async fn may_start(&self, attempt: &AttemptRef, epoch: Option<i64>) -> bool {
        match epoch {
            Some(epoch) => {
                let fresh = *self.store_down.borrow();
                let good = self.liveness.confirm(epoch, fresh).await;
                if good && fresh {
                    self.store_reached(true);
                }
                good
            }
            None => self.store_reachable(attempt).await,
        }
    }

    /// Records whether a store call of this worker succeeded (`true`) or failed in a way a
    /// retry may fix (`false`).
    pub(crate) fn store_reached(&self, reached: bool) {
        let now_down = !reached;
        self.store_down.send_if_modified(|down| {
            let changed = *down != now_down;
            *down = now_down;
            changed
        });
    }

    /// Returns `true` at once while the store is presumed reachable. Else waits until another
    /// store call of this worker succeeds (the claim loop keeps trying), then renews
    /// `attempt`'s lease, whose time may have run out meanwhile: `true` once renewed, `false`
    /// when refused (the execution was cancelled or given to another attempt).
    pub(crate) async fn store_reachable(&self, attempt: &AttemptRef) -> bool {
        let mut down = self.store_down.subscribe();
        if !*down.borrow_and_update() {
            return true;
        }
        loop {
            if down.wait_for(|down| !*down).await.is_err() {
                return false;
            }
            match self.store.attempt_heartbeat(attempt).await {
                Ok(_) => return true,
                Err(StoreError::StaleFence(_)) => return false,
                Err(e) if e.is_retryable_when_idempotent() => self.store_reached(false),
                Err(e) => {
                    tracing::error!(error = %e, execution = %attempt.id,
                        "lease renewal refused for a reason retrying cannot fix; dropping the attempt");
                    return false;
                }
            }
        }
    }

    /// Registers an attempt of this worker for cancellation: the signal that stops it.
    pub(crate) fn register(&self, id: &str) -> Arc<Notify> {
        let cancelled = Arc::new(Notify::new());
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), cancelled.clone());
        cancelled
    }

    /// Removes an attempt's cancellation signal once the attempt has ended.
    pub(crate) fn unregister(&self, id: &str) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    pub(crate) async fn attempt_inner(
        &self,
        e: &ClaimedExecution,
        cancelled: &Notify,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let _unwinding = Unwinding {
            worker: self,
            execution: e,
        };
        let started = self.clock.now();
        if e.attempt == 1 {
            let lag = started.duration_since(e.fire_at).as_secs_f64().max(0.0);
            metrics::histogram!("sundial_trigger_lag_seconds").record(lag);
        }
        let attempt = AttemptRef {
            id: e.id.clone(),
            attempt: e.attempt,
        };
        // Secrets are rendered now, into this attempt's copy of the target only
        // (docs/security.md, "Secrets").
        let rendered = if e.run.secrets.is_empty() {
            None
        } else {
            Some(self.render_secrets(e).await)
        };
        let target = match &rendered {
            Some(Ok(r)) => &r.target,
            _ => &e.run.target,
        };
        let delivery = Delivery {
            execution_id: &e.id,
            namespace: &e.namespace,
            attempt: e.attempt,
            // The attempt's lease if it is not renewed (docs/security.md, "Signed deliveries").
            lease_until: Some(started + e.run.heartbeat_timeout.as_signed()),
            signature: None,
            scheduled_at: e.scheduled_at,
            now: started,
            target,
            keep_output: e.run.output,
        };
        // The attempt's span (exported only with OTLP on): the child of the execution's
        // trigger span, with the id this delivery's `traceparent` names.
        let span = sundial_trace::attempt(&sundial_trace::Attempt {
            execution_id: &e.id,
            attempt: e.attempt,
            namespace: &e.namespace,
            job: &e.job,
            scheduled_at: e.scheduled_at,
            fire_at: e.fire_at,
            node: &self.config.node,
        });
        let deadline = started + e.run.timeout.as_signed();
        // One lease renewal loop from the claim until the completion is written, so a store
        // slow to write outcomes does not let the reaper retry an attempt that already ran.
        let heartbeat = self.heartbeat(&attempt, e.run.heartbeat_timeout, started);
        tokio::pin!(heartbeat);
        // The worker lease lost: the store refuses whatever this attempt would write, so its
        // delivery is dropped. (Its completion, once the target answered, is refused by the
        // store; no watch is kept per attempt waiting for its write.)
        let lost = self.lost(e.worker_epoch);
        // Plain-text credentials of the target are kept out of what the attempt records too
        // (docs/security.md, "Plain-text credentials").
        let credentials = sundial_core::secrets::credential_values(&e.run.target);
        let dispatch = async {
            let result = match &rendered {
                None => self.target.dispatch(&delivery).await,
                Some(Err(unrendered)) => Err(unrendered.clone()),
                Some(Ok(r)) => secrets::scrub(self.target.dispatch(&delivery).await, &r.values),
            };
            if credentials.is_empty() {
                result
            } else {
                secrets::scrub(result, &credentials)
            }
        };
        let result = tokio::select! {
            r = dispatch.instrument(span.clone()) => {
                Some(r.map_err(Failure::Target))
            }
            _ = self.clock.sleep_until(deadline) => Some(Err(Failure::TimedOut)),
            lost = &mut heartbeat => {
                tracing::warn!(execution = %e.id, attempt = e.attempt, reason = %lost,
                    "attempt lease lost; abandoning the attempt");
                sundial_trace::attempt_ended(&span, "abandoned", Some("attempt lease lost"));
                None
            }
            _ = lost => {
                tracing::warn!(execution = %e.id, attempt = e.attempt,
                    "worker lease lost; abandoning the attempt");
                sundial_trace::attempt_ended(&span, "abandoned", Some("worker lease lost"));
                None
            }
            _ = cancelled.notified() => {
                // The store recorded the cancellation; dropping the dispatch stops the work.
                tracing::info!(namespace = %e.namespace, job = %e.job, slot = %e.scheduled_at,
                    execution = %e.id, state = "cancelled", attempt = e.attempt,
                    "execution cancelled; attempt stopped");
                sundial_trace::attempt_ended(&span, "cancelled", None);
                None
            }
        };
        drop(slot);
        let Some(result) = result else { return };
        let completion = self.completion(e, attempt.clone(), result, false);
        let (next, error) = (completion.next, completion.error.clone());
        sundial_trace::attempt_ended(&span, next.outcome(), error.as_deref());
        drop(span);
        // An attempt under a worker lease that ended before its first heartbeat has no lease
        // of its own: the worker's lease covers its outcome until it is written, with no
        // renewal per attempt, however long the store takes (docs/guarantees.md, "Workers").
        // One that ran longer renews its own lease until then.
        let own_lease = e.worker_epoch.is_none()
            || self.clock.now() >= started + e.run.heartbeat_timeout.as_signed() / 3;
        // How long the completion writer may defer it ([`lease_cap`]): without a lease of its
        // own, as long as its budget says.
        let deferrable = if own_lease {
            e.run.heartbeat_timeout.as_std()
        } else {
            Duration::MAX
        };
        let heartbeat = async {
            if own_lease {
                heartbeat.await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            written = self.complete(completion, deferrable, e.worker_epoch) => if written {
                log_ending(e, next, error.as_deref());
            },
            lost = heartbeat => {
                tracing::warn!(execution = %e.id, attempt = e.attempt, reason = %lost,
                    "attempt lease lost before its completion was written");
            }
        }
    }

    /// Stops the local attempts of executions cancelled anywhere in the cluster.
    pub(crate) async fn cancel_loop(self, mut cancelled: tokio::sync::broadcast::Receiver<String>) {
        loop {
            match cancelled.recv().await {
                Ok(id) => {
                    let running = self
                        .running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&id)
                        .cloned();
                    if let Some(stop) = running {
                        stop.notify_one();
                    }
                }
                // Missed some: the heartbeat's refusal still stops those attempts.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
