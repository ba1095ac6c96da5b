//! The claim plan: what a claim does with each due execution, decided once for every store
//! (docs/policies.md). A store's claim fetches the due executions ([`DueExecution`]) and, for
//! the jobs that need it, what it knows of each job ([`JobFacts`]), in set-based statements;
//! [`plan`] decides; the store applies the [`ClaimPlan`] in bulk, in the same transaction.
//!
//! Decisions, in this order for each due execution (oldest due first):
//! 1. **Late slots created ahead** (docs/policies.md, "misfire_policy"): a never-started
//!    execution of a scheduled slot claimed more than its job's `misfire_threshold` after its
//!    fire time is judged as the slots of a misfire episode are ([`misfire_runs`]): it runs as
//!    `misfire`, or is recorded `missed`.
//! 2. **Concurrency policy** (docs/policies.md, "concurrency_policy"), for jobs that are not
//!    `allow`: a job is *active* while another of its executions runs, waits between attempts,
//!    or is chosen earlier in this claim. Under `skip`, the catch-up executions of a misfire
//!    episode (`trigger: misfire`) run one after another, oldest slot first: one waits
//!    (deferred by [`DEFER_MS`]) while the job is active or an older catch-up of the job still
//!    waits; any other execution that comes due while the job is active or a catch-up waits is
//!    `skipped`. Under `replace`, the active executions are cancelled (running ones are
//!    signalled) and the new one runs. A backfilled slot (`trigger: backfill`) under either
//!    waits (deferred) while the job is active: it never skips or replaces another.
//! 3. **Rate limits**: a rate-limited namespace gets at most the whole tokens of its bucket;
//!    the bucket is written back less what was handed out.
//!
//! A claim made with a claim-ahead window also reads executions due within it, after every
//! due one. Such an execution is handed out (its attempt starting at its fire time) only when
//! [`DueExecution::claimable_ahead`] holds and its namespace has no rate limit; none of the
//! decisions above is made for it, and the others are left as they are.
//!
//! Invariants of a plan:
//! - Every due execution is in at most one of `run`, `missed`, `skipped`, `deferred`,
//!   `cancelled`; one it leaves out stays as it was (another claim sees it later).
//! - `run` keeps the due order, and no execution the plan cancels is in it.
//! - Under `skip`, at most one execution of a job is in `run`, and none while the job is active.
//! - A namespace's executions in `run` never exceed the whole tokens of its bucket.
//! - An execution not yet due is in `run` only if it is claimable ahead and its namespace has
//!   no rate limit, and in no other list.
//!
//! The decision is made under a per-job lock (the embedded store's single writer; an
//! advisory lock per job on PostgreSQL), taken before the facts are read, so two claims
//! never both find a job idle.

use std::collections::{HashMap, HashSet};

use sundial_core::execution::Trigger;
use sundial_core::job::ConcurrencyPolicy;

use crate::RunSpec;
use crate::concurrency::{DEFER_MS, Decision, decide, misfire_runs, whole_tokens};

/// One due execution as a claim reads it. Instants are UTC milliseconds since the epoch.
#[derive(Debug, Clone)]
pub struct DueExecution {
    /// Execution id.
    pub id: String,
    /// Its namespace (the rate-limit bucket it spends from).
    pub namespace: String,
    /// The job incarnation.
    pub job_uid: String,
    /// How it was created.
    pub trigger: Trigger,
    /// The definition it runs.
    pub run: RunSpec,
    /// Its slot.
    pub scheduled_at: i64,
    /// Its fire time.
    pub fire_at: i64,
    /// When it became due for a claim: its fire time, or its retry or deferral instant.
    pub due_at: i64,
    /// Attempts so far (0: never started).
    pub attempt: u32,
}

impl DueExecution {
    /// Whether [`plan`] needs the [`JobFacts`] of this execution's job at `now`: for a due
    /// execution of a job whose concurrency policy is not `allow`, or to judge a late slot
    /// created ahead. Never for one not yet due (read by a claim ahead).
    pub fn needs_facts(&self, now: i64) -> bool {
        self.due_at <= now
            && (self.run.concurrency_policy != ConcurrencyPolicy::Allow || self.judged_late(now))
    }

