//! The release logic of a workflow run (docs/workflows.md, "Trigger rules" and "Release"):
//! a pure function over the run's task states, which each store applies inside the
//! transaction that ends a task (ARCHITECTURE.md, "Workflows").
//!
//! A task waits in `pending` until its [`TriggerRule`], judged from its direct upstream's
//! states, is met (it becomes `queued`) or can no longer be met (it ends `upstream_failed` or
//! `skipped` without running). Ending a task that way can decide its own downstream in turn,
//! so [`release`] runs to a fixed point.
//!
//! Invariants, property-tested below on random DAGs and random outcome orders:
//! - a task is released only when its rule is met, and never twice;
//! - once every task that was released has ended, every task has ended (nothing stays
//!   `pending` forever);
//! - [`run_state`] is terminal exactly when every task is.

use serde::{Deserialize, Serialize};

use crate::execution::ExecutionState;
use crate::workflow::dag::Dag;
pub use crate::workflow::spec::TriggerRule;

/// The judgment of a [`TriggerRule`] (declared beside the task spec that carries it).
impl TriggerRule {
    /// Every rule, in the order of the docs.
    pub const ALL: [TriggerRule; 4] = [
        Self::AllSuccess,
        Self::AllDone,
        Self::OneFailed,
        Self::OneSuccess,
    ];

    /// The snake_case name used in JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AllSuccess => "all_success",
            Self::AllDone => "all_done",
            Self::OneFailed => "one_failed",
            Self::OneSuccess => "one_success",
        }
    }

    /// What this rule says of a task whose direct upstream are in `upstream`; a task without
    /// upstream runs, whatever its rule.
    pub fn judge(self, upstream: impl IntoIterator<Item = ExecutionState>) -> Verdict {
        let (mut all, mut done, mut succeeded, mut satisfied, mut failed) = (0, 0, 0, 0, 0);
        for state in upstream {
            all += 1;
            if state.is_terminal() {
                done += 1;
            }
            match state {
                ExecutionState::Succeeded => {
                    succeeded += 1;
                    satisfied += 1;
                }
                ExecutionState::Skipped => satisfied += 1,
                s if is_failure(s) => failed += 1,
                _ => {}
            }
        }
        let all_done = done == all;
        if all == 0 {
            return Verdict::Run;
        }
        match self {
            Self::AllSuccess if satisfied == all => Verdict::Run,
            Self::AllSuccess if done > satisfied => Verdict::Never(ExecutionState::UpstreamFailed),
            Self::AllDone if all_done => Verdict::Run,
            Self::OneFailed if failed > 0 => Verdict::Run,
            Self::OneFailed if all_done => Verdict::Never(ExecutionState::Skipped),
            Self::OneSuccess if succeeded > 0 => Verdict::Run,
            Self::OneSuccess if all_done => Verdict::Never(ExecutionState::UpstreamFailed),
            _ => Verdict::Wait,
        }
    }
}

/// True for the endings `one_failed` reacts to: `failed`, `dead`, `cancelled`,
/// `upstream_failed` (and `missed`, which a task never reaches, for completeness).
pub const fn is_failure(state: ExecutionState) -> bool {
    matches!(
        state,
        ExecutionState::Failed
            | ExecutionState::Dead
            | ExecutionState::Cancelled
            | ExecutionState::UpstreamFailed
            | ExecutionState::Missed
    )
}

/// A trigger rule's answer for one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not decided yet: some upstream has not ended.
    Wait,
    /// Met: the task becomes `queued`.
    Run,
    /// Can no longer be met: the task ends in this state without running.
    Never(ExecutionState),
}

/// What one release decided, in the order it decided it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Release {
    /// Tasks that become `queued` (their target rendered now).
    pub queued: Vec<usize>,
    /// Tasks that end without running, with the state they end in.
    pub ended: Vec<(usize, ExecutionState)>,
}

/// Releases what the states of a run's tasks allow: every `pending` task whose rule is met
/// becomes `queued`, and every one whose rule can no longer be met ends, transitively.
/// `states[i]` is task `i`'s state; it is updated in place with what was decided.
///
/// Only `pending` tasks are judged, so a call after a completion that was refused as stale
/// (which changed no state) decides nothing new (docs/guarantees.md, W3). A task without
/// upstream is met at once.
///
/// # Panics
/// Never; `states` shorter than the graph leaves the missing tasks undecided.
pub fn release(dag: &Dag, states: &mut [ExecutionState]) -> Release {
    let mut out = Release::default();
    let n = dag.len().min(states.len());
    // Walk in topological order, so a task ended here is seen by its downstream in the same
    // pass; a graph with a cycle (never validated) falls back to repeated passes.
    let sorted = dag.topological_order();
    let acyclic = sorted.is_some();
    let order = sorted.unwrap_or_else(|| (0..n).collect());
    loop {
        let mut changed = false;
        for &i in &order {
            if i >= n || states[i] != ExecutionState::Pending {
                continue;
            }
            let upstream = dag
                .upstream(i)
                .iter()
                .map(|&u| states.get(u).copied().unwrap_or(ExecutionState::Pending));
            match dag.rule(i).judge(upstream) {
                Verdict::Wait => {}
                Verdict::Run => {
                    states[i] = ExecutionState::Queued;
                    out.queued.push(i);
                    changed = true;
                }
                Verdict::Never(end) => {
                    states[i] = end;
                    out.ended.push((i, end));
                    changed = true;
                }
            }
        }
        if !changed || acyclic {
            return out;
        }
    }
}

