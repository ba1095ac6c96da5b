//! The completion transition: where an execution goes after an attempt ([`next_after`]: the
//! retry-or-dead decision, pure, its jitter given by the caller) and what a completed attempt
//! writes, decided once for every store (docs/guarantees.md, "G3 Fencing"). A store applies each [`CompletionWrite`] fenced by its
//! attempt number, in one statement for the batch; the workflow tasks among them that ended
//! release their downstream in the same transaction, from the writes that applied (the
//! release rule is `crate::workflow::release`).
//!
//! Rules (the state machine of ARCHITECTURE.md, "Execution states"):
//! - `running` → `succeeded` | `failed` | `dead`: terminal; the execution leaves the queue and
//!   its `finished_at` is the store's now.
//! - `running` → `retry_wait`: due again the retry's delay after the store's now (the same
//!   now the write's fence reads), still in the queue, not finished.
//! - Either way the running attempt's row is written once, with its outcome, and the attempt
//!   lease is cleared.
//! - The write applies only while the execution is `running` with this attempt number and,
//!   by the store's clock, its lease is live (a worker's completion) or, for the reaper
//!   (`only_if_lapsed`), has lapsed: a worker's late completion is refused and the reaper's
//!   settles the attempt.

use sundial_core::Dur;
use sundial_core::execution::ExecutionState;
use sundial_core::retry::RetryPolicy;

use crate::{AttemptComplete, NextStep};

/// How an attempt ended, as the retry decision reads it (docs/failure-classes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    /// The target accepted the delivery.
    Succeeded,
    /// A permanent failure: another attempt cannot succeed (a 4xx other than 408 and 429, a
    /// message the broker refused for good).
    Permanent,
    /// A transient failure: a retryable target error, a timeout, a lease that lapsed;
    /// `after` is the delay the target asked for (`Retry-After`), if any.
    Transient {
        /// The target's own delay before the next attempt.
        after: Option<Dur>,
    },
}

/// Where an execution goes after its attempt number `attempt` (from 1) of `max_attempts`
/// ended as `end`: `succeeded`, `failed` for a permanent failure, and for a transient one
/// `dead` once the attempts are spent, else a retry after `retry`'s delay for that attempt
/// ([`RetryPolicy::delay`]: exponential backoff, full jitter from `jitter` in `[0, 1)`, the
/// target's `after` capped at `max_interval`). Pure: the caller draws `jitter` (a worker from
/// its jitter source), so the decision is the same for the same inputs.
pub fn next_after(
    end: AttemptEnd,
    attempt: u32,
    max_attempts: u32,
    retry: &RetryPolicy,
    jitter: f64,
) -> NextStep {
    match end {
        AttemptEnd::Succeeded => NextStep::Succeeded,
        AttemptEnd::Permanent => NextStep::Failed,
        AttemptEnd::Transient { .. } if attempt >= max_attempts => NextStep::Dead,
        AttemptEnd::Transient { after } => {
            NextStep::RetryAfter(retry.delay(attempt, jitter, after))
        }
    }
}

/// What one completion writes.
#[derive(Debug, Clone, Copy)]
pub struct CompletionWrite<'a> {
    /// The completion it comes from (its fencing token, outcome and attempt detail).
    pub completion: &'a AttemptComplete,
    /// The execution's next state.
    pub state: ExecutionState,
    /// How long after the store's now it is due again, for `retry_wait`; `None` when
    /// terminal.
    pub retry_in: Option<Dur>,
    /// Whether the execution ends: `finished_at` becomes the store's now and the execution
    /// leaves the queue.
    pub finishes: bool,
}

impl CompletionWrite<'_> {
    /// When the execution is due again (UTC ms) if the write happens at the store's `now`
    /// (UTC ms); `None` when terminal.
    pub fn due_at(&self, now: i64) -> Option<i64> {
        self.retry_in
            .map(|delay| now.saturating_add(delay.as_millis_i64()))
    }
}

