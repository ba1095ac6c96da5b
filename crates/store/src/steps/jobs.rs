//! A job's writes (docs/policies.md, "Schedule changes never fire retroactively", "Pause and
//! resume"), written once over
//! the statements each store provides ([`JobStatements`], on the caller's open transaction):
//! creations, conditional replacements that steer the job's not-started executions
//! ([`PendingExecutions`]), and deletes. The caller opens the transaction, runs
//! [`job_write_batch`] or [`job_delete`], commits only when the step returns `Ok` (an error has
//! written nothing the caller keeps), and then tells the workers holding the executions the
//! step returns to drop them, if its dialect does not do that inside the transaction.
//!
//! Invariants: a batch is all or nothing; a creation of a job that exists is refused
//! ([`Error::Conflict`]); a replacement applies only while the stored version is the expected
//! one ([`Error::StaleVersion`], or [`Error::NotFound`] when there is none) and moves the version
//! on by one; a job's not-started executions are steered in the transaction that writes the
//! job, and a delete ends every one of them (`cancelled`), those a worker holds whose fire
//! time has not come included (from its fire time on, a held execution is a running attempt).

use std::future::Future;

use jiff::Timestamp;

use crate::audit::Change;
use crate::reads::{Reader, Statement, Transaction};
use crate::{Error, FutureSlots, JobRecord, JobWrite, PendingExecutions, Result, RunSpec};

/// The version read of a conditional write that changed nothing ([`version_mismatch`]), in
/// the dialect of one store, on the transaction the caller opened.
pub trait VersionStatements: Send {
    /// The version of the row of the table `<kind>s` (`job` or `workflow`) named
    /// `namespace`/`name`, `None` when there is none.
    ///
    /// # Errors
    /// The store's classified error.
    fn version(
        &mut self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
}

/// The version read of both stores, on any store's open [`Transaction`].
impl<T: Transaction> VersionStatements for T {
    async fn version(&mut self, kind: &str, namespace: &str, name: &str) -> Result<Option<i64>> {
        let sql = format!("SELECT version FROM {kind}s WHERE namespace = $1 AND name = $2");
        let row = self
            .row(&Statement::new(sql).bind(namespace).bind(name))
            .await?;
        row.map(|r| T::Store::int(&r, 0)).transpose()
    }
}

/// The statements of a job's writes on the transaction the caller opened: the inserts and the
/// steering of pending executions in the dialect of one store, the replacement and the delete
/// shared by both (provided). Instants are UTC milliseconds since the epoch. Every method may
/// fail with the store's classified error.
pub trait JobStatements: Transaction {
    /// Inserts `writes` (creations: [`is_plain_insert`]) in one statement, version 1,
    /// `created_at` = `updated_at` = `now`, leaving alone any job whose name is taken; returns
    /// the (namespace, name) of the rows that went in.
    fn insert(
        &mut self,
        writes: &[JobWrite],
        now: i64,
    ) -> impl Future<Output = Result<Vec<(String, String)>>> + Send;

    /// Replaces job `record.spec.namespace`/`record.spec.name` with `record` (its spec stored
    /// as `spec`, JSON text) while its version is `expected`: the version moves on by one,
    /// `updated_at` becomes `now`, the paused flag, next slot and next fire time are the
    /// record's. Returns whether a row changed.
    fn replace(
        &mut self,
        record: &JobRecord,
        spec: &str,
        expected: i64,
        now: i64,
    ) -> impl Future<Output = Result<bool>> + Send {
        async move {
            let st = Statement::new(format!(
                "UPDATE jobs SET version = version + 1, spec = $4{}, paused = $5, \
                 updated_at = $6, next_slot_at = $7, next_fire_at = $8 \
                 WHERE namespace = $1 AND name = $2 AND version = $3",
                <Self::Store as Reader>::AS_JSON
            ))
            .bind(record.spec.namespace.as_str())
            .bind(record.spec.name.as_str())
            .bind(expected);
            let (slot, fire) = (record.next_slot_at, record.next_fire_at);
            let st = bind_definition(st, spec, record.spec.paused, now, slot, fire);
            Ok(self.execute(&st).await? > 0)
        }
    }

