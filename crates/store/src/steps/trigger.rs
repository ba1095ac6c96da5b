//! The trigger commit and a single execution's insert, written once over the statements each
//! store provides ([`TriggerStatements`], on the caller's open transaction). The caller opens
//! the transaction, runs [`trigger_commit`] (or [`execution_insert`]), commits, and only then
//! turns what was applied into its answer with [`TriggerApplied::into_committed`] and stamps
//! the claims it hands out with a clock read after the commit (docs/guarantees.md, "Slots
//! handed to the worker beside the scheduler").
//!
//! Invariants: nothing is written unless every shard of the batch is still leased to the
//! scheduler with the epoch it read (docs/guarantees.md, "G4 Failover"); each job advances
//! only from the version and next slot it was read at, and only the jobs that advanced get
//! their executions, one per slot, a slot written before keeping its execution (G1); the
//! executions the handoff may take (`handoff::handed_out`) are written claimed under the worker lease of
//! [`TriggerCommit::handoff`] only while that lease stands, read (and, where the store can,
//! held against a take-over) in the same transaction; every other execution waits for a claim.

use std::collections::HashSet;
use std::future::Future;

use jiff::Timestamp;

use crate::handoff;
use crate::{JobTrigger, NewExecution, Result, ShardLease, TriggerCommit, TriggerCommitted};

/// The statements of a trigger commit, in the dialect of one store, on the transaction the
/// caller opened. Every method may fail with the store's classified error.
pub trait TriggerStatements: Send {
    /// Fails with [`crate::Error::StaleFence`] unless every shard in `shards` is still leased
    /// to `node` with the epoch in `leases`, unexpired at `now` (Unix ms, UTC; the store may
    /// read its own clock instead), holding the leases against a take-over until the
    /// transaction ends where the store can.
    fn check_fence(
        &mut self,
        node: &str,
        leases: &[ShardLease],
        shards: &[u16],
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Advances every job of `jobs` whose stored version and next slot are still the ones it
    /// was read at to its `next_slot_at` / `next_fire_at`; returns the uids of those that
    /// advanced, in any order.
    fn advance_jobs(
        &mut self,
        jobs: &[JobTrigger],
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Whether the worker lease `epoch` still stands, holding it against a take-over until the
    /// transaction ends where the store can (so a take-over waits for this commit).
    fn worker_lease_stands(&mut self, epoch: i64) -> impl Future<Output = Result<bool>> + Send;

    /// Inserts `executions` at `now` (Unix ms, UTC), triggered by `node` (`None`: the API),
    /// a slot that has its execution already keeping it; returns how many went in. With
    /// `claimed` (a worker and the epoch of its lease) they are written as their first attempt
    /// under that lease, `running` from their fire time (from `now` for a slot due already,
    /// [`handoff::started_at`]), and the ids of the new ones are
    /// returned too; without it they wait for a claim. Fails with [`crate::Error::Corrupt`]
    /// when a run definition does not serialise, and may refuse an execution the store cannot
    /// hold ([`crate::Error::Defect`]: PostgreSQL's partition key needs a slot's execution id
    /// derived from the slot).
    fn insert_executions(
        &mut self,
        batch: Insert<'_>,
    ) -> impl Future<Output = Result<(u32, Vec<String>)>> + Send;

    /// Executions that wait for a claim went in: wake the workers once the transaction
    /// commits, where the store signals inside the transaction (PostgreSQL's `NOTIFY`); a
    /// store whose workers find them by their own timers does nothing.
    fn waiting_inserted(&mut self) -> impl Future<Output = Result<()>> + Send;
}

/// What a trigger commit applied, before the caller commits: [`TriggerCommitted`] but for the
/// claims handed out, which [`TriggerApplied::into_committed`] builds after the commit.
#[derive(Debug)]
pub struct TriggerApplied<'c> {
    committed: TriggerCommitted,
    /// The executions written claimed, in the batch's order, with the ids of those that went
    /// in and the epoch they were claimed under.
    handed: Vec<&'c NewExecution>,
    handed_ids: Vec<String>,
    epoch: Option<i64>,
    /// The commit's time: a slot written late starts then ([`handoff::started_at`]).
    written_at: Timestamp,
}

impl TriggerApplied<'_> {
    /// Whether any execution went in claimed: only then does the caller need the clock
    /// reading [`TriggerApplied::into_committed`] stamps the claims with.
    pub fn handed_any(&self) -> bool {
        !self.handed_ids.is_empty()
    }

