//! A worker's watch of the store's backlog, which chooses the order of its claims
//! (docs/guarantees.md, "Claim order under a backlog"; `sundial_store::claim_order`): every
//! [`BACKLOG_EVERY`] it counts the executions due longer ago than
//! `claim_order::ON_TIME_WINDOW_MS` (up to [`BACKLOG_COUNT_CAP`]), and claims read on time first
//! while that backlog shrinks, oldest first while it grows or is empty. The invariants are the
//! crate's (lib.rs); a failed count keeps the order.

use sundial_store::claim_order::{BacklogTrend, ON_TIME_WINDOW_MS};

use super::*;

/// How often the backlog is counted.
pub const BACKLOG_EVERY: Duration = Duration::from_secs(1);

/// The most executions one count of the backlog reads: a larger backlog counts as this many,
/// so its trend shows only once it drains below.
pub const BACKLOG_COUNT_CAP: u32 = 1_000_000;

impl Worker {
    /// Counts the backlog every [`BACKLOG_EVERY`] and sets the order of this worker's claims
    /// from its trend, until `shutdown`.
    pub(crate) async fn backlog_watch(self, mut shutdown: watch::Receiver<bool>) {
        let mut trend = BacklogTrend::default();
        while !*shutdown.borrow() {
            if let Some(on_time_first) = self.observe_backlog(&mut trend).await {
                let before = self.on_time_first.swap(on_time_first, Ordering::Relaxed);
                if before != on_time_first {
                    tracing::info!(
                        on_time_first,
                        "the backlog {}: claims read {}",
                        if on_time_first {
                            "drains"
                        } else {
                            "grows or is gone"
                        },
                        if on_time_first {
                            "on-time executions first"
                        } else {
                            "the oldest due first"
                        }
                    );
                }
            }
            let next = self.clock.now()
                + jiff::SignedDuration::try_from(BACKLOG_EVERY).unwrap_or_default();
            tokio::select! {
                _ = self.clock.sleep_until(next) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// One count of the backlog by the store's clock, fed to `trend`: the order claims should
    /// take, or `None` when the store could not say.
    async fn observe_backlog(&self, trend: &mut BacklogTrend) -> Option<bool> {
        let now = self.store.now().await.ok()?;
        let oldest = self.store.execution_next_due().await.ok()?;
        let cut = now - jiff::SignedDuration::from_millis(ON_TIME_WINDOW_MS);
        // Nothing due before the window: no backlog, without counting.
        let backlog = match oldest {
            Some(due) if due < cut => self
                .store
                .execution_due_count(Timestamp::UNIX_EPOCH, cut, BACKLOG_COUNT_CAP)
                .await
                .ok()?,
            _ => 0,
        };
        self.backlogged.store(backlog > 0, Ordering::Relaxed);
        let on_time_first = trend.observe(now.as_millisecond(), backlog);
        tracing::debug!(backlog, on_time_first, "backlog counted");
        Some(on_time_first)
    }

    /// Whether claims read on time first now ([`Worker::backlog_watch`]).
    pub(crate) fn claims_on_time_first(&self) -> bool {
        self.on_time_first.load(Ordering::Relaxed)
    }
}
