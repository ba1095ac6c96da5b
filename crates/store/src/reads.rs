//! The seam of the reads (`steps::listings`) and the one-statement writes (`steps::liveness`,
//! a backfill's creation) both stores answer alike: a [`Statement`] whose
//! SQL text is shared (parameters written `$1`, `$2`, …, which PostgreSQL takes as they are and
//! the SQLite driver binds by their number), its [`Value`]s, and the [`Reader`] and
//! [`Writer`] a store implements to run it and decode its rows into records. What the two dialects say
//! differently (JSON paths, lists of ids, row comparisons, a table only one store keeps) is a
//! fragment the reader provides.
//!
//! Invariants: a read writes nothing, on the connections that only read where the store has
//! them; each reads at one reading of the store's clock (`now`, Unix ms, UTC), which the
//! statement binds where a record's state depends on it. A [`Writer`]'s statement is one
//! write, atomic on its own.

use std::future::Future;

use crate::{
    AttemptRecord, BackfillRecord, CalendarRecord, ExecutionRecord, JobRecord, Result, RunRecord,
    WorkflowRecord,
};

/// A value bound to a statement's parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// Text.
    Text(&'a str),
    /// Text or NULL.
    OptText(Option<&'a str>),
    /// A 64-bit integer.
    Int(i64),
    /// A 64-bit integer or NULL.
    OptInt(Option<i64>),
    /// A boolean (`BOOLEAN` on PostgreSQL, 0 or 1 on SQLite).
    Bool(bool),
    /// A list of texts, for a fragment of [`Reader::one_of`] (an array on PostgreSQL, a JSON
    /// array on SQLite).
    Texts(&'a [String]),
    /// A list of 64-bit integers, for a fragment of [`Reader::one_of`] (a `bigint[]` on
    /// PostgreSQL, a JSON array on SQLite).
    Ints(&'a [i64]),
    /// A 64-bit float (`DOUBLE PRECISION` on PostgreSQL, `REAL` on SQLite).
    Float(f64),
    /// Bytes (`BYTEA` on PostgreSQL, `BLOB` on SQLite).
    Bytes(&'a [u8]),
}

impl From<f64> for Value<'_> {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(v: &'a str) -> Self {
        Value::Text(v)
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(v: &'a String) -> Self {
        Value::Text(v)
    }
}

impl<'a> From<Option<&'a str>> for Value<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Value::OptText(v)
    }
}

impl From<i64> for Value<'_> {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<Option<i64>> for Value<'_> {
    fn from(v: Option<i64>) -> Self {
        Value::OptInt(v)
    }
}

impl From<bool> for Value<'_> {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}

impl<'a> From<&'a [String]> for Value<'a> {
    fn from(v: &'a [String]) -> Self {
        Value::Texts(v)
    }
}

impl<'a> From<&'a [i64]> for Value<'a> {
    fn from(v: &'a [i64]) -> Self {
        Value::Ints(v)
    }
}

impl<'a> From<&'a [u8]> for Value<'a> {
    fn from(v: &'a [u8]) -> Self {
        Value::Bytes(v)
    }
}

/// An SQL statement with its values, the `n`th value bound to `$n`.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement<'a> {
    sql: String,
    values: Vec<Value<'a>>,
}

impl<'a> Statement<'a> {
    /// A statement of `sql`, with no values yet.
    pub fn new(sql: impl Into<String>) -> Self {
        Statement {
            sql: sql.into(),
            values: Vec::new(),
        }
    }

    /// Binds the next parameter (`$1` first).
    #[must_use]
    pub fn bind(mut self, value: impl Into<Value<'a>>) -> Self {
        self.values.push(value.into());
        self
    }

    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The values, in parameter order.
    pub fn values(&self) -> &[Value<'a>] {
        &self.values
    }
}

/// A store's side of the shared reads: it runs [`Statement`]s on its read connections and
/// decodes their rows with its own row decoders. Every method may fail with the store's
/// classified error; a row that does not decode is [`crate::Error::Corrupt`].
pub trait Reader: Sync {
    /// A row of the store's driver.
    type Row: Send + Sync;

    /// A job's columns, `j` naming the job row, with its spec as text.
    const JOB_COLUMNS: &'static str;
    /// A job's latest execution and earliest waiting fire time as columns, `j` naming the job
    /// row and `$1` the now.
    const LAST_EXECUTION: &'static str;

