//! The audit log (docs/security.md, "Audit log"): one entry per change a request
//! makes, written by the store step that makes the change, in its transaction
//! ([`crate::steps::audit::record`]).
//!
//! Who made the change travels with the request, not through every store method: the API
//! runs each request that may change something inside [`scope`] with its [`AuditContext`]
//! (actor, request id, remote address, and the request's action where the store cannot tell
//! it, e.g. `pause`). A step that changes something records it when a context is in scope and
//! records nothing otherwise (the scheduler's, the worker's and the maintenance's own writes
//! are no requests).
//!
//! Invariants:
//! - An entry is written in the transaction of the change it records: both commit or neither.
//! - Entries of a namespace are numbered 1, 2, 3, … (`id`) in the order their transactions
//!   commit, and each entry's `hash` is SHA-256 over the previous entry's hash (64 zeros
//!   before the first) and this entry's fields ([`entry_hash`]); an entry changed or removed
//!   from the middle breaks the chain at the next one ([`Verifier`]).
//! - Retention removes entries from the oldest end of each namespace's chain only, so what
//!   is left still verifies from its first entry.

use std::future::Future;

use jiff::Timestamp;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The hash before a namespace's first entry: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Who made a change: a configured token, by its `name` and role, or `anonymous` on a server
/// without tokens (which listens on loopback only). Shown as `{"token": NAME, "role": ROLE}`
/// or `"anonymous"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// A configured token (`[[tokens]]`, its `name`) with its role (`admin`, `editor`).
    Token {
        /// The token's configured name.
        name: String,
        /// Its role.
        role: String,
    },
    /// A server without tokens.
    Anonymous,
}

impl Actor {
    /// The name the `actor` filter matches: the token's name, or `anonymous`.
    pub fn name(&self) -> &str {
        match self {
            Actor::Token { name, .. } => name,
            Actor::Anonymous => "anonymous",
        }
    }

    /// The role, `None` for [`Actor::Anonymous`].
    pub fn role(&self) -> Option<&str> {
        match self {
            Actor::Token { role, .. } => Some(role),
            Actor::Anonymous => None,
        }
    }
}

impl Serialize for Actor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Actor::Token { name, role } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("token", name)?;
                m.serialize_entry("role", role)?;
                m.end()
            }
            Actor::Anonymous => s.serialize_str("anonymous"),
        }
    }
}

/// What the API knows of a request that may change something: recorded with each change the
/// request makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditContext {
    /// Who sent it.
    pub actor: Actor,
    /// The request's id (its `x-request-id`, or one the server gave it), echoed in the answer.
    pub request_id: String,
    /// The peer's address (`ip:port`), when the request came over a connection.
    pub remote_addr: Option<String>,
    /// The request's action when the store's own (`create`, `replace`, `delete`, `trigger`,
    /// `cancel`, `retry`) does not say it: `patch`, `pause`, `resume`, `redrive`.
    pub action: Option<&'static str>,
}

tokio::task_local! {
    static CONTEXT: AuditContext;
}

/// Runs `future` with `context` as the request whose changes the store records.
pub async fn scope<F: Future>(context: AuditContext, future: F) -> F::Output {
    CONTEXT.scope(context, future).await
}

/// The context of the request being served, if the caller runs inside [`scope`].
pub fn current() -> Option<AuditContext> {
    CONTEXT.try_with(Clone::clone).ok()
}

/// One change a store step made, as it records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `job`, `workflow`, `calendar`, `secret`, `execution`, `run` or `backfill`.
    pub resource: &'static str,
    /// The namespace it belongs to.
    pub namespace: String,
    /// The resource's name (an execution's, run's or backfill's id).
    pub name: String,
    /// What the step did (`create`, `replace`, `delete`, `trigger`, `cancel`, `retry`); the
    /// request's [`AuditContext::action`] overrides it.
    pub action: &'static str,
    /// The resource's version before the change (`None`: none, or not versioned).
    pub version_before: Option<i64>,
    /// Its version after the change (`None`: deleted, or not versioned).
    pub version_after: Option<i64>,
}

