//! Slots handed to the worker beside the scheduler (docs/guarantees.md, "Slots handed to
//! the worker beside the scheduler"): a trigger commit that carries a [`TriggerHandoff`]
//! writes the executions it may hand out already claimed, `running` under the worker lease it
//! names, and returns them; the worker of the scheduler's process holds them until their fire
//! time as it holds executions claimed ahead. A slot then costs the store one write less (no
//! claim reads it and writes it again), and the claim loop serves what it was not handed.
//!
//! Invariants:
//! - An execution is handed out only if it is of the kind a claim ahead takes ([`handed_out`],
//!   the rule of [`crate::claim::DueExecution::claimable_ahead`]): scheduled, never started,
//!   created by its schedule or by hand, due within [`TriggerHandoff::within`], of a job whose
//!   concurrency policy is `allow`, outside the namespaces the worker rate-limits; or such a
//!   slot due already, which the scheduler reached late and whose misfire policy it applied
//!   when it planned the slot: the worker starts it at once, as it starts an execution claimed
//!   ahead whose fire time passed while it was held.
//! - While the store has a backlog ([`HandoffOffer::defer`]), a scheduler beside a worker
//!   writes no slot that worker would take but has no room for ([`defer_beyond_room`]): the
//!   slot's job stays where it was and is triggered by a later pass, once the worker has room
//!   (by its misfire policy, should it wait past its threshold). Under more load than the
//!   process serves, that lateness stays in the jobs, costing no write, instead of in
//!   executions written to wait, each of which a claim would read and write again
//!   (docs/guarantees.md, "Slots handed to the worker beside the scheduler"). Without a
//!   backlog, slots beyond the room are written to wait, for any worker to claim. With some
//!   room, a batch whose first such job alone has more of them than the whole room keeps that
//!   job, so that no job waits for more room than the worker has.
//! - At most [`TriggerHandoff::limit`] executions are handed out by one commit: the worker
//!   reserved room to hold that many before asking.
//! - A commit whose worker lease no longer stands hands nothing out: its executions are
//!   written to wait for a claim, as without a handoff; the trigger itself never fails for it.
//! - Only executions the commit inserted are handed out (a slot already written by an earlier
//!   commit keeps its execution, `ON CONFLICT DO NOTHING`), so each slot is claimed once.

use jiff::Timestamp;
use sundial_core::execution::{ExecutionState, Trigger};
use sundial_core::job::ConcurrencyPolicy;

use crate::JobTrigger;
use crate::records::{ClaimedExecution, NewExecution};

pub use crate::records::TriggerHandoff;

/// The worker a scheduler hands the slots it writes to, when the two run in one process.
///
/// `offer` is called before each trigger commit; it reserves room for up to `wanted`
/// executions and returns the request with the delivery of what the commit handed out, and
/// whether what it has no room for should wait in its jobs ([`HandoffOffer::defer`]). `None`
/// says the worker takes none now (no worker lease, claiming ahead turned off, `wanted` 0):
/// every slot is written to wait for a claim. Dropping the offer gives the room back.
pub trait Handoff: Send + Sync {
    /// Reserves room for up to `wanted` executions (`0` reserves none and returns `None`).
    fn offer(&self, wanted: usize) -> Option<HandoffOffer>;
}

impl std::fmt::Debug for dyn Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handoff")
    }
}

/// A worker's reservation for one trigger commit: what to ask of the store, and where to
/// deliver what it handed out.
pub struct HandoffOffer {
    /// The request the trigger commit carries; a `limit` of 0 asks for nothing (the commit
    /// then carries no handoff).
    pub request: TriggerHandoff,
    /// Whether the slots this worker would take beyond `request.limit` should stay in their
    /// jobs for a later pass ([`defer_beyond_room`]) rather than be written to wait for a
    /// claim: set while the store has a backlog (an execution due more than a second ago),
    /// when one more waiting execution would cost one more claim and this worker, out of room,
    /// would serve it no sooner.
    pub defer: bool,
    /// Takes the executions the commit handed out (at most `request.limit`), and when the
    /// commit returned (this node's clock, UTC): the worker holds each one for
    /// `started_at - claimed_at` from then. Room reserved and not used is given back.
    pub deliver: Box<dyn FnOnce(Vec<ClaimedExecution>, Timestamp) + Send>,
}

impl std::fmt::Debug for HandoffOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandoffOffer")
            .field("request", &self.request)
            .field("defer", &self.defer)
            .finish_non_exhaustive()
    }
}

