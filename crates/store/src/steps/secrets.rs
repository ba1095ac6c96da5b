//! A namespace's secrets (docs/security.md, "Secrets"), written once for both stores: the put
//! ([`secret_put`], one statement and its audit entry in a store's [`Transaction`]), the reads ([`secret_list`],
//! [`secret_values`], [`secret_users`], over its [`Reader`]) and the delete
//! ([`secret_delete`], over [`SecretStatements`], which every store's open [`Transaction`]
//! provides; the caller opens the transaction and commits only when the step returns `Ok`).
//!
//! Invariants:
//! - The store sees a secret's value only as the bytes the API process sealed
//!   ([`SealedSecret`]: AES-256-GCM, opened only by a worker): it writes and returns them as
//!   given, and no listing ([`SecretRecord`]) carries them.
//! - A secret's `version` is 1 when a put creates it and moves on by one with every later put
//!   (sealed values cannot be compared, so every put is a change); a put created the secret
//!   exactly when the version it wrote is 1.
//! - A secret's users are the jobs and workflows of its namespace whose stored spec holds
//!   `{{ secret.NAME }}` as [`sundial_core::secrets::names_in`] reads it: the SQL only narrows
//!   the rows to those whose spec's text holds `secret.NAME` (a `LIKE`), the decision is
//!   `names_in`'s.
//! - A delete refuses a secret that has users, checked in the transaction that deletes it;
//!   nothing is deleted on any error.

use std::future::Future;

use crate::audit::Change;
use crate::reads::{Reader, Statement, Transaction};
use crate::{Error, Result, SealedSecret, SecretRecord};

/// A secret's columns as listed (never its value).
pub const SECRET_COLUMNS: &str = "namespace, name, version, created_at, updated_at";

/// The statement of the jobs and workflows of namespace `namespace` whose spec's text is
/// `LIKE` `pattern` ([`mention_pattern`], escaped with `\`): columns `kind` (`job` or
/// `workflow`), `name` and `spec` (text), jobs first, each by name. A job's spec is read as
/// text by the dialect's [`Reader::SPEC_TEXT`]; a workflow's is text on both stores.
fn users_statement<'a, R: Reader>(namespace: &'a str, pattern: &'a str) -> Statement<'a> {
    let sql = format!(
        "SELECT kind, name, spec FROM ( \
           SELECT 'job' AS kind, name, {} FROM jobs WHERE namespace = $1 \
           UNION ALL SELECT 'workflow' AS kind, name, spec FROM workflows WHERE namespace = $1 \
         ) u WHERE spec LIKE $2 ESCAPE '\\' ORDER BY kind, name",
        R::SPEC_TEXT
    );
    Statement::new(sql).bind(namespace).bind(pattern)
}

/// A secret as listed, from a row of [`SECRET_COLUMNS`].
///
/// # Errors
/// [`Error::Corrupt`] for a row that does not decode or an instant out of range.
fn record<R: Reader>(row: &R::Row) -> Result<SecretRecord> {
    Ok(SecretRecord {
        namespace: R::text_at(row, 0)?,
        name: R::text_at(row, 1)?,
        version: R::int(row, 2)?,
        created_at: super::instant(R::int(row, 3)?)?,
        updated_at: super::instant(R::int(row, 4)?)?,
    })
}

/// The `LIKE` pattern of a spec whose text holds `secret.NAME`, `name`'s `\`, `%` and `_`
/// escaped with `\` (a name may hold `_`, which `LIKE` would take as any character).
fn mention_pattern(name: &str) -> String {
    let mut pattern = String::from("%secret.");
    for c in name.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// `job NAME` and `workflow NAME` of the rows of [`users_statement`] whose spec references secret
/// `name` (`sundial_core::secrets::names_in`), in the rows' order.
///
/// # Errors
/// [`Error::Corrupt`] for a row that does not decode.
fn users_of<R: Reader>(rows: &[R::Row], name: &str) -> Result<Vec<String>> {
    let mut users = Vec::new();
    for row in rows {
        let spec = R::text_at(row, 2)?;
        if sundial_core::secrets::names_in(&spec).contains(name) {
            users.push(format!("{} {}", R::text_at(row, 0)?, R::text_at(row, 1)?));
        }
    }
    Ok(users)
}

/// Creates secret `namespace`/`name` with the value `sealed`, or replaces its value, in the
/// caller's transaction at `now` (Unix ms, UTC, the store's clock), which is `created_at` and
/// `updated_at` of a new secret and `updated_at` of a replaced one. Returns the secret as
/// listed and whether this put created it (its version is then 1; a replaced one's moved on
/// by one).
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] when the write returns no row or a row
/// that does not decode.
pub async fn secret_put<T: Transaction>(
    tx: &mut T,
    namespace: &str,
    name: &str,
    sealed: &SealedSecret,
    now: i64,
) -> Result<(SecretRecord, bool)> {
    let st = Statement::new(format!(
        "INSERT INTO secrets (namespace, name, version, nonce, ciphertext, created_at, updated_at) \
         VALUES ($1, $2, 1, $3, $4, $5, $5) \
         ON CONFLICT (namespace, name) DO UPDATE SET version = secrets.version + 1, \
         nonce = $3, ciphertext = $4, updated_at = $5 \
         RETURNING {SECRET_COLUMNS}"
    ))
    .bind(namespace)
    .bind(name)
    .bind(sealed.nonce.as_slice())
    .bind(sealed.ciphertext.as_slice())
    .bind(now);
    let row = tx
        .row(&st)
        .await?
        .ok_or_else(|| Error::Corrupt(format!("secret {namespace}/{name}: put returned no row")))?;
    let secret = record::<T::Store>(&row)?;
    let created = secret.version == 1;
    let change = Change {
        resource: "secret",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        action: if created { "create" } else { "replace" },
        version_before: (!created).then_some(secret.version - 1),
        version_after: Some(secret.version),
    };
    super::audit::record(tx, &[change], now).await?;
    Ok((secret, created))
}