    /// Whether a claim may hand this execution out before it is due (claim ahead,
    /// docs/guarantees.md, "Claim ahead"): never started, created by its schedule or by hand,
    /// due at its fire time, of a job whose concurrency policy is `allow`. For such an
    /// execution a claim decides nothing the time until its fire time could change: no
    /// misfire judgement (it is not late), no concurrency policy, and (the caller's part) no
    /// rate limit.
    pub fn claimable_ahead(&self) -> bool {
        self.attempt == 0
            && matches!(self.trigger, Trigger::Schedule | Trigger::Manual)
            && self.due_at == self.fire_at
            && self.run.concurrency_policy == ConcurrencyPolicy::Allow
    }

    /// Whether this is a never-started execution of a scheduled slot claimed later than its
    /// job's misfire threshold (one-off jobs always run when late).
    fn judged_late(&self, now: i64) -> bool {
        self.trigger == Trigger::Schedule
            && self.attempt == 0
            && !self.run.one_off
            && now - self.fire_at > self.run.misfire_threshold.as_millis_i64()
    }
}

/// An execution of a job that runs or waits between attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveExecution {
    /// Execution id.
    pub id: String,
    /// `running` (its worker must be told when it is cancelled), else `retry_wait`.
    pub running: bool,
}

/// The facts a claim read of the jobs of its due executions, by job uid.
pub type FactsByJob = HashMap<String, JobFacts>;

/// What a claim reads of one job beyond its due executions, as of the claim's `now`.
/// Instants are UTC milliseconds since the epoch.
#[derive(Debug, Clone, Default)]
pub struct JobFacts {
    /// The job's executions that run or wait between attempts (those among the due
    /// executions included).
    pub active: Vec<ActiveExecution>,
    /// The fire time of the job's next slot, not triggered yet (`jobs.next_fire_at`).
    pub next_fire_at: Option<i64>,
    /// The latest fire time among the job's never-started executions that are due.
    pub latest_due_fire_at: Option<i64>,
    /// The earliest slot among the job's never-started catch-up executions (`trigger:
    /// misfire`) that wait, due or deferred, other than the due executions read.
    pub earliest_waiting_catchup: Option<i64>,
}

/// What a claim does, for the store to apply in bulk.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimPlan {
    /// To hand out, in due order: each becomes `running` with its next attempt.
    pub run: Vec<String>,
    /// Judged late and kept: their `trigger` becomes `misfire` (whether they run now or wait).
    pub misfire: Vec<String>,
    /// To record `missed` (`trigger: misfire`).
    pub missed: Vec<String>,
    /// To record `skipped`.
    pub skipped: Vec<String>,
    /// To leave waiting, due again at `now + DEFER_MS`.
    pub deferred: Vec<String>,
    /// To cancel (`replace`), with whether each was running (its worker is signalled).
    pub cancelled: Vec<ActiveExecution>,
    /// Each rate-limited namespace's bucket as it is to be written back.
    pub buckets: Vec<(String, f64)>,
}

impl ClaimPlan {
    /// The due time of the executions in [`ClaimPlan::deferred`], for a claim at `now`.
    pub fn deferred_until(now: i64) -> i64 {
        now + DEFER_MS
    }

    /// The run definition of each execution handed out, by id, taken from the executions
    /// the plan was made over.
    pub fn runs(&self, due: Vec<DueExecution>) -> HashMap<String, RunSpec> {
        let run: HashSet<&str> = self.run.iter().map(String::as_str).collect();
        due.into_iter()
            .filter(|e| run.contains(e.id.as_str()))
            .map(|e| (e.id, e.run))
            .collect()
    }
}

/// How many executions of a rate-limited namespace a claim of `limit` may read, given its
/// bucket's `tokens` (refilled to now, [`crate::concurrency::refill`]).
pub fn allowance(tokens: f64, limit: u32) -> i64 {
    whole_tokens(tokens).min(i64::from(limit))
}

