//! `POST /v1/namespaces/{ns}/jobs:plan`: what `jobs:apply` of the same body would do, written
//! nowhere (docs/time.md, "Plan before apply").
//!
//! Invariants:
//! - The plan runs the apply's own rules on the same inputs: the same validation
//!   ([`validate::job_from_json`] through [`jobs::batch`]), the same next-slot and
//!   pending-execution rules ([`jobs::next_record`]), the same refusal of a schedule that never
//!   fires. What it says an apply at the same instant does is what that apply does.
//! - Nothing is written: the handler reads the jobs and their not-started executions only.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;
use sundial_core::execution::ExecutionState;
use sundial_core::job::ScheduleKind;
use sundial_core::schedule::Schedule;
use sundial_core::validate::{self, FieldError};
use sundial_store::{ExecutionListQuery, JobRecord, PendingExecutions};
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::{self, MAX_BATCH, check_path, context};
use crate::request::{Path, json_body};
use crate::resource::job_resource;

/// The plan of one job.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobPlan {
    /// The job's name.
    pub name: String,
    /// `created`, `changed` or `unchanged` (written back as stored: its version is kept).
    pub action: &'static str,
    /// Each field whose value changes, by dotted path (`schedule.cron`, `target.url`), with
    /// its value before (absent: `null`) and after. Empty for `created` and `unchanged`.
    pub changes: Vec<FieldChange>,
    /// The next five fire times now (UTC); empty for a job that does not exist yet or is
    /// paused.
    pub next_fire_times_before: Vec<Timestamp>,
    /// The next five fire times once applied (UTC).
    pub next_fire_times_after: Vec<Timestamp>,
    /// The executions of the job that have not started and that the change ends: those due
    /// are cancelled, those created ahead of their fire time are removed (docs/policies.md,
    /// "Schedule changes never fire retroactively").
    pub cancels: Vec<PlannedEnd>,
    /// How many not-started executions are rewritten with the new definition instead (a
    /// change of target, retry, timeout or policy keeps their slots).
    pub rewrites: usize,
    /// Slots that will not fire because of the change (UTC): those of the executions it
    /// cancels or removes that the new schedule does not fire again, and, for a job paused by
    /// it, the next five it would have fired.
    pub skipped_slots: Vec<Timestamp>,
    /// Slots that will fire after their time because of the change: a one-off job whose
    /// instant has passed fires at once.
    pub late_slots: Vec<LateSlot>,
}

/// One field of a [`JobPlan`]'s `changes`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FieldChange {
    /// Dotted path of the field.
    pub field: String,
    /// Its value now; `null` when absent.
    pub before: Value,
    /// Its value once applied; `null` when removed.
    pub after: Value,
}

/// A not-started execution a change ends.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlannedEnd {
    /// The execution's id.
    pub id: String,
    /// Its slot (UTC).
    pub scheduled_at: Timestamp,
    /// `cancelled` (it was due) or `removed` (created ahead of its fire time).
    pub ends: &'static str,
}

/// A slot a change makes fire late.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LateSlot {
    /// The slot (UTC).
    pub slot: Timestamp,
    /// How late it fires, in milliseconds, if applied at the plan's instant.
    pub late_by_ms: i64,
}

/// The answer of `jobs:plan`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Plan {
    /// The store's time the plan was made at (UTC): an apply later may differ by what
    /// happened in between (slots fired, executions started).
    pub at: Timestamp,
    /// One plan per job, in the order sent.
    pub items: Vec<JobPlan>,
}

