//! History retention (`MaintenanceStore::history_prune`, docs/configuration.md "history_retention"):
//! the history walked in (slot, id) order from where the last call stopped, the expired rows
//! of each step deleted in one short transaction that skips rows another holds; the walk is
//! written once (`sundial_store::steps::retention`), its statements too, over this store's
//! transaction.
//!
//! Expired means finished before the cut-off and not the newest finished execution of its
//! job (or run of its workflow) while that job (workflow) exists. The walk reads the slot
//! indexes of migration 0009 (keyed by columns no update changes, so the claim's and the
//! completion's updates stay HOT), the newest-finished test reads `executions_job`
//! (`workflow_runs_history`). A deleted execution takes its attempts with it; a dead letter
//! goes by the delete trigger of migration 0008.
//!
//! On PostgreSQL the history is partitioned by day (migration 0010): a day whose every slot is
//! before the cut-off is dropped whole, its survivors moved to the default partition first, a
//! step each call of the jobs' walk ([`drop_step`]); the row-by-row walk deletes the expired
//! rows of `<table>_before` and `<table>_other` only, so the rows of a day partly past the
//! cut-off wait until all of it is.

use sundial_store::steps::retention::{self as steps, RetentionDialect, Walk};
use sundial_store::{HistoryKey, HistoryKind, HistoryPrune, HistoryPruned};

use crate::maintenance::DAY_MS;

use super::*;
use crate::reads::SqlTx;

/// The newer row's test as a row comparison; the rows a step deletes locked, those another
/// transaction holds (a re-drive, a retry from failure, another pruner) skipped and left for
/// a later pass.
impl RetentionDialect for PgStore {
    const NEWER: &'static str = "(n.scheduled_at, n.id) > (e.scheduled_at, e.id)";
    const TASK_ATTEMPTS_DELETE: &'static str = "DELETE FROM attempts a USING executions e \
        WHERE e.run_id = ANY($1) AND a.execution_id = e.id";
    const SKIP_HELD: Option<&'static str> = Some(" FOR UPDATE SKIP LOCKED");
}

pub(crate) async fn history_prune(store: &PgStore, prune: &HistoryPrune) -> Result<HistoryPruned> {
    let before = ms(prune.before);
    if prune.dry_run {
        return steps::history_count(store, prune).await;
    }
    let (table, _) = steps::table(prune.kind);
    // Each call of the jobs' walk also takes one step of dropping the oldest expired day
    // whole; while a drop is under way the walk is told to go on.
    let mut done = HistoryPruned::default();
    let mut dropping = false;
    if prune.kind == HistoryKind::Executions {
        match drop_step(
            store,
            before,
            prune.limit.saturating_mul(DROP_SCAN_ROWS_PER_ROW),
        )
        .await?
        {
            DropStep::Idle => {}
            DropStep::Scanning => dropping = true,
            DropStep::Dropped(day) => {
                tracing::info!(
                    executions = day.executions,
                    task_executions = day.task_executions,
                    runs = day.runs,
                    "history: an expired day's partitions dropped"
                );
                done.deleted = day.executions;
                done.task_executions = day.task_executions;
                dropping = true;
            }
        }
    }
    // The walk reads the partitions that are not a day's (those go whole): the rows from
    // before migration 0010 and the default partition's.
    let first: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(format!("{table}_before"))
        .fetch_one(&store.pool)
        .await
        .map_err(db_err)?;
    let walked = match first {
        Some(first) => format!("(SELECT * FROM {first} UNION ALL SELECT * FROM {table}_other)"),
        None => format!("{table}_other"),
    };
    let mut tx = store.begin().await?;
    let step = steps::history_walk(&mut Walk::new(SqlTx(&mut tx), walked), prune).await?;
    commit(tx).await?;
    done.deleted += step.deleted;
    done.task_executions += step.task_executions;
    done.next = step.next;
    if done.next.is_none() && dropping {
        // The walk is over, the drop is not: a key past every row the walk reads keeps the
        // calls coming.
        done.next = Some(HistoryKey {
            scheduled_at: prune.before,
            id: String::new(),
        });
    }
    Ok(done)
}