/// Whether `e` may be handed out by a commit at `now` (UTC) under `handoff`: the kind a claim
/// ahead takes, due within the window or already (the module's first invariant).
pub fn handed_out(e: &NewExecution, now: Timestamp, handoff: &TriggerHandoff) -> bool {
    e.state == ExecutionState::Scheduled
        && matches!(e.trigger, Trigger::Schedule | Trigger::Manual)
        && e.fire_at <= now + handoff.within.as_signed()
        && e.run.concurrency_policy == ConcurrencyPolicy::Allow
        && !handoff.rate_limited.contains(&e.namespace)
}

/// Keeps in `jobs`, a pass's planned batch at `now` (UTC) in its order, those a commit handing
/// off under `handoff` should write now, and returns how many jobs it took out: those with
/// executions the worker would take ([`handed_out`]) beyond the room left (`handoff.limit`,
/// spent in order as [`split`] spends it), to be triggered by a later pass (the module's
/// second invariant). A commit of what is kept hands out every execution the worker would
/// take, but for one case: while nothing of a room of at least one is spent, a job with more
/// such executions than the whole room is kept, and what does not fit waits for a claim. A
/// commit whose clock reads later than `now` may find a slot more within
/// [`TriggerHandoff::within`] and hand it out ahead of later jobs' slots, which then wait for
/// a claim.
pub fn defer_beyond_room(
    jobs: &mut Vec<JobTrigger>,
    handoff: &TriggerHandoff,
    now: Timestamp,
) -> usize {
    let before = jobs.len();
    let room = handoff.limit as usize;
    let mut left = room;
    jobs.retain(|job| {
        let taken = job
            .executions
            .iter()
            .filter(|e| handed_out(e, now, handoff))
            .count();
        if taken <= left {
            left -= taken;
            true
        } else if left == room && room > 0 {
            left = 0;
            true
        } else {
            false
        }
    });
    before - jobs.len()
}

/// Splits the executions of a commit at `now` (UTC) into those written to wait for a claim and
/// those handed out, in their order, the latter at most `handoff.limit` (none without a
/// handoff).
pub fn split<'a>(
    executions: impl IntoIterator<Item = &'a NewExecution>,
    handoff: Option<&TriggerHandoff>,
    now: Timestamp,
) -> (Vec<&'a NewExecution>, Vec<&'a NewExecution>) {
    let (mut waiting, mut handed) = (Vec::new(), Vec::new());
    for e in executions {
        match handoff {
            Some(h) if handed.len() < h.limit as usize && handed_out(e, now, h) => handed.push(e),
            _ => waiting.push(e),
        }
    }
    (waiting, handed)
}

/// When a handed-out execution written at `written_at` (the commit's time, UTC) starts: its
/// fire time, or `written_at` for a slot the commit wrote late. The store records the same.
pub fn started_at(e: &NewExecution, written_at: Timestamp) -> Timestamp {
    e.fire_at.max(written_at)
}

/// The claim of a handed-out execution as the worker receives it: its first attempt under the
/// worker lease `epoch`, with no lease of its own, starting at [`started_at`] for a commit at
/// `written_at`; `claimed_at` is the store's clock (UTC) once the commit wrote it, so the
/// worker's hold never ends early.
pub fn claimed(
    e: &NewExecution,
    epoch: i64,
    written_at: Timestamp,
    claimed_at: Timestamp,
) -> ClaimedExecution {
    ClaimedExecution {
        id: e.id.clone(),
        namespace: e.namespace.clone(),
        job: e.job.clone(),
        trigger: e.trigger,
        attempt: 1,
        max_attempts: e.run.retry.max_attempts,
        scheduled_at: e.scheduled_at,
        fire_at: e.fire_at,
        started_at: started_at(e, written_at),
        claimed_at,
        lease_expires_at: None,
        worker_epoch: Some(epoch),
        run: e.run.clone(),
    }
}

/// The claims of those of `handed` whose ids are in `inserted` (the rest were written before:
/// not this commit's to hand out), in fire time order ([`claimed`]), for a commit at
/// `written_at`.
pub fn claimed_of(
    handed: &[&NewExecution],
    inserted: &[String],
    epoch: i64,
    written_at: Timestamp,
    claimed_at: Timestamp,
) -> Vec<ClaimedExecution> {
    let inserted: std::collections::HashSet<&str> = inserted.iter().map(String::as_str).collect();
    let mut claims: Vec<ClaimedExecution> = handed
        .iter()
        .filter(|e| inserted.contains(e.id.as_str()))
        .map(|e| claimed(e, epoch, written_at, claimed_at))
        .collect();
    claims.sort_by_key(|c| c.fire_at);
    claims
}