    /// The statement that ends the executions of job incarnation `$1` a worker holds whose
    /// attempt has not started by `$2` (claimed ahead: docs/guarantees.md, "Claim ahead"),
    /// returning their ids: `{end}` stands for the ending, [`held_ending`]'s.
    const END_HELD: &'static str;

    /// The statement that removes the executions of job incarnation `$1` waiting for a claim
    /// whose fire time is after `$2`.
    const DROP_FUTURE: &'static str;

    /// The statement that records every execution of job incarnation `$1` waiting for a claim
    /// `cancelled` at `$2`.
    const CANCEL_WAITING: &'static str;

    /// The statement that gives the executions of job incarnation `$1` waiting for a claim the
    /// run definition `$2`, job version `$3`, `max_attempts` `$4` and lease length `$5` (ms).
    const UPDATE_PENDING: &'static str;

    /// Tells the workers holding the executions `held` (just ended) to drop them: inside the
    /// transaction where the store signals so (PostgreSQL's `NOTIFY`), returning nothing;
    /// otherwise returns them, for the caller to signal after the commit.
    fn stop(&mut self, held: Vec<String>) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Deletes job `namespace`/`name` if its version is `expected` (any version for `None`);
    /// returns the uid and version of the incarnation deleted, `None` when nothing was.
    fn delete(
        &mut self,
        namespace: &str,
        name: &str,
        expected: Option<i64>,
    ) -> impl Future<Output = Result<Option<(String, i64)>>> + Send {
        async move {
            let st = Statement::new(
                "DELETE FROM jobs WHERE namespace = $1 AND name = $2 \
                 AND (CAST($3 AS BIGINT) IS NULL OR version = $3) RETURNING uid, version",
            )
            .bind(namespace)
            .bind(name)
            .bind(expected);
            let Some(row) = self.row(&st).await? else {
                return Ok(None);
            };
            let uid = <Self::Store as Reader>::text_at(&row, 0)?;
            Ok(Some((uid, <Self::Store as Reader>::int(&row, 1)?)))
        }
    }
}

/// Binds the next five parameters of a job's or a workflow's conditional replacement, in
/// this order: its spec (JSON text), its paused flag, `updated_at` = `now` (Unix ms, UTC), its
/// next slot and its next fire time (Unix ms, UTC, NULL when it has none).
pub(crate) fn bind_definition<'a>(
    st: Statement<'a>,
    spec: &'a str,
    paused: bool,
    now: i64,
    next_slot_at: Option<Timestamp>,
    next_fire_at: Option<Timestamp>,
) -> Statement<'a> {
    st.bind(spec)
        .bind(paused)
        .bind(now)
        .bind(next_slot_at.map(|t| t.as_millisecond()))
        .bind(next_fire_at.map(|t| t.as_millisecond()))
}

/// What ends an execution a worker holds before its attempt starts, in
/// [`JobStatements::END_HELD`]: removed with its slot ([`FutureSlots::Drop`]), or recorded
/// `cancelled` at `$2` ([`FutureSlots::Cancel`]).
pub fn held_ending(future: FutureSlots) -> &'static str {
    match future {
        FutureSlots::Drop => "DELETE FROM executions",
        FutureSlots::Cancel => {
            "UPDATE executions SET state = 'cancelled', finished_at = $2, lease_expires_at = NULL"
        }
    }
}

