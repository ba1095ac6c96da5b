//! The JSON shapes of the job and execution resources (README.md "A job", ARCHITECTURE.md "Execution states").

use jiff::Timestamp;
use serde_json::{Value, json};
use sundial_core::schedule::Schedule;
use sundial_store::{ExecutionRecord, JobRecord};

/// A job as the API shows it at `now`: its spec plus the read-only fields; `next_fire_at` is
/// when it fires next (an execution already created for a slot counts); with `with_upcoming`,
/// `next_fire_times` lists the next five fire times of its schedule from `next_fire_at` on,
/// that one first (none while paused or completed).
pub fn job_json(job: &JobRecord, with_upcoming: bool, now: Timestamp) -> Value {
    let mut v = serde_json::to_value(&job.spec).unwrap_or_else(|_| json!({}));
    v["state"] = json!(job.state());
    v["version"] = json!(job.version);
    v["created_at"] = json!(job.created_at);
    v["updated_at"] = json!(job.updated_at);
    v["next_fire_at"] = json!(job.upcoming_fire_at());
    v["last_execution"] = json!(job.last_execution);
    if with_upcoming {
        // From the job's next fire time, which may be a moment before `now` (an `every` job's
        // first slot is its creation instant) or its slot a jitter earlier.
        let upcoming: Vec<Timestamp> = match (
            Schedule::compile(&job.spec.schedule),
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
        };
        v["next_fire_times"] = json!(upcoming);
    }
    v
}

/// An execution as the API shows it at `now` (a due `scheduled` execution reads `queued`);
/// a workflow task's also carries `run_id` and `task`.
pub fn execution_json(e: &ExecutionRecord, now: Timestamp) -> Value {
    let mut v = json!({
        "id": e.id,
        "namespace": e.namespace,
        "job": e.job,
        "job_version": e.job_version,
        "trigger": e.trigger,
        "scheduled_at": e.scheduled_at,
        "fire_at": e.fire_at,
        "queued_at": e.queued_at,
        "started_at": e.started_at,
        "finished_at": e.finished_at,
        "state": e.state.as_of(e.fire_at, now),
        "attempt": e.attempt,
        "max_attempts": e.max_attempts,
        "next_attempt_at": e.next_attempt_at,
        "worker": e.worker,
        "attempts": e.attempts,
    });
    if let Some(run) = &e.run_id {
        v["run_id"] = json!(run);
        v["task"] = json!(e.task);
    }
    v
}
