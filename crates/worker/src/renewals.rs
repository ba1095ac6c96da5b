//! A worker's lease renewals: each attempt that runs long renews its lease every third of its
//! `heartbeat_timeout` ([`Worker::heartbeat`]), and the renewals of concurrent attempts are
//! written together by [`Worker::renewal_writer`], up to [`RENEWAL_BATCH`] a store call, each
//! judged on its own: one refused abandons its attempt only. The invariants are the crate's
//! (lib.rs).

use super::*;

/// Most lease renewals written in one store call (512).
pub const RENEWAL_BATCH: usize = 512;

/// How long the renewal writer lets renewals gather when fewer than a full
/// [`RENEWAL_BATCH`] are waiting (10 ms), a small part of the shortest renewal interval
/// (`heartbeat_timeout` / 3). The attempts held for a burst all renew their leases at the
/// same instant, a third of `heartbeat_timeout` after their fire time if still waiting for a
/// delivery slot: written one by one, 100,000 of them took the embedded store's writer for
/// seconds (BENCHMARKS.md, "Bookkeeping after the whole burst"). Wall time (tokio's timer),
/// as [`COMPLETION_GATHER`].
pub const RENEWAL_GATHER: Duration = Duration::from_millis(10);

/// A lease renewal waiting to be written, with where to send the store's answer.
pub(crate) type Renewal = (AttemptRef, tokio::sync::oneshot::Sender<Renewed>);

/// The store's answer to one lease renewal of a batch ([`Worker::renewal_writer`]).
#[derive(Debug, Clone)]
pub(crate) enum Renewed {
    /// The lease was extended.
    Extended,
    /// The store refused it: the lease lapsed, or the execution was cancelled or given to
    /// another attempt.
    Refused,
    /// The store failed the batch; `retry` is true when renewing again may succeed.
    Failed { retry: bool, message: String },
}

impl Renewed {
    /// A renewal the store judged: extended to `expiry`, or refused (`None`).
    pub(crate) fn judged(expiry: Option<Timestamp>) -> Self {
        if expiry.is_some() {
            Renewed::Extended
        } else {
            Renewed::Refused
        }
    }

    pub(crate) fn failed(e: &StoreError) -> Self {
        Renewed::Failed {
            retry: e.is_retryable_when_idempotent(),
            message: e.to_string(),
        }
    }
}

/// Why an attempt's lease renewals stopped: the attempt is abandoned.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum LeaseLost {
    /// The store refused a renewal.
    #[error("the lease lapsed, or the execution was cancelled or given to another attempt")]
    Refused,
    /// The store failed a renewal in a way retrying cannot fix, or the renewal writer stopped.
    #[error("{0}")]
    Failed(String),
}

impl Worker {
    /// Renews the attempt's lease every third of the heartbeat timeout, through the renewal
    /// writer; returns only when the store refuses a renewal (the lease lapsed, the execution
    /// was cancelled or re-claimed) or fails in a way retrying cannot fix (a defect);
    /// retryable failures are retried at the next renewal.
    ///
    /// The first renewal is due a third of the timeout after `from`, when the lease was last
    /// set (the fire time of an execution held after a claim ahead, the attempt's start
    /// otherwise), however late this is first polled: a task polled late in a burst renews
    /// at once rather than a third of the timeout after it was polled, past its lease.
    pub(crate) async fn heartbeat(
        &self,
        attempt: &AttemptRef,
        heartbeat_timeout: Dur,
        from: Timestamp,
    ) -> LeaseLost {
        let every = (heartbeat_timeout.as_signed() / 3).max(jiff::SignedDuration::from_millis(100));
        let mut next = from + every;
        loop {
            self.clock.sleep_until(next).await;
            next = self.clock.now() + every;
            match self.renew(attempt).await {
                Renewed::Extended => self.store_reached(true),
                Renewed::Refused => return LeaseLost::Refused,
                // A renewal changes nothing but the lease's expiry: one of unknown outcome
                // is retried like a retryable failure.
                Renewed::Failed {
                    retry: true,
                    message,
                } => {
                    self.store_reached(false);
                    tracing::warn!(error = %message, execution = %attempt.id, "heartbeat failed; retrying")
                }
                Renewed::Failed {
                    retry: false,
                    message,
                } => {
                    tracing::error!(error = %message, execution = %attempt.id,
                        "heartbeat refused for a reason retrying cannot fix; abandoning the attempt");
                    return LeaseLost::Failed(message);
                }
            }
        }
    }

    /// One lease renewal, written with the others waiting ([`Worker::renewal_writer`]), or
    /// alone when no writer runs (the worker is driven by hand).
    pub(crate) async fn renew(&self, attempt: &AttemptRef) -> Renewed {
        let (reply, answer) = tokio::sync::oneshot::channel();
        if self.renewals.send((attempt.clone(), reply)).is_ok() {
            return answer.await.unwrap_or_else(|_| Renewed::Failed {
                retry: false,
                message: "the lease renewal writer has stopped".into(),
            });
        }
        match self
            .store
            .attempt_heartbeat_batch(std::slice::from_ref(attempt))
            .await
        {
            Ok(renewed) => Renewed::judged(renewed.into_iter().next().flatten()),
            Err(e) => Renewed::failed(&e),
        }
    }

    /// Writes the lease renewals waiting in the queue, up to [`RENEWAL_BATCH`] per store call
    /// after at most [`RENEWAL_GATHER`] for a batch to fill, and answers each: each is judged
    /// on its own ([`WorkerStore::attempt_heartbeat_batch`]).
    pub(crate) async fn renewal_writer(
        self,
        mut queue: tokio::sync::mpsc::UnboundedReceiver<Renewal>,
    ) {
        let mut batch = Vec::with_capacity(RENEWAL_BATCH);
        while gather(&mut queue, &mut batch, RENEWAL_BATCH, RENEWAL_GATHER).await > 0 {
            let attempts: Vec<AttemptRef> = batch.iter().map(|(a, _)| a.clone()).collect();
            match self.store.attempt_heartbeat_batch(&attempts).await {
                Ok(renewed) => {
                    for ((_, reply), expiry) in batch
                        .drain(..)
                        .zip(renewed.into_iter().chain(std::iter::repeat(None)))
                    {
                        let _ = reply.send(Renewed::judged(expiry));
                    }
                }
                Err(e) => {
                    let failed = Renewed::failed(&e);
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(failed.clone());
                    }
                }
            }
        }
    }
}