/// The tasks a run's retry resets (docs/workflows.md, "Retry from failure"): `named` and everything
/// downstream of them, or, when `named` is empty, every task that ended `failed`, `dead`,
/// `cancelled` or `upstream_failed` and everything downstream of those. A mask by task.
pub fn retry_set(dag: &Dag, states: &[ExecutionState], named: &[usize]) -> Vec<bool> {
    if named.is_empty() {
        dag.downstream_closure((0..states.len()).filter(|&i| is_failure(states[i])))
    } else {
        dag.downstream_closure(named.iter().copied())
    }
}

/// The state of a workflow run (docs/workflows.md, "Runs").
///
/// ```text
///  scheduled ──(fire_at passes)──▶ running ──▶ succeeded | failed | cancelled
///      └──▶ skipped | missed   (concurrency or misfire policy; no task executions)
///  succeeded | failed | cancelled ──retry──▶ running
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Created ahead of its fire time.
    Scheduled,
    /// Its fire time has passed and some task has not ended.
    Running,
    /// Terminal: every task succeeded or was skipped by its rule.
    Succeeded,
    /// Terminal: some task ended otherwise, or `run_timeout` passed.
    Failed,
    /// Terminal: cancelled by hand, by a `replace`, or by a change or delete of its workflow.
    Cancelled,
    /// Terminal: not run because of the concurrency policy.
    Skipped,
    /// Terminal: not run because of the misfire policy.
    Missed,
}

impl RunState {
    /// Every state, the ones that are not terminal first.
    pub const ALL: [RunState; 7] = [
        Self::Scheduled,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
        Self::Skipped,
        Self::Missed,
    ];

