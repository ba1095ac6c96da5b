//! The audit log (docs/security.md, "Audit log"): a change made inside an audit scope is
//! recorded with it and only with it, one chain per namespace that verifies, listed with
//! filters and pages; a change outside a scope records nothing; retention prunes only the
//! oldest end; concurrent writers keep one chain.

use std::sync::Arc;

use jiff::SignedDuration;
use sundial_clock::ManualClock;

use super::{Harness, job_record, t0};
use crate::audit::{Actor, AuditContext, AuditEntry, AuditQuery, Verifier, scope};
use crate::{Error, JobWrite, PendingExecutions, SealedSecret, Store};

/// The context of a request by token `name` (an editor) with id `request`.
fn context(name: &str, request: &str, action: Option<&'static str>) -> AuditContext {
    AuditContext {
        actor: Actor::Token {
            name: name.to_owned(),
            role: "editor".to_owned(),
        },
        request_id: request.to_owned(),
        remote_addr: Some("192.0.2.7:40000".to_owned()),
        action,
    }
}

/// Every entry of `ns`, oldest first.
async fn chain(store: &dyn Store, ns: &str) -> Vec<AuditEntry> {
    store
        .audit_list(&AuditQuery {
            namespace: ns.to_owned(),
            ascending: true,
            limit: 1000,
            ..Default::default()
        })
        .await
        .expect("audit list")
}

/// A creation of job `ns`/`name`.
fn create(ns: &str, name: &str) -> JobWrite {
    JobWrite {
        record: job_record(ns, name),
        expected_version: None,
        pending: PendingExecutions::Keep,
    }
}

/// Writes in a scope are recorded with their actor, request, address, action and versions,
/// numbered from 1 per namespace and chained; a write outside a scope and a write that fails
/// record nothing; the request's action overrides the store's.
pub async fn changes_in_a_scope_are_recorded_with_them(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    // The scheduler's and workers' own writes are no requests.
    store
        .job_write(&create("ns", "quiet"))
        .await
        .expect("write");
    assert!(chain(&*store, "ns").await.is_empty());

    let batch = [create("ns", "a"), create("ns", "b"), create("other", "c")];
    scope(context("ci", "r1", None), store.job_write_batch(&batch))
        .await
        .expect("batch");
    clock.advance(SignedDuration::from_secs(1));
    let mut a = store.job_get("ns", "a").await.expect("get").expect("a");
    a.spec.paused = true;
    let pause = JobWrite {
        record: a,
        expected_version: Some(1),
        pending: PendingExecutions::Cancel,
    };
    scope(context("ops", "r2", Some("pause")), store.job_write(&pause))
        .await
        .expect("pause");
    // A write that fails (version 1 is gone) records nothing.
    let stale = scope(context("ops", "r3", None), store.job_write(&pause)).await;
    assert!(
        matches!(stale, Err(Error::StaleVersion { .. })),
        "{stale:?}"
    );
    scope(
        context("ops", "r4", None),
        store.job_delete("ns", "b", None),
    )
    .await
    .expect("delete");
    scope(
        context("ops", "r5", None),
        store.secret_put(
            "ns",
            "token",
            &SealedSecret {
                nonce: vec![1; 12],
                ciphertext: vec![2; 20],
            },
        ),
    )
    .await
    .expect("secret");

    let entries = chain(&*store, "ns").await;
    let seen: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e.id,
                e.actor.name(),
                e.request_id.as_str(),
                e.resource.as_str(),
                e.name.as_str(),
                e.action.as_str(),
                e.version_before,
                e.version_after,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, "ci", "r1", "job", "a", "create", None, Some(1)),
            (2, "ci", "r1", "job", "b", "create", None, Some(1)),
            (3, "ops", "r2", "job", "a", "pause", Some(1), Some(2)),
            (4, "ops", "r4", "job", "b", "delete", Some(1), None),
            (5, "ops", "r5", "secret", "token", "create", None, Some(1)),
        ]
    );
    assert_eq!(entries[0].at, t0());
    assert_eq!(entries[2].at, t0() + SignedDuration::from_secs(1));
    assert_eq!(entries[0].remote_addr.as_deref(), Some("192.0.2.7:40000"));
    let mut verifier = Verifier::default();
    verifier.check(&entries).expect("the chain verifies");
    assert_eq!(entries[0].prev_hash, crate::audit::GENESIS);
    // The other namespace has a chain of its own.
    let other = chain(&*store, "other").await;
    assert_eq!(other.len(), 1);
    assert_eq!((other[0].id, other[0].name.as_str()), (1, "c"));
}

