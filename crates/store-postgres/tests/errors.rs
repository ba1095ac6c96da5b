//! Database errors are classified by SQLSTATE (`sundial_store::Error`): real errors from the
//! machine's PostgreSQL, each provoked by a statement, and a connection the server terminates.

use sqlx::{Connection, PgConnection};
use sundial_store::Error;
use sundial_store_postgres::classify;

fn admin_url() -> String {
    std::env::var("SUNDIAL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".into())
}

async fn error_of(conn: &mut PgConnection, sql: &str) -> Error {
    classify(sqlx::raw_sql(sql).execute(&mut *conn).await.expect_err(sql))
}

#[tokio::test]
async fn contention_is_retryable_and_defects_are_not() {
    let mut conn = PgConnection::connect(&admin_url()).await.expect("connect");
    for code in ["40001", "40P01"] {
        let e = error_of(
            &mut conn,
            &format!("DO $$ BEGIN RAISE EXCEPTION 'contended' USING ERRCODE = '{code}'; END $$"),
        )
        .await;
        assert!(
            matches!(e, Error::Contended(_)) && e.is_retryable(),
            "{code}: {e:?}"
        );
    }
    let e = error_of(
        &mut conn,
        "CREATE TEMP TABLE t (k int PRIMARY KEY); INSERT INTO t VALUES (1), (1)",
    )
    .await;
    assert!(matches!(e, Error::Contended(_)), "unique violation: {e:?}");
    assert!(
        !e.to_string().contains("t_pkey"),
        "no constraint name in the message: {e}"
    );
    for sql in ["SELEC 1", "SELECT 1/0", "SELECT * FROM no_such_table"] {
        let e = error_of(&mut conn, sql).await;
        assert!(
            matches!(e, Error::Defect(_)) && !e.is_retryable(),
            "{sql}: {e:?}"
        );
    }
}

#[tokio::test]
async fn a_connection_the_server_ends_is_unavailable_and_retryable() {
    let mut victim = PgConnection::connect(&admin_url()).await.expect("connect");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut victim)
        .await
        .expect("pid");
    let mut admin = PgConnection::connect(&admin_url()).await.expect("connect");
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .execute(&mut admin)
        .await
        .expect("terminate");
    let e = classify(
        sqlx::query("SELECT 1")
            .execute(&mut victim)
            .await
            .expect_err("the connection was terminated"),
    );
    assert!(
        matches!(e, Error::Unavailable(_)) && e.is_retryable(),
        "{e:?}"
    );
    assert!(
        e.at_commit().outcome_unknown(),
        "lost during a commit, the outcome is unknown"
    );
}