impl Change {
    /// The change of a definition's write (a job's or a workflow's): `resource` `namespace`/
    /// `name` created at version 1 when `expected` is `None`, else replaced from version
    /// `expected` to `version`.
    pub fn written(
        resource: &'static str,
        namespace: &str,
        name: &str,
        expected: Option<i64>,
        version: i64,
    ) -> Change {
        Change {
            resource,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            action: if expected.is_some() {
                "replace"
            } else {
                "create"
            },
            version_before: expected,
            version_after: Some(version),
        }
    }
}

/// An entry of the audit log, as stored and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Its number in its namespace's chain: 1, 2, 3, … in commit order.
    pub id: i64,
    /// When the change committed (the store's clock, UTC).
    #[schema(value_type = String, format = DateTime)]
    pub at: Timestamp,
    /// `{"token": NAME, "role": ROLE}` or `"anonymous"` (either shape, so any JSON value in
    /// the schema).
    #[schema(value_type = serde_json::Value)]
    pub actor: Actor,
    /// The namespace.
    pub namespace: String,
    /// `job`, `workflow`, `calendar`, `secret`, `execution`, `run` or `backfill`.
    pub resource: String,
    /// The resource's name (an execution's, run's or backfill's id).
    pub name: String,
    /// `create`, `replace`, `patch`, `delete`, `pause`, `resume`, `trigger`, `cancel`,
    /// `retry` or `redrive`.
    pub action: String,
    /// The resource's version before the change, if it had one.
    pub version_before: Option<i64>,
    /// Its version after the change, if it has one.
    pub version_after: Option<i64>,
    /// The request's id.
    pub request_id: String,
    /// The peer's address, if known.
    pub remote_addr: Option<String>,
    /// The previous entry's `hash` ([`GENESIS`] before the first).
    pub prev_hash: String,
    /// [`entry_hash`] of `prev_hash` and this entry, 64 lowercase hexadecimal digits.
    pub hash: String,
}

/// The fields a hash covers, in this order (serde_json writes a struct's fields in
/// declaration order, so the text is the same on every process).
#[derive(Serialize)]
struct Hashed<'a> {
    id: i64,
    at: i64,
    actor: &'a Actor,
    namespace: &'a str,
    resource: &'a str,
    name: &'a str,
    action: &'a str,
    version_before: Option<i64>,
    version_after: Option<i64>,
    request_id: &'a str,
    remote_addr: Option<&'a str>,
}

/// SHA-256, as 64 lowercase hexadecimal digits, of `prev_hash`, a newline, and the JSON of
/// `entry`'s fields from `id` to `remote_addr` (`at` as Unix milliseconds): the chain rule of
/// docs/security.md, "Audit log". `entry.prev_hash` and `entry.hash` are not read.
pub fn entry_hash(prev_hash: &str, entry: &AuditEntry) -> String {
    let hashed = Hashed {
        id: entry.id,
        at: entry.at.as_millisecond(),
        actor: &entry.actor,
        namespace: &entry.namespace,
        resource: &entry.resource,
        name: &entry.name,
        action: &entry.action,
        version_before: entry.version_before,
        version_after: entry.version_after,
        request_id: &entry.request_id,
        remote_addr: entry.remote_addr.as_deref(),
    };
    // A struct of strings and integers always serializes.
    let text = serde_json::to_string(&hashed).unwrap_or_default();
    let mut digest = Sha256::new();
    digest.update(prev_hash.as_bytes());
    digest.update(b"\n");
    digest.update(text.as_bytes());
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(64);
    for b in digest.finalize() {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    hex
}

/// Where a chain breaks: the first entry that fails, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ChainBreak {
    /// The entry's id.
    pub id: i64,
    /// Why: its hash is not that of its fields, or its `prev_hash` is not the hash of the
    /// entry before it, or an id is missing before it.
    pub reason: String,
}

/// Walks part of a chain in id order, carrying what the next entry must link to.
#[derive(Debug, Clone, Default)]
pub struct Verifier {
    last: Option<(i64, String)>,
    /// Entries checked so far.
    pub checked: u64,
}

