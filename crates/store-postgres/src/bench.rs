//! [`BenchStore`] on PostgreSQL: expired history in one statement per table into partitions of
//! their days made first, counts, and the database's size.

use std::collections::BTreeMap;

use super::*;
use sundial_store::bench::{self, BenchStore, ExpiredLoad, number};
use sundial_store::reads::{Statement, Writer};

use crate::reads::SqlTx;

/// Executions `$2..=$3` of namespace `$4` (`bench::write_expired`), slot at `$1 + i` (Unix
/// ms), as in [`ExpiredLoad`];
/// each id leads with its slot time (`sundial_id_bound`, migration 0010).
const EXECUTIONS: &str = "INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
       scheduled_at, fire_at, queued_at, started_at, finished_at, state, attempt, \
       max_attempts, lease_ms, run, created_at) \
     SELECT sundial_id_bound($1 + i) || '-7000-8000-' || lpad(to_hex(i), 12, '0'), $4, \
       'old-' || (i % 1000), 'old-uid-' || (i % 1000), 1, i % 1024, 'schedule', $1 + i, \
       $1 + i, $1 + i, $1 + i, $1 + i + 50, 'succeeded', 1, 3, 30000, '{}', $1 + i \
     FROM generate_series($2::bigint, $3::bigint) AS i";

/// The first attempt of each execution [`EXECUTIONS`] writes.
const ATTEMPTS: &str = "INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, status_code) \
     SELECT sundial_id_bound($1 + i) || '-7000-8000-' || lpad(to_hex(i), 12, '0'), 1, 'bench', $1 + i, \
       $1 + i + 50, 'succeeded', 200 FROM generate_series($2::bigint, $3::bigint) AS i";

#[async_trait]
impl BenchStore for PgStore {
    async fn load_expired(&self, load: &ExpiredLoad) -> Result<()> {
        let (first, last) = (number(load.first)?, number(load.last)?);
        // Their days' partitions first, so that retention drops them whole as it would a day
        // of real history.
        sqlx::query(
            "SELECT sundial_history_day_create(t.name, t.key, d, $3, $4) \
             FROM (VALUES ('executions', 'id'), ('attempts', 'execution_id')) AS t(name, key), \
               generate_series($1 / 86400000 * 86400000, $2 / 86400000 * 86400000, 86400000) AS d",
        )
        .bind(load.base_ms + first)
        .bind(load.base_ms + last)
        .bind(i32::from(PARTITION_LOCK_TIMEOUT_MS))
        .bind(PARTITIONS_LOCK_KEY)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        let mut tx = self.begin().await?;
        bench::write_expired(&mut SqlTx(&mut tx), load, [EXECUTIONS, ATTEMPTS]).await?;
        tx.commit().await.map_err(db_err)
    }

    async fn checkpoint(&self) -> Result<()> {
        Writer::execute(self, &Statement::new("CHECKPOINT")).await?;
        Ok(())
    }

    async fn execution_counts(&self, namespace: Option<&str>) -> Result<BTreeMap<String, u64>> {
        bench::execution_counts(self, namespace).await
    }

    async fn storage_bytes(&self) -> Result<u64> {
        bench::size(self, "SELECT pg_database_size(current_database())").await
    }
}