    /// Who names calendar `$2` of namespace `$1` in `exclude_calendars`: one text column,
    /// `job NAME` or `workflow NAME`, in order.
    const CALENDAR_USERS: &'static str;
    /// What a `SELECT` in a write transaction ends with to hold the rows it reads until the
    /// transaction ends (`FOR UPDATE`), or nothing where the one writer holds them all.
    const FOR_UPDATE: &'static str;
    /// What follows a parameter of JSON text written into a JSON document column (`::jsonb`
    /// on PostgreSQL; nothing on SQLite, which keeps the text).
    const AS_JSON: &'static str;
    /// The table whose `due_at` column a claim reads the due executions by
    /// (`execution_queue` on PostgreSQL, `executions` on SQLite).
    const DUE_TABLE: &'static str;
    /// A job's spec as a text column named `spec` (`spec::text AS spec` on PostgreSQL, whose
    /// column is a `jsonb` document; `spec` on SQLite).
    const SPEC_TEXT: &'static str;
    /// How this store inserts a transaction's audit entries
    /// ([`crate::steps::audit::AuditInsert`]).
    const AUDIT_INSERT: crate::steps::audit::AuditInsert;
    /// The statement that takes namespace `$1`'s audit chain until the transaction ends
    /// (`pg_advisory_xact_lock` on PostgreSQL), or `""` where the one writer holds every chain
    /// (SQLite) ([`crate::steps::audit`]'s invariants).
    const AUDIT_LOCK: &'static str;

    /// The store's now, Unix milliseconds (UTC).
    fn now(&self) -> impl Future<Output = Result<i64>> + Send;

    /// The rows `statement` returns.
    fn rows(
        &self,
        statement: &Statement<'_>,
    ) -> impl Future<Output = Result<Vec<Self::Row>>> + Send;