/// Sets every claim's `claimed_at` to `claimed_at`, the store's clock read once the claims
/// are built: building thousands of them (each with its run definition) takes milliseconds,
/// which a reading before it would add to every hold. A claim left with an earlier reading is
/// held longer, never released early.
pub fn restamp(claims: &mut [ClaimedExecution], claimed_at: Timestamp) {
    for c in claims {
        c.claimed_at = claimed_at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit;
    use proptest::prelude::*;

    fn handoff(limit: u32) -> TriggerHandoff {
        TriggerHandoff {
            worker: "w".into(),
            epoch: 7,
            limit,
            rate_limited: vec!["limited".into()],
            within: sundial_core::Dur::from_secs(10),
        }
    }

    fn execution(
        fire_in_ms: i64,
        ns: &str,
        policy: ConcurrencyPolicy,
        trigger: Trigger,
    ) -> NewExecution {
        let mut e = testkit::execution(&testkit::job_record(ns, "job"), Timestamp::UNIX_EPOCH);
        e.fire_at = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_millis(1_000 + fire_in_ms);
        e.run.concurrency_policy = policy;
        e.trigger = trigger;
        e
    }

    fn now() -> Timestamp {
        Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_millis(1_000)
    }

    #[test]
    fn only_what_a_claim_ahead_could_take_is_handed_out() {
        let h = handoff(100);
        let allow = ConcurrencyPolicy::Allow;
        assert!(handed_out(
            &execution(500, "a", allow, Trigger::Schedule),
            now(),
            &h
        ));
        assert!(handed_out(
            &execution(500, "a", allow, Trigger::Manual),
            now(),
            &h
        ));
        // Due already (or late): handed out to start at once, its misfire policy applied when
        // it was planned; beyond the window: a later claim's.
        assert!(handed_out(
            &execution(0, "a", allow, Trigger::Schedule),
            now(),
            &h
        ));
        assert!(handed_out(
            &execution(-5, "a", allow, Trigger::Schedule),
            now(),
            &h
        ));
        assert!(!handed_out(
            &execution(10_001, "a", allow, Trigger::Schedule),
            now(),
            &h
        ));
        // A concurrency policy needs the job's other executions at the claim.
        let skip = execution(500, "a", ConcurrencyPolicy::Skip, Trigger::Schedule);
        assert!(!handed_out(&skip, now(), &h));
        // A rate-limited namespace is claimed through its bucket.
        assert!(!handed_out(
            &execution(500, "limited", allow, Trigger::Schedule),
            now(),
            &h
        ));
        assert!(!handed_out(
            &execution(500, "a", allow, Trigger::Misfire),
            now(),
            &h
        ));
        let mut skipped = execution(500, "a", allow, Trigger::Schedule);
        skipped.state = ExecutionState::Skipped;
        assert!(!handed_out(&skipped, now(), &h));
    }

    #[test]
    fn a_handed_out_execution_is_its_first_attempt_held_until_its_fire_time() {
        let e = execution(500, "a", ConcurrencyPolicy::Allow, Trigger::Schedule);
        let c = claimed(&e, 7, now(), now());
        assert_eq!(
            (c.attempt, c.worker_epoch, c.lease_expires_at),
            (1, Some(7), None)
        );
        assert_eq!((c.started_at, c.claimed_at), (e.fire_at, now()));
        assert_eq!(c.max_attempts, e.run.retry.max_attempts);
        // A slot written late starts when it was written, not at its past fire time.
        let late = execution(-300, "a", ConcurrencyPolicy::Allow, Trigger::Schedule);
        assert_eq!(claimed(&late, 7, now(), now()).started_at, now());
    }

    fn job(uid: &str, slots: &[(i64, ConcurrencyPolicy)]) -> JobTrigger {
        let executions = slots
            .iter()
            .map(|(fire, policy)| execution(*fire, "a", *policy, Trigger::Schedule))
            .collect();
        let mut record = testkit::job_record("a", uid);
        record.uid = uid.into();
        testkit::job_trigger(&record, now(), None, executions)
    }

    #[test]
    fn a_job_beyond_the_room_is_deferred_and_the_rest_kept() {
        let allow = ConcurrencyPolicy::Allow;
        let mut jobs = vec![
            job("due-2", &[(-50, allow), (0, allow)]),
            job("ahead-2", &[(40, allow), (100, allow)]),
            // Its concurrency policy keeps it from the worker: written to wait, never deferred.
            job("skip", &[(-30, ConcurrencyPolicy::Skip)]),
            // Beyond the window: a later claim's, never deferred.
            job("far", &[(20_000, allow)]),
            job("due-1", &[(-20, allow)]),
        ];
        let deferred = defer_beyond_room(&mut jobs, &handoff(3), now());
        let kept: Vec<&str> = jobs.iter().map(|j| j.uid.as_str()).collect();
        assert_eq!((deferred, kept), (1, vec!["due-2", "skip", "far", "due-1"]));
        // No room at all: every job with a slot the worker takes waits for a later pass.
        let mut jobs = vec![job("due", &[(-1, allow)]), job("far", &[(20_000, allow)])];
        assert_eq!(defer_beyond_room(&mut jobs, &handoff(0), now()), 1);
        assert_eq!(jobs[0].uid, "far");
        // A job with more slots than the whole room is kept while nothing is spent.
        let mut jobs = vec![
            job("many", &[(-3, allow), (-2, allow), (-1, allow)]),
            job("one", &[(-1, allow)]),
        ];
        assert_eq!(defer_beyond_room(&mut jobs, &handoff(2), now()), 1);
        assert_eq!(jobs[0].uid, "many");
    }

    proptest! {
        /// What is kept is the batch less the jobs counted out, in its order; a commit of what
        /// is kept hands out every execution the worker takes, but where the first job that
        /// has any has more than the whole room; a job is taken out only for executions the
        /// worker takes.
        #[test]
        fn deferral_keeps_order_and_hands_out_every_execution_kept(
            rows in prop::collection::vec(
                prop::collection::vec((-2_000i64..12_000, any::<bool>()), 0..5), 0..30),
            limit in 0u32..40,
        ) {
            let jobs: Vec<JobTrigger> = rows
                .iter()
                .enumerate()
                .map(|(i, slots)| {
                    let slots: Vec<(i64, ConcurrencyPolicy)> = slots
                        .iter()
                        .map(|(fire, skip)| (*fire, if *skip {
                            ConcurrencyPolicy::Skip
                        } else {
                            ConcurrencyPolicy::Allow
                        }))
                        .collect();
                    job(&format!("j{i}"), &slots)
                })
                .collect();
            let h = handoff(limit);
            let takes = |j: &JobTrigger| j.executions.iter().filter(|e| handed_out(e, now(), &h)).count();
            let mut kept = jobs.clone();
            let deferred = defer_beyond_room(&mut kept, &h, now());
            prop_assert_eq!(kept.len() + deferred, jobs.len());
            let mut rest = jobs.iter().map(|j| j.uid.as_str());
            for k in &kept {
                prop_assert!(rest.any(|uid| uid == k.uid));
            }
            let (waiting, _) = split(kept.iter().flat_map(|j| &j.executions), Some(&h), now());
            let left_waiting = waiting.iter().filter(|e| handed_out(e, now(), &h)).count();
            let first = kept.iter().find(|j| takes(j) > 0);
            let oversized = first.is_some_and(|j| takes(j) > limit as usize);
            prop_assert!(left_waiting == 0 || (oversized && left_waiting == takes(first.unwrap()) - limit as usize));
            // The greedy rule, job by job: a job is taken out exactly when what it takes
            // exceeds the room left at its place (and it is not the first to take any with a
            // room of at least one).
            let mut left = limit as usize;
            for j in &jobs {
                let t = takes(j);
                let was_kept = kept.iter().any(|k| k.uid == j.uid);
                if t <= left {
                    prop_assert!(was_kept);
                    left -= t;
                } else if left == limit as usize && limit > 0 {
                    prop_assert!(was_kept);
                    left = 0;
                } else {
                    prop_assert!(!was_kept);
                }
            }
        }

        /// Every execution lands on exactly one side, in its order; the handed side holds only
        /// what may be handed out, never more than the limit, and is short of the limit only
        /// when nothing more could be handed out.
        #[test]
        fn split_keeps_every_execution_once_and_the_limit(
            rows in prop::collection::vec((-2_000i64..2_000, any::<bool>(), any::<bool>()), 0..60),
            limit in 0u32..40,
            with in any::<bool>(),
        ) {
            let es: Vec<NewExecution> = rows
                .iter()
                .map(|(fire, limited, skip)| execution(
                    *fire,
                    if *limited { "limited" } else { "a" },
                    if *skip { ConcurrencyPolicy::Skip } else { ConcurrencyPolicy::Allow },
                    Trigger::Schedule,
                ))
                .collect();
            let h = handoff(limit);
            let (waiting, handed) = split(&es, with.then_some(&h), now());
            prop_assert_eq!(waiting.len() + handed.len(), es.len());
            if !with {
                prop_assert!(handed.is_empty());
            }
            prop_assert!(handed.len() <= limit as usize);
            prop_assert!(handed.iter().all(|e| handed_out(e, now(), &h)));
            let left = waiting.iter().filter(|e| handed_out(e, now(), &h)).count();
            prop_assert!(!with || left == 0 || handed.len() == limit as usize);
            let order = |side: &[&NewExecution]| side.iter().map(|e| e.fire_at).collect::<Vec<_>>();
            let mut seen = es.iter().map(|e| e.fire_at);
            for t in order(&handed) {
                prop_assert!(seen.any(|s| s == t));
            }
        }
    }
}
