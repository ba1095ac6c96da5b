//! The store traits' forwarding, written once: [`forward_store_traits!`](crate::forward_store_traits)
//! implements [`StoreShared`](crate::StoreShared), [`SchedulerStore`](crate::SchedulerStore),
//! [`WorkerStore`](crate::WorkerStore), [`ApiStore`](crate::ApiStore) and
//! [`MaintenanceStore`](crate::MaintenanceStore) for a store by calling its step functions, which
//! each store keeps under the same module and function names (`jobs::job_write_batch`,
//! `claim::execution_claim`, `maintenance::services`, ...), or the steps written once over its
//! [`Reader`](crate::reads::Reader) and [`Writer`](crate::reads::Writer) (`steps::listings`,
//! `steps::nodes`, `steps::liveness`, `steps::backfill::backfill_create`, `steps::secrets`). A
//! store writes only [`StoreBase`](crate::StoreBase) itself (its clock and its signals differ),
//! its reader and writer, and the steps.
//!
//! Invariant: every method of those traits without a default body is forwarded here, to a
//! function of the same name taking the store first (`maintenance` alone is answered by
//! `maintenance::services`), in the store's module or in `sundial_store::steps`, so the two
//! stores cannot differ in which step answers which call (ARCHITECTURE.md, "Code map").

/// What the expansion of [`forward_store_traits!`](crate::forward_store_traits) names outside
/// this crate's own types.
#[doc(hidden)]
pub mod support {
    pub use async_trait::async_trait;
    pub use jiff::Timestamp;
    pub use sundial_core::Dur;
}