    /// The first row `statement` returns, if any.
    fn row(
        &self,
        statement: &Statement<'_>,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;

    /// A condition: the spec (JSON text or document) in `spec` has the label whose key is
    /// parameter `key` with the value of parameter `value`.
    fn label_is(spec: &str, key: usize, value: usize) -> String;

    /// A condition: `column` is one of the texts or integers of parameter `list` (a
    /// [`Value::Texts`] or [`Value::Ints`]).
    fn one_of(column: &str, list: usize) -> String;

    /// A condition: (`a`, `b`) sorts before (parameter `pa`, parameter `pb`).
    fn before(a: &str, b: &str, pa: usize, pb: usize) -> String;

    /// A job, from a row of [`Reader::JOB_COLUMNS`] and [`Reader::LAST_EXECUTION`].
    fn job(row: &Self::Row) -> Result<JobRecord>;

    /// A workflow as of `now`, from a row of its columns and its last run.
    fn workflow(row: &Self::Row, now: i64) -> Result<WorkflowRecord>;

    /// An execution (without its attempts), from a row of
    /// [`crate::steps::listings::EXECUTION_COLUMNS`].
    fn execution(row: &Self::Row) -> Result<ExecutionRecord>;

    /// An attempt, from a row of the attempts of an execution.
    fn attempt(row: &Self::Row) -> Result<AttemptRecord>;

    /// A run as of `now` (without its tasks), from a row of its columns.
    fn run(row: &Self::Row, now: i64) -> Result<RunRecord>;

    /// A backfill, from a row of its columns.
    fn backfill(row: &Self::Row) -> Result<BackfillRecord>;

    /// A calendar, from a row of its columns.
    fn calendar(row: &Self::Row) -> Result<CalendarRecord>;

    /// The text of a row's first column.
    fn text(row: &Self::Row) -> Result<String>;

    /// The 64-bit integer in column `column` (from 0) of a row.
    fn int(row: &Self::Row, column: usize) -> Result<i64>;

    /// The 64-bit integer or NULL in column `column` (from 0) of a row.
    fn opt_int(row: &Self::Row, column: usize) -> Result<Option<i64>>;

    /// The 64-bit float in column `column` (from 0) of a row.
    fn float(row: &Self::Row, column: usize) -> Result<f64>;

    /// The bytes in column `column` (from 0) of a row (`BYTEA` or `BLOB`).
    fn bytes(row: &Self::Row, column: usize) -> Result<Vec<u8>>;

    /// A due execution as a claim reads it, from a row of its columns (`id`, `namespace`,
    /// `job_uid`, `trigger`, `run`, `scheduled_at`, `fire_at`, `attempt`, `due_at`).
    fn due_execution(row: &Self::Row) -> Result<crate::claim::DueExecution>;

    /// A job due within the trigger's horizon, from a row of `uid`, `shard`, `version`,
    /// `spec` (text) and `next_slot_at`.
    fn due_job(row: &Self::Row) -> Result<crate::DueJob>;

    /// A claimed execution, from a row of [`crate::steps::claim::CLAIMED_COLUMNS`].
    fn claimed(row: &Self::Row) -> Result<crate::ClaimedExecution>;

    /// The executions a claim handed out, from the rows of
    /// [`crate::steps::claim::CLAIM_RETURNING`], each with its run definition taken from `runs`
    /// (by id), started at its fire time or `now` if later and claimed at `claimed_at` (Unix
    /// ms, UTC), earliest fire time first. [`crate::Error::Corrupt`] for a row whose id is not
    /// in `runs`.
    fn claimed_rows(
        rows: &[Self::Row],
        runs: std::collections::HashMap<String, crate::RunSpec>,
        now: i64,
        claimed_at: i64,
    ) -> Result<Vec<crate::ClaimedExecution>>;

    /// How many executions of job incarnation `$1` are unfinished (waiting or running): one
    /// 64-bit integer column. PostgreSQL counts its `execution_queue`, which has a row for each
    /// unfinished execution; SQLite counts the executions with a due time or a lease.
    const UNFINISHED_EXECUTIONS: &'static str;

    /// The text in column `column` (from 0) of a row.
    fn text_at(row: &Self::Row, column: usize) -> Result<String>;

    /// One task's execution as a release reads it (its task name and
    /// [`crate::workflow::TaskFact`]), from a row of columns `id`, `task`, `state`, `output`
    /// (JSON text or NULL).
    fn task_fact(row: &Self::Row) -> Result<(String, crate::workflow::TaskFact)>;

    /// A run's task as a reader sees it at `now` (Unix ms, UTC), its definition from `spec`,
    /// from a row of [`crate::steps::runs::TASK_COLUMNS`].
    fn task(
        row: &Self::Row,
        spec: &sundial_core::workflow::WorkflowSpec,
        now: i64,
    ) -> Result<crate::TaskRecord>;

    /// The store's cache of parsed workflow versions, which a run read goes through.
    fn specs(&self) -> &crate::workflow::SpecCache;
}

/// A store's side of the shared writes that are one statement each, with no transaction of
/// their own: run on the connections that write (the pool on PostgreSQL, the one writer on
/// SQLite). Every method may fail with the store's classified error.
pub trait Writer: Reader {
    /// Runs `statement`; returns how many rows it changed.
    fn execute(&self, statement: &Statement<'_>) -> impl Future<Output = Result<u64>> + Send;

    /// Runs `statement` (an `INSERT` or `UPDATE` with `RETURNING`); returns its first row, if
    /// it wrote one.
    fn returning(
        &self,
        statement: &Statement<'_>,
    ) -> impl Future<Output = Result<Option<Self::Row>>> + Send;
}

/// A store's open write transaction running [`Statement`]s, whose rows decode with the
/// decoders of its store's [`Reader`] (`Self::Store`). A step written over it is a step of
/// both stores (`steps::calendars`). Every method may fail with the store's classified error.
pub trait Transaction: Send {
    /// The store whose reader decodes this transaction's rows.
    type Store: Reader;

    /// Runs `statement`; returns how many rows it changed.
    fn execute(&mut self, statement: &Statement<'_>) -> impl Future<Output = Result<u64>> + Send;

    /// The rows `statement` returns.
    fn rows(
        &mut self,
        statement: &Statement<'_>,
    ) -> impl Future<Output = Result<Vec<<Self::Store as Reader>::Row>>> + Send;

    /// The first row `statement` returns, if any.
    fn row(
        &mut self,
        statement: &Statement<'_>,
    ) -> impl Future<Output = Result<Option<<Self::Store as Reader>::Row>>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_bind_in_parameter_order() {
        let names = vec!["a".to_owned()];
        let s = Statement::new("SELECT $1, $2, $3, $4, $5, $6")
            .bind("ns")
            .bind(Some("x"))
            .bind(7_i64)
            .bind(None::<i64>)
            .bind(names.as_slice())
            .bind(b"\x00\xff".as_slice());
        assert_eq!(s.sql(), "SELECT $1, $2, $3, $4, $5, $6");
        assert_eq!(
            s.values(),
            [
                Value::Text("ns"),
                Value::OptText(Some("x")),
                Value::Int(7),
                Value::OptInt(None),
                Value::Texts(&names),
                Value::Bytes(&[0, 255]),
            ]
        );
    }
}
