//! The store conformance suite: every backend runs each of these checks from its own
//! `tests/`, each on a fresh database, with a [`sundial_clock::ManualClock`] as the time source
//! where the backend accepts one. Compiled only with the feature `testkit` (the backends'
//! dev-dependencies turn it on), never into the release binary.
//!
//! The checks live by concern in the submodules (jobs, trigger, claim, attempts and
//! completion, executions, nodes, workflows); each is a `pub async fn NAME(h: Harness)`. A backend's test
//! file expands [`crate::conformance_tests`] with a function that runs one check on a fresh
//! store; that macro holds the one list of checks, and also expands a test that compares the
//! list with the checks the submodules define ([`checks`]), so a check cannot be left out of
//! any backend's run.

mod alerts;
mod audit;
mod backfills;
mod bench;
mod calendars;
mod claim;
mod complete;
mod executions;
mod jobs;
mod liveness;
mod nodes;
mod retention;
mod secrets;
mod trigger;
mod workflows;

pub use alerts::*;
pub use audit::*;
pub use backfills::*;
pub use bench::*;
pub use calendars::*;
pub use claim::*;
pub use complete::*;
pub use executions::*;
pub use jobs::*;
pub use liveness::*;
pub use nodes::*;
pub use retention::*;
pub use secrets::*;
pub use trigger::*;
pub use workflows::*;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use sundial_clock::{Clock, ManualClock};
use sundial_core::Dur;
use sundial_core::execution::{AttemptOutcome, ExecutionState, Trigger};
use sundial_core::hash::shard_of;
use sundial_core::job::{HttpTarget, JobSpec, ScheduleKind, ScheduleSpec, TargetSpec};
use sundial_core::retry::RetryPolicy;

use crate::{
    AttemptComplete, AttemptRef, Error, ExecutionClaim, ExecutionListQuery, ExecutionRecord,
    JobListQuery, JobRecord, JobTrigger, JobWrite, NewExecution, NextDue, NextStep,
    PendingExecutions, RunSpec, ShardLease, ShardLeaseRequest, Store, TriggerCommit,
    TriggerDueSeconds, TriggerListDue, TriggerNextDue,
};

/// A future that opens a store.
pub type Opening = Pin<Box<dyn Future<Output = Arc<dyn Store>> + Send>>;

/// Opens a store whose time authority is the given clock.
pub type Opener = Arc<dyn Fn(Arc<ManualClock>) -> Opening + Send + Sync>;

/// How a check gets its stores: [`Harness::open`] a fresh, empty one;
/// [`Harness::another_process`] a second store on the database last opened, as another
/// process would open it (its own connections and process identity).
#[derive(Clone)]
pub struct Harness {
    open: Opener,
    another: Opener,
}

impl Harness {
    /// A harness from the backend's two openers.
    pub fn new(open: Opener, another: Opener) -> Self {
        Harness { open, another }
    }

    /// A fresh, empty store on `clock`.
    pub async fn open(&self, clock: Arc<ManualClock>) -> Arc<dyn Store> {
        (self.open)(clock).await
    }

    /// Another store on the database [`Harness::open`] last created, on `clock`.
    pub async fn another_process(&self, clock: Arc<ManualClock>) -> Arc<dyn Store> {
        (self.another)(clock).await
    }
}

/// The names of the checks the submodules define (every `pub async fn` taking a
/// [`Harness`]), read from their source: what [`crate::conformance_tests`] must list.
pub fn checks() -> Vec<&'static str> {
    let sources = [
        include_str!("alerts.rs"),
        include_str!("audit.rs"),
        include_str!("backfills.rs"),
        include_str!("calendars.rs"),
        include_str!("claim.rs"),
        include_str!("complete.rs"),
        include_str!("executions.rs"),
        include_str!("jobs.rs"),
        include_str!("liveness.rs"),
        include_str!("nodes.rs"),
        include_str!("retention.rs"),
        include_str!("secrets.rs"),
        include_str!("trigger.rs"),
        include_str!("workflows.rs"),
    ];
    let mut names: Vec<&'static str> = sources
        .iter()
        .flat_map(|s| s.lines())
        .filter_map(|l| l.strip_prefix("pub async fn "))
        .filter(|l| l.contains("(h: Harness)"))
        .filter_map(|l| l.split('(').next())
        .collect();
    names.sort_unstable();
    names
}

