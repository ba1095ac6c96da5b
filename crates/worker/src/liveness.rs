//! A worker process's liveness lease (docs/guarantees.md, "Workers").
//!
//! ```text
//!  none ──acquire──▶ held(epoch) ──renew every lease_ttl / 3──▶ held(epoch)
//!                     │  renewal failed: retried every RENEW_RETRY, the lease unknown
//!                     └─ renewal refused (a reaper took it over) ──▶ none ──acquire──▶ held(epoch + n)
//! ```
//!
//! Invariants:
//! - One store write renews the lease, whatever the number of attempts held under it.
//! - The lease is known good until the monotonic instant a renewal was sent plus `lease_ttl`:
//!   the store set its expiry to its own clock at the renewal plus `lease_ttl`, and that reading
//!   came after the send. A held execution starts only while at least [`start_margin`] of a
//!   lease's time is known left ([`Liveness::confirm`]); otherwise the worker asks the store
//!   (renews at once) and waits for its answer rather than start.
//! - A lease is lost only when the store says so (a renewal refused, a claim refused): then the
//!   epoch is withdrawn at once, every delivery under it is stopped ([`Liveness::lost`]), every
//!   execution held under it is dropped when it comes to start ([`Liveness::confirm`]), nothing
//!   under it is written (the store refuses it), and a new lease is taken. A worker cut off from
//!   the store keeps what it holds, starts nothing, and learns which it is when the store
//!   answers again.

use std::sync::Arc;
use std::time::Duration;

use sundial_core::Dur;
use sundial_store::{Error as StoreError, WorkerStore};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// How soon a failed lease renewal (or acquisition) is tried again (500 ms): a lease whose
/// renewals fail runs out, so the retries come well within a renewal interval.
pub const RENEW_RETRY: Duration = Duration::from_millis(500);

/// What this process knows of its worker lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseState {
    /// The epoch held: `None` before the first lease and from a lease's loss until the next.
    pub epoch: Option<i64>,
    /// When (this process's monotonic clock) the last renewal the store confirmed was sent:
    /// the lease is good until this plus `lease_ttl`.
    pub confirmed_at: Option<Instant>,
    /// Renewals confirmed so far (for waiters that want one after they asked).
    pub confirmed: u64,
}

/// The share of `lease_ttl` a held execution needs known left on the worker's lease to start
/// without asking the store (a half): with renewals every third of `lease_ttl`, a lease whose
/// renewal is more than a sixth of `lease_ttl` late is checked with the store first.
pub fn start_margin(ttl: Dur) -> Duration {
    ttl.as_std() / 2
}

/// A worker process's liveness lease: taken and renewed by [`Liveness::run`], consulted by
/// every claim and by every held execution before it starts.
#[derive(Debug)]
pub struct Liveness {
    store: Arc<dyn WorkerStore>,
    node: String,
    ttl: Dur,
    state: watch::Sender<LeaseState>,
    /// The epoch alone, changed only when the lease is taken or lost: what every attempt held
    /// or running waits on ([`Liveness::lost`]), so a renewal wakes none of them.
    epoch: watch::Sender<Option<i64>>,
    /// Asks the renewal loop to renew now.
    ask: Notify,
}

impl Liveness {
    /// The lease of worker `node` on `store`, `ttl` long, not yet taken ([`Liveness::run`]
    /// takes it).
    pub fn new(store: Arc<dyn WorkerStore>, node: impl Into<String>, ttl: Dur) -> Self {
        Liveness {
            store,
            node: node.into(),
            ttl,
            state: watch::Sender::new(LeaseState::default()),
            epoch: watch::Sender::new(None),
            ask: Notify::new(),
        }
    }

    /// What this process knows of its lease now.
    pub fn state(&self) -> LeaseState {
        *self.state.borrow()
    }

    /// A receiver of the epoch held, changed only when a lease is taken or lost.
    pub fn epochs(&self) -> watch::Receiver<Option<i64>> {
        self.epoch.subscribe()
    }

    /// The epoch to claim under: the lease held, if any.
    pub fn epoch(&self) -> Option<i64> {
        *self.epoch.borrow()
    }

    /// Records the epoch held (`None`: none), in both channels.
    fn set_epoch(&self, epoch: Option<i64>, confirmed_at: Option<Instant>) {
        self.state.send_modify(|s| {
            s.epoch = epoch;
            s.confirmed_at = confirmed_at;
            if confirmed_at.is_some() {
                s.confirmed += 1;
            }
        });
        self.epoch.send_if_modified(|held| {
            let changed = *held != epoch;
            *held = epoch;
            changed
        });
    }