impl Verifier {
    /// Checks `entries` (ascending ids, following those already checked): each entry's hash
    /// is [`entry_hash`] of its own `prev_hash` and fields, its `prev_hash` is the hash of the
    /// entry before it and its id follows that entry's by one. The first entry ever checked
    /// is taken as the chain's start (older ones may have been pruned, from the oldest end).
    ///
    /// # Errors
    /// The first entry that breaks the chain.
    pub fn check(&mut self, entries: &[AuditEntry]) -> Result<(), ChainBreak> {
        for e in entries {
            if let Some((id, hash)) = &self.last {
                if e.id != id + 1 {
                    return Err(ChainBreak {
                        id: e.id,
                        reason: format!("entries {} to {} are missing", id + 1, e.id - 1),
                    });
                }
                if &e.prev_hash != hash {
                    return Err(ChainBreak {
                        id: e.id,
                        reason: format!("its prev_hash is not the hash of entry {id}"),
                    });
                }
            }
            if entry_hash(&e.prev_hash, e) != e.hash {
                return Err(ChainBreak {
                    id: e.id,
                    reason: "its hash is not the hash of its fields (the entry was changed)"
                        .to_owned(),
                });
            }
            self.last = Some((e.id, e.hash.clone()));
            self.checked += 1;
        }
        Ok(())
    }
}

/// A page of a namespace's audit log, newest first, or oldest first for a walk of the chain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// The namespace.
    pub namespace: String,
    /// Only entries of this resource kind.
    pub resource: Option<String>,
    /// Only entries of resources of this name.
    pub name: Option<String>,
    /// Only entries by this actor ([`Actor::name`]).
    pub actor: Option<String>,
    /// Only entries at or after this instant.
    pub since: Option<Timestamp>,
    /// Entries after this id (oldest first) or before it (newest first).
    pub cursor: Option<i64>,
    /// Oldest first (a walk of the chain) instead of newest first.
    pub ascending: bool,
    /// At most this many.
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: i64, prev: &str) -> AuditEntry {
        let mut e = AuditEntry {
            id,
            at: Timestamp::from_millisecond(1_700_000_000_000 + id).unwrap(),
            actor: Actor::Token {
                name: "ci".into(),
                role: "editor".into(),
            },
            namespace: "billing".into(),
            resource: "job".into(),
            name: "invoice".into(),
            action: "replace".into(),
            version_before: Some(id),
            version_after: Some(id + 1),
            request_id: format!("r{id}"),
            remote_addr: Some("127.0.0.1:5000".into()),
            prev_hash: prev.into(),
            hash: String::new(),
        };
        e.hash = entry_hash(prev, &e);
        e
    }

    fn chain(n: i64) -> Vec<AuditEntry> {
        let mut out: Vec<AuditEntry> = Vec::new();
        for id in 1..=n {
            let prev = out.last().map_or(GENESIS.to_owned(), |e| e.hash.clone());
            out.push(entry(id, &prev));
        }
        out
    }

    #[test]
    fn a_whole_chain_verifies_in_pages_and_from_a_pruned_start() {
        let c = chain(5);
        let mut v = Verifier::default();
        v.check(&c[..2]).unwrap();
        v.check(&c[2..]).unwrap();
        assert_eq!(v.checked, 5);
        Verifier::default().check(&c[2..]).unwrap();
    }

    #[test]
    fn a_changed_removed_or_relinked_entry_is_named() {
        let c = chain(5);
        let mut changed = c.clone();
        changed[2].action = "delete".into();
        assert_eq!(Verifier::default().check(&changed).unwrap_err().id, 3);
        let mut removed = c.clone();
        removed.remove(2);
        assert_eq!(Verifier::default().check(&removed).unwrap_err().id, 4);
        // Rehashing the changed entry does not help: the next one no longer links to it.
        let mut rehashed = changed.clone();
        rehashed[2].hash = entry_hash(&rehashed[2].prev_hash, &rehashed[2]);
        assert_eq!(Verifier::default().check(&rehashed).unwrap_err().id, 4);
    }

    #[test]
    fn the_hash_covers_every_field() {
        let base = entry(1, GENESIS);
        let mut variants = Vec::new();
        let mut e = base.clone();
        e.actor = Actor::Anonymous;
        variants.push(e);
        let mut e = base.clone();
        e.remote_addr = None;
        variants.push(e);
        let mut e = base.clone();
        e.version_after = None;
        variants.push(e);
        let mut e = base.clone();
        e.at = Timestamp::from_millisecond(1).unwrap();
        variants.push(e);
        for v in variants {
            assert_ne!(entry_hash(GENESIS, &v), base.hash, "{v:?}");
        }
        assert_ne!(entry_hash("1", &base), base.hash);
    }
}