/// Ends the not-started executions of job incarnation `uid` at `now` (UTC ms): with
/// [`FutureSlots::Drop`] those whose fire time has not come are removed, the others (all of
/// them with [`FutureSlots::Cancel`]) recorded `cancelled`; executions held by a worker whose
/// attempt has not started end alike. Returns the ids of those held ones, whose worker must
/// drop them (see [`JobStatements::stop`]).
///
/// # Errors
/// The store's.
pub async fn end_pending<S: JobStatements>(
    s: &mut S,
    uid: &str,
    now: i64,
    future: FutureSlots,
) -> Result<Vec<String>> {
    let sql = S::END_HELD.replace("{end}", held_ending(future));
    let rows = s.rows(&Statement::new(sql).bind(uid).bind(now)).await?;
    let held = rows
        .iter()
        .map(<S::Store as Reader>::text)
        .collect::<Result<Vec<_>>>()?;
    let held = s.stop(held).await?;
    if future == FutureSlots::Drop {
        s.execute(&Statement::new(S::DROP_FUTURE).bind(uid).bind(now))
            .await?;
    }
    s.execute(&Statement::new(S::CANCEL_WAITING).bind(uid).bind(now))
        .await?;
    Ok(held)
}

/// True for a write that creates a job and touches no executions: a batch of only these can be
/// inserted in one statement.
pub fn is_plain_insert(write: &JobWrite) -> bool {
    write.expected_version.is_none() && matches!(write.pending, PendingExecutions::Keep)
}

/// The outcome of a batch of plain inserts (see [`is_plain_insert`]) written at `now`, of which
/// the rows `inserted` (namespace, name) went in: the records as written, or
/// [`Error::Conflict`] naming the first job that already existed.
///
/// # Errors
/// [`Error::Conflict`] when fewer rows went in than were written.
pub fn inserted_jobs(
    writes: &[JobWrite],
    inserted: Vec<(String, String)>,
    now: Timestamp,
) -> Result<Vec<JobRecord>> {
    if inserted.len() < writes.len() {
        let inserted: std::collections::HashSet<(String, String)> = inserted.into_iter().collect();
        if let Some(r) = writes
            .iter()
            .map(|w| &w.record)
            .find(|r| !inserted.contains(&(r.spec.namespace.clone(), r.spec.name.clone())))
        {
            return Err(Error::Conflict(format!(
                "job {}/{} already exists",
                r.spec.namespace, r.spec.name
            )));
        }
    }
    Ok(writes
        .iter()
        .map(|w| JobRecord {
            version: 1,
            created_at: now,
            updated_at: now,
            ..w.record.clone()
        })
        .collect())
}

/// The error of a conditional write of the `kind` (`job` or `workflow`) named
/// `namespace`/`name` that changed nothing: [`Error::StaleVersion`] with the version found, or
/// [`Error::NotFound`] when there is none (the store's error when it cannot tell).
pub async fn version_mismatch<S: VersionStatements>(
    s: &mut S,
    kind: &str,
    namespace: &str,
    name: &str,
    expected: i64,
) -> Error {
    match s.version(kind, namespace, name).await {
        Ok(Some(actual)) => Error::StaleVersion { expected, actual },
        Ok(None) => Error::NotFound(format!("{kind} {namespace}/{name}")),
        Err(e) => e,
    }
}

/// What a batch of job writes or a delete did: the records as written (a delete writes none),
/// and the executions held by a worker that it ended, which that worker must drop.
#[derive(Debug, Default)]
pub struct JobsWritten {
    /// The records as written, in the order of the writes.
    pub records: Vec<JobRecord>,
    /// Ids of executions held by a worker (claimed ahead, not started) that the writes ended.
    pub cancelled: Vec<String>,
}

/// Writes `writes` at `now` (UTC ms), each as [`crate::ApiStore::job_write`] describes: a
/// batch of creations only in one statement, any other batch write by write.
///
/// # Errors
/// The first write that fails: [`Error::Conflict`] (a creation whose name is taken),
/// [`Error::StaleVersion`] or [`Error::NotFound`] (a replacement of another version, or of no
/// job), [`Error::Corrupt`] for a spec or clock reading that does not convert, or the store's.
pub async fn job_write_batch<S: JobStatements>(
    s: &mut S,
    writes: &[JobWrite],
    now: i64,
) -> Result<JobsWritten> {
    let at = super::instant(now)?;
    if writes.iter().all(is_plain_insert) {
        let inserted = s.insert(writes, now).await?;
        let records = inserted_jobs(writes, inserted, at)?;
        super::audit::record(s, &changes(writes, &records), now).await?;
        return Ok(JobsWritten {
            records,
            cancelled: Vec::new(),
        });
    }
    let mut done = JobsWritten::default();
    for w in writes {
        let record = write_one(s, w, now, at, &mut done.cancelled).await?;
        done.records.push(record);
    }
    super::audit::record(s, &changes(writes, &done.records), now).await?;
    Ok(done)
}