    /// The commit's answer, with the claims handed out (in fire time order,
    /// [`handoff::claimed_of`]) stamped `claimed_at`. Call it after the commit; the caller
    /// restamps the claims with [`handoff::restamp`] from a clock read once they are built
    /// (building thousands takes milliseconds), so `claimed_at` may be a reading from before
    /// the commit.
    pub fn into_committed(self, claimed_at: Timestamp) -> TriggerCommitted {
        let mut committed = self.committed;
        if let Some(epoch) = self.epoch.filter(|_| !self.handed_ids.is_empty()) {
            committed.handed = handoff::claimed_of(
                &self.handed,
                &self.handed_ids,
                epoch,
                self.written_at,
                claimed_at,
            );
        }
        committed
    }
}

/// Applies `c` inside the caller's transaction at `now` (the store's now): the
/// fence, the jobs' conditional advance, and their executions, those the handoff may take
/// written claimed when `c` hands off to a worker whose lease still stands.
///
/// # Errors
/// [`crate::Error::StaleFence`] when a shard of the batch is no longer leased as read (nothing
/// written; the caller rolls back); whatever [`TriggerStatements::insert_executions`] refuses
/// ([`crate::Error::Corrupt`] for a run definition that does not serialise, a store's
/// [`crate::Error::Defect`] for an execution whose id is not its slot's); or the store's
/// classified error of any statement.
pub async fn trigger_commit<'c, S: TriggerStatements>(
    s: &mut S,
    c: &'c TriggerCommit,
    now: Timestamp,
) -> Result<TriggerApplied<'c>> {
    let ms = now.as_millisecond();
    let shards: Vec<u16> = c.jobs.iter().map(|j| j.shard).collect();
    s.check_fence(&c.node, &c.leases, &shards, ms).await?;
    let advanced: HashSet<String> = s.advance_jobs(&c.jobs).await?.into_iter().collect();
    let mut committed = TriggerCommitted::of(c, &advanced);
    let executions = c
        .jobs
        .iter()
        .filter(|j| advanced.contains(&j.uid))
        .flat_map(|j| &j.executions);
    let handoff = match &c.handoff {
        Some(h) if s.worker_lease_stands(h.epoch).await? => Some(h),
        _ => None,
    };
    let (waiting, handed) = handoff::split(executions, handoff, now);
    let (inserted, _) = s
        .insert_executions(Insert::waiting(&waiting, ms, Some(&c.node)))
        .await?;
    committed.executions_inserted = inserted;
    if inserted > 0 {
        s.waiting_inserted().await?;
    }
    let (mut handed_ids, mut epoch) = (Vec::new(), None);
    if let Some(h) = handoff {
        let (inserted, ids) = s
            .insert_executions(Insert {
                claimed: Some((&h.worker, h.epoch)),
                ..Insert::waiting(&handed, ms, Some(&c.node))
            })
            .await?;
        committed.executions_inserted += inserted;
        handed_ids = ids;
        epoch = Some(h.epoch);
    }
    Ok(TriggerApplied {
        committed,
        handed,
        handed_ids,
        epoch,
        written_at: now,
    })
}

/// Inserts one execution outside the schedule (a manual run, by the API) inside the caller's
/// transaction at `now`, waiting for a claim; the caller commits and reads it
/// back.
///
/// # Errors
/// As [`trigger_commit`]'s inserts.
pub async fn execution_insert<S: TriggerStatements>(
    s: &mut S,
    e: &NewExecution,
    now: Timestamp,
) -> Result<()> {
    s.insert_executions(Insert::waiting(&[e], now.as_millisecond(), None))
        .await?;
    s.waiting_inserted().await
}

