//! The audit log across a SIGKILL (docs/security.md, "Audit log"), on both stores: writers
//! replace jobs as fast as they can while the server is killed mid-write; after a restart
//! every job's versions and its audit entries agree exactly (each version that exists has its
//! entry, no entry names a version that does not: change and entry together or neither), and
//! `sundial audit verify` says the chain is whole. Then a row is edited in the database by
//! hand, and `verify` exits 1 naming it; a row removed is named by the entry after it.

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::{Server, ServerOpts};
use serde_json::json;

const NS: &str = "audited";
const JOBS: usize = 4;

/// Replaces jobs `w0`..`w3` in a loop, one writer each, until aborted; errors (the server is
/// being killed) are ignored.
fn start_writers(server: &Server) -> Vec<tokio::task::JoinHandle<()>> {
    (0..JOBS)
        .map(|i| {
            let url = server.url(&format!("/v1/namespaces/{NS}/jobs/w{i}"));
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                for n in 0u64.. {
                    let body = json!({
                        "schedule": {"every": "1h"},
                        "target": {"type": "http", "url": "http://127.0.0.1:9/"},
                        "description": format!("write {n}"),
                    });
                    let _ = http
                        .put(&url)
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send()
                        .await;
                }
            })
        })
        .collect()
}

/// `sundial audit verify -n NS` against `server`: its exit code and what it printed.
fn verify(server: &Server) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sundial"))
        .args(["audit", "verify", "-n", NS, "--server", &server.url("")])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Kills `server` mid-write, restarts it, and checks that every job's versions and its
/// entries agree and the chain verifies.
async fn change_and_entry_survive_a_kill_together(server: &mut Server) {
    let writers = start_writers(server);
    // Let the writers get going, so that the kill lands among them.
    server
        .wait_for(Duration::from_secs(30), async || {
            let (status, job) = server
                .request(
                    reqwest::Method::GET,
                    &format!("/v1/namespaces/{NS}/jobs/w{}", JOBS - 1),
                    None,
                )
                .await;
            (status == 200 && job["version"].as_i64().unwrap_or(0) >= 20).then_some(())
        })
        .await;
    server.kill9();
    for w in writers {
        w.abort();
    }
    server.restart().await;
    let mut total = 0;
    for i in 0..JOBS {
        let job = server.get(&format!("/v1/namespaces/{NS}/jobs/w{i}")).await;
        let version = job["version"].as_i64().expect("a version");
        let entries = server
            .all_pages(&format!(
                "/v1/namespaces/{NS}/audit?resource=job&name=w{i}&limit=1000"
            ))
            .await;
        let recorded: BTreeSet<i64> = entries
            .iter()
            .map(|e| e["version_after"].as_i64().expect("a version after"))
            .collect();
        let expected: BTreeSet<i64> = (1..=version).collect();
        assert_eq!(
            recorded, expected,
            "job w{i} is at version {version}: every version has its entry and no entry more"
        );
        assert_eq!(entries.len(), usize::try_from(version).unwrap());
        total += entries.len();
    }
    assert!(total >= 20, "the kill came among the writes ({total})");
    let (code, text) = verify(server);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!("{total} entries verified")),
        "{text}"
    );
}

/// After `edit` runs an `UPDATE` of entry 3 the chain is broken at 3; put back, it verifies;
/// after a `DELETE` of entry 6 it is broken at 7.
async fn an_edited_or_removed_row_is_named(server: &Server, edit: impl AsyncFn(&str)) {
    edit("UPDATE audit_log SET action = action || 'x' WHERE namespace = 'audited' AND id = 3")
        .await;
    let (code, text) = verify(server);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("broken at entry 3"), "{text}");
    edit(
        "UPDATE audit_log SET action = substr(action, 1, length(action) - 1) \
         WHERE namespace = 'audited' AND id = 3",
    )
    .await;
    assert_eq!(verify(server).0, 0, "put back, it verifies again");
    edit("DELETE FROM audit_log WHERE namespace = 'audited' AND id = 6").await;
    let (code, text) = verify(server);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("broken at entry 7") && text.contains("missing"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_sqlite_change_and_entry_survive_a_kill_together() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        ServerOpts {
            args: vec!["--roles".into(), "api".into()],
            ..Default::default()
        },
    )
    .await;
    change_and_entry_survive_a_kill_together(&mut server).await;
    let url = format!("sqlite://{}", dir.path().join("sundial.db").display());
    an_edited_or_removed_row_is_named(&server, async |sql| {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query(sql).execute(&pool).await.unwrap();
        pool.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_change_and_entry_survive_a_kill_together() {
    let db = sundial_store_postgres::testing::TestDatabase::create("sundial_audit").await;
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_with(
        dir.path(),
        ServerOpts {
            database_url: Some(db.url().to_owned()),
            args: vec!["--roles".into(), "api".into()],
            ..Default::default()
        },
    )
    .await;
    change_and_entry_survive_a_kill_together(&mut server).await;
    let url = db.url().to_owned();
    an_edited_or_removed_row_is_named(&server, async |sql| {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        sqlx::query(sql).execute(&pool).await.unwrap();
        pool.close().await;
    })
    .await;
}