/// Orders the executions a claim read oldest due first, drops any read twice (by id: a claim
/// on time first reads its backlog's first rows again, `claim_order::ClaimReads`) and keeps
/// the first `limit`: a claim reads the rate-limited namespaces apart from the others (each up
/// to its allowance), and this merges the reads into the one list [`plan`] takes. Executions
/// due at the same instant keep the order they were read in.
pub fn oldest_due(due: &mut Vec<DueExecution>, limit: u32) {
    let mut seen = HashSet::with_capacity(due.len());
    due.retain(|e| seen.insert(e.id.clone()));
    due.sort_by_key(|e| e.due_at);
    due.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
}

/// Decides a claim at `now` (UTC ms) over `due` (oldest due first), with the facts of every
/// job for which [`DueExecution::needs_facts`] holds (a job missing from `facts` counts as
/// having none) and the refilled buckets of the rate-limited namespaces. See the module doc.
pub fn plan(
    due: &[DueExecution],
    facts: &HashMap<String, JobFacts>,
    buckets: &[(String, f64)],
    now: i64,
) -> ClaimPlan {
    let none = JobFacts::default();
    let facts_of = |uid: &str| facts.get(uid).unwrap_or(&none);
    let mut out = ClaimPlan::default();

    // 1. Late slots created ahead, judged on the facts alone (independent of each other).
    let mut trigger: Vec<Trigger> = due.iter().map(|e| e.trigger).collect();
    let mut judged_out = vec![false; due.len()];
    for (i, e) in due.iter().enumerate() {
        if !e.judged_late(now) {
            continue;
        }
        let f = facts_of(&e.job_uid);
        let later_due = f.next_fire_at.is_some_and(|t| t <= now)
            || f.latest_due_fire_at.is_some_and(|t| t > e.fire_at);
        let threshold = e.run.misfire_threshold.as_millis_i64();
        if misfire_runs(e.run.misfire_policy, threshold, now - e.fire_at, later_due) {
            out.misfire.push(e.id.clone());
            trigger[i] = Trigger::Misfire;
        } else {
            out.missed.push(e.id.clone());
            judged_out[i] = true;
        }
    }

    // The catch-up executions of each job among those read, by slot: under `skip` they wait
    // for each other, oldest first.
    let mut catchups: HashMap<&str, Vec<(i64, &str)>> = HashMap::new();
    for (i, e) in due.iter().enumerate() {
        if trigger[i] == Trigger::Misfire && e.attempt == 0 && !judged_out[i] {
            catchups
                .entry(e.job_uid.as_str())
                .or_default()
                .push((e.scheduled_at, e.id.as_str()));
        }
    }

    // 2. Concurrency policies, in due order.
    let mut tokens: HashMap<&str, i64> = buckets
        .iter()
        .map(|(ns, t)| (ns.as_str(), whole_tokens(*t)))
        .collect();
    let mut cancelled: HashSet<String> = HashSet::new();
    let mut chosen: Vec<(usize, &str)> = Vec::new(); // (index in due, job uid)
    for (i, e) in due.iter().enumerate() {
        if judged_out[i] || cancelled.contains(&e.id) {
            continue;
        }
        if let Some(left) = tokens.get(e.namespace.as_str())
            && *left <= 0
        {
            continue;
        }
        if e.due_at > now {
            // Read ahead of its fire time: handed out only when nothing decided here could
            // change before the fire time; otherwise left for a claim once it is due.
            if e.claimable_ahead() && !tokens.contains_key(e.namespace.as_str()) {
                chosen.push((i, e.job_uid.as_str()));
            }
            continue;
        }
        let policy = e.run.concurrency_policy;
        if policy != ConcurrencyPolicy::Allow {
            let f = facts_of(&e.job_uid);
            let others: Vec<&ActiveExecution> = f
                .active
                .iter()
                .filter(|a| a.id != e.id && !cancelled.contains(&a.id))
                .collect();
            let mate = chosen.iter().any(|(_, uid)| *uid == e.job_uid);
            let waiting_catchup = |older_than: Option<i64>| {
                let older = |slot: i64| older_than.is_none_or(|s| slot < s);
                f.earliest_waiting_catchup.is_some_and(older)
                    || catchups.get(e.job_uid.as_str()).is_some_and(|list| {
                        list.iter().any(|(slot, id)| {
                            *id != e.id && !cancelled.contains(*id) && older(*slot)
                        })
                    })
            };
            let is_catchup = trigger[i] == Trigger::Misfire;
            let active = mate
                || !others.is_empty()
                || (policy == ConcurrencyPolicy::Skip
                    && waiting_catchup(is_catchup.then_some(e.scheduled_at)));
            match decide(policy, trigger[i], active) {
                Decision::Run => {}
                Decision::Skip => {
                    out.skipped.push(e.id.clone());
                    continue;
                }
                Decision::Defer => {
                    out.deferred.push(e.id.clone());
                    continue;
                }
                Decision::Replace => {
                    for a in others {
                        cancelled.insert(a.id.clone());
                        out.cancelled.push(a.clone());
                    }
                    let (mates, keep): (Vec<_>, Vec<_>) =
                        chosen.into_iter().partition(|(_, uid)| *uid == e.job_uid);
                    chosen = keep;
                    for (j, _) in mates {
                        let mate = &due[j];
                        if let Some(left) = tokens.get_mut(mate.namespace.as_str()) {
                            *left += 1;
                        }
                        cancelled.insert(mate.id.clone());
                        out.cancelled.push(ActiveExecution {
                            id: mate.id.clone(),
                            running: false,
                        });
                    }
                }
            }
        }
        if let Some(left) = tokens.get_mut(e.namespace.as_str()) {
            *left -= 1;
        }
        chosen.push((i, e.job_uid.as_str()));
    }
    out.run = chosen.iter().map(|(i, _)| due[*i].id.clone()).collect();

    // 3. Buckets, less what is handed out.
    out.buckets = buckets
        .iter()
        .map(|(ns, t)| {
            let spent = chosen
                .iter()
                .filter(|(i, _)| due[*i].namespace == *ns)
                .count();
            (ns.clone(), t - spent as f64)
        })
        .collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::job_record;
    use proptest::prelude::*;
    use sundial_core::Dur;
    use sundial_core::job::MisfirePolicy;

    const NOW: i64 = 1_000_000;

    fn run(policy: ConcurrencyPolicy, misfire: MisfirePolicy) -> RunSpec {
        let mut spec = job_record("ns", "j").spec;
        spec.concurrency_policy = policy;
        spec.misfire_policy = misfire;
        spec.misfire_threshold = Dur::from_secs(60);
        RunSpec::of(&spec)
    }

    fn due(id: &str, uid: &str, trigger: Trigger, slot: i64, run: &RunSpec) -> DueExecution {
        DueExecution {
            id: id.into(),
            namespace: "ns".into(),
            job_uid: uid.into(),
            trigger,
            run: run.clone(),
            scheduled_at: slot,
            fire_at: slot,
            due_at: slot,
            attempt: 0,
        }
    }

    #[test]
    fn under_skip_a_slot_due_while_catch_ups_wait_is_skipped_and_catch_ups_go_oldest_first() {
        let r = run(ConcurrencyPolicy::Skip, MisfirePolicy::RunAll);
        // Two catch-ups read in the wrong slot order (both deferred once to the same due
        // time), and a scheduled slot that came due meanwhile.
        let rows = [
            due("c3", "u", Trigger::Misfire, NOW - 3_000, &r),
            due("c2", "u", Trigger::Misfire, NOW - 4_000, &r),
            due("s", "u", Trigger::Schedule, NOW - 100, &r),
        ];
        let p = plan(&rows, &HashMap::new(), &[], NOW);
        assert_eq!(p.run, ["c2"], "the oldest catch-up runs");
        assert_eq!(p.deferred, ["c3"]);
        assert_eq!(p.skipped, ["s"]);

        // Nothing of the job is read but the scheduled slot, while an older catch-up waits
        // deferred: it is skipped even though nothing runs right now.
        let facts = HashMap::from([(
            "u".to_owned(),
            JobFacts {
                earliest_waiting_catchup: Some(NOW - 4_000),
                ..JobFacts::default()
            },
        )]);
        let p = plan(&rows[2..], &facts, &[], NOW);
        assert_eq!(
            (p.run.len(), p.skipped.as_slice()),
            (0, &["s".to_owned()][..])
        );
        // And a catch-up younger than the waiting one waits too.
        let p = plan(&rows[..1], &facts, &[], NOW);
        assert_eq!(p.deferred, ["c3"]);
    }

    #[test]
    fn run_once_runs_only_the_latest_late_slot_created_ahead() {
        let r = run(ConcurrencyPolicy::Allow, MisfirePolicy::RunOnce);
        let rows = [
            due("a", "u", Trigger::Schedule, NOW - 300_000, &r),
            due("b", "u", Trigger::Schedule, NOW - 200_000, &r),
        ];
        let facts = HashMap::from([(
            "u".to_owned(),
            JobFacts {
                latest_due_fire_at: Some(NOW - 200_000),
                next_fire_at: Some(NOW + 1_000),
                ..JobFacts::default()
            },
        )]);
        let p = plan(&rows, &facts, &[], NOW);
        assert_eq!(
            (p.missed.as_slice(), p.run.as_slice()),
            (&["a".to_owned()][..], &["b".to_owned()][..])
        );
        assert_eq!(p.misfire, ["b"]);
        // When the job's next slot has come due, the scheduler runs that one instead.
        let facts = HashMap::from([(
            "u".to_owned(),
            JobFacts {
                latest_due_fire_at: Some(NOW - 200_000),
                next_fire_at: Some(NOW),
                ..JobFacts::default()
            },
        )]);
        let p = plan(&rows, &facts, &[], NOW);
        assert_eq!(p.missed, ["a", "b"]);
        assert!(p.run.is_empty());
    }

    #[test]
    fn replace_cancels_the_active_and_the_batch_mates() {
        let r = run(ConcurrencyPolicy::Replace, MisfirePolicy::RunOnce);
        let rows = [
            due("e1", "u", Trigger::Schedule, NOW - 10, &r),
            due("e2", "u", Trigger::Schedule, NOW - 5, &r),
        ];
        let facts = HashMap::from([(
            "u".to_owned(),
            JobFacts {
                active: vec![ActiveExecution {
                    id: "old".into(),
                    running: true,
                }],
                ..JobFacts::default()
            },
        )]);
        let p = plan(&rows, &facts, &[], NOW);
        assert_eq!(p.run, ["e2"]);
        let cancelled: Vec<_> = p
            .cancelled
            .iter()
            .map(|a| (a.id.as_str(), a.running))
            .collect();
        assert_eq!(cancelled, [("old", true), ("e1", false)]);
    }

    #[test]
    fn rate_limited_namespaces_get_their_whole_tokens_and_spend_them() {
        let r = run(ConcurrencyPolicy::Allow, MisfirePolicy::RunOnce);
        let rows: Vec<_> = (0..5)
            .map(|i| {
                due(
                    &format!("e{i}"),
                    &format!("u{i}"),
                    Trigger::Schedule,
                    NOW - 10,
                    &r,
                )
            })
            .collect();
        let p = plan(&rows, &HashMap::new(), &[("ns".into(), 3.5)], NOW);
        assert_eq!(p.run, ["e0", "e1", "e2"]);
        assert_eq!(p.buckets, [("ns".to_owned(), 0.5)]);
        assert_eq!(allowance(3.5, 2), 2);
        assert_eq!(allowance(f64::NAN, 2), 0);
    }

    fn policy() -> impl Strategy<Value = ConcurrencyPolicy> {
        prop_oneof![
            Just(ConcurrencyPolicy::Allow),
            Just(ConcurrencyPolicy::Skip),
            Just(ConcurrencyPolicy::Replace)
        ]
    }

    fn misfire() -> impl Strategy<Value = MisfirePolicy> {
        prop_oneof![
            Just(MisfirePolicy::RunOnce),
            Just(MisfirePolicy::RunAll),
            Just(MisfirePolicy::Skip)
        ]
    }

    fn trigger() -> impl Strategy<Value = Trigger> {
        prop_oneof![
            Just(Trigger::Schedule),
            Just(Trigger::Misfire),
            Just(Trigger::Manual)
        ]
    }

    /// Random claims: up to 4 jobs, up to 12 due executions, random facts and a bucket.
    fn claim() -> impl Strategy<Value = (Vec<DueExecution>, HashMap<String, JobFacts>, Option<f64>)>
    {
        let job = (policy(), misfire());
        let row = (0usize..4, trigger(), 0i64..400_000, 0u32..3);
        (
            proptest::collection::vec(job, 4),
            proptest::collection::vec(row, 0..12),
            proptest::collection::vec(
                (
                    0usize..3,
                    any::<bool>(),
                    proptest::option::of(0i64..400_000),
                ),
                4,
            ),
            proptest::option::of(0.0f64..8.0),
        )
            .prop_map(|(jobs, rows, facts, bucket)| {
                let due: Vec<DueExecution> = rows
                    .into_iter()
                    .enumerate()
                    .map(|(n, (j, t, late, attempt))| {
                        let r = run(jobs[j].0, jobs[j].1);
                        DueExecution {
                            attempt,
                            ..due(&format!("e{n}"), &format!("u{j}"), t, NOW - late, &r)
                        }
                    })
                    .collect();
                let facts = facts
                    .into_iter()
                    .enumerate()
                    .map(|(j, (active, running, catchup))| {
                        let active = (0..active)
                            .map(|k| ActiveExecution {
                                id: format!("a{j}.{k}"),
                                running,
                            })
                            .collect();
                        (
                            format!("u{j}"),
                            JobFacts {
                                active,
                                earliest_waiting_catchup: catchup.map(|c| NOW - c),
                                ..JobFacts::default()
                            },
                        )
                    })
                    .collect();
                (due, facts, bucket)
            })
    }

    proptest! {
        #[test]
        fn a_plan_keeps_its_invariants((due, facts, bucket) in claim()) {
            let buckets: Vec<(String, f64)> = bucket.map(|t| ("ns".to_owned(), t)).into_iter().collect();
            let p = plan(&due, &facts, &buckets, NOW);
            let ids: HashSet<&str> = due.iter().map(|e| e.id.as_str()).collect();
            // Each due execution lands in at most one outcome.
            let mut seen = HashSet::new();
            for id in p.run.iter().chain(&p.missed).chain(&p.skipped).chain(&p.deferred)
                .chain(p.cancelled.iter().map(|a| &a.id)) {
                prop_assert!(seen.insert(id.as_str()), "{id} decided twice: {p:?}");
            }
            // `run` keeps the due order.
            let order: Vec<usize> = p.run.iter()
                .map(|id| due.iter().position(|e| e.id == *id).unwrap()).collect();
            prop_assert!(order.windows(2).all(|w| w[0] < w[1]));
            for e in &due {
                let runs = p.run.iter().filter(|id| due.iter().any(|d| d.id == **id && d.job_uid == e.job_uid)).count();
                let f = facts.get(&e.job_uid);
                match e.run.concurrency_policy {
                    ConcurrencyPolicy::Skip => {
                        prop_assert!(runs <= 1, "skip ran {runs} of job {}: {p:?}", e.job_uid);
                        if f.is_some_and(|f| !f.active.is_empty()) {
                            let active_not_due = f.unwrap().active.iter().any(|a| !ids.contains(a.id.as_str()));
                            if active_not_due {
                                prop_assert_eq!(runs, 0, "skip ran while the job was active: {:?}", p);
                            }
                        }
                    }
                    ConcurrencyPolicy::Replace => prop_assert!(runs <= 1),
                    ConcurrencyPolicy::Allow => {}
                }
            }
            // Cancelled executions are never handed out; the bucket is never overspent.
            prop_assert!(p.cancelled.iter().all(|a| !p.run.contains(&a.id)));
            if let Some(t) = bucket {
                prop_assert!(p.run.len() as i64 <= whole_tokens(t));
                prop_assert!(p.buckets[0].1 >= t - whole_tokens(t) as f64 - 1e-9);
            }
        }
    }
}