/// The listing is newest first, filtered by resource, name, actor and time, and pages by its
/// cursor.
pub async fn the_audit_log_is_filtered_and_paged(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        let actor = if i % 2 == 0 { "ci" } else { "ops" };
        scope(
            context(actor, &format!("r{i}"), None),
            store.job_write(&create("ns", name)),
        )
        .await
        .expect("write");
        clock.advance(SignedDuration::from_secs(10));
    }
    let list = |q: AuditQuery| {
        let store = store.clone();
        async move {
            let q = AuditQuery {
                namespace: "ns".into(),
                limit: q.limit.max(1),
                ..q
            };
            store
                .audit_list(&q)
                .await
                .expect("list")
                .iter()
                .map(|e| e.name.clone())
                .collect::<Vec<_>>()
        }
    };
    let all = AuditQuery {
        limit: 100,
        ..Default::default()
    };
    assert_eq!(list(all.clone()).await, ["d", "c", "b", "a"]);
    let by_actor = AuditQuery {
        actor: Some("ops".into()),
        ..all.clone()
    };
    assert_eq!(list(by_actor).await, ["d", "b"]);
    let by_name = AuditQuery {
        resource: Some("job".into()),
        name: Some("c".into()),
        ..all.clone()
    };
    assert_eq!(list(by_name).await, ["c"]);
    let none = AuditQuery {
        resource: Some("workflow".into()),
        ..all.clone()
    };
    assert!(list(none).await.is_empty());
    let since = AuditQuery {
        since: Some(t0() + SignedDuration::from_secs(20)),
        ..all.clone()
    };
    assert_eq!(list(since).await, ["d", "c"]);
    let page = AuditQuery {
        limit: 2,
        cursor: Some(3),
        ..all.clone()
    };
    assert_eq!(list(page).await, ["b", "a"]);
    let ascending = AuditQuery {
        limit: 2,
        cursor: Some(1),
        ascending: true,
        ..all
    };
    assert_eq!(list(ascending).await, ["b", "c"]);
}

/// Retention removes the entries before the cut-off from the oldest end of each chain only,
/// keeping the newest whatever its age: what is left verifies, and the chain goes on.
pub async fn audit_retention_prunes_the_oldest_end_only(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    for name in ["a", "b", "c"] {
        scope(
            context("ci", name, None),
            store.job_write(&create("ns", name)),
        )
        .await
        .expect("write");
        clock.advance(SignedDuration::from_secs(60));
    }
    let pruned = store
        .audit_prune(t0() + SignedDuration::from_secs(90))
        .await
        .expect("prune");
    assert_eq!(pruned, 2);
    let left = chain(&*store, "ns").await;
    assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), [3]);
    Verifier::default()
        .check(&left)
        .expect("what is left verifies");
    // Nothing before the cut-off: nothing goes.
    assert_eq!(store.audit_prune(t0()).await.expect("prune"), 0);
    // Everything expired: the newest entry stays, and the chain goes on from it.
    let later = t0() + SignedDuration::from_hours(24);
    assert_eq!(store.audit_prune(later).await.expect("prune"), 0);
    scope(
        context("ci", "d", None),
        store.job_write(&create("ns", "d")),
    )
    .await
    .expect("write");
    let left = chain(&*store, "ns").await;
    assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), [3, 4]);
    Verifier::default().check(&left).expect("the chain goes on");
}

/// Writes from two processes at once, each in its own scope, leave one chain with every
/// entry: no id taken twice, no fork.
pub async fn concurrent_writers_keep_one_chain(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let first = h.open(clock.clone()).await;
    let second = h.another_process(clock.clone()).await;
    let mut tasks = Vec::new();
    for (p, store) in [first.clone(), second].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let name = format!("p{p}-{i}");
                scope(
                    context("ci", &name, None),
                    store.job_write(&create("ns", &name)),
                )
                .await
                .expect("write");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let entries = chain(&*first, "ns").await;
    assert_eq!(entries.len(), 40);
    Verifier::default()
        .check(&entries)
        .expect("one chain, whole");
}

/// A batch larger than one insert statement's rows records every change, in the batch's
/// order, and the chain verifies across the statements.
pub async fn a_large_batch_records_every_change_in_order(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    let n = 2 * crate::steps::audit::ROWS_PER_INSERT + 17;
    let batch: Vec<JobWrite> = (0..n).map(|i| create("ns", &format!("j{i:04}"))).collect();
    scope(context("ci", "big", None), store.job_write_batch(&batch))
        .await
        .expect("batch");
    let entries = chain(&*store, "ns").await;
    assert_eq!(entries.len(), n);
    for (i, e) in entries.iter().enumerate() {
        assert_eq!((e.id, e.name.clone()), (i as i64 + 1, format!("j{i:04}")));
    }
    Verifier::default()
        .check(&entries)
        .expect("the chain verifies across statements");
}