/// The secrets of `namespace`, in name order, without their values.
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] for a row that does not decode.
pub async fn secret_list<R: Reader>(store: &R, namespace: &str) -> Result<Vec<SecretRecord>> {
    let sql = format!("SELECT {SECRET_COLUMNS} FROM secrets WHERE namespace = $1 ORDER BY name");
    let st = Statement::new(sql).bind(namespace);
    store.rows(&st).await?.iter().map(record::<R>).collect()
}

/// Whether the store holds any secret, in any namespace: a server that would make a new
/// secrets key refuses to when some value is sealed under one it lacks.
///
/// # Errors
/// The store's classified error.
pub async fn secret_any<R: Reader>(store: &R) -> Result<bool> {
    let st = Statement::new("SELECT 1 FROM secrets LIMIT 1");
    Ok(store.row(&st).await?.is_some())
}

/// The sealed values of those of `names` that exist in `namespace`, as (name, value), in name
/// order; a name with no secret is left out, and no names read nothing.
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] for a row that does not decode.
pub async fn secret_values<R: Reader>(
    store: &R,
    namespace: &str,
    names: &[String],
) -> Result<Vec<(String, SealedSecret)>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT name, nonce, ciphertext FROM secrets WHERE namespace = $1 AND {} ORDER BY name",
        R::one_of("name", 2)
    );
    let st = Statement::new(sql).bind(namespace).bind(names);
    store
        .rows(&st)
        .await?
        .iter()
        .map(|row| {
            let sealed = SealedSecret {
                nonce: R::bytes(row, 1)?,
                ciphertext: R::bytes(row, 2)?,
            };
            Ok((R::text_at(row, 0)?, sealed))
        })
        .collect()
}

/// The jobs and workflows of `namespace` whose stored spec references secret `name` as
/// `{{ secret.NAME }}`: `job NAME` then `workflow NAME`, each kind by name.
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`] for a row that does not decode.
pub async fn secret_users<R: Reader>(
    store: &R,
    namespace: &str,
    name: &str,
) -> Result<Vec<String>> {
    let pattern = mention_pattern(name);
    let rows = store
        .rows(&users_statement::<R>(namespace, &pattern))
        .await?;
    users_of::<R>(&rows, name)
}

/// The statements of a secret's delete, on the transaction the caller opened. Every method may
/// fail with the store's classified error.
pub trait SecretStatements: Send {
    /// Who references secret `namespace`/`name`, as [`secret_users`] gives them, read in the
    /// transaction.
    fn users(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Deletes the secret; returns the version deleted, `None` when there was none.
    fn delete(
        &mut self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;
}

/// The statements of both stores, on any store's [`Transaction`]: the SQL is shared but for
/// the job spec's text ([`Reader::SPEC_TEXT`]).
impl<T: Transaction> SecretStatements for T {
    async fn users(&mut self, namespace: &str, name: &str) -> Result<Vec<String>> {
        let pattern = mention_pattern(name);
        let rows = self
            .rows(&users_statement::<T::Store>(namespace, &pattern))
            .await?;
        users_of::<T::Store>(&rows, name)
    }

    async fn delete(&mut self, namespace: &str, name: &str) -> Result<Option<i64>> {
        let st = Statement::new(
            "DELETE FROM secrets WHERE namespace = $1 AND name = $2 RETURNING version",
        )
        .bind(namespace)
        .bind(name);
        let row = self.row(&st).await?;
        row.map(|r| <T::Store as Reader>::int(&r, 0)).transpose()
    }
}

/// Deletes secret `namespace`/`name` at `now` (Unix ms, UTC) unless a job or workflow
/// references it.
///
/// # Errors
/// [`Error::Conflict`] naming its users (as [`secret_users`] gives them) when some job or
/// workflow references it; [`Error::NotFound`] when there is no such secret; or the store's
/// classified error. Nothing is deleted on any error.
pub async fn secret_delete<S: SecretStatements + Transaction>(
    s: &mut S,
    namespace: &str,
    name: &str,
    now: i64,
) -> Result<()> {
    let users = s.users(namespace, name).await?;
    let deleted = if users.is_empty() {
        s.delete(namespace, name).await?
    } else {
        None
    };
    super::unless_used(
        &format!("secret {namespace}/{name}"),
        "referenced by",
        &users,
        u64::from(deleted.is_some()),
    )?;
    let change = Change {
        resource: "secret",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        action: "delete",
        version_before: deleted,
        version_after: None,
    };
    super::audit::record(s, &[change], now).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mention_pattern_escapes_what_like_would_match_widely() {
        assert_eq!(mention_pattern("token"), "%secret.token%");
        assert_eq!(mention_pattern("db_pass"), "%secret.db\\_pass%");
        assert_eq!(mention_pattern("a%b\\c"), "%secret.a\\%b\\\\c%");
    }
}
