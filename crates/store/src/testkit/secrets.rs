//! Secrets (docs/security.md, "Secrets"): put and versions, listing without values, the sealed
//! values of the names that exist, who references one, and the refusal to delete one in use.

use std::sync::Arc;

use jiff::SignedDuration;
use serde_json::json;
use sundial_clock::ManualClock;
use sundial_core::job::TargetSpec;

use super::{Harness, create_workflow, job_record, t0};
use crate::{Error, JobWrite, PendingExecutions, SealedSecret, Store};

/// A sealed value of the given bytes: a 12-byte nonce and a ciphertext that is no UTF-8.
fn sealed(seed: u8) -> SealedSecret {
    SealedSecret {
        nonce: (0..12).map(|i| seed.wrapping_add(i)).collect(),
        ciphertext: vec![0, 255, seed, 0xc3, 0x28, 0, 7],
    }
}

/// Writes job `ns`/`name` whose HTTP target sends `authorization` as `header`.
async fn job_with_header(store: &dyn Store, ns: &str, name: &str, header: &str) {
    let mut job = job_record(ns, name);
    if let TargetSpec::Http(http) = &mut job.spec.target {
        http.headers
            .insert("authorization".into(), header.to_owned());
    }
    store
        .job_write(&JobWrite {
            record: job,
            expected_version: None,
            pending: PendingExecutions::Keep,
        })
        .await
        .expect("job written");
}

/// A put creates at version 1; every later put is a new version with the bytes as given and
/// `updated_at` moved to the store's now; secrets are listed by name, per namespace, without
/// their values; the values read are those of the names that exist, by name.
pub async fn secrets_are_put_versioned_and_listed_without_values(h: Harness) {
    let clock = Arc::new(ManualClock::new(t0()));
    let store = h.open(clock.clone()).await;
    assert!(
        !store.secret_any().await.expect("any"),
        "a new store holds none"
    );
    let (first, created) = store
        .secret_put("ns", "token", &sealed(1))
        .await
        .expect("put");
    assert!(created);
    assert!(store.secret_any().await.expect("any"));
    assert_eq!(
        (first.namespace.as_str(), first.name.as_str(), first.version),
        ("ns", "token", 1)
    );
    assert_eq!((first.created_at, first.updated_at), (t0(), t0()));
    clock.advance(SignedDuration::from_secs(5));
    let (second, created) = store
        .secret_put("ns", "token", &sealed(2))
        .await
        .expect("put again");
    assert!(!created);
    assert_eq!(second.version, 2, "every put is a new version");
    assert_eq!(second.created_at, t0());
    assert_eq!(second.updated_at, t0() + SignedDuration::from_secs(5));
    store
        .secret_put("ns", "api-key", &sealed(3))
        .await
        .expect("put");
    store
        .secret_put("other", "token", &sealed(4))
        .await
        .expect("put");
    let listed = store.secret_list("ns").await.expect("list");
    let names: Vec<_> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["api-key", "token"]);
    assert_eq!(listed[1], second);
    assert!(store.secret_list("none").await.expect("list").is_empty());

    let wanted = [
        "token".to_owned(),
        "missing".to_owned(),
        "api-key".to_owned(),
    ];
    let values = store.secret_values("ns", &wanted).await.expect("values");
    assert_eq!(
        values,
        [
            ("api-key".to_owned(), sealed(3)),
            ("token".to_owned(), sealed(2)),
        ],
        "the existing names' bytes as last put, by name"
    );
    assert!(
        store
            .secret_values("ns", &[])
            .await
            .expect("values")
            .is_empty()
    );
    assert!(
        store
            .secret_values("ns", &["missing".to_owned()])
            .await
            .expect("values")
            .is_empty()
    );
}

/// The users of a secret are the jobs and workflows of its namespace whose target references
/// it as `{{ secret.NAME }}` (not another name that starts alike, not the text without the
/// braces, not another namespace's); a secret in use is not deleted (a conflict naming them,
/// nothing deleted); once none references it, it is; a second delete finds nothing.
pub async fn a_secret_in_use_cannot_be_deleted(h: Harness) {
    let store = h.open(Arc::new(ManualClock::new(t0()))).await;
    store
        .secret_put("ns", "token", &sealed(1))
        .await
        .expect("put");
    store
        .secret_put("ns", "db_pass", &sealed(2))
        .await
        .expect("put");
    job_with_header(&*store, "ns", "payroll", "Bearer {{ secret.token }}").await;
    job_with_header(&*store, "ns", "reports", "Bearer {{secret.token2}}").await;
    job_with_header(&*store, "ns", "plain", "secret.token").await;
    job_with_header(&*store, "ns", "lookalike", "{{ secret.dbxpass }}").await;
    job_with_header(&*store, "other", "payroll", "{{ secret.token }}").await;
    create_workflow(
        &*store,
        "nightly",
        json!({"schedule": {"cron": "0 2 * * *"},
        "tasks": [
            {"name": "a", "target": {"type": "http", "url": "http://127.0.0.1:9/"}},
            {"name": "b", "target": {"type": "http", "url": "http://127.0.0.1:9/",
             "headers": {"authorization": "Bearer {{ secret.token }}"}}}
        ]}),
    )
    .await;
    assert_eq!(
        store.secret_users("ns", "token").await.expect("users"),
        ["job payroll", "workflow nightly"]
    );
    assert!(
        store
            .secret_users("ns", "db_pass")
            .await
            .expect("users")
            .is_empty(),
        "a `_` in a name matches itself only"
    );
    match store.secret_delete("ns", "token").await {
        Err(Error::Conflict(m)) => {
            assert!(
                m.contains("job payroll") && m.contains("workflow nightly"),
                "{m}"
            );
            assert!(!m.contains("reports") && !m.contains("plain"), "{m}");
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(
        store
            .secret_values("ns", &["token".to_owned()])
            .await
            .expect("values"),
        [("token".to_owned(), sealed(1))],
        "a refused delete deletes nothing"
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
            .secret_users("ns", "token")
            .await
            .expect("users")
            .is_empty()
    );
    store
        .secret_delete("ns", "token")
        .await
        .expect("deleted once unused");
    let names: Vec<_> = store
        .secret_list("ns")
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["db_pass"]);
    assert!(
        store
            .secret_values("ns", &["token".to_owned()])
            .await
            .expect("values")
            .is_empty()
    );
    assert!(matches!(
        store.secret_delete("ns", "token").await,
        Err(Error::NotFound(_))
    ));
    assert_eq!(
        store.secret_users("other", "token").await.expect("users"),
        ["job payroll"],
        "users are per namespace"
    );
}
