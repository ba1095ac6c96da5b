//! A holiday calendar's put and delete (docs/time.md, "Calendars"), written once over
//! [`CalendarStatements`], which every store's open [`Transaction`] provides.
//! The caller opens the transaction, runs [`calendar_put`] or [`calendar_delete`], and commits
//! only when the step returns `Ok` (an error has written nothing the caller keeps).
//!
//! Invariants: a put that changes nothing (the same spec, compared parsed) keeps the
//! calendar's version and `updated_at`; any other put moves the version on by one; a delete
//! refuses a calendar that a job or workflow of its namespace names in `exclude_calendars`,
//! checked in the transaction that deletes it.

use std::future::Future;

use sundial_core::calendar::CalendarSpec;

use crate::audit::Change;
use crate::reads::{Reader, Statement, Transaction};
use crate::steps::listings::CALENDAR_COLUMNS;
use crate::{CalendarRecord, Error, Result};

/// The statements of a calendar's put and delete, in the dialect of one store, on the
/// transaction the caller opened. Every method may fail with the store's classified error.
pub trait CalendarStatements: Send {
    /// The stored spec (JSON text) and version of calendar `namespace`/`name`, `None` when
    /// there is none, its row held until the transaction ends where the store can.
    fn current(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<(String, i64)>>> + Send;

    /// Writes the calendar with `spec` (JSON text) at `now` (Unix ms, UTC): version 1 and
    /// `created_at` = `updated_at` = `now` when new, else its spec replaced, its version moved
    /// on by one and `updated_at` = `now`.
    fn upsert(
        &mut self,
        namespace: &str,
        name: &str,
        spec: &str,
        now: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The stored calendar `namespace`/`name` (it exists).
    fn read(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<CalendarRecord>> + Send;

    /// Who names the calendar in `exclude_calendars`: `job NAME` and `workflow NAME` of its
    /// namespace, in order.
    fn users(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Deletes the calendar; returns how many rows went (0 or 1).
    fn delete(&mut self, namespace: &str, name: &str) -> impl Future<Output = Result<u64>> + Send;
}

/// The statements of both stores, on any store's [`Transaction`]: the SQL is shared but for
/// the users' query and the row lock ([`Reader::CALENDAR_USERS`], [`Reader::FOR_UPDATE`]).
impl<T: Transaction> CalendarStatements for T {
    async fn current(&mut self, namespace: &str, name: &str) -> Result<Option<(String, i64)>> {
        let sql = format!(
            "SELECT spec, version FROM calendars WHERE namespace = $1 AND name = $2{}",
            <T::Store as Reader>::FOR_UPDATE
        );
        let row = self
            .row(&Statement::new(sql).bind(namespace).bind(name))
            .await?;
        row.map(|r| Ok((T::Store::text(&r)?, T::Store::int(&r, 1)?)))
            .transpose()
    }

    async fn upsert(&mut self, namespace: &str, name: &str, spec: &str, now: i64) -> Result<()> {
        let st = Statement::new(
            "INSERT INTO calendars (namespace, name, spec, version, created_at, updated_at) \
             VALUES ($1, $2, $3, 1, $4, $4) \
             ON CONFLICT (namespace, name) DO UPDATE SET spec = $3, \
             version = calendars.version + 1, updated_at = $4",
        )
        .bind(namespace)
        .bind(name)
        .bind(spec)
        .bind(now);
        self.execute(&st).await?;
        Ok(())
    }

    async fn read(&mut self, namespace: &str, name: &str) -> Result<CalendarRecord> {
        let sql =
            format!("SELECT {CALENDAR_COLUMNS} FROM calendars WHERE namespace = $1 AND name = $2");
        match self
            .row(&Statement::new(sql).bind(namespace).bind(name))
            .await?
        {
            Some(row) => T::Store::calendar(&row),
            None => Err(Error::NotFound(format!("calendar {namespace}/{name}"))),
        }
    }

    async fn users(&mut self, namespace: &str, name: &str) -> Result<Vec<String>> {
        let st = Statement::new(<T::Store as Reader>::CALENDAR_USERS)
            .bind(namespace)
            .bind(name);
        self.rows(&st).await?.iter().map(T::Store::text).collect()
    }

    async fn delete(&mut self, namespace: &str, name: &str) -> Result<u64> {
        let st = Statement::new("DELETE FROM calendars WHERE namespace = $1 AND name = $2")
            .bind(namespace)
            .bind(name);
        self.execute(&st).await
    }
}

/// The JSON text a calendar's spec is stored as; the caller makes it before it opens the
/// transaction of [`calendar_put`].
///
/// # Errors
/// [`Error::Corrupt`] when `spec` does not serialise.
pub fn spec_text(spec: &CalendarSpec) -> Result<String> {
    serde_json::to_string(spec).map_err(|e| Error::Corrupt(e.to_string()))
}

/// Creates or replaces calendar `namespace`/`name` with `spec` (stored as `text`, from
/// [`spec_text`]) at `now` (Unix ms, UTC); returns the stored record and whether it was
/// created.
///
/// # Errors
/// The store's classified error.
pub async fn calendar_put<S: CalendarStatements + Transaction>(
    s: &mut S,
    namespace: &str,
    name: &str,
    (spec, text): (&CalendarSpec, &str),
    now: i64,
) -> Result<(CalendarRecord, bool)> {
    let old = s.current(namespace, name).await?;
    let created = old.is_none();
    let unchanged = old
        .as_ref()
        .and_then(|(stored, _)| serde_json::from_str::<CalendarSpec>(stored).ok())
        .is_some_and(|stored| stored == *spec);
    if unchanged {
        return Ok((s.read(namespace, name).await?, created));
    }
    s.upsert(namespace, name, text, now).await?;
    let record = s.read(namespace, name).await?;
    let change = Change {
        resource: "calendar",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        action: if created { "create" } else { "replace" },
        version_before: old.map(|(_, v)| v),
        version_after: Some(record.version),
    };
    super::audit::record(s, &[change], now).await?;
    Ok((record, created))
}

/// Deletes calendar `namespace`/`name` at `now` (Unix ms, UTC) unless a job or workflow
/// names it.
///
/// # Errors
/// [`Error::Conflict`] naming its users when some job or workflow names it in
/// `exclude_calendars`; [`Error::NotFound`] when there is no such calendar; or the store's
/// classified error. Nothing is deleted on any error.
pub async fn calendar_delete<S: CalendarStatements + Transaction>(
    s: &mut S,
    namespace: &str,
    name: &str,
    now: i64,
) -> Result<()> {
    let users = s.users(namespace, name).await?;
    let before = s.current(namespace, name).await?.map(|(_, v)| v);
    let deleted = if users.is_empty() {
        s.delete(namespace, name).await?
    } else {
        0
    };
    super::unless_used(
        &format!("calendar {namespace}/{name}"),
        "named in exclude_calendars of",
        &users,
        deleted,
    )?;
    let change = Change {
        resource: "calendar",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        action: "delete",
        version_before: before,
        version_after: None,
    };
    super::audit::record(s, &[change], now).await
}
