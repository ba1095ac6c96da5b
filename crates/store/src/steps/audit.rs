//! The audit log's steps, written once for both stores (docs/security.md, "Audit log"): the
//! append a changing step makes in its own transaction ([`record`]), the listing
//! ([`audit_list`]) and retention's prune ([`audit_prune`]).
//!
//! Invariants (besides [`crate::audit`]'s):
//! - An append takes its namespace's chain first: on PostgreSQL a transaction-scoped advisory
//!   lock per namespace ([`Reader::AUDIT_LOCK`]), held until the transaction ends, so that the
//!   last entry it reads is the last committed one; SQLite's one writer holds every chain. The
//!   primary key (namespace, id) refuses a second entry with one id all the same, so no chain
//!   forks whatever the isolation.
//! - A step records its changes after it made them, as the last thing before its caller
//!   commits: nothing is locked after the chain, so two appends cannot wait on each other.

use crate::Result;
use crate::audit::{self, Actor, AuditEntry, AuditQuery, Change, GENESIS};
use crate::reads::{Reader, Statement, Transaction, Value, Writer};

/// The columns of an entry, in the order a row of the audit log is read and written.
pub const COLUMNS: &str = "namespace, id, at, actor_name, actor_role, resource, name, action, \
    version_before, version_after, request_id, remote_addr, prev_hash, hash";

/// An entry from a row of [`COLUMNS`]. [`Actor::Anonymous`] is stored as the name
/// `anonymous` with the role `''`, no remote address as `''`.
///
/// # Errors
/// [`Error::Corrupt`](crate::Error::Corrupt) for a row that does not decode.
fn entry<R: Reader>(row: &R::Row) -> Result<AuditEntry> {
    let name = R::text_at(row, 3)?;
    let role = R::text_at(row, 4)?;
    // Read back exactly as written, so that a changed name or role changes the hash.
    let actor = if role.is_empty() && name == "anonymous" {
        Actor::Anonymous
    } else {
        Actor::Token { name, role }
    };
    let remote = R::text_at(row, 11)?;
    Ok(AuditEntry {
        namespace: R::text_at(row, 0)?,
        id: R::int(row, 1)?,
        at: super::instant(R::int(row, 2)?)?,
        actor,
        resource: R::text_at(row, 5)?,
        name: R::text_at(row, 6)?,
        action: R::text_at(row, 7)?,
        version_before: R::opt_int(row, 8)?,
        version_after: R::opt_int(row, 9)?,
        request_id: R::text_at(row, 10)?,
        remote_addr: (!remote.is_empty()).then_some(remote),
        prev_hash: R::text_at(row, 12)?,
        hash: R::text_at(row, 13)?,
    })
}

