//! The API's reads of jobs, workflows, executions, runs, backfills and calendars, written once
//! over a store's [`Reader`] (`crate::reads`): each builds its statement from SQL both stores
//! share and the reader's dialect fragments, binds its values and decodes the rows with the
//! reader's decoders.
//!
//! Invariants: a read writes nothing; pages are keyset pages (a name after the last one, or a
//! (slot, id) pair before the last one), so a page never skips or repeats a record that stays
//! put while the pages are read; a record whose state depends on time is read as of one
//! reading of the store's clock.

use sundial_core::execution::ExecutionState;
use sundial_core::workflow::RunState;

use crate::reads::{Reader, Statement};
use crate::{
    BackfillOf, BackfillRecord, CalendarRecord, ExecutionListQuery, ExecutionRecord, JobListQuery,
    JobRecord, Result, RunListQuery, RunRecord, WorkflowListQuery, WorkflowRecord,
};

/// A workflow's columns, `w` naming its row.
pub const WORKFLOW_COLUMNS: &str = "w.namespace, w.name, w.uid, w.shard, w.version, w.spec, \
    w.created_at, w.updated_at, w.next_slot_at, w.next_fire_at";

/// The workflow's last run (the latest slot whose fire time `$1` has reached).
const LAST_RUN: &str = "(SELECT r.id || '|' || r.state || '|' || r.scheduled_at || '|' || r.fire_at \
    FROM workflow_runs r WHERE r.namespace = w.namespace AND r.workflow = w.name \
    AND r.workflow_uid = w.uid AND r.fire_at <= $1 \
    ORDER BY r.scheduled_at DESC, r.id DESC LIMIT 1) AS last_run";

/// A run's columns, `r` naming its row (its tasks are read apart).
pub const RUN_COLUMNS: &str = "r.id, r.namespace, r.workflow, r.workflow_uid, r.workflow_version, \
    r.trigger, r.scheduled_at, r.fire_at, r.state, r.params, r.created_at, r.finished_at, \
    (SELECT min(e.started_at) FROM executions e WHERE e.run_id = r.id) AS started_at";

/// An execution's columns.
pub const EXECUTION_COLUMNS: &str = "id, namespace, job, job_version, trigger, scheduled_at, \
    fire_at, queued_at, started_at, finished_at, state, attempt, max_attempts, due_at, worker, \
    run_id, task";

/// The attempts of execution `$1`, in attempt order: the ended ones from `attempts`, the running
/// one from the execution row (its `attempts` row is written when it ends).
const ATTEMPTS_OF_EXECUTION: &str = "SELECT attempt, worker, started_at, finished_at, outcome, \
    status_code, error, detail FROM attempts WHERE execution_id = $1 \
    UNION ALL \
    SELECT e.attempt, coalesce(e.worker, ''), coalesce(e.attempt_started_at, e.started_at), \
      CAST(NULL AS BIGINT), CAST(NULL AS TEXT), CAST(NULL AS BIGINT), CAST(NULL AS TEXT), \
      CAST(NULL AS TEXT) \
    FROM executions e WHERE e.id = $1 AND e.state = 'running' \
      AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.execution_id = e.id AND a.attempt = e.attempt) \
    ORDER BY attempt";

/// A backfill's columns.
pub const BACKFILL_COLUMNS: &str = "id, namespace, of, name, uid, shard, from_at, to_at, \
    max_per_second, state, slots, cursor_at, created, existing, last_id, reason, created_at, \
    updated_at, finished_at";

/// A calendar's columns.
pub const CALENDAR_COLUMNS: &str = "namespace, name, spec, version, created_at, updated_at";

/// The most backfills a listing returns, newest first.
pub const BACKFILL_LIST_MAX: i64 = 100;

/// The job `name` of `namespace`, with its last execution.
///
/// # Errors
/// The reader's classified error; [`crate::Error::Corrupt`] for a row that does not decode.
pub async fn job_get<S: Reader>(s: &S, namespace: &str, name: &str) -> Result<Option<JobRecord>> {
    let now = s.now().await?;
    let sql = format!(
        "SELECT {}, {} FROM jobs j WHERE j.namespace = $2 AND j.name = $3",
        S::JOB_COLUMNS,
        S::LAST_EXECUTION
    );
    let st = Statement::new(sql).bind(now).bind(namespace).bind(name);
    s.row(&st).await?.as_ref().map(S::job).transpose()
}

/// The jobs among `names` of `namespace` (those that exist, in any order).
///
/// # Errors
/// As [`job_get`].
pub async fn job_get_many<S: Reader>(
    s: &S,
    namespace: &str,
    names: &[String],
) -> Result<Vec<JobRecord>> {
    let now = s.now().await?;
    let sql = format!(
        "SELECT {}, {} FROM jobs j WHERE j.namespace = $2 AND {}",
        S::JOB_COLUMNS,
        S::LAST_EXECUTION,
        S::one_of("j.name", 3)
    );
    let st = Statement::new(sql).bind(now).bind(namespace).bind(names);
    s.rows(&st).await?.iter().map(S::job).collect()
}

