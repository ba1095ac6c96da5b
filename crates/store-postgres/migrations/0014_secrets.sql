-- Secrets (docs/security.md, "Secrets"): a namespace's named values that targets reference as
-- `{{ secret.NAME }}`. A value is sealed with AES-256-GCM by the API process that writes it and
-- opened only by a worker when it sends an attempt: the store sees bytes only (`nonce`, and
-- `ciphertext` with its tag), never a value. `version` is 1 when created and moves on by one
-- with every put. Which jobs and workflows reference one is read from their specs
-- (`secret_users`): the namespace's rows, read only when a secret is deleted or inspected.
CREATE TABLE secrets (
    namespace  TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    nonce      BYTEA  NOT NULL,   -- 12 bytes
    ciphertext BYTEA  NOT NULL,   -- the sealed value and its 16-byte tag
    created_at BIGINT NOT NULL,   -- ms since the epoch, UTC, by the store's clock
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
);