/// Records `changes`, made at `now` (Unix ms, UTC, the store's clock) in the transaction `tx`,
/// as entries of their namespaces' audit logs, in `changes`' order within each namespace,
/// when the caller runs inside [`audit::scope`]; outside it (the scheduler's and workers' own
/// writes) nothing. Call it after the step's other writes ([module invariants](self)).
///
/// # Errors
/// The store's classified error ([`Error::Conflict`](crate::Error::Conflict) should two appends take one id, which
/// the chain's lock prevents); [`Error::Corrupt`](crate::Error::Corrupt) for a last entry that does not decode.
pub async fn record<T: Transaction>(tx: &mut T, changes: &[Change], now: i64) -> Result<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let Some(context) = audit::current() else {
        return Ok(());
    };
    let at = super::instant(now)?;
    let mut namespaces: Vec<&str> = changes.iter().map(|c| c.namespace.as_str()).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    for ns in namespaces {
        let lock = <T::Store as Reader>::AUDIT_LOCK;
        if !lock.is_empty() {
            tx.execute(&Statement::new(lock).bind(ns)).await?;
        }
        let last = Statement::new(
            "SELECT id, hash FROM audit_log WHERE namespace = $1 ORDER BY id DESC LIMIT 1",
        )
        .bind(ns);
        let (mut id, mut prev) = match tx.row(&last).await? {
            Some(row) => (
                <T::Store as Reader>::int(&row, 0)?,
                <T::Store as Reader>::text_at(&row, 1)?,
            ),
            None => (0, GENESIS.to_owned()),
        };
        let mut entries = Vec::new();
        for c in changes.iter().filter(|c| c.namespace == ns) {
            id += 1;
            let mut e = AuditEntry {
                id,
                at,
                actor: context.actor.clone(),
                namespace: c.namespace.clone(),
                resource: c.resource.to_owned(),
                name: c.name.clone(),
                action: context.action.unwrap_or(c.action).to_owned(),
                version_before: c.version_before,
                version_after: c.version_after,
                request_id: context.request_id.clone(),
                remote_addr: context.remote_addr.clone(),
                prev_hash: prev,
                hash: String::new(),
            };
            e.hash = audit::entry_hash(&e.prev_hash, &e);
            prev = e.hash.clone();
            entries.push(e);
        }
        match <T::Store as Reader>::AUDIT_INSERT {
            AuditInsert::Json(sql) => {
                let rows = rows(&entries);
                tx.execute(&Statement::new(sql).bind(rows.as_str())).await?;
            }
            AuditInsert::AnonymousRows => {
                for chunk in entries.chunks(ROWS_PER_INSERT) {
                    tx.execute(&insert(chunk)).await?;
                }
            }
        }
    }
    Ok(())
}

/// How a store inserts a transaction's audit entries ([`Reader::AUDIT_INSERT`]). A
/// statement's parameters cost SQLite time quadratic in their number when they are named
/// (`$1`, `$2`, …: each is looked up in a list of the names seen), and linear when anonymous
/// (`?`); PostgreSQL takes either, and one parameter best (BENCHMARKS.md, "The audit log's
/// cost on `jobs:apply`").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditInsert {
    /// One statement whose `$1` is a JSON array (text) of rows, each an array of [`COLUMNS`]'
    /// values in that order.
    Json(&'static str),
    /// Multi-row `INSERT … VALUES (?, …), …` statements of [`ROWS_PER_INSERT`] rows at most,
    /// their parameters anonymous (`?`) and bound in order.
    AnonymousRows,
}

/// Rows per statement of [`AuditInsert::AnonymousRows`]: 100 (1,400 parameters).
pub const ROWS_PER_INSERT: usize = 100;

/// One [`AuditInsert::AnonymousRows`] statement of `entries`.
fn insert(entries: &[AuditEntry]) -> Statement<'_> {
    let row = format!("({})", ["?"; 14].join(", "));
    let rows = vec![row; entries.len()].join(", ");
    let mut st = Statement::new(format!("INSERT INTO audit_log ({COLUMNS}) VALUES {rows}"));
    for e in entries {
        st = st
            .bind(e.namespace.as_str())
            .bind(e.id)
            .bind(e.at.as_millisecond())
            .bind(e.actor.name())
            .bind(e.actor.role().unwrap_or(""))
            .bind(e.resource.as_str())
            .bind(e.name.as_str())
            .bind(e.action.as_str())
            .bind(e.version_before)
            .bind(e.version_after)
            .bind(e.request_id.as_str())
            .bind(e.remote_addr.as_deref().unwrap_or(""))
            .bind(e.prev_hash.as_str())
            .bind(e.hash.as_str());
    }
    st
}