/// A page of the jobs of `q.namespace`, in name order after `q.after_name`.
///
/// # Errors
/// As [`job_get`].
pub async fn job_list<S: Reader>(s: &S, q: &JobListQuery) -> Result<Vec<JobRecord>> {
    let now = s.now().await?;
    let mut sql = format!(
        "SELECT {}, {} FROM jobs j WHERE j.namespace = $2 AND j.name > $3",
        S::JOB_COLUMNS,
        S::LAST_EXECUTION
    );
    push_filters::<S>(&mut sql, "j", q.paused, q.label.is_some());
    sql.push_str(" ORDER BY j.name LIMIT $4");
    let st = named_page(
        sql,
        now,
        &q.namespace,
        q.after_name.as_deref(),
        q.limit,
        &q.label,
    );
    s.rows(&st).await?.iter().map(S::job).collect()
}

/// The workflow `name` of `namespace`, with its last run.
///
/// # Errors
/// As [`job_get`].
pub async fn workflow_get<S: Reader>(
    s: &S,
    namespace: &str,
    name: &str,
) -> Result<Option<WorkflowRecord>> {
    let now = s.now().await?;
    let sql = format!(
        "SELECT {WORKFLOW_COLUMNS}, {LAST_RUN} FROM workflows w WHERE w.namespace = $2 AND w.name = $3"
    );
    let st = Statement::new(sql).bind(now).bind(namespace).bind(name);
    s.row(&st)
        .await?
        .as_ref()
        .map(|r| S::workflow(r, now))
        .transpose()
}

/// A page of the workflows of `q.namespace`, in name order after `q.after_name`.
///
/// # Errors
/// As [`job_get`].
pub async fn workflow_list<S: Reader>(s: &S, q: &WorkflowListQuery) -> Result<Vec<WorkflowRecord>> {
    let now = s.now().await?;
    let mut sql = format!(
        "SELECT {WORKFLOW_COLUMNS}, {LAST_RUN} FROM workflows w WHERE w.namespace = $2 AND w.name > $3"
    );
    push_filters::<S>(&mut sql, "w", q.paused, q.label.is_some());
    sql.push_str(" ORDER BY w.name LIMIT $4");
    let st = named_page(
        sql,
        now,
        &q.namespace,
        q.after_name.as_deref(),
        q.limit,
        &q.label,
    );
    s.rows(&st)
        .await?
        .iter()
        .map(|r| S::workflow(r, now))
        .collect()
}

/// The workflows of the shards `q.shards` whose next fire time is at or before `q.horizon`,
/// earliest first, at most `q.limit`, as of the store's now (without their last run).
///
/// # Errors
/// The store's; [`crate::Error::Corrupt`] for a row that does not decode.
pub async fn workflow_list_due<S: Reader>(
    s: &S,
    q: &crate::TriggerListDue,
) -> Result<Vec<WorkflowRecord>> {
    let now = s.now().await?;
    let shards: Vec<i64> = q.shards.iter().map(|s| i64::from(*s)).collect();
    let sql = format!(
        "SELECT {WORKFLOW_COLUMNS}, CAST(NULL AS TEXT) AS last_run FROM workflows w \
         WHERE {} AND w.next_fire_at <= $2 ORDER BY w.next_fire_at LIMIT $3",
        S::one_of("w.shard", 1)
    );
    let st = Statement::new(sql)
        .bind(shards.as_slice())
        .bind(q.horizon.as_millisecond())
        .bind(i64::from(q.limit));
    s.rows(&st)
        .await?
        .iter()
        .map(|r| S::workflow(r, now))
        .collect()
}

/// The paused and label filters of a listing by name, on the row `alias` (`$5`, `$6`: the
/// label's key and value).
fn push_filters<S: Reader>(sql: &mut String, alias: &str, paused: Option<bool>, label: bool) {
    match paused {
        Some(true) => sql.push_str(&format!(" AND {alias}.paused")),
        Some(false) => sql.push_str(&format!(" AND NOT {alias}.paused")),
        None => {}
    }
    if label {
        sql.push_str(" AND ");
        sql.push_str(&S::label_is(&format!("{alias}.spec"), 5, 6));
    }
}

