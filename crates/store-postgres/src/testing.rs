//! Throw-away PostgreSQL databases for tests (feature `testing`, never in the release binary):
//! each [`TestDatabase`] is created with a fresh name on the server of
//! `SUNDIAL_TEST_DATABASE_URL` (default [`DEFAULT_ADMIN_URL`], the machine's local
//! PostgreSQL) and dropped when the value is dropped — on a failed test too, since a panic
//! drops it while unwinding.

use sqlx::{Connection, PgConnection};

/// The server tests use when `SUNDIAL_TEST_DATABASE_URL` is not set.
pub const DEFAULT_ADMIN_URL: &str = "postgres://root@127.0.0.1:5432/postgres";

/// The URL of the server's maintenance database, from `SUNDIAL_TEST_DATABASE_URL`.
pub fn admin_url() -> String {
    std::env::var("SUNDIAL_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.into())
}

/// `url` with its database name replaced by `db`, its options kept
/// ([`crate::scratch::with_database`]).
///
/// # Panics
/// When `url` has no `://`: the test's database URL is malformed.
pub fn with_database(url: &str, db: &str) -> String {
    crate::scratch::with_database(url, db).expect("SUNDIAL_TEST_DATABASE_URL is a URL")
}

/// Runs one statement on the server's maintenance database.
///
/// # Panics
/// When the server cannot be reached or refuses the statement: a test cannot go on then.
pub async fn admin(sql: &str) {
    let mut conn = PgConnection::connect(&admin_url())
        .await
        .expect("connect to PostgreSQL (SUNDIAL_TEST_DATABASE_URL)");
    sqlx::query(sql).execute(&mut conn).await.expect(sql);
}

/// A database created for one test, dropped (with `FORCE`, ending its connections) when this
/// is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    /// Creates an empty database named `{prefix}_{uuid}`.
    ///
    /// # Panics
    /// When the server cannot be reached or refuses to create it.
    pub async fn create(prefix: &str) -> TestDatabase {
        let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
        admin(&format!("CREATE DATABASE {name}")).await;
        TestDatabase {
            url: with_database(&admin_url(), &name),
            name,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop runs outside any async context we can await in: a thread of its own with a
        // runtime of its own drops the database, and this waits for it.
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let mut conn = PgConnection::connect(&admin_url()).await?;
                sqlx::raw_sql(&sql).execute(&mut conn).await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("test database {} was not dropped", self.name);
        }
    }
}
