//! Holiday calendars (docs/time.md, "Calendars"): put, get, list, who names one, delete; the
//! put and the delete are written once (`sundial_store::steps::calendars`) over this file's
//! statements.
//! A delete checks for users and deletes in one transaction. A job write that names the
//! calendar and commits between the API's existence check and that transaction can still
//! leave a job naming a deleted calendar; the scheduler then excludes nothing for it and says
//! so in its log (docs/time.md).

use super::*;
use sundial_core::calendar::CalendarSpec;
use sundial_store::CalendarRecord;
use sundial_store::steps::calendars::{self as steps, CalendarStatements};
use sundial_store::steps::listings::CALENDAR_COLUMNS;

pub(crate) async fn calendar_put(
    store: &PgStore,
    namespace: &str,
    name: &str,
    spec: &CalendarSpec,
) -> Result<(CalendarRecord, bool)> {
    let text = steps::spec_text(spec)?;
    let mut tx = store.begin().await?;
    let now = store.now_ms(&mut *tx).await?;
    let put = steps::calendar_put(
        &mut CalendarTx(&mut tx),
        namespace,
        name,
        (spec, &text),
        now,
    )
    .await?;
    commit(tx).await?;
    Ok(put)
}

/// The jobs through `jobs_calendar_users` (its predicate repeated so the planner may use
/// it); the workflows, fewer, by their namespace's rows.
const USERS: &str = "SELECT 'job ' || name FROM jobs WHERE namespace = $1 \
     AND spec -> 'schedule' ? 'exclude_calendars' \
     AND spec -> 'schedule' -> 'exclude_calendars' ? $2 \
     UNION ALL SELECT 'workflow ' || name FROM workflows WHERE namespace = $1 \
     AND spec::jsonb -> 'schedule' -> 'exclude_calendars' ? $2 \
     ORDER BY 1";

pub(crate) async fn calendar_users(
    store: &PgStore,
    namespace: &str,
    name: &str,
) -> Result<Vec<String>> {
    sqlx::query_scalar(USERS)
        .bind(namespace)
        .bind(name)
        .fetch_all(&store.pool)
        .await
        .map_err(db_err)
}

pub(crate) async fn calendar_delete(store: &PgStore, namespace: &str, name: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    steps::calendar_delete(&mut CalendarTx(&mut tx), namespace, name).await?;
    commit(tx).await
}

/// A calendar's put and delete statements ([`CalendarStatements`]) on an open transaction.
struct CalendarTx<'t, 'c>(&'t mut Tx<'c>);

impl CalendarStatements for CalendarTx<'_, '_> {
    async fn current(&mut self, namespace: &str, name: &str) -> Result<Option<(String, i64)>> {
        sqlx::query_as(
            "SELECT spec, version FROM calendars WHERE namespace = $1 AND name = $2 FOR UPDATE",
        )
        .bind(namespace)
        .bind(name)
        .fetch_optional(&mut **self.0)
        .await
        .map_err(db_err)
    }

    async fn upsert(&mut self, namespace: &str, name: &str, spec: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO calendars (namespace, name, spec, version, created_at, updated_at) \
             VALUES ($1, $2, $3, 1, $4, $4) \
             ON CONFLICT (namespace, name) DO UPDATE SET spec = $3, \
             version = calendars.version + 1, updated_at = $4",
        )
        .bind(namespace)
        .bind(name)
        .bind(spec)
        .bind(now)
        .execute(&mut **self.0)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn read(&mut self, namespace: &str, name: &str) -> Result<CalendarRecord> {
        let row = sqlx::query(&format!(
            "SELECT {CALENDAR_COLUMNS} FROM calendars WHERE namespace = $1 AND name = $2"
        ))
        .bind(namespace)
        .bind(name)
        .fetch_one(&mut **self.0)
        .await
        .map_err(db_err)?;
        rows::calendar(&row)
    }

    async fn users(&mut self, namespace: &str, name: &str) -> Result<Vec<String>> {
        sqlx::query_scalar(USERS)
            .bind(namespace)
            .bind(name)
            .fetch_all(&mut **self.0)
            .await
            .map_err(db_err)
    }

    async fn delete(&mut self, namespace: &str, name: &str) -> Result<u64> {
        Ok(
            sqlx::query("DELETE FROM calendars WHERE namespace = $1 AND name = $2")
                .bind(namespace)
                .bind(name)
                .execute(&mut **self.0)
                .await
                .map_err(db_err)?
                .rows_affected(),
        )
    }
}
