//! Row decoding shared by the SQL backends, as a macro so that this crate needs no SQL driver:
//! each backend expands it for its own row type, database and error codes
//! (`row_decoders!(PgRow, Postgres, errors::classify_postgres)`).
//! Both stores keep the same schema (instants as BIGINT milliseconds since the Unix epoch, UTC;
//! specs as JSON text), so one decoder serves both.

/// Expands, in the calling module, the decoders from rows of `$row` (a `sqlx` row of database
/// `$db`, whose error codes `$classify` sorts by kind, [`crate::errors`]) into the records of
/// this crate, and the conversions every query shares (`ms`, `ts`, `db_err`, `commit`,
/// `parse`). The caller depends on `sqlx`, `jiff`, `serde` and `serde_json`.
#[macro_export]
macro_rules! row_decoders {
    ($row:ty, $db:ty, $classify:path) => {
        use std::str::FromStr;

        use jiff::Timestamp;
        use sqlx::Row;
        use $crate::{
            AttemptRecord, ClaimedExecution, DueJob, Error, ExecutionRecord, ExecutionSummary,
            JobRecord, NodeStatus, NodeWorkerLease, Result, RunSpec, ShardLease,
        };

        /// Milliseconds since the Unix epoch.
        pub(crate) fn ms(t: Timestamp) -> i64 {
            t.as_millisecond()
        }

        /// The instant of a stored millisecond count.
        pub(crate) fn ts(ms: i64) -> Result<Timestamp> {
            Timestamp::from_millisecond(ms)
                .map_err(|e| Error::Corrupt(format!("instant {ms}: {e}")))
        }

        /// Classifies a driver error by kind (see [`Error`]): the database's SQLSTATE
        /// (PostgreSQL) or primary and extended result code (SQLite), then the driver's own
        /// error kinds.
        pub(crate) fn db_err(e: sqlx::Error) -> Error {
            let kind = match &e {
                sqlx::Error::Database(d) => $classify(d.code().as_deref().unwrap_or("")),
                sqlx::Error::ColumnDecode { .. }
                | sqlx::Error::Decode(_)
                | sqlx::Error::ColumnNotFound(_)
                | sqlx::Error::ColumnIndexOutOfBounds { .. }
                | sqlx::Error::TypeNotFound { .. } => return Error::Corrupt(e.to_string()),
                sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed => $crate::errors::Kind::Unavailable,
                _ => $crate::errors::Kind::Defect,
            };
            kind.error(Box::new(e))
        }

        /// Commits `tx`; a commit whose connection is lost on the way is
        /// [`Error::CommitUnknown`].
        pub(crate) async fn commit(tx: sqlx::Transaction<'_, $db>) -> Result<()> {
            tx.commit().await.map_err(|e| db_err(e).at_commit())
        }

        pub(crate) fn parse<T: FromStr<Err = String>>(text: String) -> Result<T> {
            text.parse().map_err(Error::Corrupt)
        }

        fn get<'r, T: sqlx::Decode<'r, $db> + sqlx::Type<$db>>(
            row: &'r $row,
            col: &str,
        ) -> Result<T> {
            row.try_get(col).map_err(db_err)
        }

        fn instant(row: &$row, col: &str) -> Result<Timestamp> {
            ts(get(row, col)?)
        }

        fn opt_instant(row: &$row, col: &str) -> Result<Option<Timestamp>> {
            get::<Option<i64>>(row, col)?.map(ts).transpose()
        }

        fn count(row: &$row, col: &str) -> Result<u32> {
            u32::try_from(get::<i64>(row, col)?).map_err(|e| Error::Corrupt(format!("{col}: {e}")))
        }

        fn shard(row: &$row) -> Result<u16> {
            u16::try_from(get::<i64>(row, "shard")?)
                .map_err(|e| Error::Corrupt(format!("shard: {e}")))
        }

        fn json<T: serde::de::DeserializeOwned>(row: &$row, col: &str) -> Result<T> {
            serde_json::from_str(&get::<String>(row, col)?)
                .map_err(|e| Error::Corrupt(format!("{col}: {e}")))
        }

        pub(crate) fn job(row: &$row) -> Result<JobRecord> {
            let last_execution = get::<Option<String>>(row, "last_execution")?
                .map(|text| {
                    let mut parts = text.splitn(3, '|');
                    let (Some(id), Some(state), Some(at)) =
                        (parts.next(), parts.next(), parts.next())
                    else {
                        return Err(Error::Corrupt(format!("last execution '{text}'")));
                    };
                    Ok(ExecutionSummary {
                        id: id.to_owned(),
                        state: parse(state.to_owned())?,
                        scheduled_at: ts(at.parse().map_err(|_| Error::Corrupt(text.clone()))?)?,
                    })
                })
                .transpose()?;
            Ok(JobRecord {
                spec: json(row, "spec")?,
                uid: get(row, "uid")?,
                shard: shard(row)?,
                version: get(row, "version")?,
                created_at: instant(row, "created_at")?,
                updated_at: instant(row, "updated_at")?,
                next_slot_at: opt_instant(row, "next_slot_at")?,
                next_fire_at: opt_instant(row, "next_fire_at")?,
                pending_fire_at: opt_instant(row, "pending_fire_at")?,
                last_execution,
            })
        }

        /// A workflow with its last run: columns of `workflows` and `last_run`, the text
        /// `id|state|scheduled_at|fire_at` (ms), read as of `now` (UTC ms).
        pub(crate) fn workflow(row: &$row, now: i64) -> Result<$crate::WorkflowRecord> {
            let last_run = get::<Option<String>>(row, "last_run")?
                .map(|text| {
                    let parts: Vec<&str> = text.splitn(4, '|').collect();
                    let [id, state, at, fire] = parts.as_slice() else {
                        return Err(Error::Corrupt(format!("last run '{text}'")));
                    };
                    let number =
                        |t: &str| t.parse::<i64>().map_err(|_| Error::Corrupt(text.clone()));
                    Ok($crate::RunSummary {
                        id: (*id).to_owned(),
                        state: $crate::workflow::run_state_as_of(
                            parse((*state).to_owned())?,
                            number(fire)?,
                            now,
                        ),
                        scheduled_at: ts(number(at)?)?,
                    })
                })
                .transpose()?;
            Ok($crate::WorkflowRecord {
                spec: json(row, "spec")?,
                uid: get(row, "uid")?,
                shard: shard(row)?,
                version: get(row, "version")?,
                created_at: instant(row, "created_at")?,
                updated_at: instant(row, "updated_at")?,
                next_slot_at: opt_instant(row, "next_slot_at")?,
                next_fire_at: opt_instant(row, "next_fire_at")?,
                last_run,
            })
        }

        /// A run without its tasks, read as of `now` (UTC ms): columns of `workflow_runs`
        /// and `started_at` (its first attempt's start, or NULL).
        pub(crate) fn run(row: &$row, now: i64) -> Result<$crate::RunRecord> {
            let fire_at: i64 = get(row, "fire_at")?;
            Ok($crate::RunRecord {
                id: get(row, "id")?,
                namespace: get(row, "namespace")?,
                workflow: get(row, "workflow")?,
                workflow_version: get(row, "workflow_version")?,
                trigger: parse(get(row, "trigger")?)?,
                scheduled_at: instant(row, "scheduled_at")?,
                fire_at: ts(fire_at)?,
                state: $crate::workflow::run_state_as_of(parse(get(row, "state")?)?, fire_at, now),
                params: json(row, "params")?,
                created_at: instant(row, "created_at")?,
                started_at: opt_instant(row, "started_at")?,
                finished_at: opt_instant(row, "finished_at")?,
                tasks: Vec::new(),
            })
        }

        /// One task's execution as a release reads it: columns `id`, `task`, `state`,
        /// `output` (JSON text or NULL).
        pub(crate) fn task_fact(row: &$row) -> Result<(String, $crate::workflow::TaskFact)> {
            let output = get::<Option<String>>(row, "output")?
                .map(|o| {
                    serde_json::from_str(&o).map_err(|e| Error::Corrupt(format!("output: {e}")))
                })
                .transpose()?;
            Ok((
                get(row, "task")?,
                $crate::workflow::TaskFact {
                    execution_id: get(row, "id")?,
                    state: parse(get(row, "state")?)?,
                    output,
                },
            ))
        }

        /// A task execution as a release sees it with its run: columns `run_id` and those of
        /// `task_fact`.
        pub(crate) fn run_task_fact(
            row: &$row,
        ) -> Result<(String, String, $crate::workflow::TaskFact)> {
            let (task, fact) = task_fact(row)?;
            Ok((get(row, "run_id")?, task, fact))
        }

        /// A run's task as a reader sees it at `now` (UTC ms), its definition from `spec`:
        /// columns `id`, `task`, `state`, `fire_at`, `attempt`, `started_at`, `finished_at`,
        /// `output`.
        pub(crate) fn task_record(
            row: &$row,
            spec: &sundial_core::workflow::WorkflowSpec,
            now: i64,
        ) -> Result<$crate::TaskRecord> {
            let (name, fact) = task_fact(row)?;
            let definition = spec.task(&name).map(|(_, t)| t);
            let fire_at = instant(row, "fire_at")?;
            Ok($crate::TaskRecord {
                depends_on: definition.map(|t| t.depends_on.clone()).unwrap_or_default(),
                trigger_rule: definition.map(|t| t.trigger_rule).unwrap_or_default(),
                name,
                state: fact.state.as_of(fire_at, ts(now)?),
                execution_id: fact.execution_id,
                attempt: count(row, "attempt")?,
                started_at: opt_instant(row, "started_at")?,
                finished_at: opt_instant(row, "finished_at")?,
                output: fact.output,
            })
        }

        pub(crate) fn due_job(row: &$row) -> Result<DueJob> {
            Ok(DueJob {
                spec: json(row, "spec")?,
                uid: get(row, "uid")?,
                shard: shard(row)?,
                version: get(row, "version")?,
                next_slot_at: instant(row, "next_slot_at")?,
            })
        }

        pub(crate) fn shard_lease(row: &$row) -> Result<ShardLease> {
            Ok(ShardLease {
                shard: shard(row)?,
                epoch: get(row, "epoch")?,
                expires_at: instant(row, "expires_at")?,
            })
        }

        pub(crate) fn claimed(row: &$row) -> Result<ClaimedExecution> {
            let run: RunSpec = json(row, "run")?;
            claimed_with(row, run)
        }

        /// [`claimed`] with the run definition given instead of read from the row.
        pub(crate) fn claimed_with(row: &$row, run: RunSpec) -> Result<ClaimedExecution> {
            let started_at = opt_instant(row, "started_at")?.unwrap_or(Timestamp::UNIX_EPOCH);
            Ok(ClaimedExecution {
                id: get(row, "id")?,
                namespace: get(row, "namespace")?,
                job: get(row, "job")?,
                trigger: parse(get(row, "trigger")?)?,
                attempt: count(row, "attempt")?,
                max_attempts: count(row, "max_attempts")?,
                scheduled_at: instant(row, "scheduled_at")?,
                fire_at: instant(row, "fire_at")?,
                started_at,
                claimed_at: started_at,
                lease_expires_at: opt_instant(row, "lease_expires_at")?,
                worker_epoch: get::<Option<i64>>(row, "worker_epoch")?,
                run,
            })
        }

        pub(crate) fn execution(row: &$row) -> Result<ExecutionRecord> {
            let state = parse(get(row, "state")?)?;
            let due_at = opt_instant(row, "due_at")?;
            Ok(ExecutionRecord {
                id: get(row, "id")?,
                namespace: get(row, "namespace")?,
                job: get(row, "job")?,
                job_version: get(row, "job_version")?,
                trigger: parse(get(row, "trigger")?)?,
                scheduled_at: instant(row, "scheduled_at")?,
                fire_at: instant(row, "fire_at")?,
                queued_at: instant(row, "queued_at")?,
                started_at: opt_instant(row, "started_at")?,
                finished_at: opt_instant(row, "finished_at")?,
                next_attempt_at: due_at
                    .filter(|_| state == sundial_core::execution::ExecutionState::RetryWait),
                state,
                attempt: count(row, "attempt")?,
                max_attempts: count(row, "max_attempts")?,
                worker: get(row, "worker")?,
                run_id: get(row, "run_id")?,
                task: get(row, "task")?,
                attempts: Vec::new(),
            })
        }

        pub(crate) fn attempt(row: &$row) -> Result<AttemptRecord> {
            let started_at = instant(row, "started_at")?;
            let finished_at = opt_instant(row, "finished_at")?;
            Ok(AttemptRecord {
                attempt: count(row, "attempt")?,
                worker: get(row, "worker")?,
                started_at,
                finished_at,
                outcome: get::<Option<String>>(row, "outcome")?
                    .map(parse)
                    .transpose()?,
                status_code: get(row, "status_code")?,
                error: get(row, "error")?,
                detail: get(row, "detail")?,
                duration_ms: finished_at.map(|f| f.as_millisecond() - started_at.as_millisecond()),
            })
        }

        pub(crate) fn node(row: &$row, now: i64) -> Result<NodeStatus> {
            let expires_at: i64 = get(row, "expires_at")?;
            let roles: String = get(row, "roles")?;
            Ok(NodeStatus {
                id: get(row, "id")?,
                roles: roles
                    .split(',')
                    .filter(|r| !r.is_empty())
                    .map(str::to_owned)
                    .collect(),
                started_at: instant(row, "started_at")?,
                heartbeat_at: instant(row, "heartbeat_at")?,
                live: expires_at > now,
                shards: count(row, "shards")?,
                worker_lease: match get::<Option<i64>>(row, "wl_epoch")? {
                    Some(epoch) => {
                        let lease_expiry: i64 = get(row, "wl_expires_at")?;
                        Some(NodeWorkerLease {
                            epoch,
                            renewed_at: instant(row, "wl_renewed_at")?,
                            expires_at: ts(lease_expiry)?,
                            live: lease_expiry >= now,
                            held: u64::try_from(get::<i64>(row, "wl_held")?).unwrap_or(0),
                        })
                    }
                    None => None,
                },
            })
        }

        /// The executions a claim handed out, from the rows its update returned (columns
        /// of `claimed_with` but `run`), each with its run definition taken from `runs`
        /// (`ClaimPlan::runs`), `started_at` = the later of `now` (the claim's time, UTC ms) and the
        /// fire time (an execution claimed ahead starts at its fire time) and `claimed_at` (UTC
        /// ms: the store's clock read as late in the claim as it can be, so that a worker's
        /// hold counted from the claim's return is as short as never-early allows), in
        /// fire-time order.
        ///
        /// # Errors
        /// [`Error::Corrupt`] for a row whose execution the plan did not hand out.
        pub(crate) fn claimed_rows(
            rows: &[$row],
            mut runs: std::collections::HashMap<String, RunSpec>,
            now: i64,
            claimed_at: i64,
        ) -> Result<Vec<ClaimedExecution>> {
            let (now, claimed_at) = (ts(now)?, ts(claimed_at)?);
            let mut claimed = rows
                .iter()
                .map(|r| {
                    let id: String = get(r, "id")?;
                    let run = runs.remove(&id).ok_or_else(|| {
                        Error::Corrupt(format!("claimed execution {id} was not among those read"))
                    })?;
                    claimed_with(r, run).map(|c| ClaimedExecution {
                        started_at: c.fire_at.max(now),
                        claimed_at,
                        ..c
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            claimed.sort_by_key(|c| c.fire_at);
            Ok(claimed)
        }

        /// A due execution as a claim reads it: columns `id`, `namespace`, `job_uid`,
        /// `trigger`, `run`, `scheduled_at`, `fire_at`, `due_at`, `attempt`.
        pub(crate) fn due_execution(row: &$row) -> Result<$crate::claim::DueExecution> {
            Ok($crate::claim::DueExecution {
                id: get(row, "id")?,
                namespace: get(row, "namespace")?,
                job_uid: get(row, "job_uid")?,
                trigger: parse(get(row, "trigger")?)?,
                run: json(row, "run")?,
                scheduled_at: get(row, "scheduled_at")?,
                fire_at: get(row, "fire_at")?,
                due_at: get(row, "due_at")?,
                attempt: u32::try_from(get::<i64>(row, "attempt")?)
                    .map_err(|e| Error::Corrupt(format!("attempt: {e}")))?,
            })
        }

        /// A held attempt as the late judgement reads it: columns `id`, `attempt`,
        /// `namespace`, `job`, `job_uid`, `trigger`, `run`, `scheduled_at`, `fire_at`.
        pub(crate) fn held_attempt(row: &$row) -> Result<$crate::steps::late::HeldAttempt> {
            Ok($crate::steps::late::HeldAttempt {
                id: get(row, "id")?,
                attempt: count(row, "attempt")?,
                namespace: get(row, "namespace")?,
                job: get(row, "job")?,
                job_uid: get(row, "job_uid")?,
                trigger: parse(get(row, "trigger")?)?,
                run: json(row, "run")?,
                scheduled_at: get(row, "scheduled_at")?,
                fire_at: get(row, "fire_at")?,
            })
        }

        /// A backfill (migration 0012's `backfills` row, every column).
        pub(crate) fn backfill(row: &$row) -> Result<$crate::BackfillRecord> {
            fn count(row: &$row, col: &str) -> Result<u64> {
                let n: i64 = get(row, col)?;
                u64::try_from(n).map_err(|_| Error::Corrupt(format!("backfill {col} {n}")))
            }
            let shard: i64 = get(row, "shard")?;
            let rate: i64 = get(row, "max_per_second")?;
            Ok($crate::BackfillRecord {
                id: get(row, "id")?,
                namespace: get(row, "namespace")?,
                of: $crate::BackfillOf::parse(&get::<String>(row, "of")?)?,
                name: get(row, "name")?,
                uid: get(row, "uid")?,
                shard: u16::try_from(shard)
                    .map_err(|_| Error::Corrupt(format!("shard {shard}")))?,
                from: instant(row, "from_at")?,
                to: instant(row, "to_at")?,
                max_per_second: u32::try_from(rate)
                    .map_err(|_| Error::Corrupt(format!("max_per_second {rate}")))?,
                state: $crate::BackfillState::parse(&get::<String>(row, "state")?)?,
                slots: count(row, "slots")?,
                created: count(row, "created")?,
                existing: count(row, "existing")?,
                cursor: instant(row, "cursor_at")?,
                last_id: get(row, "last_id")?,
                reason: get(row, "reason")?,
                created_at: instant(row, "created_at")?,
                updated_at: instant(row, "updated_at")?,
                finished_at: opt_instant(row, "finished_at")?,
            })
        }

        /// A calendar (a row of `steps::listings::CALENDAR_COLUMNS`).
        pub(crate) fn calendar(row: &$row) -> Result<$crate::CalendarRecord> {
            let spec: String = get(row, "spec")?;
            Ok($crate::CalendarRecord {
                namespace: get(row, "namespace")?,
                name: get(row, "name")?,
                spec: serde_json::from_str(&spec)
                    .map_err(|e| Error::Corrupt(format!("calendar spec: {e}")))?,
                version: get(row, "version")?,
                created_at: instant(row, "created_at")?,
                updated_at: instant(row, "updated_at")?,
            })
        }

        /// The text of a row's first column.
        pub(crate) fn text(row: &$row) -> Result<String> {
            row.try_get(0).map_err(db_err)
        }

        /// The 64-bit integer in column `column` (from 0) of a row.
        pub(crate) fn int(row: &$row, column: usize) -> Result<i64> {
            row.try_get(column).map_err(db_err)
        }

        /// The 64-bit integer or NULL in column `column` (from 0) of a row.
        pub(crate) fn opt_int(row: &$row, column: usize) -> Result<Option<i64>> {
            row.try_get(column).map_err(db_err)
        }

        /// The 64-bit float in column `column` (from 0) of a row.
        pub(crate) fn float(row: &$row, column: usize) -> Result<f64> {
            row.try_get(column).map_err(db_err)
        }

        /// The bytes in column `column` (from 0) of a row.
        pub(crate) fn bytes(row: &$row, column: usize) -> Result<Vec<u8>> {
            row.try_get(column).map_err(db_err)
        }
    };
}

/// Expands, inside a store's `impl` of [`crate::reads::Reader`], the reader's decoders as the
/// store's `rows` module (expanded from [`row_decoders!`]), in scope where it expands, defines
/// them.
#[macro_export]
macro_rules! reader_decoders {
    () => {
        fn job(row: &Self::Row) -> $crate::Result<$crate::JobRecord> {
            rows::job(row)
        }

        fn workflow(row: &Self::Row, now: i64) -> $crate::Result<$crate::WorkflowRecord> {
            rows::workflow(row, now)
        }

        fn execution(row: &Self::Row) -> $crate::Result<$crate::ExecutionRecord> {
            rows::execution(row)
        }

        fn attempt(row: &Self::Row) -> $crate::Result<$crate::AttemptRecord> {
            rows::attempt(row)
        }

        fn run(row: &Self::Row, now: i64) -> $crate::Result<$crate::RunRecord> {
            rows::run(row, now)
        }

        fn backfill(row: &Self::Row) -> $crate::Result<$crate::BackfillRecord> {
            rows::backfill(row)
        }

        fn calendar(row: &Self::Row) -> $crate::Result<$crate::CalendarRecord> {
            rows::calendar(row)
        }

        fn text(row: &Self::Row) -> $crate::Result<String> {
            rows::text(row)
        }

        fn int(row: &Self::Row, column: usize) -> $crate::Result<i64> {
            rows::int(row, column)
        }

        fn opt_int(row: &Self::Row, column: usize) -> $crate::Result<Option<i64>> {
            rows::opt_int(row, column)
        }

        fn float(row: &Self::Row, column: usize) -> $crate::Result<f64> {
            rows::float(row, column)
        }

        fn bytes(row: &Self::Row, column: usize) -> $crate::Result<Vec<u8>> {
            rows::bytes(row, column)
        }

        fn due_execution(row: &Self::Row) -> $crate::Result<$crate::claim::DueExecution> {
            rows::due_execution(row)
        }

        fn due_job(row: &Self::Row) -> $crate::Result<$crate::DueJob> {
            rows::due_job(row)
        }

        fn claimed(row: &Self::Row) -> $crate::Result<$crate::ClaimedExecution> {
            rows::claimed(row)
        }

        fn claimed_rows(
            rows: &[Self::Row],
            runs: std::collections::HashMap<String, $crate::RunSpec>,
            now: i64,
            claimed_at: i64,
        ) -> $crate::Result<Vec<$crate::ClaimedExecution>> {
            rows::claimed_rows(rows, runs, now, claimed_at)
        }
    };
}