/// Refuses to re-open (re-drive, retry) the finished execution or run `id` while retention is
/// dropping its day's partition (`history_drops`, migration 0010): the drop keeps the rows
/// it found unexpired, and a row re-opened after that would be lost with the day.
///
/// # Errors
/// [`Error::Conflict`] naming the day; the store's, classified.
pub(crate) async fn refuse_if_dropping(tx: &mut Tx<'_>, id: &str) -> Result<()> {
    // Held until this transaction ends, so a drop announced meanwhile waits for it.
    sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
        .bind(REOPEN_LOCK_KEY)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
    let day: Option<i64> = sqlx::query_scalar(
        "SELECT day_start FROM history_drops \
         WHERE $1 >= sundial_id_bound(day_start) AND $1 < sundial_id_bound(day_start + 86400000)",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_err)?;
    match day {
        Some(day) => Err(Error::Conflict(format!(
            "{id} is in the history of {}, older than history_retention, which is being pruned",
            ts(day)?.strftime("%Y-%m-%d")
        ))),
        None => Ok(()),
    }
}

/// What one day's drop removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DayDropped {
    /// Executions of jobs dropped with the day.
    pub executions: u64,
    /// Task executions dropped with the day.
    pub task_executions: u64,
    /// Runs dropped with the day.
    pub runs: u64,
}

/// Where a day's drop stands after one [`drop_step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropStep {
    /// No day is expired whole, or another process is dropping one.
    Idle,
    /// A day is being scanned for its survivors; call again.
    Scanning,
    /// A day was dropped.
    Dropped(DayDropped),
}

/// The advisory lock whose shared side a re-open (re-drive, retry) holds from its check of
/// `history_drops` to its commit, and whose exclusive side a drop takes once after announcing
/// its day.
const REOPEN_LOCK_KEY: i64 = 0x5375_6e64_6961_6c52; // "SundialR"

/// Rows of a day a drop's scan step reads per row of the row walk's batch (40: 10,000 rows
/// a step with retention's 250-row batches); the retention service's pause after each call
/// paces both.
const DROP_SCAN_ROWS_PER_ROW: u32 = 40;

