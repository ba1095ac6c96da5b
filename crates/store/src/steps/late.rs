//! The misfire judgement of a held first attempt that gets its delivery slot late
//! (docs/policies.md, "misfire_policy", "Late in the worker"), written once over the statements
//! each store provides ([`LateStatements`], on the caller's open transaction). A worker holds
//! what it claimed ahead, and what its scheduler handed it, until the fire time, then waits for
//! a delivery slot; a slot that waited past its job's `misfire_threshold` is judged here, by the
//! store's clock, before it starts. The caller opens the transaction, runs [`judge_late`], and
//! commits only when the step returns `Ok`.
//!
//! Invariants:
//! - Only a running attempt fenced as a worker's completion is (its attempt number, its own
//!   lease unexpired if it has one, its worker lease not taken over) is judged: any other is
//!   [`LateVerdict::Stale`] and nothing is written for it. An attempt that may still run
//!   keeps its attempt number, so no fencing token is handed out twice; one recorded `missed`
//!   ends, as never started (attempt number 0), and nothing can claim it again.
//! - Lateness is the store's clock less the fire time; one within the threshold, or of an
//!   attempt the misfire policy never judges ([`judged`]), starts as it is.
//! - A late one is judged as the slots of a misfire episode are ([`misfire_runs`]): under
//!   `run_once` it runs unless a later slot of its job has come (its next slot not yet
//!   triggered, or a later slot's execution, scheduled or a catch-up, that is not `skipped`,
//!   `cancelled` or `missed`: waiting, held, running or ended; a manual run is no slot), under
//!   `skip` it does not, under `run_all` it does. One that runs becomes `trigger: misfire`; one
//!   that does not is recorded `missed` (`trigger: misfire`, never started: no attempt, no
//!   worker), as a claim records one.
//! - Asked again, the episode's run starts (it is no longer `trigger: schedule`) and a missed
//!   one is stale; one that started as on time may be judged afresh (by then it may be late),
//!   but nothing starts twice: its worker asks only before it starts.

use std::collections::HashMap;
use std::future::Future;

use sundial_core::execution::Trigger;
use sundial_core::job::MisfirePolicy;

use crate::concurrency::misfire_runs;
use crate::{AttemptRef, LateVerdict, Result, RunSpec};

/// A held attempt as the judgement reads it. Instants are UTC milliseconds since the epoch.
#[derive(Debug, Clone)]
pub struct HeldAttempt {
    /// Execution id.
    pub id: String,
    /// The attempt number (1 for the only attempts judged).
    pub attempt: u32,
    /// Namespace of its job.
    pub namespace: String,
    /// Its job's name.
    pub job: String,
    /// Its job incarnation.
    pub job_uid: String,
    /// Why it exists.
    pub trigger: Trigger,
    /// The definition it runs (its misfire policy and threshold, whether one-off).
    pub run: RunSpec,
    /// Its slot.
    pub scheduled_at: i64,
    /// Its fire time.
    pub fire_at: i64,
}

/// The statements of the judgement, in the dialect of one store, on the transaction the
/// caller opened. Every method may fail with the store's classified error.
pub trait LateStatements: Send {
    /// The store's clock (UTC ms): the database's on a shared store.
    fn now(&mut self) -> impl Future<Output = Result<i64>> + Send;

    /// The executions of `attempts` that run that attempt, fenced as a worker's completion
    /// at `now` (this attempt number, their own lease unexpired if they have one, their
    /// worker lease not taken over), each row held until the transaction ends.
    fn held(
        &mut self,
        attempts: &[AttemptRef],
        now: i64,
    ) -> impl Future<Output = Result<Vec<HeldAttempt>>> + Send;

    /// The store's open transaction the judgement's shared statements run on.
    type Tx: crate::reads::Transaction;

    /// The statement that records the executions of the list `$1` `missed` at `$2`, never
    /// started: `trigger: misfire`, attempt number 0, no worker, no start, no lease, out of
    /// the queue, `finished_at` = `$2`.
    const RECORD_MISSED: &'static str;

    /// The transaction, for the statements above.
    fn tx(&mut self) -> &mut Self::Tx;
}

/// Whether the misfire policy judges `held` at all when it starts: a scheduled slot's first
/// attempt of a recurring job. Manual runs, catch-up runs (judged already), workflow tasks,
/// backfilled slots, retries and one-off slots always start.
pub fn judged(trigger: Trigger, attempt: u32, run: &RunSpec) -> bool {
    trigger == Trigger::Schedule && attempt == 1 && !run.one_off
}

/// The verdict on `held` at `now` (UTC ms), `later_come` being whether a later slot of its
/// job has come ([`shared::later_slot_come`], only asked under `run_once`):
/// [`LateVerdict::Start`] or [`LateVerdict::Missed`], and whether it becomes the episode's
/// run (`trigger: misfire`).
pub fn verdict(held: &HeldAttempt, now: i64, later_come: bool) -> (LateVerdict, bool) {
    let threshold = held.run.misfire_threshold.as_millis_i64();
    let late = now - held.fire_at;
    if !judged(held.trigger, held.attempt, &held.run) || late <= threshold {
        return (LateVerdict::Start, false);
    }
    if misfire_runs(held.run.misfire_policy, threshold, late, later_come) {
        (LateVerdict::Start, true)
    } else {
        (LateVerdict::Missed, false)
    }
}