/// The writes of a batch of completions, in order.
pub fn plan(completions: &[AttemptComplete]) -> Vec<CompletionWrite<'_>> {
    completions
        .iter()
        .map(|c| {
            let (state, retry_in) = c.next.state();
            CompletionWrite {
                completion: c,
                state,
                retry_in,
                finishes: state.is_terminal(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttemptRef, NextStep};
    use proptest::prelude::*;
    use sundial_core::execution::AttemptOutcome;

    fn completion(next: NextStep) -> AttemptComplete {
        AttemptComplete {
            attempt: AttemptRef {
                id: "e".into(),
                attempt: 1,
            },
            outcome: AttemptOutcome::Succeeded,
            status_code: None,
            error: None,
            detail: None,
            next,
            only_if_lapsed: false,
            output: None,
        }
    }

    fn next_step() -> impl Strategy<Value = NextStep> {
        prop_oneof![
            Just(NextStep::Succeeded),
            Just(NextStep::Failed),
            Just(NextStep::Dead),
            (0u64..400_000_000_000)
                .prop_map(|ms| NextStep::RetryAfter(sundial_core::Dur::from_millis(ms))),
        ]
    }

    proptest! {
        #[test]
        fn an_execution_either_finishes_or_is_due_again(
            next in next_step(),
            now in 0i64..4_000_000_000_000,
        ) {
            let c = completion(next);
            let w = plan(std::slice::from_ref(&c))[0];
            prop_assert_eq!(w.finishes, w.due_at(now).is_none());
            prop_assert_eq!(w.finishes, w.state.is_terminal());
            if let NextStep::RetryAfter(delay) = next {
                prop_assert_eq!(w.state, ExecutionState::RetryWait);
                prop_assert_eq!(w.due_at(now), Some(now + delay.as_millis_i64()));
            }
        }
    }

    fn attempt_end() -> impl Strategy<Value = AttemptEnd> {
        prop_oneof![
            Just(AttemptEnd::Succeeded),
            Just(AttemptEnd::Permanent),
            proptest::option::of(0u64..10_000_000).prop_map(|ms| AttemptEnd::Transient {
                after: ms.map(sundial_core::Dur::from_millis)
            }),
        ]
    }

    fn retry_policy() -> impl Strategy<Value = RetryPolicy> {
        (
            1u32..10,
            0u64..100_000,
            1.0f64..4.0,
            0u64..3_600_000,
            any::<bool>(),
        )
            .prop_map(
                |(max_attempts, initial, multiplier, max, jitter)| RetryPolicy {
                    max_attempts,
                    initial_interval: sundial_core::Dur::from_millis(initial),
                    multiplier,
                    max_interval: sundial_core::Dur::from_millis(max),
                    jitter,
                },
            )
    }

    proptest! {
        /// docs/failure-classes.md: a success and a permanent failure end the execution
        /// whatever the attempt; a transient failure retries while attempts are left, with a
        /// delay within the policy's cap, and is dead on the last.
        #[test]
        fn the_next_step_follows_the_ending_and_the_attempts_left(
            end in attempt_end(),
            attempt in 1u32..12,
            max_attempts in 1u32..12,
            retry in retry_policy(),
            jitter in 0.0f64..1.0,
        ) {
            let next = next_after(end, attempt, max_attempts, &retry, jitter);
            match end {
                AttemptEnd::Succeeded => prop_assert_eq!(next, NextStep::Succeeded),
                AttemptEnd::Permanent => prop_assert_eq!(next, NextStep::Failed),
                AttemptEnd::Transient { .. } if attempt >= max_attempts => {
                    prop_assert_eq!(next, NextStep::Dead)
                }
                AttemptEnd::Transient { .. } => match next {
                    NextStep::RetryAfter(d) => {
                        prop_assert!(d <= retry.max_interval);
                        prop_assert_eq!(d, retry.delay(attempt, jitter, match end {
                            AttemptEnd::Transient { after } => after,
                            _ => None,
                        }));
                    }
                    other => prop_assert!(false, "a transient failure with attempts left went {:?}", other),
                },
            }
            // The same inputs give the same step.
            prop_assert_eq!(next, next_after(end, attempt, max_attempts, &retry, jitter));
        }
    }
}
