//! The JSON shapes of the job and execution resources (README.md "A job", ARCHITECTURE.md "Execution states").

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;
use sundial_core::execution::{ExecutionState, Trigger};
use sundial_core::job::JobSpec;
use sundial_core::schedule::Schedule;
use sundial_store::{AttemptRecord, ExecutionRecord, ExecutionSummary, JobRecord};
use utoipa::ToSchema;

/// A job as the API shows it at `now`: its spec plus the read-only fields; `next_fire_at` is
/// when it fires next (an execution already created for a slot counts); with `with_upcoming`,
/// `next_fire_times` lists the next five fire times of its schedule from `next_fire_at` on,
/// that one first (none while paused or completed). A schedule that names calendars
/// (`exclude_calendars`, looked up in `calendars`, the namespace's) has both computed without
/// the slots they exclude.
pub fn job_json(
    job: &JobRecord,
    with_upcoming: bool,
    now: Timestamp,
    calendars: &NsCalendars,
) -> Value {
    to_value(&job_resource(job, with_upcoming, now, calendars))
}

pub use sundial_core::calendar::{NsCalendars, named_calendars};

/// The typed form of [`job_json`].
pub fn job_resource(
    job: &JobRecord,
    with_upcoming: bool,
    now: Timestamp,
    calendars: &NsCalendars,
) -> JobResource {
    let excluding = !job.spec.schedule.exclude_calendars.is_empty();
    let upcoming = (with_upcoming || excluding).then(|| {
        // From the job's next fire time, which may be a moment before `now` (an `every` job's
        // first slot is its creation instant) or its slot a jitter earlier.
        match (
            Schedule::compile(&job.spec.schedule)
                .map(|s| s.with_calendars(named_calendars(&job.spec.schedule, calendars))),
            job.upcoming_fire_at(),
        ) {
            (Ok(schedule), Some(next)) if !job.spec.paused => {
                let from = now.min(next - job.spec.jitter.as_signed())
                    - jiff::SignedDuration::from_millis(1);
                schedule
                    .upcoming(from, 10)
                    .into_iter()
                    .map(|s| sundial_core::hash::fire_time(&job.uid, s, job.spec.jitter))
                    .filter(|f| *f >= next)
                    .take(5)
                    .collect()
            }
            _ => Vec::new(),
        }
    });
    // The stored next fire time ignores calendars (the scheduler passes over excluded slots
    // when it triggers them); shown, it is the first slot no calendar excludes.
    let next_fire_at = match &upcoming {
        Some(times) if excluding => times.first().copied(),
        _ => job.upcoming_fire_at(),
    };
    let next_fire_times = upcoming.filter(|_| with_upcoming);
    let dst_preview = with_upcoming.then(|| dst_preview(&job.spec.schedule, now, calendars));
    let mut spec = job.spec.clone();
    spec.target = sundial_core::secrets::mask_target(&spec.target);
    JobResource {
        warnings: credential_warnings(&job.spec.target, ""),
        spec,
        state: job.state(),
        version: job.version,
        created_at: job.created_at,
        updated_at: job.updated_at,
        next_fire_at,
        last_execution: job.last_execution.clone(),
        next_fire_times,
        dst_preview,
    }
}

/// How many offset changes `dst_preview` shows (docs/time.md, "DST policy": the next two).
pub const DST_PREVIEW_COUNT: usize = 2;

/// A schedule's `dst_preview` as of `now`: the next [`DST_PREVIEW_COUNT`] offset changes of its
/// zone that touch its wall times, with the slots around each under its DST policy
/// (docs/cron.md, "DST policy"), without the slots its calendars (of `calendars`, the
/// namespace's) exclude. Empty for `at` and `every` schedules, zones without DST, and
/// schedules no change touches within the engine's horizon.
pub fn dst_preview(
    spec: &sundial_core::job::ScheduleSpec,
    now: Timestamp,
    calendars: &NsCalendars,
) -> Vec<DstTransitionResource> {
    let Ok(schedule) = Schedule::compile(spec) else {
        return Vec::new();
    };
    let schedule = schedule.with_calendars(named_calendars(spec, calendars));
    schedule
        .dst_preview(now, DST_PREVIEW_COUNT)
        .into_iter()
        .map(|t| DstTransitionResource {
            at: t.at,
            kind: t.kind.as_str(),
            offset_before: offset_text(t.offset_before),
            offset_after: offset_text(t.offset_after),
            local_from: t.local_from.to_string(),
            local_to: t.local_to.to_string(),
            slots: t.slots,
        })
        .collect()
}

/// A UTC offset as `±HH:MM` (seconds dropped; no zone's offset has had any since 1972).
fn offset_text(offset: jiff::tz::Offset) -> String {
    let seconds = offset.seconds();
    let sign = if seconds < 0 { '-' } else { '+' };
    let abs = seconds.unsigned_abs();
    format!("{sign}{:02}:{:02}", abs / 3600, abs / 60 % 60)
}

/// One entry of `dst_preview` (docs/time.md, "DST policy"): an offset change of the schedule's zone that skips
/// (`gap`) or repeats (`fold`) wall times the schedule matches.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DstTransitionResource {
    /// The instant the offset changes (UTC).
    pub at: Timestamp,
    /// `gap` (wall times skipped) or `fold` (wall times repeated).
    pub kind: &'static str,
    /// The zone's UTC offset before the change, e.g. `-05:00`.
    pub offset_before: String,
    /// The UTC offset from the change on, e.g. `-04:00`.
    pub offset_after: String,
    /// First skipped or repeated wall time (local, inclusive), e.g. `2027-03-14T02:00:00`.
    pub local_from: String,
    /// End of the skipped or repeated wall times (local, exclusive).
    pub local_to: String,
    /// The schedule's fire times around the change under its DST policy (UTC): the last
    /// before the window, those inside it (at most 8), the first after.
    pub slots: Vec<Timestamp>,
}

