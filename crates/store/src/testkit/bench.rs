//! The check of [`crate::bench::BenchStore`], which no role's trait holds: each backend calls
//! [`bench_store_loads_expired_history_that_retention_counts`] from its own `tests/` with a
//! store that is both a [`Store`] and a [`BenchStore`].

use std::collections::BTreeMap;

use super::*;
use crate::bench::{BenchStore, ExpiredLoad};
use crate::{HistoryKind, HistoryPrune};

/// Expired history loaded in two chunks is counted by state in its namespace (and among all),
/// a chunk loaded twice is refused (a unique violation) and changes nothing, retention's dry run
/// counts every loaded execution as expired, and the store checkpoints and reports a size.
pub async fn bench_store_loads_expired_history_that_retention_counts<S>(store: &S)
where
    S: Store + BenchStore,
{
    let now = store.now().await.expect("now");
    let base_ms = (now - SignedDuration::from_hours(60 * 24)).as_millisecond();
    let load = |first, last| ExpiredLoad {
        namespace: "bench-history".into(),
        first,
        last,
        base_ms,
    };
    store.load_expired(&load(1, 1500)).await.expect("load");
    store.load_expired(&load(1501, 2000)).await.expect("load");
    let expected = BTreeMap::from([("succeeded".to_owned(), 2000)]);
    let counts =
        |ns: Option<&'static str>| async move { store.execution_counts(ns).await.expect("counts") };
    assert_eq!(counts(Some("bench-history")).await, expected);
    assert_eq!(counts(Some("elsewhere")).await, BTreeMap::new());
    assert_eq!(counts(None).await, expected);

    match store.load_expired(&load(2000, 2001)).await {
        Err(Error::Contended(_)) => {}
        other => panic!("a chunk loaded twice: {other:?}"),
    }
    assert_eq!(
        counts(None).await,
        expected,
        "the refused chunk wrote nothing"
    );

    let expired = store
        .history_prune(&HistoryPrune {
            kind: HistoryKind::Executions,
            before: now - SignedDuration::from_hours(30 * 24),
            limit: 100,
            after: None,
            dry_run: true,
        })
        .await
        .expect("dry run");
    assert_eq!(expired.deleted, 2000);

    store.checkpoint().await.expect("checkpoint");
    assert!(store.storage_bytes().await.expect("size") > 0);
}