    /// Asks for a renewal now (a claim was refused, or a held execution wants to start).
    pub fn check(&self) {
        self.ask.notify_one();
    }

    /// Resolves once `epoch` is no longer this process's lease: the store refused it, so a
    /// delivery under it is stopped. Never resolves while it is held.
    pub async fn lost(&self, epoch: i64) {
        let mut rx = self.epoch.subscribe();
        // The sender lives as long as `self`, so the wait ends only by the predicate.
        let _ = rx.wait_for(|held| *held != Some(epoch)).await;
    }

    /// Whether an execution held under `epoch` may start now: `true` while at least
    /// [`start_margin`] of the lease is known left and, with `fresh`, a renewal sent after this
    /// call was confirmed; otherwise asks for a renewal and waits for the store's answer,
    /// however long the store takes to answer. `false` once `epoch` is lost.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads the lease's state and asks for a renewal.
    pub async fn confirm(&self, epoch: i64, fresh: bool) -> bool {
        let asked = Instant::now();
        let margin = start_margin(self.ttl);
        let ttl = self.ttl.as_std();
        let mut rx = self.state.subscribe();
        loop {
            let s = *rx.borrow_and_update();
            if s.epoch != Some(epoch) {
                return false;
            }
            let left = s
                .confirmed_at
                .map(|at| (at + ttl).saturating_duration_since(Instant::now()));
            let good = left.is_some_and(|left| left >= margin);
            let recent = !fresh || s.confirmed_at.is_some_and(|at| at >= asked);
            if good && recent {
                return true;
            }
            self.ask.notify_one();
            if rx.changed().await.is_err() {
                return false;
            }
        }
    }

    /// Takes the lease and renews it every third of `lease_ttl` (at once when asked), taking a
    /// new one whenever the store refuses it, until `stop` turns true; then gives it up, so
    /// that what is left under it is retried at the next reaper pass.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let every = self.ttl.as_std() / 3;
        'lease: loop {
            let epoch = loop {
                let sent = Instant::now();
                match self.store.worker_lease_acquire(&self.node, self.ttl).await {
                    Ok(lease) => {
                        tracing::info!(node = %self.node, epoch = lease.epoch, "worker lease taken");
                        self.set_epoch(Some(lease.epoch), Some(sent));
                        break lease.epoch;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "taking the worker lease failed; trying again");
                        tokio::select! {
                            _ = tokio::time::sleep(RENEW_RETRY) => {}
                            _ = stop.wait_for(|s| *s) => return,
                        }
                    }
                }
            };
            let mut next = Instant::now() + every;
            loop {
                let stopping = tokio::select! {
                    _ = tokio::time::sleep_until(next) => false,
                    _ = self.ask.notified() => false,
                    _ = stop.wait_for(|s| *s) => true,
                };
                if stopping {
                    if let Err(e) = self.store.worker_lease_release(epoch).await {
                        tracing::warn!(error = %e, epoch, "giving the worker lease up failed; it lapses on its own");
                    }
                    self.set_epoch(None, None);
                    return;
                }
                let sent = Instant::now();
                match self.store.worker_lease_renew(epoch, self.ttl).await {
                    Ok(Some(_)) => {
                        self.state.send_modify(|s| {
                            s.confirmed_at = Some(sent);
                            s.confirmed += 1;
                        });
                        next = sent + every;
                    }
                    Ok(None) => {
                        metrics::counter!("sundial_worker_leases_lost_total").increment(1);
                        tracing::warn!(node = %self.node, epoch,
                            "worker lease taken over (this process was paused or cut off from the store past lease_ttl); dropping every attempt held under it");
                        self.set_epoch(None, None);
                        continue 'lease;
                    }
                    Err(e) => {
                        log_failed_renewal(&e, epoch);
                        next = Instant::now() + RENEW_RETRY;
                    }
                }
            }
        }
    }
}

fn log_failed_renewal(e: &StoreError, epoch: i64) {
    if e.is_retryable_when_idempotent() {
        tracing::warn!(error = %e, epoch, "renewing the worker lease failed; trying again");
    } else {
        tracing::error!(error = %e, epoch, "renewing the worker lease failed; trying again");
    }
}
