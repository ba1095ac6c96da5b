//! Concurrency policies, decided where an execution is claimed (SPEC §2 "Policies").
//!
//! A backend's claim looks, for each due execution of a job whose policy is not `allow`,
//! whether another execution of the same job is *active* — running, waiting between attempts,
//! or chosen earlier in the same claim — and asks [`decide`] what to do. The decision is made
//! under a per-job lock (the embedded store's single writer; an advisory lock per job on
//! PostgreSQL), so two workers never both decide that a job is idle.

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
    /// `skip`, which runs after the one before it instead of being skipped.
    Defer,
    /// Cancel the job's active executions, then run it (`replace`, the job is active).
    Replace,
}

/// The decision for an execution with `trigger` of a job with `policy`, given whether the job
/// is active.
pub fn decide(policy: ConcurrencyPolicy, trigger: Trigger, active: bool) -> Decision {
    match (policy, active) {
        (ConcurrencyPolicy::Allow, _) | (_, false) => Decision::Run,
        (ConcurrencyPolicy::Skip, true) if trigger == Trigger::Misfire => Decision::Defer,
        (ConcurrencyPolicy::Skip, true) => Decision::Skip,
        (ConcurrencyPolicy::Replace, true) => Decision::Replace,
    }
}

/// How long a deferred catch-up execution waits before it is looked at again, in ms.
pub const DEFER_MS: i64 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

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
        ] {
            assert_eq!(
                decide(policy, trigger, active),
                expected,
                "{policy:?} {trigger:?} active={active}"
            );
        }
    }
}
