//! This store's side of the reads written once (`sundial_store::steps::listings`): the
//! [`Reader`] that runs their statements on the read connections and the SQLite fragments they
//! need (`json_extract`, JSON arrays read with `json_each`, row comparisons spelled out).

use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sundial_store::reads::{Reader, Statement, Transaction, Value, Writer};

use super::*;

/// `statement` with its values bound (a list of texts as a JSON array).
///
/// # Errors
/// [`Error::Corrupt`] when a list does not serialise (it always does).
fn query<'q>(
    statement: &'q Statement<'q>,
) -> Result<sqlx::query::Query<'q, sqlx::Sqlite, SqliteArguments<'q>>> {
    let mut q = sqlx::query(statement.sql());
    for value in statement.values() {
        q = match *value {
            Value::Text(v) => q.bind(v),
            Value::OptText(v) => q.bind(v),
            Value::Int(v) => q.bind(v),
            Value::OptInt(v) => q.bind(v),
            Value::Bool(v) => q.bind(v),
            Value::Texts(v) => {
                q.bind(serde_json::to_string(v).map_err(|e| Error::Corrupt(e.to_string()))?)
            }
            Value::Ints(v) => {
                q.bind(serde_json::to_string(v).map_err(|e| Error::Corrupt(e.to_string()))?)
            }
            Value::Float(v) => q.bind(v),
            Value::Bytes(v) => q.bind(v),
        };
    }
    Ok(q)
}

impl Reader for SqliteStore {
    type Row = SqliteRow;

    const JOB_COLUMNS: &'static str = jobs::JOB_COLUMNS;
    const LAST_EXECUTION: &'static str = jobs::LAST_EXECUTION;
    const CALENDAR_USERS: &'static str = "SELECT 'job ' || name FROM jobs WHERE namespace = $1 AND EXISTS \
     (SELECT 1 FROM json_each(spec, '$.schedule.exclude_calendars') WHERE value = $2) \
     UNION ALL SELECT 'workflow ' || name FROM workflows WHERE namespace = $1 AND EXISTS \
     (SELECT 1 FROM json_each(spec, '$.schedule.exclude_calendars') WHERE value = $2) \
     ORDER BY 1";
    const FOR_UPDATE: &'static str = "";
    const AS_JSON: &'static str = "";
    const DUE_TABLE: &'static str = "executions";
    const SPEC_TEXT: &'static str = "spec";
    const AUDIT_INSERT: sundial_store::steps::audit::AuditInsert =
        sundial_store::steps::audit::AuditInsert::AnonymousRows;
    const AUDIT_LOCK: &'static str = "";

    async fn now(&self) -> Result<i64> {
        Ok(ms(self.clock.now()))
    }

    async fn rows(&self, statement: &Statement<'_>) -> Result<Vec<SqliteRow>> {
        query(statement)?
            .fetch_all(&self.reader)
            .await
            .map_err(db_err)
    }

    async fn row(&self, statement: &Statement<'_>) -> Result<Option<SqliteRow>> {
        query(statement)?
            .fetch_optional(&self.reader)
            .await
            .map_err(db_err)
    }

    fn label_is(spec: &str, key: usize, value: usize) -> String {
        format!("json_extract({spec}, '$.labels.' || json_quote(${key})) = ${value}")
    }

    fn one_of(column: &str, list: usize) -> String {
        format!("{column} IN (SELECT value FROM json_each(${list}))")
    }

    fn before(a: &str, b: &str, pa: usize, pb: usize) -> String {
        format!("({a} < ${pa} OR ({a} = ${pa} AND {b} < ${pb}))")
    }

    sundial_store::reader_decoders!();

    /// The queue is kept on the executions: waiting ones have `due_at`, running ones a lease
    /// (each through a partial index by incarnation).
    const UNFINISHED_EXECUTIONS: &'static str = "SELECT (SELECT count(*) FROM executions WHERE job_uid = $1 AND due_at IS NOT NULL) \
         + (SELECT count(*) FROM executions WHERE job_uid = $1 AND state = 'running')";

    sundial_store::run_decoders!();
}

impl Writer for SqliteStore {
    async fn execute(&self, statement: &Statement<'_>) -> Result<u64> {
        Ok(query(statement)?
            .execute(&self.writer)
            .await
            .map_err(db_err)?
            .rows_affected())
    }

    async fn returning(&self, statement: &Statement<'_>) -> Result<Option<SqliteRow>> {
        query(statement)?
            .fetch_optional(&self.writer)
            .await
            .map_err(db_err)
    }
}

/// This store's open write transaction, on which the steps written over
/// [`Transaction`] run.
pub(crate) struct SqlTx<'t, 'c>(pub(crate) &'t mut Tx<'c>);

impl Transaction for SqlTx<'_, '_> {
    type Store = SqliteStore;

    async fn execute(&mut self, statement: &Statement<'_>) -> Result<u64> {
        Ok(query(statement)?
            .execute(&mut **self.0)
            .await
            .map_err(db_err)?
            .rows_affected())
    }

    async fn rows(
        &mut self,
        statement: &Statement<'_>,
    ) -> Result<Vec<<SqliteStore as Reader>::Row>> {
        query(statement)?
            .fetch_all(&mut **self.0)
            .await
            .map_err(db_err)
    }

    async fn row(
        &mut self,
        statement: &Statement<'_>,
    ) -> Result<Option<<SqliteStore as Reader>::Row>> {
        query(statement)?
            .fetch_optional(&mut **self.0)
            .await
            .map_err(db_err)
    }
}