/// The audit log's change of a manual run ([`execution_insert`]): job `e.job` triggered, at
/// its version `e.job_version` (which it keeps). The caller records it in the insert's
/// transaction ([`super::audit::record`]).
pub fn trigger_change(e: &NewExecution) -> crate::audit::Change {
    crate::audit::Change {
        resource: "job",
        namespace: e.namespace.clone(),
        name: e.job.clone(),
        action: "trigger",
        version_before: Some(e.job_version),
        version_after: Some(e.job_version),
    }
}

/// A batch of executions to insert ([`TriggerStatements::insert_executions`]).
#[derive(Debug, Clone, Copy)]
pub struct Insert<'a> {
    /// The executions, one per slot.
    pub executions: &'a [&'a NewExecution],
    /// The commit's now, Unix ms (UTC).
    pub now: i64,
    /// The scheduler that triggered them (`triggered_by`), if one did.
    pub node: Option<&'a str>,
    /// The worker and its lease's epoch they are handed to, written as their first attempt
    /// under that lease; `None` for executions that wait for a claim.
    pub claimed: Option<(&'a str, i64)>,
}

impl<'a> Insert<'a> {
    /// `executions` written at `now` by `node` to wait for a claim.
    pub fn waiting(executions: &'a [&'a NewExecution], now: i64, node: Option<&'a str>) -> Self {
        Insert {
            executions,
            now,
            node,
            claimed: None,
        }
    }
}

/// The condition that limits a read of `jobs` to `shards`, to append to its `WHERE`: empty
/// when they are every shard (one node holds them all, and a read of every shard needs no
/// filter), `None` when there are none (nothing to read). The shard numbers are written into
/// the SQL as integers, which they are, in order: the text changes only when the shards held
/// do, so a store that prepares statements prepares it again only after a rebalance.
pub fn shard_filter(shards: &[u16]) -> Option<String> {
    let mut shards = shards.to_vec();
    shards.sort_unstable();
    shards.dedup();
    if shards.len() >= usize::from(sundial_core::SHARD_COUNT) {
        Some(String::new())
    } else if shards.is_empty() {
        None
    } else {
        let list: Vec<String> = shards.iter().map(u16::to_string).collect();
        Some(format!(" AND shard IN ({})", list.join(",")))
    }
}

/// Checks the fence of a trigger commit: every shard of `shards` must be held by `node` in
/// `held` (the shard leases as stored, read in the commit's transaction) with the epoch in
/// `leases` (as the trigger read them), unexpired at `now`.
///
/// # Errors
/// [`crate::Error::StaleFence`] naming the first shard that is not: nothing may be written.
pub fn fence_holds(
    node: &str,
    leases: &[crate::ShardLease],
    held: &[crate::ShardLease],
    shards: &[u16],
    now: jiff::Timestamp,
) -> Result<()> {
    for shard in shards {
        let read = leases.iter().find(|l| l.shard == *shard);
        let current = held.iter().find(|l| l.shard == *shard);
        let valid = matches!((read, current),
            (Some(r), Some(h)) if r.epoch == h.epoch && h.expires_at > now);
        if !valid {
            return Err(crate::Error::StaleFence(format!(
                "shard {shard} is no longer leased to {node} with the epoch read"
            )));
        }
    }
    Ok(())
}

/// The trigger's reads of due jobs, written once over any store's [`crate::reads::Reader`]:
/// each walks `jobs_due` (`next_fire_at`) from where it starts, limited to the shards asked
/// for by [`shard_filter`].
pub mod reads {
    use super::shard_filter;
    use crate::reads::{Reader, Statement};
    use crate::{DueJob, NextDue, Result, TriggerDueSeconds, TriggerListDue, TriggerNextDue};