/// Judges `attempts`, in order: see the module's invariants.
///
/// # Errors
/// The store's classified error; then the caller's transaction must not commit.
pub async fn judge_late<S: LateStatements>(
    s: &mut S,
    attempts: &[AttemptRef],
) -> Result<Vec<LateVerdict>> {
    let now = s.now().await?;
    let held: HashMap<(String, u32), HeldAttempt> = s
        .held(attempts, now)
        .await?
        .into_iter()
        .map(|h| ((h.id.clone(), h.attempt), h))
        .collect();
    let (mut misfire, mut missed, mut verdicts) = (Vec::new(), Vec::new(), Vec::new());
    for a in attempts {
        let Some(h) = held.get(&(a.id.clone(), a.attempt)) else {
            verdicts.push(LateVerdict::Stale);
            continue;
        };
        let asks = judged(h.trigger, h.attempt, &h.run)
            && now - h.fire_at > h.run.misfire_threshold.as_millis_i64()
            && h.run.misfire_policy == MisfirePolicy::RunOnce;
        let later_come = asks && shared::later_slot_come(s.tx(), h, now).await?;
        let (v, episode_run) = verdict(h, now, later_come);
        if episode_run {
            misfire.push(h.id.clone());
        }
        if v == LateVerdict::Missed {
            missed.push(h.id.clone());
        }
        verdicts.push(v);
    }
    if !misfire.is_empty() {
        super::claim::shared::mark_misfire(s.tx(), &misfire).await?;
    }
    if !missed.is_empty() {
        let st = crate::reads::Statement::new(S::RECORD_MISSED)
            .bind(missed.as_slice())
            .bind(now);
        crate::reads::Transaction::execute(s.tx(), &st).await?;
    }
    Ok(verdicts)
}

/// The late judgement's statements both stores share, on any store's open
/// [`crate::reads::Transaction`].
pub mod shared {
    use super::HeldAttempt;
    use crate::Result;
    use crate::reads::{Reader, Statement, Transaction};

    /// Whether a slot of job incarnation `held.job_uid` later than `held.scheduled_at` has
    /// come by `now` (Unix ms, UTC): the job's next slot not yet triggered, or the execution of
    /// a later slot (`trigger` `schedule` or `misfire`) whose fire time is at or before `now`
    /// and that is not `skipped`, `cancelled` or `missed`; read through `executions_job`
    /// (namespace, job, slot) and the jobs' key.
    ///
    /// # Errors
    /// The store's.
    pub async fn later_slot_come<T: Transaction>(
        tx: &mut T,
        held: &HeldAttempt,
        now: i64,
    ) -> Result<bool> {
        let st = Statement::new(
            "SELECT CAST(CASE WHEN EXISTS (SELECT 1 FROM executions WHERE namespace = $1 \
                 AND job = $2 AND job_uid = $3 AND scheduled_at > $4 AND fire_at <= $5 \
                 AND trigger IN ('schedule', 'misfire') \
                 AND state NOT IN ('skipped', 'cancelled', 'missed')) \
               OR EXISTS (SELECT 1 FROM jobs WHERE namespace = $1 AND name = $2 AND uid = $3 \
                 AND next_fire_at <= $5) THEN 1 ELSE 0 END AS BIGINT)",
        )
        .bind(held.namespace.as_str())
        .bind(held.job.as_str())
        .bind(held.job_uid.as_str())
        .bind(held.scheduled_at)
        .bind(now);
        match tx.row(&st).await? {
            Some(row) => Ok(<T::Store as Reader>::int(&row, 0)? == 1),
            None => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sundial_core::Dur;

    fn held(trigger: Trigger, attempt: u32, policy: MisfirePolicy, one_off: bool) -> HeldAttempt {
        let mut run = RunSpec::of(&crate::testkit::job_record("ns", "j").spec);
        run.misfire_policy = policy;
        run.misfire_threshold = Dur::from_secs(60);
        run.one_off = one_off;
        HeldAttempt {
            id: "e".into(),
            attempt,
            namespace: "ns".into(),
            job: "j".into(),
            job_uid: "u".into(),
            trigger,
            run,
            scheduled_at: 0,
            fire_at: 0,
        }
    }

    #[test]
    fn a_late_first_attempt_of_a_scheduled_slot_is_judged_by_its_policy() {
        use LateVerdict::{Missed, Start};
        let once = held(Trigger::Schedule, 1, MisfirePolicy::RunOnce, false);
        assert_eq!(
            verdict(&once, 60_000, true),
            (Start, false),
            "at the threshold"
        );
        assert_eq!(
            verdict(&once, 60_001, false),
            (Start, true),
            "the episode's run"
        );
        assert_eq!(
            verdict(&once, 60_001, true),
            (Missed, false),
            "a later slot came"
        );
        let skip = held(Trigger::Schedule, 1, MisfirePolicy::Skip, false);
        assert_eq!(verdict(&skip, 60_001, false), (Missed, false));
        let all = held(Trigger::Schedule, 1, MisfirePolicy::RunAll, false);
        assert_eq!(verdict(&all, 60_001, true), (Start, true));
    }

    #[test]
    fn what_the_policy_never_judges_starts_however_late() {
        for spared in [
            held(Trigger::Schedule, 1, MisfirePolicy::Skip, true),
            held(Trigger::Schedule, 2, MisfirePolicy::Skip, false),
            held(Trigger::Manual, 1, MisfirePolicy::Skip, false),
            held(Trigger::Misfire, 1, MisfirePolicy::Skip, false),
            held(Trigger::Backfill, 1, MisfirePolicy::Skip, false),
            held(Trigger::Workflow, 1, MisfirePolicy::Skip, false),
        ] {
            assert_eq!(
                verdict(&spared, 3_600_000, true),
                (LateVerdict::Start, false),
                "{:?}",
                (spared.trigger, spared.attempt)
            );
        }
    }
}