/// `POST /v1/namespaces/{ns}/jobs:plan` with the body of `jobs:apply` (`{"jobs": [...]}`, at
/// most [`MAX_BATCH`]): per job, what applying it now would do; writes nothing. Refuses what
/// the apply refuses, with the same errors (`jobs.<i>.<field>`).
#[utoipa::path(
    post,
    path = "/v1/namespaces/{ns}/jobs:plan",
    tag = "jobs",
    summary = "What applying these jobs would do, writing nothing",
    params(("ns" = String, Path, description = "Namespace")),
    request_body = crate::openapi::JobsApply,
    responses((status = 200, description = "The plan", body = Plan), crate::openapi::Problems)
)]
pub(crate) async fn plan_many(
    State(state): State<AppState>,
    Path(ns): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_path(&ns, None)?;
    let body = json_body(&headers, body).await?;
    let specs = match jobs::batch(&body, "jobs", MAX_BATCH, |item| {
        validate::job_from_json(item, &context(&state, &ns, None))
            .map(|spec| (spec.name.clone(), spec))
    }) {
        Ok(specs) => specs,
        Err(e) => {
            return Err(jobs::and_unknown_calendars(&state, &ns, &body, Some("jobs"), e).await);
        }
    };
    let schedules: Vec<_> = specs.iter().map(|s| Some(&s.schedule)).collect();
    jobs::refuse_unknown_calendars(&state, &ns, &schedules, "jobs.").await?;
    let now = state.store.now().await?;
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let mut existing: std::collections::HashMap<String, JobRecord> = state
        .store
        .job_get_many(&ns, &names)
        .await?
        .into_iter()
        .map(|j| (j.spec.name.clone(), j))
        .collect();
    let cals = jobs::ns_calendars(&state, &ns).await?;
    let mut items = Vec::with_capacity(specs.len());
    let mut never = Vec::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let old = existing.remove(&spec.name);
        let (record, pending) = jobs::next_record(spec, old.as_ref(), now);
        if let Some(e) = jobs::never_fires(&record, old.as_ref(), now) {
            never.push(FieldError::new(format!("jobs.{i}.{}", e.field), e.message));
            continue;
        }
        let not_started = match (&old, pending) {
            (Some(o), PendingExecutions::Cancel | PendingExecutions::Update)
                if o.spec != record.spec =>
            {
                not_started(&state, &ns, &o.spec.name).await?
            }
            _ => Vec::new(),
        };
        items.push(plan_one(
            old.as_ref(),
            &record,
            pending,
            &not_started,
            now,
            &cals,
        ));
    }
    if !never.is_empty() {
        return Err(ApiError::invalid(never));
    }
    Ok(Json(Plan { at: now, items }).into_response())
}

/// The job's executions that have not started (`scheduled` or `queued`, no attempt yet), by
/// slot; at most 1,000 of each.
async fn not_started(
    state: &AppState,
    ns: &str,
    job: &str,
) -> Result<Vec<sundial_store::ExecutionRecord>, ApiError> {
    let mut out = Vec::new();
    for s in [ExecutionState::Queued, ExecutionState::Scheduled] {
        out.extend(
            state
                .store
                .execution_list(&ExecutionListQuery {
                    namespace: ns.to_owned(),
                    job: Some(job.to_owned()),
                    state: Some(s),
                    before: None,
                    limit: 1000,
                })
                .await?
                .into_iter()
                .filter(|e| e.attempt == 0 && e.run_id.is_none()),
        );
    }
    out.sort_by(|a, b| (a.scheduled_at, &a.id).cmp(&(b.scheduled_at, &b.id)));
    Ok(out)
}

