//! A batch of attempt completions, written once over the statements each store provides
//! ([`CompletionStatements`] on the store, [`TaskCompletionStatements`] on the transaction
//! that ends workflow tasks). [`complete_batch`] plans the batch
//! ([`crate::completion::plan`]), applies the completions of job executions in one write, and
//! then those of workflow tasks in a transaction that holds their runs first and applies
//! their release with them.
//!
//! Invariants (docs/guarantees.md, "G3 Fencing"; docs/workflows.md, "Release"): each
//! completion applies only to the attempt it names, while the execution is `running` under
//! that attempt, with its lease live (a worker's completion) or lapsed (the reaper's,
//! `only_if_lapsed`); one that does not apply changes nothing. An applied completion writes
//! the execution's next state, its attempt row and (PostgreSQL) its queue row in the same
//! write. Whatever a task's end releases is queued by the transaction that ends it, and only
//! the tasks that applied and ended release anything; the runs are held before any of their
//! tasks' rows is written, the lock order of every workflow writer.

use std::collections::HashSet;
use std::future::Future;

use crate::completion::{CompletionWrite, plan};
use crate::{AttemptComplete, Result};

/// A completion the store applied, as its write returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The execution.
    pub id: String,
    /// The attempt number the completion was fenced by.
    pub attempt: i64,
    /// The workflow run of a task; `None` for a job's execution.
    pub run: Option<String>,
    /// Whether the execution ended (`finished_at` set), rather than waiting for a retry.
    pub finished: bool,
}

/// What the write of a batch's job executions did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobsCompleted {
    /// The completions it applied.
    pub ended: Vec<Ended>,
    /// The ids of the workflow tasks among the batch's executions, which it left alone (any
    /// order, each once); a stale completion of a job's execution is in neither list.
    pub tasks: Vec<String>,
}

/// The statements of a batch's completions, in the dialect of one store. Every method may
/// fail with the store's classified error.
pub trait CompletionStatements: Sync {
    /// Applies, in one write, the writes among `writes` whose execution belongs to no
    /// workflow run, each fenced as the module states, with their attempt rows; names the
    /// workflow tasks among the rest, left for [`CompletionStatements::complete_tasks`]. A
    /// store whose one writer serialises every transaction (SQLite) applies the whole batch
    /// instead, in one transaction that runs [`complete_tasks`] on all of it, and names no task
    /// left: a batch is then never half written.
    fn complete_jobs(
        &self,
        writes: &[CompletionWrite<'_>],
    ) -> impl Future<Output = Result<JobsCompleted>> + Send;

    /// Applies `writes` (the workflow tasks [`CompletionStatements::complete_jobs`] left, or a
    /// whole batch where that method hands it over) in a transaction of their own: opens it,
    /// runs [`complete_tasks`] on it, wakes the workers when tasks became due (inside the
    /// transaction where the store signals there, after the commit otherwise), commits, and
    /// returns what applied.
    fn complete_tasks(
        &self,
        writes: &[CompletionWrite<'_>],
    ) -> impl Future<Output = Result<TasksCompleted>> + Send;
}

/// What the transaction of a batch's workflow tasks did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TasksCompleted {
    /// The completions it applied.
    pub ended: Vec<Ended>,
    /// How many tasks their runs' release made due.
    pub queued: usize,
}

/// The statements of the transaction that ends workflow tasks, on the transaction the store
/// opened.
pub trait TaskCompletionStatements: Send {
    /// Holds the workflow runs of the executions `ids` until the transaction ends (PostgreSQL
    /// locks them in id order; SQLite's one writer holds everything already).
    fn hold_runs(&mut self, ids: &[&str]) -> impl Future<Output = Result<()>> + Send;