    /// [`crate::SchedulerStore::trigger_list_due`]: the jobs of `q.shards` whose next fire time
    /// is at or before `q.horizon`, earliest first, at most `q.limit`.
    ///
    /// # Errors
    /// The store's; [`crate::Error::Corrupt`] for a row that does not decode.
    pub async fn list_due<S: Reader>(s: &S, q: &TriggerListDue) -> Result<Vec<DueJob>> {
        let Some(shards) = shard_filter(&q.shards) else {
            return Ok(Vec::new());
        };
        let sql = format!(
            "SELECT uid, shard, version, {}, next_slot_at FROM jobs \
             WHERE next_fire_at <= $1{shards} ORDER BY next_fire_at LIMIT $2",
            S::SPEC_TEXT
        );
        let st = Statement::new(sql)
            .bind(q.horizon.as_millisecond())
            .bind(i64::from(q.limit));
        s.rows(&st).await?.iter().map(S::due_job).collect()
    }

    /// [`crate::SchedulerStore::trigger_due_seconds`]: how many of the first `q.cap` jobs of
    /// `q.shards` due in [`q.from`, `q.until`) fall in each second (Unix seconds, a fire time
    /// before 1970 in the second that starts before it), earliest first.
    ///
    /// # Errors
    /// The store's; [`crate::Error::Corrupt`] for a row that does not decode.
    pub async fn due_seconds<S: Reader>(s: &S, q: &TriggerDueSeconds) -> Result<Vec<(i64, u64)>> {
        let Some(shards) = shard_filter(&q.shards) else {
            return Ok(Vec::new());
        };
        // `%` keeps the sign of the dividend in both dialects: the fire time less its
        // remainder brought into [0, 1000) is the start of its second, a whole multiple.
        let sql = format!(
            "SELECT s, count(*) FROM (SELECT (next_fire_at - ((next_fire_at % 1000) + 1000) % 1000) \
               / 1000 AS s FROM jobs WHERE next_fire_at >= $1 AND next_fire_at < $2{shards} \
               ORDER BY next_fire_at LIMIT $3) AS due GROUP BY s ORDER BY s"
        );
        let st = Statement::new(sql)
            .bind(q.from.as_millisecond())
            .bind(q.until.as_millisecond())
            .bind(i64::from(q.cap));
        s.rows(&st)
            .await?
            .iter()
            .map(|r| Ok((S::int(r, 0)?, u64::try_from(S::int(r, 1)?).unwrap_or(0))))
            .collect()
    }

    /// [`crate::SchedulerStore::trigger_next_due`]: the first next fire time of `q.shards`
    /// after `q.after`, unless it is beyond `q.until`, and how many jobs (at most `q.cap`) are
    /// due from it until `q.span` later.
    ///
    /// # Errors
    /// The store's; [`crate::Error::Corrupt`] for a row that does not decode.
    pub async fn next_due<S: Reader>(s: &S, q: &TriggerNextDue) -> Result<Option<NextDue>> {
        let Some(shards) = shard_filter(&q.shards) else {
            return Ok(None);
        };
        let until = q.until.as_millisecond();
        let sql = format!(
            "WITH n AS (SELECT min(next_fire_at) AS t FROM jobs WHERE next_fire_at > $1{shards}) \
             SELECT n.t, CASE WHEN n.t <= $4 THEN (SELECT count(*) FROM (SELECT 1 FROM jobs \
               WHERE next_fire_at >= n.t AND next_fire_at < n.t + $2{shards} LIMIT $3) AS due) \
               ELSE 0 END FROM n"
        );
        let st = Statement::new(sql)
            .bind(q.after.as_millisecond())
            .bind(q.span.as_millis_i64())
            .bind(i64::from(q.cap))
            .bind(until);
        let Some(row) = s.row(&st).await? else {
            return Ok(None);
        };
        match S::opt_int(&row, 0)? {
            Some(t) if t <= until => Ok(Some(NextDue {
                fire_at: super::super::instant(t)?,
                jobs: u64::try_from(S::int(&row, 1)?).unwrap_or(0),
            })),
            _ => Ok(None),
        }
    }
}