/// Implements every store trait but [`StoreBase`](crate::StoreBase) for `$store` by forwarding
/// each method to the function of the same name in the invoking crate's module for it
/// (`nodes`, `jobs`, `executions`, `workflows`, `runs`, `calendars`, `secrets`, `backfills`,
/// `leases`, `trigger`, `liveness`, `claim`, `complete`, `release`, `maintenance`,
/// `retention`, `alerts`), or in `sundial_store::steps` (`listings`, `nodes`, `liveness`,
/// `backfill`, `secrets`, `audit`) for the steps both stores answer alike (`$store` then implements
/// [`Reader`](crate::reads::Reader), [`Writer`](crate::reads::Writer) and
/// `steps::nodes::NodeStatements`). Invoke it once, at the store crate's root.
#[macro_export]
macro_rules! forward_store_traits {
    ($store:ident) => {
        const _: () = {
            use std::time::Duration;
            use $crate::__forward::Timestamp;
            use $crate::{
                ApiStore, AttemptComplete, AttemptRef, ClaimedExecution, ClusterStatus, DueJob,
                ExecutionClaim, ExecutionListQuery, ExecutionRecord, JobListQuery, JobRecord,
                JobWrite, MaintenanceStore, NewExecution, NewRun, NextDue, Result, RunListQuery,
                RunRecord, SchedulerStore, ShardLease, ShardLeaseRequest, StoreShared,
                TriggerCommit, TriggerCommitted, TriggerDueSeconds, TriggerListDue, TriggerNextDue,
                WorkerLease, WorkerStore, WorkflowListQuery, WorkflowRecord, WorkflowWrite,
            };

            #[$crate::__forward::async_trait]
            impl StoreShared for $store {
                async fn cluster_status(&self) -> Result<ClusterStatus> {
                    $crate::steps::nodes::cluster_status(self).await
                }

                async fn job_get(&self, namespace: &str, name: &str) -> Result<Option<JobRecord>> {
                    $crate::steps::listings::job_get(self, namespace, name).await
                }

                async fn job_get_many(
                    &self,
                    namespace: &str,
                    names: &[String],
                ) -> Result<Vec<JobRecord>> {
                    $crate::steps::listings::job_get_many(self, namespace, names).await
                }

                async fn job_list(&self, q: &JobListQuery) -> Result<Vec<JobRecord>> {
                    $crate::steps::listings::job_list(self, q).await
                }

                async fn execution_get(
                    &self,
                    namespace: &str,
                    id: &str,
                ) -> Result<Option<ExecutionRecord>> {
                    $crate::steps::listings::execution_get(self, namespace, id).await
                }

                async fn execution_list(
                    &self,
                    q: &ExecutionListQuery,
                ) -> Result<Vec<ExecutionRecord>> {
                    $crate::steps::listings::execution_list(self, q).await
                }

                async fn workflow_get(
                    &self,
                    namespace: &str,
                    name: &str,
                ) -> Result<Option<WorkflowRecord>> {
                    $crate::steps::listings::workflow_get(self, namespace, name).await
                }

                async fn workflow_list(
                    &self,
                    q: &WorkflowListQuery,
                ) -> Result<Vec<WorkflowRecord>> {
                    $crate::steps::listings::workflow_list(self, q).await
                }

                async fn run_get(&self, namespace: &str, id: &str) -> Result<Option<RunRecord>> {
                    $crate::steps::runs::run_get(self, namespace, id).await
                }

                async fn run_list(&self, q: &RunListQuery) -> Result<Vec<RunRecord>> {
                    $crate::steps::listings::run_list(self, q).await
                }

                async fn calendar_get(
                    &self,
                    namespace: &str,
                    name: &str,
                ) -> Result<Option<$crate::CalendarRecord>> {
                    $crate::steps::listings::calendar_get(self, namespace, name).await
                }

                async fn calendar_list(
                    &self,
                    namespace: &str,
                ) -> Result<Vec<$crate::CalendarRecord>> {
                    $crate::steps::listings::calendar_list(self, namespace).await
                }

                async fn calendar_users(&self, namespace: &str, name: &str) -> Result<Vec<String>> {
                    $crate::steps::listings::calendar_users(self, namespace, name).await
                }

                async fn backfill_get(
                    &self,
                    namespace: &str,
                    id: &str,
                ) -> Result<Option<$crate::BackfillRecord>> {
                    $crate::steps::listings::backfill_get(self, namespace, id).await
                }

                async fn backfill_list(
                    &self,
                    namespace: &str,
                    of: $crate::BackfillOf,
                    name: &str,
                ) -> Result<Vec<$crate::BackfillRecord>> {
                    $crate::steps::listings::backfill_list(self, namespace, of, name).await
                }

                async fn backfill_taken(
                    &self,
                    of: $crate::BackfillOf,
                    ids: &[String],
                ) -> Result<std::collections::HashSet<String>> {
                    $crate::steps::backfill::backfill_taken(self, of, ids).await
                }

                async fn backfill_unfinished(
                    &self,
                    of: $crate::BackfillOf,
                    uid: &str,
                ) -> Result<u64> {
                    $crate::steps::backfill::backfill_unfinished(self, of, uid).await
                }

                async fn namespace_list(&self) -> Result<Vec<String>> {
                    $crate::steps::listings::namespace_list(self).await
                }

                async fn backfill_cancel(
                    &self,
                    namespace: &str,
                    id: &str,
                    reason: Option<&str>,
                ) -> Result<$crate::BackfillRecord> {
                    backfills::backfill_cancel(self, namespace, id, reason).await
                }
            }

            #[$crate::__forward::async_trait]
            impl SchedulerStore for $store {
                async fn shard_lease_renew(
                    &self,
                    request: &ShardLeaseRequest,
                ) -> Result<Vec<ShardLease>> {
                    leases::shard_lease_renew(self, request).await
                }

                async fn shard_lease_release(&self, node: &str) -> Result<()> {
                    leases::shard_lease_release(self, node).await
                }

                async fn trigger_list_due(&self, q: &TriggerListDue) -> Result<Vec<DueJob>> {
                    $crate::steps::trigger::reads::list_due(self, q).await
                }

                async fn trigger_due_seconds(
                    &self,
                    query: &TriggerDueSeconds,
                ) -> Result<Vec<(i64, u64)>> {
                    $crate::steps::trigger::reads::due_seconds(self, query).await
                }

                async fn trigger_next_due(
                    &self,
                    query: &TriggerNextDue,
                ) -> Result<Option<NextDue>> {
                    $crate::steps::trigger::reads::next_due(self, query).await
                }

                async fn trigger_commit(&self, c: &TriggerCommit) -> Result<TriggerCommitted> {
                    trigger::trigger_commit(self, c).await
                }

                async fn workflow_list_due(
                    &self,
                    q: &TriggerListDue,
                ) -> Result<Vec<WorkflowRecord>> {
                    $crate::steps::listings::workflow_list_due(self, q).await
                }

                async fn workflow_trigger(&self, t: &$crate::WorkflowTrigger) -> Result<u32> {
                    workflows::workflow_trigger(self, t).await
                }

                async fn backfill_running(
                    &self,
                    shards: &[u16],
                ) -> Result<Vec<$crate::BackfillRecord>> {
                    $crate::steps::backfill::backfill_running(self, shards).await
                }

                async fn backfill_step(
                    &self,
                    step: &$crate::BackfillStep,
                ) -> Result<$crate::BackfillStepped> {
                    backfills::backfill_step(self, step).await
                }
            }

            #[$crate::__forward::async_trait]
            impl WorkerStore for $store {
                async fn secret_values(
                    &self,
                    namespace: &str,
                    names: &[String],
                ) -> Result<Vec<(String, $crate::SealedSecret)>> {
                    $crate::steps::secrets::secret_values(self, namespace, names).await
                }

                async fn worker_lease_acquire(
                    &self,
                    worker: &str,
                    ttl: $crate::__forward::Dur,
                ) -> Result<WorkerLease> {
                    $crate::steps::liveness::worker_lease_acquire(self, worker, ttl).await
                }

                async fn worker_lease_renew(
                    &self,
                    epoch: i64,
                    ttl: $crate::__forward::Dur,
                ) -> Result<Option<Timestamp>> {
                    $crate::steps::liveness::worker_lease_renew(self, epoch, ttl).await
                }

                async fn worker_lease_release(&self, epoch: i64) -> Result<()> {
                    $crate::steps::liveness::worker_lease_release(self, epoch).await
                }

                async fn worker_lease_reap(&self, limit: u32) -> Result<Vec<i64>> {
                    liveness::worker_lease_reap(self, limit).await
                }

                async fn execution_claim(
                    &self,
                    claim: &ExecutionClaim,
                ) -> Result<Vec<ClaimedExecution>> {
                    claim::execution_claim(self, claim).await
                }

                async fn execution_next_due(&self) -> Result<Option<Timestamp>> {
                    $crate::steps::claim::shared::next_due(self).await
                }

                async fn execution_due_count(
                    &self,
                    from: Timestamp,
                    until: Timestamp,
                    cap: u32,
                ) -> Result<u64> {
                    $crate::steps::claim::shared::due_count(self, from, until, cap).await
                }

                async fn attempt_heartbeat_batch(
                    &self,
                    attempts: &[AttemptRef],
                ) -> Result<Vec<Option<Timestamp>>> {
                    complete::attempt_heartbeat_batch(self, attempts).await
                }

                async fn attempt_complete_batch(
                    &self,
                    completions: &[AttemptComplete],
                ) -> Result<Vec<bool>> {
                    complete::attempt_complete_batch(self, completions).await
                }

                async fn attempt_judge_late(
                    &self,
                    attempts: &[AttemptRef],
                ) -> Result<Vec<$crate::LateVerdict>> {
                    if attempts.is_empty() {
                        return Ok(Vec::new());
                    }
                    complete::attempt_judge_late(self, attempts).await
                }

                async fn attempt_list_lapsed(&self, limit: u32) -> Result<Vec<ClaimedExecution>> {
                    $crate::steps::claim::shared::lapsed(self, complete::LAPSED, limit).await
                }

                async fn run_expire(&self, limit: u32) -> Result<u32> {
                    runs::run_expire(self, limit).await
                }
            }

            #[$crate::__forward::async_trait]
            impl ApiStore for $store {
                async fn job_write_batch(&self, writes: &[JobWrite]) -> Result<Vec<JobRecord>> {
                    jobs::job_write_batch(self, writes).await
                }

                async fn job_delete(
                    &self,
                    namespace: &str,
                    name: &str,
                    expected_version: Option<i64>,
                ) -> Result<()> {
                    jobs::job_delete(self, namespace, name, expected_version).await
                }

                async fn execution_insert(&self, e: &NewExecution) -> Result<ExecutionRecord> {
                    trigger::execution_insert(self, e).await
                }

                async fn execution_cancel(
                    &self,
                    namespace: &str,
                    id: &str,
                ) -> Result<ExecutionRecord> {
                    executions::execution_cancel(self, namespace, id).await
                }

                async fn workflow_write_batch(
                    &self,
                    writes: &[WorkflowWrite],
                ) -> Result<Vec<WorkflowRecord>> {
                    workflows::workflow_write_batch(self, writes).await
                }

                async fn workflow_delete(
                    &self,
                    namespace: &str,
                    name: &str,
                    expected_version: Option<i64>,
                ) -> Result<()> {
                    workflows::workflow_delete(self, namespace, name, expected_version).await
                }

                async fn run_create(&self, run: &NewRun) -> Result<RunRecord> {
                    runs::run_create(self, run).await
                }

                async fn run_cancel(&self, namespace: &str, id: &str) -> Result<RunRecord> {
                    runs::run_cancel(self, namespace, id).await
                }

                async fn run_retry(
                    &self,
                    namespace: &str,
                    id: &str,
                    tasks: &[String],
                ) -> Result<RunRecord> {
                    runs::run_retry(self, namespace, id, tasks).await
                }

                async fn execution_redrive(
                    &self,
                    namespace: &str,
                    id: &str,
                    extra_attempts: u32,
                ) -> Result<ExecutionRecord> {
                    executions::execution_redrive(self, namespace, id, extra_attempts).await
                }

                async fn calendar_put(
                    &self,
                    namespace: &str,
                    name: &str,
                    spec: &sundial_core::calendar::CalendarSpec,
                ) -> Result<($crate::CalendarRecord, bool)> {
                    calendars::calendar_put(self, namespace, name, spec).await
                }

                async fn calendar_delete(&self, namespace: &str, name: &str) -> Result<()> {
                    calendars::calendar_delete(self, namespace, name).await
                }

                async fn secret_put(
                    &self,
                    namespace: &str,
                    name: &str,
                    sealed: &$crate::SealedSecret,
                ) -> Result<($crate::SecretRecord, bool)> {
                    secrets::secret_put(self, namespace, name, sealed).await
                }

                async fn secret_list(&self, namespace: &str) -> Result<Vec<$crate::SecretRecord>> {
                    $crate::steps::secrets::secret_list(self, namespace).await
                }

                async fn secret_any(&self) -> Result<bool> {
                    $crate::steps::secrets::secret_any(self).await
                }

                async fn secret_users(&self, namespace: &str, name: &str) -> Result<Vec<String>> {
                    $crate::steps::secrets::secret_users(self, namespace, name).await
                }

                async fn secret_delete(&self, namespace: &str, name: &str) -> Result<()> {
                    secrets::secret_delete(self, namespace, name).await
                }

                async fn backfill_create(
                    &self,
                    backfill: &$crate::NewBackfill,
                ) -> Result<$crate::BackfillRecord> {
                    backfills::backfill_create(self, backfill).await
                }

                async fn audit_list(
                    &self,
                    query: &$crate::audit::AuditQuery,
                ) -> Result<Vec<$crate::audit::AuditEntry>> {
                    $crate::steps::audit::audit_list(self, query).await
                }
            }

            #[$crate::__forward::async_trait]
            impl MaintenanceStore for $store {
                fn maintenance(
                    &self,
                    config: &$crate::maintenance::MaintenanceConfig,
                ) -> Vec<std::sync::Arc<dyn $crate::maintenance::Service>> {
                    maintenance::services(self, config)
                }

                async fn node_heartbeat(
                    &self,
                    node: &str,
                    roles: &[String],
                    ttl: $crate::__forward::Dur,
                ) -> Result<()> {
                    $crate::steps::nodes::node_heartbeat(self, node, roles, ttl).await
                }

                async fn history_prune(
                    &self,
                    prune: &$crate::HistoryPrune,
                ) -> Result<$crate::HistoryPruned> {
                    retention::history_prune(self, prune).await
                }

                async fn alert_states_add(&self, states: &[String]) -> Result<()> {
                    alerts::alert_states_add(self, states).await
                }

                async fn alert_claim(
                    &self,
                    limit: u32,
                    lease: Duration,
                ) -> Result<Vec<$crate::AlertEvent>> {
                    alerts::alert_claim(self, limit, lease).await
                }

                async fn alert_settle(
                    &self,
                    seq: i64,
                    round: u32,
                    settle: &$crate::AlertSettle,
                ) -> Result<bool> {
                    alerts::alert_settle(self, seq, round, settle).await
                }

                async fn audit_prune(&self, before: $crate::__forward::Timestamp) -> Result<u64> {
                    $crate::steps::audit::audit_prune(self, before.as_millisecond()).await
                }
            }
        };
    };
}
