//! The completion transition: what a completed attempt writes, decided once for every store
//! (docs/guarantees.md, "G3 Fencing"). A store applies each [`CompletionWrite`] fenced by its
//! attempt number, in one statement for the batch; a workflow's release (planned:
//! ARCHITECTURE.md, the code map's workflows row) joins here, from the writes that applied.
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

use crate::AttemptComplete;

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
}
