//! The executions the scheduler of this process hands to its worker as it writes them
//! (docs/guarantees.md, "Slots handed to the worker beside the scheduler";
//! `sundial_store::handoff`): the worker reserves room for them in its `max_claimed_ahead`
//! bound before each trigger commit, then holds what the commit handed out until its fire time,
//! as it holds executions claimed ahead. The invariants are the crate's (lib.rs); besides:
//! - While the store has a backlog (executions due longer ago than a second, `backlog.rs`),
//!   the offer asks the scheduler to defer the slots this worker would take beyond its room
//!   (`HandoffOffer::defer`): written to wait, each would cost a claim more, and this worker,
//!   out of room, would serve it no sooner. A worker with room still takes what fits, so a
//!   backlog its claims cannot drain (a rate-limited namespace's) holds nothing back.
//! - Without a backlog, what does not fit in the room is written to wait, for any worker to
//!   claim.
//! - Nothing is handed out whose fire time is further ahead than the widest window this
//!   worker claims ahead in ([`BURST_WINDOW_MAX`], or `claim_ahead` if wider).
//! - Nothing is handed out to a worker without its liveness lease, or with claiming ahead
//!   turned off (`claim_ahead = "0s"` or `max_claimed_ahead = 0`).
//! - Each handed-out execution takes one permit of the room reserved for its commit; the
//!   rest is given back when the commit's delivery ends (or the offer is dropped).

use sundial_store::handoff::{Handoff, HandoffOffer, TriggerHandoff};

use super::*;

impl Handoff for Worker {
    fn offer(&self, wanted: usize) -> Option<HandoffOffer> {
        if wanted == 0
            || self.config.claim_ahead.as_millis() == 0
            || self.config.max_claimed_ahead == 0
            || !self.leased.load(Ordering::Relaxed)
            || self.stopping.load(Ordering::Relaxed)
        {
            return None;
        }
        let epoch = self.liveness.epoch()?;
        let backlogged = self.backlogged.load(Ordering::Relaxed);
        let room = wanted.min(self.ahead.available_permits());
        let limit = u32::try_from(room).unwrap_or(u32::MAX);
        // Zero permits are always granted: an offer of no room.
        let reserved = self.ahead.clone().try_acquire_many_owned(limit).ok()?;
        let worker = self.clone();
        Some(HandoffOffer {
            request: TriggerHandoff {
                worker: self.config.node.clone(),
                epoch,
                limit,
                rate_limited: self.config.rate_limits.keys().cloned().collect(),
                within: BURST_WINDOW_MAX.max(self.config.claim_ahead),
            },
            defer: backlogged,
            deliver: Box::new(move |handed, returned_at| {
                worker.take_handed(handed, reserved, returned_at);
            }),
        })
    }
}

impl Worker {
    /// Holds each `handed` execution until its start (`started_at - claimed_at` from
    /// `returned_at`, this node's clock when the trigger commit returned) with one permit of
    /// `reserved`; the permits left over are given back.
    fn take_handed(
        &self,
        handed: Vec<ClaimedExecution>,
        mut reserved: tokio::sync::OwnedSemaphorePermit,
        returned_at: Timestamp,
    ) {
        metrics::counter!("sundial_handed_out_total").increment(handed.len() as u64);
        for execution in handed {
            // The commit hands out no more than the room reserved (`TriggerHandoff::limit`);
            // should it hand out more, the excess is held all the same rather than left
            // running under a lease that stands, where nothing would retry it.
            let held = reserved.split(1);
            if held.is_none() {
                tracing::error!(execution = %execution.id,
                    "handed out past the room reserved for it; holding it beyond max_claimed_ahead");
            }
            let hold = execution.started_at.duration_since(execution.claimed_at);
            let start_at = returned_at + hold.max(jiff::SignedDuration::ZERO);
            let worker = self.clone();
            tokio::spawn(async move {
                worker.hold(execution, start_at, held).await;
            });
        }
    }
}
