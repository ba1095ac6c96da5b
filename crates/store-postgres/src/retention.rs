//! History retention (`Store::history_prune`, docs/configuration.md "history_retention"):
//! the history walked in (slot, id) order from where the last call stopped, the expired rows
//! of each step deleted in one short transaction that skips rows another holds.
//!
//! Expired means finished before the cut-off and not the newest finished execution of its
//! job (or run of its workflow) while that job (workflow) exists. The walk reads the slot
//! indexes of migration 0009 (keyed by columns no update changes, so the claim's and the
//! completion's updates stay HOT), the newest-finished test reads `executions_job`
//! (`workflow_runs_history`). A deleted execution takes its attempts with it; a dead letter
//! goes by the delete trigger of migration 0008.
//!
//! A walk of the jobs' history starts by dropping the oldest day partition (migration 0010)
//! whose every slot is before the cut-off, whole, its survivors moved to the default
//! partition first ([`drop_expired_day`]); the row-by-row walk then deletes what is left
//! in `<table>_before` and `<table>_other`.

use sundial_store::{HistoryKey, HistoryKind, HistoryPrune, HistoryPruned};

use super::*;

/// The expiry test of an execution `e` of a job at the cut-off `$1`.
const EXECUTION_EXPIRED: &str = "(e.finished_at IS NOT NULL AND e.finished_at < $1 \
    AND e.state IN ('succeeded', 'failed', 'dead', 'cancelled', 'skipped', 'missed', 'upstream_failed') \
    AND (NOT EXISTS (SELECT 1 FROM jobs j WHERE j.namespace = e.namespace AND j.name = e.job) \
         OR EXISTS (SELECT 1 FROM executions n \
                    WHERE n.namespace = e.namespace AND n.job = e.job \
                      AND (n.scheduled_at, n.id) > (e.scheduled_at, e.id) \
                      AND n.finished_at IS NOT NULL AND n.run_id IS NULL)))";

/// The expiry test of a run `e` at the cut-off `$1`.
const RUN_EXPIRED: &str = "(e.finished_at IS NOT NULL AND e.finished_at < $1 \
    AND e.state IN ('succeeded', 'failed', 'cancelled', 'skipped', 'missed') \
    AND NOT EXISTS (SELECT 1 FROM executions t WHERE t.run_id = e.id AND t.finished_at IS NULL) \
    AND (NOT EXISTS (SELECT 1 FROM workflows w WHERE w.namespace = e.namespace AND w.name = e.workflow) \
         OR EXISTS (SELECT 1 FROM workflow_runs n \
                    WHERE n.namespace = e.namespace AND n.workflow = e.workflow \
                      AND (n.scheduled_at, n.id) > (e.scheduled_at, e.id) \
                      AND n.finished_at IS NOT NULL)))";