/// The audit log's changes of `writes`, written as `records` (one each, in order).
fn changes(writes: &[JobWrite], records: &[JobRecord]) -> Vec<Change> {
    writes
        .iter()
        .zip(records)
        .map(|(w, r)| {
            let (ns, name) = (&r.spec.namespace, &r.spec.name);
            Change::written("job", ns, name, w.expected_version, r.version)
        })
        .collect()
}

/// One write of [`job_write_batch`], at `now` (UTC ms; `at` the same instant).
async fn write_one<S: JobStatements>(
    s: &mut S,
    w: &JobWrite,
    now: i64,
    at: Timestamp,
    cancelled: &mut Vec<String>,
) -> Result<JobRecord> {
    let r = &w.record;
    let version = match w.expected_version {
        None => {
            let inserted = s.insert(std::slice::from_ref(w), now).await?;
            inserted_jobs(std::slice::from_ref(w), inserted, at)?;
            1
        }
        Some(expected) => {
            let spec = serde_json::to_string(&r.spec).map_err(|e| Error::Corrupt(e.to_string()))?;
            if !s.replace(r, &spec, expected, now).await? {
                let (namespace, name) = (&r.spec.namespace, &r.spec.name);
                return Err(version_mismatch(s, "job", namespace, name, expected).await);
            }
            expected + 1
        }
    };
    match w.pending {
        PendingExecutions::Keep => {}
        PendingExecutions::Cancel => {
            cancelled.extend(end_pending(s, &r.uid, now, FutureSlots::Drop).await?);
        }
        PendingExecutions::Update => {
            let run = serde_json::to_string(&RunSpec::of(&r.spec))
                .map_err(|e| Error::Corrupt(e.to_string()))?;
            let (attempts, lease) = (
                i64::from(r.spec.retry.max_attempts),
                r.spec.heartbeat_timeout.as_millis_i64(),
            );
            let st = Statement::new(S::UPDATE_PENDING)
                .bind(r.uid.as_str())
                .bind(run.as_str())
                .bind(version)
                .bind(attempts)
                .bind(lease);
            s.execute(&st).await?;
        }
    }
    Ok(JobRecord {
        version,
        created_at: if w.expected_version.is_none() {
            at
        } else {
            r.created_at
        },
        updated_at: at,
        ..r.clone()
    })
}

/// Deletes job `namespace`/`name` at `now` (UTC ms) if its version is `expected` (any for
/// `None`), ending every not-started execution of it ([`FutureSlots::Cancel`]); returns what
/// it ended that a worker holds.
///
/// # Errors
/// [`Error::StaleVersion`] (another version) or [`Error::NotFound`] (no such job), or the
/// store's.
pub async fn job_delete<S: JobStatements>(
    s: &mut S,
    namespace: &str,
    name: &str,
    expected: Option<i64>,
    now: i64,
) -> Result<JobsWritten> {
    let Some((uid, version)) = s.delete(namespace, name, expected).await? else {
        return Err(version_mismatch(s, "job", namespace, name, expected.unwrap_or(0)).await);
    };
    let cancelled = end_pending(s, &uid, now, FutureSlots::Cancel).await?;
    let change = Change {
        resource: "job",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        action: "delete",
        version_before: Some(version),
        version_after: None,
    };
    super::audit::record(s, &[change], now).await?;
    Ok(JobsWritten {
        records: Vec::new(),
        cancelled,
    })
}
