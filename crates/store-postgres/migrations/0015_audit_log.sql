-- The audit log (docs/security.md, "Audit log"): one row per change a request made, written
-- in the transaction of the change. Each namespace's entries are a chain: `id` 1, 2, 3, … in
-- commit order, `hash` the SHA-256 over `prev_hash` (the entry before's hash, 64 zeros
-- before the first) and the entry's fields (`sundial_store::audit::entry_hash`). Retention
-- deletes from each chain's oldest end only, found along the primary key (no index on `at`:
-- one less to write with every entry). No role (`anonymous`) and no remote address are
-- stored as ''.
CREATE TABLE audit_log (
    namespace      TEXT    NOT NULL,
    id             BIGINT  NOT NULL,
    at             BIGINT  NOT NULL,   -- ms since the epoch, UTC, by the store's clock
    actor_name     TEXT    NOT NULL,   -- the token's name, or 'anonymous'
    actor_role     TEXT    NOT NULL,
    resource       TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    action         TEXT    NOT NULL,
    version_before BIGINT,
    version_after  BIGINT,
    request_id     TEXT    NOT NULL,
    remote_addr    TEXT    NOT NULL,
    prev_hash      TEXT    NOT NULL,
    hash           TEXT    NOT NULL,
    PRIMARY KEY (namespace, id)
);
-- "Who changed this": one resource's entries, newest first.
CREATE INDEX audit_log_resource ON audit_log (namespace, resource, name, id);
