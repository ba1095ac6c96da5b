//! [`BenchStore`] on SQLite: expired history in one recursive statement per table, counts, and
//! the file's size.

use std::collections::BTreeMap;

use super::*;
use sundial_store::bench::{self, BenchStore, ExpiredLoad};
use sundial_store::reads::{Statement, Writer};

use crate::reads::SqlTx;

/// Executions `$2..=$3` of namespace `$4` (`bench::write_expired`), slot at `$1 + i` (Unix
/// ms), as in [`ExpiredLoad`].
const EXECUTIONS: &str = "WITH RECURSIVE s(i) AS (SELECT $2 UNION ALL SELECT i + 1 FROM s WHERE i < $3) \
     INSERT INTO executions (id, namespace, job, job_uid, job_version, shard, trigger, \
       scheduled_at, fire_at, queued_at, started_at, finished_at, state, attempt, \
       max_attempts, lease_ms, run, created_at) \
     SELECT printf('00000000-0000-7000-8000-%012x', i), $4, 'old-' || (i % 1000), \
       'old-uid-' || (i % 1000), 1, i % 1024, 'schedule', $1 + i, $1 + i, $1 + i, $1 + i, \
       $1 + i + 50, 'succeeded', 1, 3, 30000, '{}', $1 + i FROM s";

/// The first attempt of each execution [`EXECUTIONS`] writes.
const ATTEMPTS: &str = "WITH RECURSIVE s(i) AS (SELECT $2 UNION ALL SELECT i + 1 FROM s WHERE i < $3) \
     INSERT INTO attempts (execution_id, attempt, worker, started_at, finished_at, outcome, status_code) \
     SELECT printf('00000000-0000-7000-8000-%012x', i), 1, 'bench', $1 + i, $1 + i + 50, \
       'succeeded', 200 FROM s";

#[async_trait]
impl BenchStore for SqliteStore {
    async fn load_expired(&self, load: &ExpiredLoad) -> Result<()> {
        let mut tx = self.begin().await?;
        bench::write_expired(&mut SqlTx(&mut tx), load, [EXECUTIONS, ATTEMPTS]).await?;
        commit(tx).await
    }

    async fn checkpoint(&self) -> Result<()> {
        Writer::execute(self, &Statement::new("PRAGMA wal_checkpoint(TRUNCATE)")).await?;
        Ok(())
    }

    async fn execution_counts(&self, namespace: Option<&str>) -> Result<BTreeMap<String, u64>> {
        bench::execution_counts(self, namespace).await
    }

    async fn storage_bytes(&self) -> Result<u64> {
        let pages = bench::size(
            self,
            "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
        )
        .await?;
        // The write-ahead log beside the file (`<file>-wal`), where the lock file is `<file>.scheduler.lock`.
        let log = self
            .lock_path
            .as_ref()
            .and_then(|lock| {
                lock.to_str()?
                    .strip_suffix(".scheduler.lock")
                    .map(|f| format!("{f}-wal"))
            })
            .and_then(|wal| std::fs::metadata(wal).ok())
            .map_or(0, |m| m.len());
        Ok(pages + log)
    }
}