/// The rows of `entries` as the JSON array [`AuditInsert::Json`] takes, written without an
/// intermediate document.
fn rows(entries: &[AuditEntry]) -> String {
    type Row<'a> = (
        &'a str,
        i64,
        i64,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        Option<i64>,
        Option<i64>,
        &'a str,
        &'a str,
        &'a str,
        &'a str,
    );
    let rows: Vec<Row<'_>> = entries
        .iter()
        .map(|e| {
            (
                e.namespace.as_str(),
                e.id,
                e.at.as_millisecond(),
                e.actor.name(),
                e.actor.role().unwrap_or(""),
                e.resource.as_str(),
                e.name.as_str(),
                e.action.as_str(),
                e.version_before,
                e.version_after,
                e.request_id.as_str(),
                e.remote_addr.as_deref().unwrap_or(""),
                e.prev_hash.as_str(),
                e.hash.as_str(),
            )
        })
        .collect();
    // Strings and integers always serialize.
    serde_json::to_string(&rows).unwrap_or_default()
}

/// A page of `query.namespace`'s audit log: the entries matching its filters, newest first
/// (ids below `query.cursor`) or, with `query.ascending`, oldest first (ids above it), at most
/// `query.limit`.
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`](crate::Error::Corrupt) for a row that does not decode.
pub async fn audit_list<'a, R: Reader>(
    store: &R,
    query: &'a AuditQuery,
) -> Result<Vec<AuditEntry>> {
    let mut sql = format!("SELECT {COLUMNS} FROM audit_log WHERE namespace = $1");
    let mut binds: Vec<Value<'_>> = vec![query.namespace.as_str().into()];
    let mut filter = |clause: &str, value: Value<'a>| {
        binds.push(value);
        sql.push_str(&format!(" AND {clause} ${}", binds.len()));
    };
    if let Some(r) = &query.resource {
        filter("resource =", r.as_str().into());
    }
    if let Some(n) = &query.name {
        filter("name =", n.as_str().into());
    }
    if let Some(a) = &query.actor {
        filter("actor_name =", a.as_str().into());
    }
    if let Some(t) = query.since {
        filter("at >=", t.as_millisecond().into());
    }
    if let Some(c) = query.cursor {
        filter(if query.ascending { "id >" } else { "id <" }, c.into());
    }
    let order = if query.ascending { "ASC" } else { "DESC" };
    sql.push_str(&format!(" ORDER BY id {order} LIMIT {}", query.limit));
    let mut st = Statement::new(sql);
    for v in binds {
        st = st.bind(v);
    }
    store.rows(&st).await?.iter().map(entry::<R>).collect()
}

/// The namespaces that hold entries, each found by one index lookup (a loose scan of the
/// primary key, as neither store skips through an index on its own).
const NAMESPACES: &str = "WITH RECURSIVE ns(n) AS ( \
       SELECT min(namespace) FROM audit_log \
       UNION ALL SELECT (SELECT min(namespace) FROM audit_log WHERE namespace > ns.n) \
       FROM ns WHERE ns.n IS NOT NULL \
     ) SELECT n FROM ns WHERE n IS NOT NULL";

/// Retention (docs/configuration.md, `audit_retention`): deletes, in each namespace, the
/// entries before the first one written at or after `before` (Unix ms, UTC), so that only the
/// oldest end of a chain goes; the newest entry stays whatever its age, so that the chain goes
/// on from it. The first entry to keep is found along the chain from its oldest end, reading
/// the expired entries and no more. Returns how many went.
///
/// # Errors
/// The store's classified error; [`Error::Corrupt`](crate::Error::Corrupt) for a namespace
/// that does not decode.
pub async fn audit_prune<W: Writer>(store: &W, before: i64) -> Result<u64> {
    let mut pruned = 0;
    for row in store.rows(&Statement::new(NAMESPACES)).await? {
        let ns = W::text_at(&row, 0)?;
        let st = Statement::new(
            "DELETE FROM audit_log WHERE namespace = $1 AND id < COALESCE( \
               (SELECT id FROM audit_log WHERE namespace = $1 AND at >= $2 ORDER BY id LIMIT 1), \
               (SELECT max(id) FROM audit_log WHERE namespace = $1))",
        )
        .bind(ns.as_str())
        .bind(before);
        pruned += store.execute(&st).await?;
    }
    Ok(pruned)
}