/// The plan of one job: `old` as stored (if any), `new` as [`jobs::next_record`] made it.
fn plan_one(
    old: Option<&JobRecord>,
    new: &JobRecord,
    pending: PendingExecutions,
    not_started: &[sundial_store::ExecutionRecord],
    now: Timestamp,
    cals: &crate::resource::NsCalendars,
) -> JobPlan {
    let after = job_resource(new, true, now, cals)
        .next_fire_times
        .unwrap_or_default();
    let Some(old) = old else {
        return JobPlan {
            name: new.spec.name.clone(),
            action: "created",
            changes: Vec::new(),
            next_fire_times_before: Vec::new(),
            next_fire_times_after: after,
            cancels: Vec::new(),
            rewrites: 0,
            skipped_slots: Vec::new(),
            late_slots: late_slots(new, now, cals),
        };
    };
    let before = job_resource(old, true, now, cals)
        .next_fire_times
        .unwrap_or_default();
    if old.spec == new.spec {
        return JobPlan {
            name: new.spec.name.clone(),
            action: "unchanged",
            changes: Vec::new(),
            next_fire_times_before: before.clone(),
            next_fire_times_after: before,
            cancels: Vec::new(),
            rewrites: 0,
            skipped_slots: Vec::new(),
            late_slots: Vec::new(),
        };
    }
    let mut changes = Vec::new();
    diff(
        &crate::resource::to_value(&old.spec),
        &crate::resource::to_value(&new.spec),
        "",
        &mut changes,
    );
    // A changed plain-text credential is named, its values shown as the answers show them
    // (docs/security.md, "Plain-text credentials").
    let credentials: std::collections::BTreeSet<String> =
        sundial_core::secrets::plain_credentials(&old.spec.target)
            .into_iter()
            .chain(sundial_core::secrets::plain_credentials(&new.spec.target))
            .collect();
    if !credentials.is_empty() {
        let shown =
            |spec: &sundial_core::job::JobSpec| -> std::collections::BTreeMap<String, String> {
                sundial_core::workflow::template::target_strings(
                    &sundial_core::secrets::mask_target(&spec.target),
                )
                .into_iter()
                .map(|(field, text, _)| (field, text.to_owned()))
                .collect()
            };
        let (old_shown, new_shown) = (shown(&old.spec), shown(&new.spec));
        for change in changes
            .iter_mut()
            .filter(|c| credentials.contains(&c.field))
        {
            let at = |m: &std::collections::BTreeMap<String, String>| {
                m.get(&change.field)
                    .map_or(Value::Null, |t| Value::from(t.clone()))
            };
            change.before = at(&old_shown);
            change.after = at(&new_shown);
        }
    }
    let (cancels, rewrites) = match pending {
        PendingExecutions::Cancel => (
            not_started
                .iter()
                .map(|e| PlannedEnd {
                    id: e.id.clone(),
                    scheduled_at: e.scheduled_at,
                    ends: if e.fire_at > now {
                        "removed"
                    } else {
                        "cancelled"
                    },
                })
                .collect(),
            0,
        ),
        PendingExecutions::Update => (Vec::new(), not_started.len()),
        PendingExecutions::Keep => (Vec::new(), 0),
    };
    // A removed execution's slot fires again when the new schedule yields it from now on.
    let new_slots: Vec<Timestamp> = match Schedule::compile(&new.spec.schedule) {
        Ok(s) if !new.spec.paused => s
            .with_calendars(crate::resource::named_calendars(&new.spec.schedule, cals))
            .upcoming(now, 50),
        _ => Vec::new(),
    };
    let mut skipped_slots: Vec<Timestamp> = cancels
        .iter()
        .filter(|c| c.ends == "cancelled" || !new_slots.contains(&c.scheduled_at))
        .map(|c| c.scheduled_at)
        .collect();
    if new.spec.paused && !old.spec.paused {
        // The next five slots the old schedule would have fired after those it had written.
        let from = cancels
            .iter()
            .map(|c| c.scheduled_at)
            .max()
            .map_or(now, |m| m.max(now));
        if let Ok(s) = Schedule::compile(&old.spec.schedule) {
            let s = s.with_calendars(crate::resource::named_calendars(&old.spec.schedule, cals));
            skipped_slots.extend(s.upcoming(from, 5));
        }
    }
    skipped_slots.sort();
    skipped_slots.dedup();
    JobPlan {
        name: new.spec.name.clone(),
        action: "changed",
        changes,
        next_fire_times_before: before,
        next_fire_times_after: after,
        cancels,
        rewrites,
        skipped_slots,
        late_slots: late_slots(new, now, cals),
    }
}

/// A one-off slot already past that `new` fires at once (docs/policies.md, "start_at and
/// end_at": a one-off job whose `at` has passed fires now), unless a calendar excludes it.
fn late_slots(
    new: &JobRecord,
    now: Timestamp,
    cals: &crate::resource::NsCalendars,
) -> Vec<LateSlot> {
    let excluded = |slot: Timestamp| {
        Schedule::compile(&new.spec.schedule).is_ok_and(|s| {
            s.with_calendars(crate::resource::named_calendars(&new.spec.schedule, cals))
                .excludes(slot)
        })
    };
    new.next_slot_at
        .filter(|slot| {
            *slot < now
                && matches!(new.spec.schedule.kind, ScheduleKind::At { .. })
                && !excluded(*slot)
        })
        .map(|slot| LateSlot {
            slot,
            late_by_ms: now.as_millisecond() - slot.as_millisecond(),
        })
        .into_iter()
        .collect()
}

/// Appends to `out` every leaf path where `before` and `after` differ: objects are compared
/// member by member (a member on one side only counts, its other side `null`), anything else
/// as a whole.
fn diff(before: &Value, after: &Value, path: &str, out: &mut Vec<FieldChange>) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let field = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                diff(
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    &field,
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(FieldChange {
            field: path.to_owned(),
            before: a.clone(),
            after: b.clone(),
        }),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_names_leaf_paths_and_members_on_one_side() {
        let mut out = Vec::new();
        diff(
            &json!({"schedule": {"cron": "0 * * * *", "timezone": "UTC"}, "labels": {"a": "1"}, "paused": false}),
            &json!({"schedule": {"cron": "*/15 * * * *", "timezone": "UTC", "dst": {"gap": "skip"}}, "labels": {}, "paused": false}),
            "",
            &mut out,
        );
        let fields: Vec<&str> = out.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["labels.a", "schedule.cron", "schedule.dst"]);
        assert_eq!(out[0].after, Value::Null);
        assert_eq!(out[2].before, Value::Null);
    }
}