/// One step of dropping the oldest day partition of the history whose every slot is before
/// `before` (ms), its survivors kept; `rows` is how many rows of the day a scan step reads.
///
/// The rule (ARCHITECTURE.md, "History partitions"): what the row-by-row pruning
/// would keep is kept — unfinished executions and runs, those finished at or after `before`,
/// each job's newest finished execution and each workflow's newest finished run while the job
/// or workflow exists, and the tasks of every kept run. The steps, each a call:
/// 1. The day is announced in `history_drops` (one process drops at a time); from then on
///    nothing re-opens a finished row of it ([`refuse_if_dropping`]), and the scan starts
///    once the re-opens that passed that check before have committed.
/// 2. A chunk of `rows` of the day's runs, then of its executions, by id, is read without
///    locks, and its survivors, by the expiry tests of the row-by-row pruning, are written
///    to `history_drop_kept`, with how far the scan got: one statement a chunk, so the
///    caller's pacing spreads the scan's reads.
/// 3. With the scan done, one statement (`sundial_history_day_drop`, migration 0010) under a
///    100 ms `lock_timeout` takes `ACCESS EXCLUSIVE` on the three parents, adds the rows still
///    unfinished (through the queue's and the runs' indexes, so nothing reads the day's
///    tables under the lock), detaches the day's partitions, inserts the survivors back
///    through the parents (the default partition takes them, their ids unchanged) and
///    deletes the day's other dead letters; then the detached tables are dropped, each in a
///    statement of its own, so the removal of their files holds no lock of the parents. A
///    process that stalls after sending a statement holds no lock.
///
/// A row of the day inserted after its chunk was read, already finished (a catch-up of a
/// slot older than `history_retention` recorded as missed), is dropped with it.
///
/// # Errors
/// The store's, classified; a lock not had within 100 ms is `Contended` (the scan stays done,
/// and the next step drops the day).
pub(crate) async fn drop_step(store: &PgStore, before: i64, rows: u32) -> Result<DropStep> {
    let now = store.now_ms(&store.pool).await?;
    let current: Option<(i64, String, bool, String, i64, bool)> = sqlx::query_as(
        "SELECT day_start, owner, runs_done, scanned_to, started_at, detached FROM history_drops \
         ORDER BY day_start LIMIT 1",
    )
    .fetch_optional(&store.pool)
    .await
    .map_err(db_err)?;
    let Some((day_start, owner, runs_done, scanned_to, started_at, detached)) = current else {
        return announce_next_day(store, before, now).await;
    };
    if owner != store.instance {
        // Another process's drop; taken over once its owner has been silent for a minute.
        if started_at >= now - 60_000 {
            return Ok(DropStep::Idle);
        }
        let taken = sqlx::query(
            "UPDATE history_drops SET owner = $2, started_at = $3 \
             WHERE day_start = $1 AND owner = $4 AND started_at = $5",
        )
        .bind(day_start)
        .bind(&store.instance)
        .bind(now)
        .bind(&owner)
        .bind(started_at)
        .execute(&store.pool)
        .await
        .map_err(db_err)?
        .rows_affected();
        if taken == 0 {
            return Ok(DropStep::Idle);
        }
    }
    let day = ts(day_start)?.strftime("%Y%m%d").to_string();
    let (executions, runs) = (format!("executions_{day}"), format!("workflow_runs_{day}"));
    if detached {
        return finish_drop(store, day_start, &day).await;
    }
    let has_runs = sqlx::query_scalar::<_, Option<String>>("SELECT to_regclass($1)::text")
        .bind(&runs)
        .fetch_one(&store.pool)
        .await
        .map_err(db_err)?
        .is_some();
    if !runs_done && scanned_to.is_empty() {
        // Before the scan starts: every re-open that passed its check before the
        // announcement holds the shared side of this lock until it commits, so having the
        // exclusive side once means they are all over.
        let over: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(REOPEN_LOCK_KEY)
            .fetch_one(&store.pool)
            .await
            .map_err(db_err)?;
        if !over {
            return Ok(DropStep::Scanning);
        }
    }
    // 2. A chunk of the scan: the runs, then the executions. Survivors go to
    //    history_drop_kept; what is expired is counted for the report.
    let is_run = has_runs && !runs_done;
    let (table, keep, expired) = if is_run {
        (
            runs.as_str(),
            format!("NOT {}", steps::expired::<PgStore>(HistoryKind::Runs)),
            "0::bigint, 0::bigint, count(*) FILTER (WHERE NOT keep)",
        )
    } else {
        (
            executions.as_str(),
            format!(
                "CASE WHEN e.run_id IS NULL THEN NOT {} \
                 ELSE EXISTS (SELECT 1 FROM history_drop_kept k \
                              WHERE k.day_start = $2 AND k.is_run AND k.id = e.run_id) \
                   OR (NOT (e.run_id >= $6 AND e.run_id < $7) \
                       AND EXISTS (SELECT 1 FROM workflow_runs r WHERE r.id = e.run_id)) END",
                steps::expired::<PgStore>(HistoryKind::Executions)
            ),
            "count(*) FILTER (WHERE NOT keep AND run_id IS NULL), \
             count(*) FILTER (WHERE NOT keep AND run_id IS NOT NULL), 0::bigint",
        )
    };
    let run_id = if is_run { "NULL::text" } else { "e.run_id" };
    let read: (i64, Option<String>, i64, i64, i64) = sqlx::query_as(&format!(
        "WITH chunk AS (SELECT e.id, {run_id} AS run_id, {keep} AS keep FROM {table} e \
           WHERE e.id > $3 ORDER BY e.id LIMIT $4), \
         kept AS (INSERT INTO history_drop_kept (day_start, is_run, id) \
           SELECT $2, $5, id FROM chunk WHERE keep ON CONFLICT DO NOTHING) \
         SELECT count(*), max(id), {expired} FROM chunk"
    ))
    .bind(before)
    .bind(day_start)
    .bind(&scanned_to)
    .bind(i64::from(rows))
    .bind(is_run)
    .bind(bound(day_start))
    .bind(bound(day_start + DAY_MS))
    .fetch_one(&store.pool)
    .await
    .map_err(db_err)?;
    let short = read.0 < i64::from(rows);
    sqlx::query(
        "UPDATE history_drops SET scanned_to = $2, runs_done = runs_done OR $3, started_at = $4, \
           expired_executions = expired_executions + $5, expired_tasks = expired_tasks + $6, \
           expired_runs = expired_runs + $7 \
         WHERE day_start = $1",
    )
    .bind(day_start)
    .bind(if short {
        String::new()
    } else {
        read.1.unwrap_or_default()
    })
    .bind(short && is_run)
    .bind(now)
    .bind(read.2)
    .bind(read.3)
    .bind(read.4)
    .execute(&store.pool)
    .await
    .map_err(db_err)?;
    if !short || is_run {
        return Ok(DropStep::Scanning);
    }
    // 3. The detach: one statement, its own transaction.
    sqlx::query("SELECT sundial_history_day_drop($1, $2)")
        .bind(day_start)
        .bind(i32::from(crate::PARTITION_LOCK_TIMEOUT_MS))
        .execute(&store.pool)
        .await
        .map_err(db_err)?;
    finish_drop(store, day_start, &day).await
}