/// The instant every check starts at.
pub fn t0() -> Timestamp {
    Timestamp::from_second(1_798_761_600).unwrap_or(Timestamp::UNIX_EPOCH) // 2027-01-01T00:00:00Z
}

/// A valid every-`secs` HTTP job.
pub fn job_spec(namespace: &str, name: &str, secs: u64) -> JobSpec {
    JobSpec {
        namespace: namespace.into(),
        name: name.into(),
        description: String::new(),
        labels: Default::default(),
        schedule: ScheduleSpec {
            kind: ScheduleKind::Every {
                every: Dur::from_secs(secs),
            },
            start_at: Some(t0()),
            end_at: None,
            exclude_calendars: Vec::new(),
        },
        target: TargetSpec::Http(HttpTarget {
            method: "POST".into(),
            url: "http://127.0.0.1:9/".into(),
            headers: Default::default(),
            body: None,
            success_codes: Vec::new(),
        }),
        retry: RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::default()
        },
        timeout: Dur::from_secs(10),
        heartbeat_timeout: Dur::from_secs(30),
        concurrency_policy: Default::default(),
        misfire_policy: Default::default(),
        misfire_threshold: Dur::from_secs(60),
        jitter: Dur::ZERO,
        paused: false,
    }
}

/// A new job record at `t0()` whose first slot is `t0()`.
pub fn job_record(namespace: &str, name: &str) -> JobRecord {
    JobRecord {
        spec: job_spec(namespace, name, 10),
        uid: uuid::Uuid::now_v7().to_string(),
        shard: shard_of(namespace, name),
        version: 0,
        created_at: t0(),
        updated_at: t0(),
        next_slot_at: Some(t0()),
        next_fire_at: Some(t0()),
        pending_fire_at: None,
        last_execution: None,
    }
}

/// Claims everything due as worker `w1`, 512 a claim, and completes it successfully, 256
/// completions a batch, until nothing is due; returns the ids completed.
///
/// # Panics
/// When the store fails, or refuses a completion.
pub async fn claim_and_complete_all(store: &dyn Store) -> Vec<String> {
    let mut done = Vec::new();
    loop {
        let claimed = store
            .execution_claim(&crate::ExecutionClaim {
                worker: "w1".into(),
                limit: 512,
                rate_limits: Default::default(),
                ahead_ms: 0,
                epoch: None,
                on_time_first: false,
            })
            .await
            .expect("claim");
        if claimed.is_empty() {
            return done;
        }
        for batch in claimed.chunks(256) {
            let completions: Vec<_> = batch
                .iter()
                .map(|e| complete_ok(&e.id, e.attempt))
                .collect();
            let applied = store
                .attempt_complete_batch(&completions)
                .await
                .expect("complete");
            assert!(applied.iter().all(|a| *a), "every completion applies");
        }
        done.extend(claimed.into_iter().map(|e| e.id));
    }
}

/// A `scheduled` execution of `job` for `slot` (fire time = slot), as the scheduler makes one.
pub fn execution(job: &JobRecord, slot: Timestamp) -> NewExecution {
    NewExecution {
        id: sundial_core::ids::slot_execution_id(&job.uid, slot),
        namespace: job.spec.namespace.clone(),
        job: job.spec.name.clone(),
        job_uid: job.uid.clone(),
        job_version: job.version,
        shard: job.shard,
        trigger: Trigger::Schedule,
        scheduled_at: slot,
        fire_at: slot,
        state: ExecutionState::Scheduled,
        run: RunSpec::of(&job.spec),
    }
}