    /// The snake_case name used in JSON and in the store.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Skipped => "skipped",
            Self::Missed => "missed",
        }
    }

    /// True for the states a run leaves only by a retry.
    pub const fn is_terminal(self) -> bool {
        !matches!(self, Self::Scheduled | Self::Running)
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunState {
    type Err = String;

    /// Parses the snake_case name.
    ///
    /// # Errors
    /// A message listing the valid names.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "unknown run state '{s}'; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// The terminal state a run reaches from its tasks' states, or `None` while a task has not
/// ended: `succeeded` when every task succeeded or was skipped, `failed` otherwise. A run
/// without tasks never ends this way.
pub fn run_state(states: &[ExecutionState]) -> Option<RunState> {
    if states.is_empty() || !states.iter().all(|s| s.is_terminal()) {
        return None;
    }
    let clean = states
        .iter()
        .all(|s| matches!(s, ExecutionState::Succeeded | ExecutionState::Skipped));
    Some(if clean {
        RunState::Succeeded
    } else {
        RunState::Failed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ExecutionState::*;
    use proptest::prelude::*;

    #[test]
    fn each_rule_judges_its_upstream_as_the_spec_says() {
        use TriggerRule::*;
        let cases: &[(TriggerRule, &[ExecutionState], Verdict)] = &[
            (AllSuccess, &[Succeeded, Skipped], Verdict::Run),
            (AllSuccess, &[Succeeded, Running], Verdict::Wait),
            (
                AllSuccess,
                &[Failed, Running],
                Verdict::Never(UpstreamFailed),
            ),
            (
                AllSuccess,
                &[UpstreamFailed],
                Verdict::Never(UpstreamFailed),
            ),
            (AllDone, &[Failed, Cancelled], Verdict::Run),
            (AllDone, &[Failed, Queued], Verdict::Wait),
            (OneFailed, &[Dead, Running], Verdict::Run),
            (OneFailed, &[Succeeded, Running], Verdict::Wait),
            (OneFailed, &[Succeeded, Skipped], Verdict::Never(Skipped)),
            (OneSuccess, &[Failed, Succeeded], Verdict::Run),
            (OneSuccess, &[Failed, Pending], Verdict::Wait),
            (
                OneSuccess,
                &[Failed, Skipped],
                Verdict::Never(UpstreamFailed),
            ),
            (AllSuccess, &[], Verdict::Run),
            (OneFailed, &[], Verdict::Run),
        ];
        for (rule, upstream, want) in cases {
            assert_eq!(
                rule.judge(upstream.iter().copied()),
                *want,
                "{rule:?} over {upstream:?}"
            );
        }
    }

    #[test]
    fn a_failure_ends_the_chain_below_it_and_fires_the_alert() {
        // extract → load; alert (one_failed) on both: the example of docs/workflows.md.
        let dag = Dag::from_parts(
            vec![vec![], vec![0], vec![0, 1], vec![1]],
            vec![
                TriggerRule::AllSuccess,
                TriggerRule::AllSuccess,
                TriggerRule::OneFailed,
                TriggerRule::AllSuccess,
            ],
        );
        let mut states = vec![Queued, Pending, Pending, Pending];
        assert_eq!(release(&dag, &mut states), Release::default());
        states[0] = Dead;
        let r = release(&dag, &mut states);
        assert_eq!(r.queued, vec![2]);
        assert_eq!(r.ended, vec![(1, UpstreamFailed), (3, UpstreamFailed)]);
        assert_eq!(run_state(&states), None);
        states[2] = Succeeded;
        assert_eq!(run_state(&states), Some(RunState::Failed));
    }

    #[test]
    fn a_clean_run_skips_its_alert_and_succeeds() {
        let dag = Dag::from_parts(
            vec![vec![], vec![0]],
            vec![TriggerRule::AllSuccess, TriggerRule::OneFailed],
        );
        let mut states = vec![Succeeded, Pending];
        let r = release(&dag, &mut states);
        assert_eq!(r.ended, vec![(1, Skipped)]);
        assert_eq!(run_state(&states), Some(RunState::Succeeded));
    }

    #[test]
    fn retry_without_names_takes_the_failed_and_their_downstream() {
        let dag = Dag::from_parts(vec![vec![], vec![0], vec![], vec![1, 2]], vec![]);
        let states = [Succeeded, Dead, Succeeded, UpstreamFailed];
        assert_eq!(
            retry_set(&dag, &states, &[]),
            vec![false, true, false, true]
        );
        assert_eq!(
            retry_set(&dag, &states, &[2]),
            vec![false, false, true, true]
        );
    }

    /// A random DAG: each task depends on some of the tasks before it.
    fn dag_strategy() -> impl Strategy<Value = Dag> {
        (1usize..24).prop_flat_map(|n| {
            let ups = (0..n)
                .map(|i| proptest::collection::vec(0..i.max(1), 0..=i.min(4)))
                .collect::<Vec<_>>();
            let rules =
                proptest::collection::vec(proptest::sample::select(TriggerRule::ALL.to_vec()), n);
            (ups, rules).prop_map(move |(ups, rules)| {
                let ups = ups
                    .into_iter()
                    .enumerate()
                    .map(|(i, u)| u.into_iter().filter(|&x| x < i).collect())
                    .collect();
                Dag::from_parts(ups, rules)
            })
        })
    }

    fn outcome() -> impl Strategy<Value = ExecutionState> {
        proptest::sample::select(vec![Succeeded, Succeeded, Failed, Dead, Cancelled])
    }

    proptest! {
        /// Random DAGs, random outcomes, random completion orders: every task ends, the run
        /// ends exactly when its last task does, and no task is released before its rule is
        /// met or twice.
        #[test]
        fn every_task_ends_and_no_task_runs_before_its_rule(
            dag in dag_strategy(),
            outcomes in proptest::collection::vec(outcome(), 24),
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 48),
        ) {
            let n = dag.len();
            let mut states = vec![Pending; n];
            let mut released = vec![false; n];
            let first = release(&dag, &mut states);
            for &i in &first.queued {
                prop_assert!(dag.upstream(i).is_empty(), "task {} released at the start", i);
                released[i] = true;
            }
            let mut picks = picks.into_iter().cycle();
            loop {
                let active: Vec<usize> = (0..n).filter(|&i| states[i] == Queued).collect();
                if active.is_empty() {
                    break;
                }
                prop_assert_eq!(run_state(&states), None);
                let i = active[picks.next().expect("cycled").index(active.len())];
                states[i] = outcomes[i];
                let before = states.clone();
                let r = release(&dag, &mut states);
                for &q in &r.queued {
                    prop_assert!(!released[q], "task {} released twice", q);
                    released[q] = true;
                    prop_assert_eq!(before[q], Pending);
                    let verdict = dag.rule(q).judge(dag.upstream(q).iter().map(|&u| states[u]));
                    prop_assert_eq!(verdict, Verdict::Run, "task {} released before its rule", q);
                }
                for &(e, _) in &r.ended {
                    prop_assert_eq!(before[e], Pending);
                }
            }
            prop_assert!(states.iter().all(|s| s.is_terminal()), "stuck: {:?}", states);
            prop_assert!(run_state(&states).is_some());
            // A task ran exactly when its rule was met by its upstream's final states.
            for (i, &ran) in released.iter().enumerate() {
                let verdict = dag.rule(i).judge(dag.upstream(i).iter().map(|&u| states[u]));
                prop_assert_eq!(ran, verdict == Verdict::Run, "task {}", i);
            }
        }

        #[test]
        fn a_second_release_over_the_same_states_decides_nothing(
            dag in dag_strategy(),
            outcomes in proptest::collection::vec(outcome(), 24),
        ) {
            let mut states: Vec<ExecutionState> = (0..dag.len())
                .map(|i| if dag.upstream(i).is_empty() { outcomes[i] } else { Pending })
                .collect();
            release(&dag, &mut states);
            let again = release(&dag, &mut states.clone());
            prop_assert_eq!(again, Release::default());
        }
    }
}