/// An execution as the API shows it at `now` (a due `scheduled` execution reads `queued`);
/// a workflow task's also carries `run_id` and `task`.
pub fn execution_json(e: &ExecutionRecord, now: Timestamp) -> Value {
    to_value(&execution_resource(e, now))
}

/// The typed form of [`execution_json`].
pub fn execution_resource(e: &ExecutionRecord, now: Timestamp) -> ExecutionResource {
    ExecutionResource {
        id: e.id.clone(),
        namespace: e.namespace.clone(),
        job: e.job.clone(),
        job_version: e.job_version,
        trigger: e.trigger,
        scheduled_at: e.scheduled_at,
        fire_at: e.fire_at,
        queued_at: e.queued_at,
        started_at: e.started_at,
        finished_at: e.finished_at,
        state: e.state.as_of(e.fire_at, now),
        attempt: e.attempt,
        max_attempts: e.max_attempts,
        next_attempt_at: e.next_attempt_at,
        worker: e.worker.clone(),
        attempts: e.attempts.clone(),
        run_id: e.run_id.clone(),
        task: e.run_id.as_ref().and(e.task.clone()),
    }
}

/// Serializes a resource; the types here always serialize (string keys, no failing impls).
pub(crate) fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A job as the API shows it (README.md, "The API"): the spec's fields and the read-only ones.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobResource {
    /// The definition, as written (with its defaults filled in).
    #[serde(flatten)]
    pub spec: JobSpec,
    /// `active`, `paused` or `completed` (the schedule has no slot left).
    pub state: &'static str,
    /// Incremented by every change; `If-Match` takes it.
    pub version: i64,
    /// When the job was created (UTC).
    pub created_at: Timestamp,
    /// When it was last changed (UTC).
    pub updated_at: Timestamp,
    /// When it fires next (UTC); an execution already created for a slot counts.
    pub next_fire_at: Option<Timestamp>,
    /// Its latest slot fired.
    pub last_execution: Option<ExecutionSummary>,
    /// The next five fire times (UTC), on `GET` of one job only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_fire_times: Option<Vec<Timestamp>>,
    /// The next two DST changes of its zone that touch its slots (docs/time.md, "DST policy"), on `GET` of one
    /// job only; empty when none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst_preview: Option<Vec<DstTransitionResource>>,
    /// The credentials its target holds in plain text (docs/security.md, "Plain-text
    /// credentials"), each `{field, message}`: they show as `***` above; move them into
    /// secrets. Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<sundial_core::validate::FieldError>,
}

/// The warnings of a target that holds plain-text credentials (`prefix` before each field):
/// one per field, naming the secret syntax.
pub fn credential_warnings(
    target: &sundial_core::job::TargetSpec,
    prefix: &str,
) -> Vec<sundial_core::validate::FieldError> {
    sundial_core::secrets::plain_credentials(target)
        .into_iter()
        .map(|field| {
            sundial_core::validate::FieldError::new(
                format!("{prefix}{field}"),
                "holds a credential in plain text, shown as ***; store it as a secret of this namespace (PUT .../secrets/NAME) and write {{ secret.NAME }} here",
            )
        })
        .collect()
}

/// An execution as the API shows it (README.md, "The API"), with its attempts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExecutionResource {
    /// Execution id (UUID, its first 48 bits the slot's or manual trigger's instant in Unix
    /// ms; derived from the job and the slot for a scheduled execution): the idempotency key
    /// of its deliveries.
    pub id: String,
    /// Namespace.
    pub namespace: String,
    /// The job's name (the workflow's, for a task).
    pub job: String,
    /// The job version it was created from.
    pub job_version: i64,
    /// What created it.
    pub trigger: Trigger,
    /// The slot (UTC).
    pub scheduled_at: Timestamp,
    /// The slot plus jitter (UTC): never started before.
    pub fire_at: Timestamp,
    /// When it became due (UTC).
    pub queued_at: Timestamp,
    /// First attempt's start (UTC).
    pub started_at: Option<Timestamp>,
    /// When it ended (UTC).
    pub finished_at: Option<Timestamp>,
    /// State (a due `scheduled` execution reads `queued`).
    pub state: ExecutionState,
    /// Attempts made so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// When the next attempt is due (UTC), while `retry_wait`.
    pub next_attempt_at: Option<Timestamp>,
    /// The worker node of the last attempt.
    pub worker: Option<String>,
    /// Every attempt, oldest first.
    pub attempts: Vec<AttemptRecord>,
    /// The workflow run, for a task's execution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The task's name, for a task's execution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

/// A page of a listing (README.md, "The API"): pass `next_page_token` back as `?page_token=`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The token of the next page; `null` on the last.
    pub next_page_token: Option<String>,
}

/// What a batch apply (`jobs:apply`, `workflows:apply`) wrote.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Applied<T> {
    /// Every item as it now stands, in the order sent.
    pub items: Vec<T>,
    /// How many were created.
    pub created: usize,
    /// How many were changed.
    pub updated: usize,
    /// How many were sent unchanged (their version kept).
    pub unchanged: usize,
}