/// Creations of `n` new jobs named `job-0000`, `job-0001`, … in `namespace`, each as
/// [`job_record`] makes it (first slot `t0()`), for [`ApiStore::job_write_batch`].
pub fn new_job_writes(namespace: &str, n: usize) -> Vec<JobWrite> {
    (0..n)
        .map(|i| JobWrite {
            record: job_record(namespace, &format!("job-{i:04}")),
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .collect()
}

/// The part of a trigger commit that advances `job` from the slot it read, `expected`, to
/// `next` (its next slot and fire time; `None` when the schedule has ended) and writes
/// `executions`.
pub fn job_trigger(
    job: &JobRecord,
    expected: Timestamp,
    next: Option<Timestamp>,
    executions: Vec<NewExecution>,
) -> JobTrigger {
    JobTrigger {
        namespace: job.spec.namespace.clone(),
        name: job.spec.name.clone(),
        uid: job.uid.clone(),
        shard: job.shard,
        version: job.version,
        expected_next_slot: expected,
        next_slot_at: next,
        next_fire_at: next,
        executions,
    }
}

/// A store on a manual clock at [`t0`] holding one execution of job `ns/a`, claimed by `w1`
/// (attempt 1, its lease 30 s from `t0`).
async fn one_claimed(h: Harness) -> (Arc<ManualClock>, Arc<dyn Store>, crate::ClaimedExecution) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let job = create(&*store, "ns", "a").await;
    trigger(&*store, "n1", &job, &[t0()])
        .await
        .expect("trigger");
    let e = store
        .execution_claim(&claim("w1", 1))
        .await
        .expect("claim")
        .remove(0);
    (clock, store, e)
}

async fn create(store: &dyn Store, ns: &str, name: &str) -> JobRecord {
    let write = JobWrite {
        record: job_record(ns, name),
        expected_version: None,
        pending: PendingExecutions::Keep,
    };
    store.job_write(&write).await.expect("create job")
}

/// Creates job `ns/name` with its next slot (and fire time) at `at`, as a scheduler's trigger
/// left it.
async fn create_due(store: &dyn Store, ns: &str, name: &str, at: Timestamp) -> JobRecord {
    let mut record = job_record(ns, name);
    record.next_slot_at = Some(at);
    record.next_fire_at = Some(at);
    let write = JobWrite {
        record,
        expected_version: None,
        pending: PendingExecutions::Keep,
    };
    store.job_write(&write).await.expect("create job")
}

/// Renews every shard lease for `node` with a 10 s TTL, as its scheduler does before a commit.
async fn renew_leases(store: &dyn Store, node: &str) -> Result<Vec<ShardLease>, Error> {
    store
        .shard_lease_renew(&ShardLeaseRequest {
            node: node.into(),
            ttl: Dur::from_secs(10),
        })
        .await
}

/// The trigger commit by `node` (every shard lease renewed first) that writes each of `jobs`'
/// execution for `t0()` and advances it to `t0()` + 10 s.
///
/// # Errors
/// The store's, when the leases cannot be renewed.
pub async fn first_slots_commit(
    store: &dyn Store,
    node: &str,
    jobs: &[JobRecord],
) -> Result<TriggerCommit, Error> {
    let leases = renew_leases(store, node).await?;
    let next = t0() + SignedDuration::from_secs(10);
    Ok(TriggerCommit {
        node: node.into(),
        leases,
        jobs: jobs
            .iter()
            .map(|job| job_trigger(job, t0(), Some(next), vec![execution(job, t0())]))
            .collect(),
        handoff: None,
    })
}

/// Triggers `slots` of `job` as one commit by `node` holding the leases it renews first.
async fn trigger(
    store: &dyn Store,
    node: &str,
    job: &JobRecord,
    slots: &[Timestamp],
) -> Result<u32, Error> {
    let leases = renew_leases(store, node).await?;
    let next = slots.last().map(|s| *s + SignedDuration::from_secs(10));
    let commit = TriggerCommit {
        node: node.into(),
        leases,
        jobs: vec![job_trigger(
            job,
            job.next_slot_at.unwrap_or(t0()),
            next,
            slots.iter().map(|s| execution(job, *s)).collect(),
        )],
        handoff: None,
    };
    Ok(store.trigger_commit(&commit).await?.executions_inserted)
}

/// The executions of namespace `ns` in `state`, newest first (up to 10).
async fn in_state(store: &dyn Store, ns: &str, state: ExecutionState) -> Vec<ExecutionRecord> {
    store
        .execution_list(&ExecutionListQuery {
            namespace: ns.into(),
            state: Some(state),
            limit: 10,
            ..Default::default()
        })
        .await
        .expect("list executions by state")
}

fn claim(worker: &str, limit: u32) -> ExecutionClaim {
    ExecutionClaim {
        worker: worker.into(),
        limit,
        rate_limits: Default::default(),
        ahead_ms: 0,
        epoch: None,
        on_time_first: false,
    }
}

async fn create_with(
    store: &dyn Store,
    name: &str,
    policy: sundial_core::job::ConcurrencyPolicy,
) -> JobRecord {
    let mut record = job_record("ns", name);
    record.spec.concurrency_policy = policy;
    store
        .job_write(&JobWrite {
            record,
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("create job")
}

/// The reaper's completion of attempt `attempt` of execution `id`, applied only if its lease
/// lapsed: recorded `lease_lapsed` and retried at once.
pub fn reap_lapsed(id: &str, attempt: u32) -> AttemptComplete {
    AttemptComplete {
        attempt: AttemptRef {
            id: id.into(),
            attempt,
        },
        outcome: AttemptOutcome::LeaseLapsed,
        status_code: None,
        error: Some("lease lapsed".into()),
        detail: None,
        next: NextStep::RetryAfter(Dur::ZERO),
        only_if_lapsed: true,
        output: None,
    }
}

/// A successful completion (HTTP 200) of attempt `attempt` of execution `id`.
pub fn complete_ok(id: &str, attempt: u32) -> AttemptComplete {
    AttemptComplete {
        attempt: AttemptRef {
            id: id.into(),
            attempt,
        },
        outcome: AttemptOutcome::Succeeded,
        status_code: Some(200),
        error: None,
        detail: None,
        next: NextStep::Succeeded,
        only_if_lapsed: false,
        output: None,
    }
}

/// Expands one `#[tokio::test]` per conformance check, the one list of checks every backend
/// runs, and a test `conformance_lists_every_check` that fails when a check defined in
/// `testkit` is missing from the list. `$run` is an async fn taking a closure
/// `Harness -> future` and running it on the backend (creating and dropping whatever the
/// backend needs around it).
///
/// ```ignore
/// async fn run<F: std::future::Future<Output = ()>>(check: impl FnOnce(Harness) -> F) {
///     check(harness()).await;
/// }
/// sundial_store::conformance_tests!(run);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($run:path) => {
        $crate::conformance_tests!(@each $run,
            dead_letters_and_queue_depth_are_counted_per_namespace,
            alert_events_follow_registered_states_and_leases,
            a_failed_run_writes_a_run_alert_event,
            calendars_are_put_listed_and_versioned,
            a_calendar_in_use_cannot_be_deleted,
            secrets_are_put_versioned_and_listed_without_values,
            a_secret_in_use_cannot_be_deleted,
            changes_in_a_scope_are_recorded_with_them,
            the_audit_log_is_filtered_and_paged,
            audit_retention_prunes_the_oldest_end_only,
            concurrent_writers_keep_one_chain,
            a_large_batch_records_every_change_in_order,
            a_backfill_step_is_fenced_idempotent_and_counts_existing_slots,
            a_serial_backfill_waits_its_turn_and_stops_on_cancel,
            a_backfilled_slot_waits_while_its_job_runs,
            a_workflow_backfill_creates_one_run_per_slot,
            job_writes_are_conditional_on_version,
            namespaces_are_listed_from_jobs_and_workflows,
            job_list_pages_and_filters,
            job_writes_steer_pending_executions,
            a_pause_removes_what_was_written_ahead_and_cancels_what_is_due,
            the_last_execution_is_the_latest_slot_fired,
            a_slot_gets_one_execution_however_often_it_is_triggered,
            large_batches_write_every_row_once,
            a_trigger_with_a_stale_epoch_writes_nothing,
            due_jobs_are_listed_by_fire_time,
            the_first_jobs_due_beyond_the_horizon_are_found_and_counted,
            jobs_due_are_counted_per_second,
            executions_are_claimed_once_and_never_early,
            waiting_executions_are_counted_by_due_time_up_to_a_cap,
            skip_records_a_slot_due_while_the_job_runs,
            replace_cancels_the_running_execution,
            replace_never_runs_what_the_same_claim_cancelled,
            catch_up_under_skip_runs_one_after_another,
            catch_up_under_skip_skips_slots_that_come_due_meanwhile,
            rate_limited_namespaces_dispatch_at_their_rate,
            a_claim_that_read_the_clock_earlier_refills_no_time_twice,
            a_claim_ahead_takes_only_what_nothing_can_change_before_the_fire_time,
            a_claim_on_time_first_serves_new_slots_beside_the_backlog,
            under_skip_a_slot_near_its_fire_time_is_judged_as_of_it,
            an_execution_claimed_ahead_is_leased_from_its_fire_time,
            a_pause_delete_or_cancel_drops_what_was_claimed_ahead,
            late_precreated_slots_follow_the_misfire_policy,
            run_once_leaves_late_slots_to_a_later_slot_come_due,
            a_stale_completion_is_rejected,
            a_held_attempt_that_starts_late_is_judged_by_its_misfire_policy,
            a_completion_after_its_lease_lapsed_is_refused,
            a_completion_at_its_lease_expiry_applies,
            attempts_under_a_worker_lease_record_its_epoch_and_live_by_it,
            a_worker_lease_taken_over_lapses_every_attempt_under_it,
            a_trigger_commit_hands_out_what_a_claim_ahead_could_take,
            a_slot_written_late_is_handed_out_started_at_the_commit,
            the_cluster_view_shows_each_workers_lease_and_what_it_holds,
            a_retry_is_due_its_delay_after_the_completion_is_written,
            heartbeats_keep_the_lease,
            heartbeats_in_a_batch_are_judged_each_on_its_own,
            cancel_and_redrive_follow_the_state_machine,
            execution_history_pages_newest_first,
            history_pages_through_executions_sharing_a_slot_time,
            dead_letters_page_newest_first,
            a_node_heartbeat_shows_the_node_live_with_its_roles_until_its_ttl,
            a_node_id_held_by_another_live_process_is_refused,
            cluster_status_counts_the_queue_and_each_nodes_shards,
            a_chain_releases_each_task_when_its_upstream_succeeds,
            trigger_rules_decide_every_task_from_its_upstream,
            a_stale_completion_releases_nothing,
            a_cancelled_run_starts_nothing_more,
            cancelling_a_task_releases_its_downstream,
            retry_from_failure_keeps_ids_and_numbers_attempts_on,
            a_run_keeps_the_version_it_was_created_with,
            concurrency_policies_act_on_runs,
            a_missing_template_path_fails_the_task_naming_it,
            one_run_per_slot_from_two_processes,
            a_workflow_trigger_is_fenced_and_idempotent,
            a_run_past_its_timeout_fails_and_stops_its_tasks,
            retention_deletes_expired_executions_keeping_each_job_s_newest,
            retention_deletes_a_run_with_its_tasks,
            the_retention_service_goes_on_where_its_last_pass_stopped
        );
    };
    (@each $run:path, $($name:ident),*) => {
        $(
            #[tokio::test]
            async fn $name() {
                $run($crate::testkit::$name).await;
            }
        )*

        #[test]
        fn conformance_lists_every_check() {
            let mut listed = vec![$(stringify!($name)),*];
            listed.sort_unstable();
            assert_eq!(
                listed,
                $crate::testkit::checks(),
                "sundial_store::conformance_tests! must list every check of testkit"
            );
        }
    };
}