/// The end of a day's drop, once its partitions are detached: their tables dropped, each a
/// statement of its own (the removal of their files holds no lock of the parents), then the
/// day's rows of `history_drops` and `history_drop_kept` deleted.
async fn finish_drop(store: &PgStore, day_start: i64, day: &str) -> Result<DropStep> {
    for table in ["executions", "attempts", "workflow_runs"] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {table}_{day}"))
            .execute(&store.pool)
            .await
            .map_err(db_err)?;
    }
    sqlx::query("DELETE FROM history_drop_kept WHERE day_start = $1")
        .bind(day_start)
        .execute(&store.pool)
        .await
        .map_err(db_err)?;
    let counts: Option<(i64, i64, i64)> = sqlx::query_as(
        "DELETE FROM history_drops WHERE day_start = $1 \
         RETURNING expired_executions, expired_tasks, expired_runs",
    )
    .bind(day_start)
    .fetch_optional(&store.pool)
    .await
    .map_err(db_err)?;
    let (executions, tasks, runs) = counts.unwrap_or_default();
    Ok(DropStep::Dropped(DayDropped {
        executions: u64::try_from(executions).unwrap_or(0),
        task_executions: u64::try_from(tasks).unwrap_or(0),
        runs: u64::try_from(runs).unwrap_or(0),
    }))
}

/// Step 1 of [`drop_step`]: announces the oldest day partition whose every slot is before
/// `before`, if any.
async fn announce_next_day(store: &PgStore, before: i64, now: i64) -> Result<DropStep> {
    // The day partitions, oldest first, by their names' dates.
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE i.inhparent = 'executions'::regclass AND c.relname ~ '^executions_[0-9]{8}$' \
         ORDER BY c.relname",
    )
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    let Some(day_start) = names
        .iter()
        .filter_map(|n| {
            let date = jiff::civil::Date::strptime("%Y%m%d", n.get(11..)?).ok()?;
            Some(
                date.to_zoned(jiff::tz::TimeZone::UTC)
                    .ok()?
                    .timestamp()
                    .as_millisecond(),
            )
        })
        .find(|start| start + DAY_MS <= before)
    else {
        return Ok(DropStep::Idle);
    };
    let announced = sqlx::query(
        "INSERT INTO history_drops (day_start, started_at, owner) VALUES ($1, $2, $3) \
         ON CONFLICT DO NOTHING",
    )
    .bind(day_start)
    .bind(now)
    .bind(&store.instance)
    .execute(&store.pool)
    .await
    .map_err(db_err)?
    .rows_affected();
    Ok(if announced == 0 {
        DropStep::Idle
    } else {
        DropStep::Scanning
    })
}

/// The lower bound of the ids of millisecond `ms`: the first 12 hex digits of a UUID's text
/// (migration 0010's `sundial_id_bound`).
fn bound(ms: i64) -> String {
    let hex = format!("{:012x}", ms.max(0));
    format!("{}-{}", &hex[..8], &hex[8..12])
}