    /// Applies `writes` of workflow tasks as [`CompletionStatements::complete_jobs`] applies
    /// those of job executions; returns what applied and the write's now (Unix ms, UTC).
    fn apply(
        &mut self,
        writes: &[CompletionWrite<'_>],
    ) -> impl Future<Output = Result<(Vec<Ended>, i64)>> + Send;

    /// Releases the runs `runs` at `now` (Unix ms, UTC) through
    /// [`crate::steps::release`]; returns how many tasks became due.
    fn release(&mut self, runs: &[String], now: i64) -> impl Future<Output = Result<usize>> + Send;
}

/// Applies `completions` (see the module's invariants); per completion, in order, whether it
/// applied. Nothing is written for an empty batch.
///
/// # Errors
/// The store's classified error of the first write that failed. The write of the job
/// executions commits before the tasks' transaction begins: when the second fails, the
/// first's completions stand and a retry of the whole batch finds them stale.
pub async fn complete_batch<S: CompletionStatements>(
    store: &S,
    completions: &[AttemptComplete],
) -> Result<Vec<bool>> {
    if completions.is_empty() {
        return Ok(Vec::new());
    }
    let writes = plan(completions);
    let JobsCompleted { mut ended, tasks } = store.complete_jobs(&writes).await?;
    if !tasks.is_empty() {
        let tasks: HashSet<&str> = tasks.iter().map(String::as_str).collect();
        let of_tasks: Vec<CompletionWrite<'_>> = writes
            .iter()
            .filter(|w| tasks.contains(w.completion.attempt.id.as_str()))
            .copied()
            .collect();
        ended.extend(store.complete_tasks(&of_tasks).await?.ended);
    }
    Ok(applied(completions, &ended))
}

/// The tasks' part of [`complete_batch`], on the transaction `tx` the store opened and
/// commits: holds the runs, applies `writes`, and releases the runs of the tasks that applied
/// and ended.
///
/// # Errors
/// The store's classified error of the first statement that failed; the caller rolls back.
pub async fn complete_tasks<T: TaskCompletionStatements>(
    tx: &mut T,
    writes: &[CompletionWrite<'_>],
) -> Result<TasksCompleted> {
    let ids: Vec<&str> = writes
        .iter()
        .map(|w| w.completion.attempt.id.as_str())
        .collect();
    tx.hold_runs(&ids).await?;
    let (ended, now) = tx.apply(writes).await?;
    let runs = runs_to_release(&ended);
    let queued = if runs.is_empty() {
        0
    } else {
        tx.release(&runs, now).await?
    };
    Ok(TasksCompleted { ended, queued })
}

/// The runs whose tasks ended among `ended` (a task waiting for its retry releases nothing),
/// each once, in id order.
pub fn runs_to_release(ended: &[Ended]) -> Vec<String> {
    let mut runs: Vec<String> = ended
        .iter()
        .filter(|e| e.finished)
        .filter_map(|e| e.run.clone())
        .collect();
    runs.sort_unstable();
    runs.dedup();
    runs
}

/// Per completion of `completions`, in order, whether `ended` holds its attempt.
pub fn applied(completions: &[AttemptComplete], ended: &[Ended]) -> Vec<bool> {
    let ended: HashSet<(&str, i64)> = ended.iter().map(|e| (e.id.as_str(), e.attempt)).collect();
    completions
        .iter()
        .map(|c| ended.contains(&(c.attempt.id.as_str(), i64::from(c.attempt.attempt))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttemptRef, NextStep};
    use sundial_core::execution::AttemptOutcome;

    fn completion(id: &str, attempt: u32) -> AttemptComplete {
        AttemptComplete {
            attempt: AttemptRef {
                id: id.into(),
                attempt,
            },
            outcome: AttemptOutcome::Succeeded,
            status_code: None,
            error: None,
            detail: None,
            next: NextStep::Succeeded,
            only_if_lapsed: false,
            output: None,
        }
    }

    fn ended(id: &str, attempt: i64, run: Option<&str>, finished: bool) -> Ended {
        Ended {
            id: id.into(),
            attempt,
            run: run.map(Into::into),
            finished,
        }
    }

    #[test]
    fn a_completion_applied_only_when_its_attempt_ended() {
        let batch = [completion("a", 1), completion("b", 2), completion("c", 1)];
        // `b` ended under attempt 1, not the 2 its completion names: stale.
        let done = [ended("a", 1, None, true), ended("b", 1, None, true)];
        assert_eq!(applied(&batch, &done), [true, false, false]);
    }

    #[test]
    fn only_tasks_that_ended_release_their_run_once() {
        let done = [
            ended("t1", 1, Some("r2"), true),
            ended("t2", 1, Some("r1"), true),
            ended("t3", 1, Some("r2"), true),
            // Waiting for its retry: releases nothing.
            ended("t4", 1, Some("r3"), false),
            ended("j", 1, None, true),
        ];
        assert_eq!(runs_to_release(&done), ["r1", "r2"]);
    }

    /// A store whose writes are recorded, to check the orchestration's order and splits.
    struct Recording {
        tasks: HashSet<&'static str>,
        log: std::sync::Mutex<Vec<String>>,
    }

    impl CompletionStatements for Recording {
        async fn complete_jobs(&self, writes: &[CompletionWrite<'_>]) -> Result<JobsCompleted> {
            let (tasks, jobs): (Vec<&CompletionWrite<'_>>, Vec<_>) = writes
                .iter()
                .partition(|w| self.tasks.contains(w.completion.attempt.id.as_str()));
            let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
            log.push(format!("jobs {}", jobs.len()));
            Ok(JobsCompleted {
                ended: jobs
                    .iter()
                    .map(|w| ended(&w.completion.attempt.id, 1, None, true))
                    .collect(),
                tasks: tasks
                    .iter()
                    .map(|w| w.completion.attempt.id.clone())
                    .collect(),
            })
        }

        async fn complete_tasks(&self, writes: &[CompletionWrite<'_>]) -> Result<TasksCompleted> {
            let mut tx = RecordingTx(Vec::new());
            let done = complete_tasks(&mut tx, writes).await?;
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(tx.0);
            Ok(done)
        }
    }

    struct RecordingTx(Vec<String>);

    impl TaskCompletionStatements for RecordingTx {
        async fn hold_runs(&mut self, ids: &[&str]) -> Result<()> {
            self.0.push(format!("hold {}", ids.join(",")));
            Ok(())
        }

        async fn apply(&mut self, writes: &[CompletionWrite<'_>]) -> Result<(Vec<Ended>, i64)> {
            self.0.push(format!("apply {}", writes.len()));
            let done = writes
                .iter()
                .map(|w| ended(&w.completion.attempt.id, 1, Some("r"), true))
                .collect();
            Ok((done, 7))
        }

        async fn release(&mut self, runs: &[String], now: i64) -> Result<usize> {
            self.0.push(format!("release {} at {now}", runs.join(",")));
            Ok(1)
        }
    }

    #[tokio::test]
    async fn tasks_are_held_applied_and_released_after_the_jobs_write() {
        let store = Recording {
            tasks: HashSet::from(["t1", "t2"]),
            log: Default::default(),
        };
        let batch = [
            completion("j1", 1),
            completion("t1", 1),
            completion("t2", 1),
        ];
        let done = complete_batch(&store, &batch)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done, [true, true, true]);
        let log = store.log.into_inner().unwrap_or_else(|p| p.into_inner());
        assert_eq!(log, ["jobs 1", "hold t1,t2", "apply 2", "release r at 7"]);
    }

    #[tokio::test]
    async fn a_batch_of_job_executions_opens_no_tasks_transaction() {
        let store = Recording {
            tasks: HashSet::new(),
            log: Default::default(),
        };
        let batch = [completion("j1", 1), completion("j2", 1)];
        let done = complete_batch(&store, &batch)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done, [true, true]);
        assert!(
            complete_batch(&store, &[])
                .await
                .is_ok_and(|d| d.is_empty())
        );
        let log = store.log.into_inner().unwrap_or_else(|p| p.into_inner());
        assert_eq!(log, ["jobs 2"]);
    }
}
