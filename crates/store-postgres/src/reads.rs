//! This store's side of the reads written once (`sundial_store::steps::listings`): the
//! [`Reader`] that runs their statements on the pool and the PostgreSQL fragments they need
//! (`jsonb` paths, arrays, row comparisons, the queue table).

use sqlx::postgres::{PgArguments, PgRow};
use sundial_store::reads::{Reader, Statement, Transaction, Value, Writer};

use super::*;

/// `statement` with its values bound (a list of texts as a `text[]`).
fn query<'q>(statement: &'q Statement<'q>) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    statement
        .values()
        .iter()
        .fold(sqlx::query(statement.sql()), |q, value| match *value {
            Value::Text(v) => q.bind(v),
            Value::OptText(v) => q.bind(v),
            Value::Int(v) => q.bind(v),
            Value::OptInt(v) => q.bind(v),
            Value::Bool(v) => q.bind(v),
            Value::Texts(v) => q.bind(v),
            Value::Ints(v) => q.bind(v),
            Value::Float(v) => q.bind(v),
            Value::Bytes(v) => q.bind(v),
        })
}

impl Reader for PgStore {
    type Row = PgRow;

    const JOB_COLUMNS: &'static str = jobs::JOB_COLUMNS;
    const LAST_EXECUTION: &'static str = jobs::LAST_EXECUTION;
    /// The jobs through `jobs_calendar_users` (its predicate repeated so the planner may use
    /// it); the workflows, fewer, by their namespace's rows.
    const CALENDAR_USERS: &'static str = "SELECT 'job ' || name FROM jobs WHERE namespace = $1 \
     AND spec -> 'schedule' ? 'exclude_calendars' \
     AND spec -> 'schedule' -> 'exclude_calendars' ? $2 \
     UNION ALL SELECT 'workflow ' || name FROM workflows WHERE namespace = $1 \
     AND spec::jsonb -> 'schedule' -> 'exclude_calendars' ? $2 \
     ORDER BY 1";
    const FOR_UPDATE: &'static str = " FOR UPDATE";
    const AS_JSON: &'static str = "::jsonb";
    const DUE_TABLE: &'static str = "execution_queue";
    const SPEC_TEXT: &'static str = "spec::text AS spec";
    const AUDIT_INSERT: sundial_store::steps::audit::AuditInsert =
        sundial_store::steps::audit::AuditInsert::Json(
            "INSERT INTO audit_log (namespace, id, at, actor_name, actor_role, resource, name, action, version_before, version_after, request_id, remote_addr, prev_hash, hash) \
        SELECT e ->> 0, (e ->> 1)::bigint, (e ->> 2)::bigint, e ->> 3, e ->> 4, e ->> 5, e ->> 6, \
        e ->> 7, (e ->> 8)::bigint, (e ->> 9)::bigint, e ->> 10, e ->> 11, e ->> 12, e ->> 13 \
        FROM jsonb_array_elements($1::jsonb) AS e",
        );
    const AUDIT_LOCK: &'static str =
        "SELECT pg_advisory_xact_lock(hashtextextended('sundial.audit:' || $1, 0))";

    async fn now(&self) -> Result<i64> {
        self.now_ms(&self.pool).await
    }

    async fn rows(&self, statement: &Statement<'_>) -> Result<Vec<PgRow>> {
        query(statement).fetch_all(&self.pool).await.map_err(db_err)
    }

    async fn row(&self, statement: &Statement<'_>) -> Result<Option<PgRow>> {
        query(statement)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)
    }

    fn label_is(spec: &str, key: usize, value: usize) -> String {
        format!("({spec}::jsonb -> 'labels' ->> ${key}) = ${value}")
    }

    fn one_of(column: &str, list: usize) -> String {
        format!("{column} = ANY(${list})")
    }

    fn before(a: &str, b: &str, pa: usize, pb: usize) -> String {
        format!("({a}, {b}) < (${pa}, ${pb})")
    }

    sundial_store::reader_decoders!();

    const UNFINISHED_EXECUTIONS: &'static str =
        "SELECT count(*) FROM execution_queue WHERE job_uid = $1";

    sundial_store::run_decoders!();
}

impl Writer for PgStore {
    async fn execute(&self, statement: &Statement<'_>) -> Result<u64> {
        Ok(query(statement)
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected())
    }

    async fn returning(&self, statement: &Statement<'_>) -> Result<Option<PgRow>> {
        query(statement)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)
    }
}

/// This store's open write transaction, on which the steps written over
/// [`Transaction`] run.
pub(crate) struct SqlTx<'t, 'c>(pub(crate) &'t mut Tx<'c>);

impl Transaction for SqlTx<'_, '_> {
    type Store = PgStore;

    async fn execute(&mut self, statement: &Statement<'_>) -> Result<u64> {
        Ok(query(statement)
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?
            .rows_affected())
    }

    async fn rows(&mut self, statement: &Statement<'_>) -> Result<Vec<<PgStore as Reader>::Row>> {
        query(statement)
            .fetch_all(&mut **self.0)
            .await
            .map_err(db_err)
    }

    async fn row(&mut self, statement: &Statement<'_>) -> Result<Option<<PgStore as Reader>::Row>> {
        query(statement)
            .fetch_optional(&mut **self.0)
            .await
            .map_err(db_err)
    }
}