/// A listing by name's values: `$1` now, `$2` the namespace, `$3` the name after which the
/// page starts, `$4` its size, `$5` and `$6` the label's key and value.
fn named_page<'a>(
    sql: String,
    now: i64,
    namespace: &'a str,
    after: Option<&'a str>,
    limit: u32,
    label: &'a Option<(String, String)>,
) -> Statement<'a> {
    let (key, value) = label
        .as_ref()
        .map_or(("", ""), |(k, v)| (k.as_str(), v.as_str()));
    Statement::new(sql)
        .bind(now)
        .bind(namespace)
        .bind(after.unwrap_or(""))
        .bind(i64::from(limit))
        .bind(key)
        .bind(value)
}

/// Execution `id` of `namespace`, with its attempts.
///
/// # Errors
/// As [`job_get`].
pub async fn execution_get<S: Reader>(
    s: &S,
    namespace: &str,
    id: &str,
) -> Result<Option<ExecutionRecord>> {
    let sql =
        format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = $1 AND namespace = $2");
    let Some(row) = s.row(&Statement::new(sql).bind(id).bind(namespace)).await? else {
        return Ok(None);
    };
    let mut record = S::execution(&row)?;
    let attempts = s
        .rows(&Statement::new(ATTEMPTS_OF_EXECUTION).bind(id))
        .await?;
    record.attempts = attempts.iter().map(S::attempt).collect::<Result<_>>()?;
    Ok(Some(record))
}

/// A page of the history of `q.namespace` (a job's, with `q.job`), newest slot first, before
/// `q.before`; `queued` and `scheduled` are read as of the store's now, and `dead` without a
/// job pages through the dead letters, never through the whole history.
///
/// # Errors
/// As [`job_get`].
pub async fn execution_list<S: Reader>(
    s: &S,
    q: &ExecutionListQuery,
) -> Result<Vec<ExecutionRecord>> {
    let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE namespace = $1");
    if q.job.is_some() {
        // A job's history; a workflow of the same name keeps its tasks apart.
        sql.push_str(" AND job = $2 AND run_id IS NULL");
    }
    match q.state {
        Some(ExecutionState::Queued) => {
            sql.push_str(" AND state IN ('scheduled', 'queued') AND fire_at <= $3")
        }
        Some(ExecutionState::Scheduled) => {
            sql.push_str(" AND state = 'scheduled' AND fire_at > $3")
        }
        // The dead-letter listing pages through `dead_letters` (0008), never through the
        // whole history: the ids of one page, then their rows.
        Some(ExecutionState::Dead) if q.job.is_none() => {
            sql.push_str(
                " AND state = $4 AND id IN (SELECT d.id FROM dead_letters d WHERE d.namespace = $1",
            );
            if q.before.is_some() {
                sql.push_str(" AND ");
                sql.push_str(&S::before("d.scheduled_at", "d.id", 5, 6));
            }
            sql.push_str(" ORDER BY d.scheduled_at DESC, d.id DESC LIMIT $7)");
        }
        Some(_) => sql.push_str(" AND state = $4"),
        None => {}
    }
    if q.before.is_some() {
        sql.push_str(" AND ");
        sql.push_str(&S::before("scheduled_at", "id", 5, 6));
    }
    sql.push_str(" ORDER BY scheduled_at DESC, id DESC LIMIT $7");
    let now = s.now().await?;
    let st = history_page(
        sql,
        &q.namespace,
        q.job.as_deref(),
        now,
        q.state.map(ExecutionState::as_str),
        q.before.as_ref(),
        q.limit,
    );
    s.rows(&st).await?.iter().map(S::execution).collect()
}

/// A page of the runs of `q.namespace` (a workflow's, with `q.workflow`), newest slot first,
/// before `q.before`, without their tasks; `running` and `scheduled` as a reader sees them at
/// the store's now ([`crate::workflow::run_state_as_of`]).
///
/// # Errors
/// As [`job_get`].
pub async fn run_list<S: Reader>(s: &S, q: &RunListQuery) -> Result<Vec<RunRecord>> {
    let now = s.now().await?;
    let mut sql = format!("SELECT {RUN_COLUMNS} FROM workflow_runs r WHERE r.namespace = $1");
    if q.workflow.is_some() {
        sql.push_str(" AND r.workflow = $2");
    }
    match q.state {
        Some(RunState::Running) => sql
            .push_str(" AND (r.state = 'running' OR (r.state = 'scheduled' AND r.fire_at <= $3))"),
        Some(RunState::Scheduled) => sql.push_str(" AND r.state = 'scheduled' AND r.fire_at > $3"),
        Some(_) => sql.push_str(" AND r.state = $4"),
        None => {}
    }
    if q.before.is_some() {
        sql.push_str(" AND (r.scheduled_at < $5 OR (r.scheduled_at = $5 AND r.id < $6))");
    }
    sql.push_str(" ORDER BY r.scheduled_at DESC, r.id DESC LIMIT $7");
    let st = history_page(
        sql,
        &q.namespace,
        q.workflow.as_deref(),
        now,
        q.state.map(RunState::as_str),
        q.before.as_ref(),
        q.limit,
    );
    s.rows(&st).await?.iter().map(|r| S::run(r, now)).collect()
}