pub(crate) async fn history_prune(store: &PgStore, prune: &HistoryPrune) -> Result<HistoryPruned> {
    let before = ms(prune.before);
    let (table, expired, scope) = match prune.kind {
        HistoryKind::Executions => ("executions", EXECUTION_EXPIRED, "e.run_id IS NULL AND "),
        HistoryKind::Runs => ("workflow_runs", RUN_EXPIRED, ""),
    };
    if prune.dry_run {
        let deleted: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {table} e WHERE {scope}e.scheduled_at < $1 AND {expired}"
        ))
        .bind(before)
        .fetch_one(&store.pool)
        .await
        .map_err(db_err)?;
        let task_executions: i64 = if prune.kind == HistoryKind::Runs {
            sqlx::query_scalar(&format!(
                "SELECT count(*) FROM executions WHERE run_id IN \
                   (SELECT e.id FROM workflow_runs e WHERE e.scheduled_at < $1 AND {RUN_EXPIRED})"
            ))
            .bind(before)
            .fetch_one(&store.pool)
            .await
            .map_err(db_err)?
        } else {
            0
        };
        return Ok(HistoryPruned {
            deleted: u64::try_from(deleted).unwrap_or(0),
            task_executions: u64::try_from(task_executions).unwrap_or(0),
            next: None,
        });
    }
    // A walk of the jobs' history starts with the oldest expired day, dropped whole.
    let mut done = HistoryPruned::default();
    if prune.kind == HistoryKind::Executions
        && prune.after.is_none()
        && let Some(day) = drop_expired_day(store, before).await?
    {
        tracing::info!(
            executions = day.executions,
            task_executions = day.task_executions,
            runs = day.runs,
            kept = day.kept,
            "history: an expired day's partitions dropped"
        );
        done.deleted = day.executions;
        done.task_executions = day.task_executions;
    }
    let (after_at, after_id) = prune.after.as_ref().map_or((i64::MIN, String::new()), |k| {
        (ms(k.scheduled_at), k.id.clone())
    });
    let mut tx = store.begin().await?;
    let seen: Vec<(String, i64, bool)> = sqlx::query_as(&format!(
        "SELECT e.id, e.scheduled_at, {expired} FROM {table} e \
         WHERE {scope}e.scheduled_at < $1 AND (e.scheduled_at, e.id) > ($2, $3) \
         ORDER BY e.scheduled_at, e.id LIMIT $4"
    ))
    .bind(before)
    .bind(after_at)
    .bind(&after_id)
    .bind(i64::from(prune.limit))
    .fetch_all(&mut *tx)
    .await
    .map_err(db_err)?;
    let doomed: Vec<&str> = seen
        .iter()
        .filter(|(_, _, expired)| *expired)
        .map(|(id, _, _)| id.as_str())
        .collect();
    if !doomed.is_empty() {
        // Lock what is still finished, skipping rows another transaction holds (a re-drive,
        // a retry from failure, another pruner): they are left for a later pass.
        let locked: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT id FROM {table} WHERE id = ANY($1) AND finished_at < $2 \
             FOR UPDATE SKIP LOCKED"
        ))
        .bind(&doomed)
        .bind(before)
        .fetch_all(&mut *tx)
        .await
        .map_err(db_err)?;
        if prune.kind == HistoryKind::Runs {
            sqlx::query(
                "DELETE FROM attempts a USING executions e \
                 WHERE e.run_id = ANY($1) AND a.execution_id = e.id",
            )
            .bind(&locked)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
            done.task_executions += sqlx::query("DELETE FROM executions WHERE run_id = ANY($1)")
                .bind(&locked)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?
                .rows_affected();
        } else {
            sqlx::query("DELETE FROM attempts WHERE execution_id = ANY($1)")
                .bind(&locked)
                .execute(&mut *tx)
                .await
                .map_err(db_err)?;
        }
        done.deleted += sqlx::query(&format!("DELETE FROM {table} WHERE id = ANY($1)"))
            .bind(&locked)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?
            .rows_affected();
    }
    commit(tx).await?;
    if seen.len() == prune.limit as usize
        && let Some((id, at, _)) = seen.last()
    {
        done.next = Some(HistoryKey {
            scheduled_at: ts(*at)?,
            id: id.clone(),
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

/// What one day's drop removed and kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DayDropped {
    /// Executions of jobs dropped with the day.
    pub executions: u64,
    /// Task executions dropped with the day.
    pub task_executions: u64,
    /// Runs dropped with the day.
    pub runs: u64,
    /// Executions and runs kept (moved to the default partition).
    pub kept: u64,
}

/// The advisory lock whose shared side a re-open (re-drive, retry) holds from its check of
/// `history_drops` to its commit, and whose exclusive side a drop takes once after announcing
/// its day.
const REOPEN_LOCK_KEY: i64 = 0x5375_6e64_6961_6c52; // "SundialR"

/// How long a drop waits for the re-opens that began before it announced the day to end:
/// 10 s.
const DROP_WAIT_FOR_OLDER: std::time::Duration = std::time::Duration::from_secs(10);

/// Drops the oldest day partition of the history whose every slot is before `before` (ms),
/// keeping its survivors; `None` when there is none (or another process is dropping one).
///
/// The rule (ARCHITECTURE.md, "History partitions"; SPEC §10): what the row-by-row pruning
/// would keep is kept — unfinished executions and runs, those finished at or after `before`,
/// each job's newest finished execution and each workflow's newest finished run while the job
/// or workflow exists, and the tasks of every kept run. The steps:
/// 1. The day is announced in `history_drops`; from then on nothing re-opens a finished row
///    of it ([`refuse_if_dropping`]), and the drop waits until the re-opens that passed that
///    check before have committed.
/// 2. Without locks, the survivors are found by the expiry tests of the row-by-row pruning,
///    reading the day's partitions.
/// 3. One statement (`sundial_history_day_drop`, migration 0010) under a 100 ms
///    `lock_timeout`: `ACCESS EXCLUSIVE` on the three parents; the rows still unfinished are
///    added to the survivors (found through the queue's and the runs' indexes, so nothing
///    scans the day under the lock); the day's partitions are detached, the survivors
///    inserted back through the parents (the default partition takes them, their ids
///    unchanged), the day's other dead letters deleted, and the detached tables dropped. A
///    day's history costs this statement whatever its size, and a process that stalls after
///    sending it holds no lock.
///
/// A row of the day inserted after step 2 already finished (a catch-up of a slot older than
/// `history_retention` recorded as missed) is dropped with it.
///
/// # Errors
/// The store's, classified; a lock not had within 100 ms is `Contended` (the day stays,
/// announced, and the next pass drops it).
pub(crate) async fn drop_expired_day(store: &PgStore, before: i64) -> Result<Option<DayDropped>> {
    const DAY: i64 = 86_400_000;
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
            let date: jiff::civil::Date =
                jiff::civil::Date::strptime("%Y%m%d", n.get(11..)?).ok()?;
            Some(
                date.to_zoned(jiff::tz::TimeZone::UTC)
                    .ok()?
                    .timestamp()
                    .as_millisecond(),
            )
        })
        .find(|start| start + DAY <= before)
    else {
        return Ok(None);
    };
    let day = ts(day_start)?.strftime("%Y%m%d").to_string();
    let (executions, runs) = (format!("executions_{day}"), format!("workflow_runs_{day}"));
    // 1. Announce the day, in one statement (a stalled process leaves nothing open). One
    //    process drops a day at a time: the announcement is taken over only once it is a
    //    minute old (a drop that failed).
    let now = store.now_ms(&store.pool).await?;
    let announced: Option<i32> = sqlx::query_scalar(
        "INSERT INTO history_drops (day_start, started_at) VALUES ($1, $2) \
         ON CONFLICT (day_start) DO UPDATE SET started_at = excluded.started_at \
         WHERE history_drops.started_at < excluded.started_at - 60000 \
         RETURNING 1",
    )
    .bind(day_start)
    .bind(now)
    .fetch_optional(&store.pool)
    .await
    .map_err(db_err)?;
    if announced.is_none() {
        return Ok(None);
    }
    // Every re-open that passed its check before the announcement holds the shared side of
    // this lock until it commits: having the exclusive side once means they are all over.
    let waited = std::time::Instant::now();
    loop {
        let over: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(REOPEN_LOCK_KEY)
            .fetch_one(&store.pool)
            .await
            .map_err(db_err)?;
        if over {
            break;
        }
        if waited.elapsed() > DROP_WAIT_FOR_OLDER {
            return Err(Error::Contended(
                format!("a re-drive or retry begun before the drop of {day} is still open").into(),
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // 2. The survivors, without locks.
    let has_runs = sqlx::query_scalar::<_, Option<String>>("SELECT to_regclass($1)::text")
        .bind(&runs)
        .fetch_one(&store.pool)
        .await
        .map_err(db_err)?
        .is_some();
    let kept_runs: Vec<String> = if has_runs {
        sqlx::query_scalar(&format!(
            "SELECT e.id FROM {runs} e WHERE NOT {RUN_EXPIRED}"
        ))
        .bind(before)
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)?
    } else {
        Vec::new()
    };
    let kept: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT e.id FROM {executions} e WHERE CASE WHEN e.run_id IS NULL THEN NOT {EXECUTION_EXPIRED} \
           ELSE e.run_id = ANY($2) OR (NOT (e.run_id >= $3 AND e.run_id < $4) \
             AND EXISTS (SELECT 1 FROM workflow_runs r WHERE r.id = e.run_id)) END"
    ))
    .bind(before)
    .bind(&kept_runs)
    .bind(bound(day_start))
    .bind(bound(day_start + DAY))
    .fetch_all(&store.pool)
    .await
    .map_err(db_err)?;
    // 3. The drop: one statement, its own transaction, so its ACCESS EXCLUSIVE locks end
    //    with it even if this process stalls right after sending it.
    let (executions_gone, tasks_gone, runs_gone): (i64, i64, i64) =
        sqlx::query_as("SELECT * FROM sundial_history_day_drop($1, $2, $3, $4)")
            .bind(day_start)
            .bind(&kept)
            .bind(&kept_runs)
            .bind(i32::from(crate::PARTITION_LOCK_TIMEOUT_MS))
            .fetch_one(&store.pool)
            .await
            .map_err(db_err)?;
    let dropped = DayDropped {
        executions: u64::try_from(executions_gone).unwrap_or(0),
        task_executions: u64::try_from(tasks_gone).unwrap_or(0),
        runs: u64::try_from(runs_gone).unwrap_or(0),
        kept: (kept.len() + kept_runs.len()) as u64,
    };
    Ok(Some(dropped))
}

/// The lower bound of the ids of millisecond `ms`: the first 12 hex digits of a UUID's text
/// (migration 0010's `sundial_id_bound`).
fn bound(ms: i64) -> String {
    let hex = format!("{:012x}", ms.max(0));
    format!("{}-{}", &hex[..8], &hex[8..12])
}
