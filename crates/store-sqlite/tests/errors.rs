//! Database errors are classified by SQLite's result codes (`sundial_store::Error`): real
//! errors from an in-memory database, each provoked by a statement.

use sqlx::{Connection, SqliteConnection};
use sundial_store::Error;
use sundial_store_sqlite::classify;

async fn error_of(conn: &mut SqliteConnection, sql: &str) -> Error {
    classify(sqlx::raw_sql(sql).execute(&mut *conn).await.expect_err(sql))
}

#[tokio::test]
async fn contention_is_retryable_and_defects_are_not() {
    let mut conn = SqliteConnection::connect("sqlite::memory:")
        .await
        .expect("open");
    sqlx::raw_sql("CREATE TABLE t (k INTEGER PRIMARY KEY, u TEXT UNIQUE)")
        .execute(&mut conn)
        .await
        .expect("create");
    for sql in [
        "INSERT INTO t VALUES (1, 'a'), (1, 'b')",
        "INSERT INTO t VALUES (2, 'a'), (3, 'a')",
    ] {
        let e = error_of(&mut conn, sql).await;
        assert!(
            matches!(e, Error::Contended(_)) && e.is_retryable(),
            "{sql}: {e:?}"
        );
        assert!(!e.to_string().contains("t.u"), "no constraint text: {e}");
    }
    for sql in [
        "SELEC 1",
        "SELECT * FROM no_such_table",
        "INSERT INTO t VALUES (NULL, NULL, 3)",
    ] {
        let e = error_of(&mut conn, sql).await;
        assert!(
            matches!(e, Error::Defect(_)) && !e.is_retryable(),
            "{sql}: {e:?}"
        );
    }
}

#[tokio::test]
async fn a_write_while_another_connection_holds_the_lock_is_contended() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("busy.db").display());
    let mut holder = SqliteConnection::connect(&url).await.expect("open");
    sqlx::raw_sql("CREATE TABLE t (k INTEGER); BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
        .execute(&mut holder)
        .await
        .expect("hold the write lock");
    let mut other = SqliteConnection::connect(&url).await.expect("open");
    sqlx::raw_sql("PRAGMA busy_timeout = 0")
        .execute(&mut other)
        .await
        .expect("no busy wait");
    let e = error_of(&mut other, "INSERT INTO t VALUES (2)").await;
    assert!(
        matches!(e, Error::Contended(_)) && e.is_retryable(),
        "{e:?}"
    );
}
