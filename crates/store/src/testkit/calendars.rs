//! Holiday calendars (docs/time.md, "Calendars"): put and versions, list, who names one, and
//! the refusal to delete one in use.

use std::sync::Arc;

use serde_json::json;
use sundial_clock::ManualClock;
use sundial_core::calendar::{CalendarSpec, calendar_from_json};

use super::{Harness, create_workflow, job_record, t0};
use crate::{Error, JobWrite, PendingExecutions};

fn spec(dates: &[&str]) -> CalendarSpec {
    let exclude: Vec<_> = dates.iter().map(|d| json!({"date": d})).collect();
    calendar_from_json(&json!({"timezone": "Europe/Berlin", "exclude": exclude}))
        .expect("a valid calendar")
}

/// A put creates at version 1; the same spec again changes nothing; another spec is version
/// 2; calendars are listed by name, per namespace.
pub async fn calendars_are_put_listed_and_versioned(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    let (first, created) = store
        .calendar_put("ns", "holidays", &spec(&["2027-12-25"]))
        .await
        .expect("put");
    assert!(created);
    assert_eq!((first.version, first.created_at), (1, t0()));
    let (again, created) = store
        .calendar_put("ns", "holidays", &spec(&["2027-12-25"]))
        .await
        .expect("put");
    assert!(!created);
    assert_eq!(again.version, 1, "the same spec keeps its version");
    let (changed, _) = store
        .calendar_put("ns", "holidays", &spec(&["2027-12-25", "2027-12-26"]))
        .await
        .expect("put");
    assert_eq!(changed.version, 2);
    assert_eq!(changed.spec.exclude.len(), 2);
    store
        .calendar_put("ns", "closures", &spec(&["2027-08-01"]))
        .await
        .expect("put");
    store
        .calendar_put("other", "holidays", &spec(&[]))
        .await
        .expect("put");
    let names: Vec<String> = store
        .calendar_list("ns")
        .await
        .expect("list")
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["closures", "holidays"]);
    assert_eq!(
        store.calendar_get("ns", "holidays").await.expect("get"),
        Some(changed)
    );
    assert_eq!(store.calendar_get("ns", "none").await.expect("get"), None);
}

/// A calendar a job or workflow names is not deleted (409 naming them); once none names it,
/// it is; a second delete finds nothing.
pub async fn a_calendar_in_use_cannot_be_deleted(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    store
        .calendar_put("ns", "holidays", &spec(&["2027-12-25"]))
        .await
        .expect("put");
    let mut job = job_record("ns", "payroll");
    job.spec.schedule.exclude_calendars = vec!["closures".into(), "holidays".into()];
    store
        .job_write(&JobWrite {
            record: job.clone(),
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("job written");
    // A job that names another calendar only.
    let mut other = job_record("ns", "reports");
    other.spec.schedule.exclude_calendars = vec!["closures".into()];
    store
        .job_write(&JobWrite {
            record: other,
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("job written");
    create_workflow(
        &*store,
        "nightly",
        json!({"schedule": {"cron": "0 2 * * *", "exclude_calendars": ["holidays"]},
               "tasks": [{"name": "a", "target": {"type": "http", "url": "http://127.0.0.1:9/"}}]}),
    )
    .await;
    assert_eq!(
        store.calendar_users("ns", "holidays").await.expect("users"),
        ["job payroll", "workflow nightly"]
    );
    match store.calendar_delete("ns", "holidays").await {
        Err(Error::Conflict(m)) => {
            assert!(
                m.contains("job payroll") && m.contains("workflow nightly"),
                "{m}"
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(
        store
            .calendar_get("ns", "holidays")
            .await
            .expect("get")
            .is_some()
    );
    store
        .job_delete("ns", "payroll", None)
        .await
        .expect("job deleted");
    store
        .workflow_delete("ns", "nightly", None)
        .await
        .expect("workflow deleted");
    assert!(
        store
            .calendar_users("ns", "holidays")
            .await
            .expect("users")
            .is_empty()
    );
    store
        .calendar_delete("ns", "holidays")
        .await
        .expect("deleted once unused");
    assert!(matches!(
        store.calendar_delete("ns", "holidays").await,
        Err(Error::NotFound(_))
    ));
}