/// A history listing's values: `$1` the namespace, `$2` the job or workflow, `$3` now, `$4`
/// the state, `$5` and `$6` the (slot in Unix ms, id) the page ends before, `$7` its size.
fn history_page<'a>(
    sql: String,
    namespace: &'a str,
    of: Option<&'a str>,
    now: i64,
    state: Option<&'static str>,
    before: Option<&'a (jiff::Timestamp, String)>,
    limit: u32,
) -> Statement<'a> {
    let (before_at, before_id) =
        before.map_or((0, ""), |(t, id)| (t.as_millisecond(), id.as_str()));
    Statement::new(sql)
        .bind(namespace)
        .bind(of)
        .bind(now)
        .bind(state)
        .bind(before_at)
        .bind(before_id)
        .bind(i64::from(limit))
}

/// Backfill `id` of `namespace`.
///
/// # Errors
/// As [`job_get`].
pub async fn backfill_get<S: Reader>(
    s: &S,
    namespace: &str,
    id: &str,
) -> Result<Option<BackfillRecord>> {
    let sql = format!("SELECT {BACKFILL_COLUMNS} FROM backfills WHERE namespace = $1 AND id = $2");
    let st = Statement::new(sql).bind(namespace).bind(id);
    s.row(&st).await?.as_ref().map(S::backfill).transpose()
}

/// The latest [`BACKFILL_LIST_MAX`] backfills of the job or workflow `name`, newest first.
///
/// # Errors
/// As [`job_get`].
pub async fn backfill_list<S: Reader>(
    s: &S,
    namespace: &str,
    of: BackfillOf,
    name: &str,
) -> Result<Vec<BackfillRecord>> {
    let sql = format!(
        "SELECT {BACKFILL_COLUMNS} FROM backfills WHERE namespace = $1 AND of = $2 AND name = $3 \
         ORDER BY created_at DESC, id DESC LIMIT $4"
    );
    let st = Statement::new(sql)
        .bind(namespace)
        .bind(of.as_str())
        .bind(name)
        .bind(BACKFILL_LIST_MAX);
    s.rows(&st).await?.iter().map(S::backfill).collect()
}

/// Calendar `name` of `namespace`.
///
/// # Errors
/// As [`job_get`].
pub async fn calendar_get<S: Reader>(
    s: &S,
    namespace: &str,
    name: &str,
) -> Result<Option<CalendarRecord>> {
    let sql =
        format!("SELECT {CALENDAR_COLUMNS} FROM calendars WHERE namespace = $1 AND name = $2");
    let st = Statement::new(sql).bind(namespace).bind(name);
    s.row(&st).await?.as_ref().map(S::calendar).transpose()
}

/// The calendars of `namespace`, in name order.
///
/// # Errors
/// As [`job_get`].
pub async fn calendar_list<S: Reader>(s: &S, namespace: &str) -> Result<Vec<CalendarRecord>> {
    let sql =
        format!("SELECT {CALENDAR_COLUMNS} FROM calendars WHERE namespace = $1 ORDER BY name");
    let st = Statement::new(sql).bind(namespace);
    s.rows(&st).await?.iter().map(S::calendar).collect()
}

/// Who names calendar `name` of `namespace` in `exclude_calendars`: `job NAME` and
/// `workflow NAME`, in order.
///
/// # Errors
/// As [`job_get`].
pub async fn calendar_users<S: Reader>(s: &S, namespace: &str, name: &str) -> Result<Vec<String>> {
    let st = Statement::new(S::CALENDAR_USERS).bind(namespace).bind(name);
    s.rows(&st).await?.iter().map(S::text).collect()
}

/// The namespaces that hold a job or a workflow, in name order.
///
/// # Errors
/// As [`job_get`].
pub async fn namespace_list<S: Reader>(s: &S) -> Result<Vec<String>> {
    // A skip scan: one index lookup per namespace, on each table's primary key.
    let st = Statement::new(
        "WITH RECURSIVE j AS ( \
           SELECT min(namespace) AS ns FROM jobs \
           UNION ALL SELECT (SELECT min(namespace) FROM jobs WHERE namespace > j.ns) FROM j \
             WHERE j.ns IS NOT NULL), \
         w AS ( \
           SELECT min(namespace) AS ns FROM workflows \
           UNION ALL SELECT (SELECT min(namespace) FROM workflows WHERE namespace > w.ns) FROM w \
             WHERE w.ns IS NOT NULL) \
         SELECT ns FROM j WHERE ns IS NOT NULL UNION SELECT ns FROM w WHERE ns IS NOT NULL \
         ORDER BY 1",
    );
    s.rows(&st).await?.iter().map(S::text).collect()
}
