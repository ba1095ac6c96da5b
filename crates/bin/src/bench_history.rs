//! `--expired N` of `sundial bench burst|steady`: N finished executions of jobs that no longer
//! exist, one attempt each, finished 60 days ago, written straight into the store before the
//! nodes start, so that history retention (default 30 days) prunes them all while the
//! workload runs (BENCHMARKS.md, "Retention under load"), in the namespace `bench-history`.
//! On PostgreSQL their ids lead with their slot time and their days get partitions of their
//! own first, so retention drops them a day at a time (migration 0010). Also the figures the
//! report gives: how many of them are left, the database's size, and the executions in each
//! state at the end of a run.

use std::sync::Arc;

use anyhow::Context as _;
use jiff::{SignedDuration, Timestamp};
use sqlx::Connection as _;
use sundial_clock::SystemClock;

/// Rows written per statement.
const CHUNK: u64 = 500_000;

/// Writes `n` expired executions (and an attempt each) into the store at `url`, migrating it
/// first.
///
/// # Errors
/// The store cannot be opened or written.
pub(crate) async fn load_expired(url: &str, n: u64) -> anyhow::Result<()> {
    drop(crate::server::open_store(url, Arc::new(SystemClock)).await?);
    let base = (Timestamp::now() - SignedDuration::from_hours(60 * 24)).as_millisecond();
    let started = std::time::Instant::now();
    let (executions, attempts) = if url.starts_with("sqlite:") {
        (
            "WITH RECURSIVE s(i) AS (SELECT ?2 UNION ALL SELECT i + 1 FROM s WHERE i < ?3) \
             INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
               scheduled_at, fire_at, queued_at, started_at, finished_at, state, attempt, \
               max_attempts, lease_ms, run, created_at) \
             SELECT printf('00000000-0000-7000-8000-%012x', i), 'bench-history', 'old-' || (i % 1000), \
               'old-uid-' || (i % 1000), 1, i % 1024, 'schedule', ?1 + i, ?1 + i, ?1 + i, ?1 + i, \
               ?1 + i + 50, 'succeeded', 1, 3, 30000, '{}', ?1 + i FROM s",
            "WITH RECURSIVE s(i) AS (SELECT ?2 UNION ALL SELECT i + 1 FROM s WHERE i < ?3) \
             INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, status_code) \
             SELECT printf('00000000-0000-7000-8000-%012x', i), 1, 'bench', ?1 + i, ?1 + i + 50, \
               'succeeded', 200 FROM s",
        )
    } else {
        (
            "INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
               scheduled_at, fire_at, queued_at, started_at, finished_at, state, attempt, \
               max_attempts, lease_ms, run, created_at) \
             SELECT sundial_id_bound($1 + i) || '-7000-8000-' || lpad(to_hex(i), 12, '0'), 'bench-history', \
               'old-' || (i % 1000), 'old-uid-' || (i % 1000), 1, i % 1024, 'schedule', $1 + i, \
               $1 + i, $1 + i, $1 + i, $1 + i + 50, 'succeeded', 1, 3, 30000, '{}', $1 + i \
             FROM generate_series($2::bigint, $3::bigint) AS i",
            "INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, status_code) \
             SELECT sundial_id_bound($1 + i) || '-7000-8000-' || lpad(to_hex(i), 12, '0'), 1, 'bench', $1 + i, \
               $1 + i + 50, 'succeeded', 200 FROM generate_series($2::bigint, $3::bigint) AS i",
        )
    };
    if !url.starts_with("sqlite:") {
        // Their days' partitions first (the ids lead with the slot time, migration 0010), so
        // that retention drops them whole as it would a day of real history.
        let last = base + i64::try_from(n).context("--expired")?;
        let mut conn = sqlx::PgConnection::connect(url).await?;
        sqlx::query(
            "SELECT sundial_history_day_create(t.name, t.key, d, $3, $4) \
             FROM (VALUES ('executions', 'id'), ('attempts', 'execution_id')) AS t(name, key), \
               generate_series($1 / 86400000 * 86400000, $2 / 86400000 * 86400000, 86400000) AS d",
        )
        .bind(base)
        .bind(last)
        .bind(i32::from(sundial_store_postgres::PARTITION_LOCK_TIMEOUT_MS))
        .bind(sundial_store_postgres::PARTITIONS_LOCK_KEY)
        .execute(&mut conn)
        .await
        .context("making the days' partitions")?;
        conn.close().await?;
    }
    let mut from = 1u64;
    while from <= n {
        let to = (from + CHUNK - 1).min(n);
        let (a, b) = (
            i64::try_from(from).context("--expired")?,
            i64::try_from(to).context("--expired")?,
        );
        for sql in [executions, attempts] {
            execute(url, sql, [base, a, b]).await?;
        }
        eprint!("\rloaded {to}/{n} expired executions");
        from = to + 1;
    }
    eprintln!(" in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Runs `sql` with `binds` on a connection of its own to the store at `url`.
async fn execute(url: &str, sql: &str, binds: [i64; 3]) -> anyhow::Result<()> {
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await?;
        let q = binds.iter().fold(sqlx::query(sql), |q, b| q.bind(*b));
        q.execute(&mut conn).await?;
        conn.close().await?;
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        let q = binds.iter().fold(sqlx::query(sql), |q, b| q.bind(*b));
        q.execute(&mut conn).await?;
        conn.close().await?;
    }
    Ok(())
}

/// The loaded executions still in the store, and the database's size in bytes (PostgreSQL:
/// `pg_database_size`; SQLite: the file and its log).
///
/// # Errors
/// The store cannot be read.
pub(crate) async fn left(url: &str) -> anyhow::Result<(u64, u64)> {
    const COUNT: &str = "SELECT count(*) FROM executions WHERE namespace = 'bench-history'";
    if let Some(path) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    {
        let mut conn = sqlx::SqliteConnection::connect(url).await?;
        let rows: i64 = sqlx::query_scalar(COUNT).fetch_one(&mut conn).await?;
        conn.close().await?;
        let path = path.split('?').next().unwrap_or(path);
        let size = [path.to_owned(), format!("{path}-wal")]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        return Ok((u64::try_from(rows).unwrap_or(0), size));
    }
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let rows: i64 = sqlx::query_scalar(COUNT).fetch_one(&mut conn).await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    Ok((
        u64::try_from(rows).unwrap_or(0),
        u64::try_from(size).unwrap_or(0),
    ))
}

/// How many executions the store at `url` holds in each state (`succeeded`, `missed`,
/// `retry_wait`, ...), read once a run has ended, so a report says what a run that fell
/// behind left undone and what the misfire policy recorded instead of running.
///
/// # Errors
/// The store cannot be read.
pub(crate) async fn executions_by_state(
    url: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    const BY_STATE: &str = "SELECT state, count(*) FROM executions GROUP BY state";
    let rows: Vec<(String, i64)> = if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await?;
        let rows = sqlx::query_as(BY_STATE).fetch_all(&mut conn).await?;
        conn.close().await?;
        rows
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await?;
        let rows = sqlx::query_as(BY_STATE).fetch_all(&mut conn).await?;
        conn.close().await?;
        rows
    };
    Ok(rows
        .into_iter()
        .map(|(state, n)| (state, u64::try_from(n).unwrap_or(0)))
        .collect())
}
