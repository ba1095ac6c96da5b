//! Policies decided where an execution is claimed (docs/policies.md): concurrency
//! policies, per-namespace dispatch buckets, and the misfire policy of executions created
//! ahead of a slot that then passed while nothing could run them.
//!
//! These are the per-execution rules; [`crate::claim::plan`] applies them to a whole claim
//! (which executions make a job *active*, catch-up order, what is written), and the stores
//! apply its plan.

use sundial_core::execution::Trigger;
use sundial_core::job::ConcurrencyPolicy;

/// What a claim does with one due execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Run,
    /// Record it `skipped` and do not run it (`skip`, the job is active).
    Skip,
    /// Leave it waiting and look again shortly: a catch-up slot of a misfire episode under
    /// `skip`, which runs after the one before it instead of being skipped, or a backfilled
    /// slot under `skip` or `replace`, which waits for the job to be idle (docs/time.md,
    /// "Backfill").
    Defer,
    /// Cancel the job's active executions, then run it (`replace`, the job is active).
    Replace,
}

/// The decision for an execution with `trigger` of a job with `policy`, given whether the job
/// is active. A backfilled slot never skips or replaces: it waits its turn.
pub fn decide(policy: ConcurrencyPolicy, trigger: Trigger, active: bool) -> Decision {
    match (policy, active) {
        (ConcurrencyPolicy::Allow, _) | (_, false) => Decision::Run,
        (_, true) if trigger == Trigger::Backfill => Decision::Defer,
        (ConcurrencyPolicy::Skip, true) if trigger == Trigger::Misfire => Decision::Defer,
        (ConcurrencyPolicy::Skip, true) => Decision::Skip,
        (ConcurrencyPolicy::Replace, true) => Decision::Replace,
    }
}

/// How many seconds' worth of dispatches a namespace's bucket holds: small, so that no
/// one-second window sees much more than the rate (a token bucket of depth `rate` would let
/// twice the rate through in the second after an idle spell).
pub const BURST_SECONDS: f64 = 0.1;

/// The depth of a namespace's bucket: [`BURST_SECONDS`] of its rate, at least one token.
pub fn bucket_depth(rate: f64) -> f64 {
    (rate * BURST_SECONDS).max(1.0)
}

/// A namespace's dispatch bucket refilled to `now` (ms) at `rate` per second, up to
/// [`bucket_depth`]: `stored` is (tokens, updated_at) as last written, `None` for a namespace
/// seen for the first time (a full bucket). Token bucket as in RFC 2697's committed burst.
pub fn refill(stored: Option<(f64, i64)>, rate: f64, now: i64) -> f64 {
    let depth = bucket_depth(rate);
    match stored {
        None => depth,
        Some((tokens, at)) => {
            let elapsed_s = (now - at).max(0) as f64 / 1000.0;
            (tokens + rate * elapsed_s).min(depth)
        }
    }
}

/// The whole tokens of a bucket: how many executions it may start now.
pub fn whole_tokens(tokens: f64) -> i64 {
    if tokens.is_finite() && tokens >= 1.0 {
        tokens.floor() as i64
    } else {
        0
    }
}

/// Whether a never-started execution of a scheduled slot, claimed `late_ms` after its fire
/// time, still runs. Within `threshold` it runs late; beyond it, the job's misfire policy
/// applies as to slots never triggered (docs/policies.md): `run_all` runs it; `skip` records it
/// `missed`; `run_once` runs only the latest late slot of the job — this one unless
/// `later_due` says a later slot of the job is due too (a later execution waiting, or the
/// job's next slot, not triggered yet, come due: the scheduler runs that one, as the run of
/// its own episode if it is late too). One-off jobs always run.
pub fn misfire_runs(
    policy: sundial_core::job::MisfirePolicy,
    threshold_ms: i64,
    late_ms: i64,
    later_due: bool,
) -> bool {
    use sundial_core::job::MisfirePolicy as P;
    late_ms <= threshold_ms
        || match policy {
            P::RunAll => true,
            P::Skip => false,
            P::RunOnce => !later_due,
        }
}

/// How long a deferred catch-up execution waits before it is looked at again, in ms.
pub const DEFER_MS: i64 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_at_the_rate_up_to_their_depth() {
        assert_eq!(refill(None, 100.0, 0), 10.0);
        assert_eq!(refill(Some((0.0, 0)), 100.0, 50), 5.0);
        assert_eq!(refill(Some((5.0, 0)), 100.0, 10_000), 10.0);
        assert_eq!(
            refill(Some((5.0, 1000)), 100.0, 0),
            5.0,
            "a clock step back adds nothing"
        );
        assert_eq!(refill(None, 2.0, 0), 1.0, "at least one token");
        assert_eq!(whole_tokens(2.9), 2);
        assert_eq!(whole_tokens(0.5), 0);
        assert_eq!(whole_tokens(f64::NAN), 0);
    }

    #[test]
    fn late_executions_follow_the_misfire_policy() {
        use sundial_core::job::MisfirePolicy as P;
        assert!(
            misfire_runs(P::Skip, 60_000, 59_000, true),
            "within the threshold it runs late"
        );
        assert!(!misfire_runs(P::Skip, 60_000, 61_000, false));
        assert!(misfire_runs(P::RunAll, 60_000, 3_600_000, true));
        assert!(
            !misfire_runs(P::RunOnce, 60_000, 61_000, true),
            "a later slot runs instead"
        );
        assert!(
            misfire_runs(P::RunOnce, 60_000, 61_000, false),
            "the latest one runs"
        );
    }

    #[test]
    fn each_policy_decides_as_the_spec_says() {
        use ConcurrencyPolicy as P;
        use Decision as D;
        for (policy, trigger, active, expected) in [
            (P::Allow, Trigger::Schedule, true, D::Run),
            (P::Skip, Trigger::Schedule, false, D::Run),
            (P::Skip, Trigger::Schedule, true, D::Skip),
            (P::Skip, Trigger::Manual, true, D::Skip),
            (P::Skip, Trigger::Misfire, true, D::Defer),
            (P::Replace, Trigger::Schedule, false, D::Run),
            (P::Replace, Trigger::Schedule, true, D::Replace),
            (P::Skip, Trigger::Backfill, true, D::Defer),
            (P::Replace, Trigger::Backfill, true, D::Defer),
            (P::Allow, Trigger::Backfill, true, D::Run),
        ] {
            assert_eq!(
                decide(policy, trigger, active),
                expected,
                "{policy:?} {trigger:?} active={active}"
            );
        }
    }
}
