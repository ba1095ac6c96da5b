//! Databases of a tool's own on the server of a store URL: made with a fresh name beside the
//! URL's database, dropped (with `FORCE`, ending their sessions) when the tool is done, so
//! that each probe of `sundial bench capacity` (BENCHMARKS.md) starts on an empty store.

use sqlx::{Connection, PgConnection};
use sundial_store::{Error, Result};

use crate::rows::db_err;

/// A database made by [`ScratchDatabase::create`]; [`ScratchDatabase::drop_it`] drops it.
#[derive(Debug)]
pub struct ScratchDatabase {
    admin: String,
    name: String,
    url: String,
}

impl ScratchDatabase {
    /// Makes the database `{prefix}_{process id}_{Unix ms}` on the server `url` names,
    /// connecting to that server's `postgres` database to do so.
    ///
    /// # Errors
    /// [`Error::Defect`] for a URL without `://` or a prefix that is not a plain lower-case SQL
    /// name; a database error when the server cannot be reached or the user may not create
    /// databases (`CREATEDB`).
    pub async fn create(url: &str, prefix: &str) -> Result<Self> {
        if prefix.is_empty()
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(Error::Defect(
                format!("scratch database prefix '{prefix}' is not a lower-case SQL name").into(),
            ));
        }
        let name = format!(
            "{prefix}_{}_{}",
            std::process::id(),
            jiff::Timestamp::now().as_millisecond()
        );
        let admin = with_database(url, "postgres")?;
        let mut conn = PgConnection::connect(&admin).await.map_err(db_err)?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .map_err(db_err)?;
        conn.close().await.ok();
        Ok(ScratchDatabase {
            url: with_database(url, &name)?,
            admin,
            name,
        })
    }

    /// The database's URL: the URL given to [`ScratchDatabase::create`] naming it instead,
    /// with the same options.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database, ending its sessions.
    ///
    /// # Errors
    /// A database error when the server cannot be reached or refuses.
    pub async fn drop_it(self) -> Result<()> {
        let mut conn = PgConnection::connect(&self.admin).await.map_err(db_err)?;
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut conn)
        .await
        .map_err(db_err)?;
        conn.close().await.ok();
        Ok(())
    }
}

/// `url` (`postgres://user@host:port/db?options`) naming the database `name` instead.
///
/// # Errors
/// [`Error::Defect`] for a URL without `://`.
pub fn with_database(url: &str, name: &str) -> Result<String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not echoed: a malformed URL may still hold a password.
        return Err(Error::Defect("the database URL has no '://'".into()));
    };
    let (authority, path_and_query) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let query = path_and_query
        .find('?')
        .map_or("", |at| &path_and_query[at..]);
    Ok(format!("{scheme}://{authority}/{name}{query}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_database_keeps_the_server_and_options() {
        assert_eq!(
            with_database("postgres://root@127.0.0.1:5432/bench?sslmode=disable", "p1").unwrap(),
            "postgres://root@127.0.0.1:5432/p1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgresql://h", "p2").unwrap(),
            "postgresql://h/p2"
        );
        assert!(with_database("nonsense", "p").is_err());
    }
}
