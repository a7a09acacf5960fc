-- surely idempotency records and transactional inbox, SQLite.
-- This is exactly what (*sqlstore.Store).Migrate runs (with the table name
-- of WithTable in place of surely_inbox). Times are Unix milliseconds of the
-- database clock; 0 means none.
CREATE TABLE IF NOT EXISTS "surely_inbox" (
    namespace      TEXT    NOT NULL,
    op_key         TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    fingerprint    TEXT    NOT NULL,
    token          TEXT    NOT NULL,
    attempts       INTEGER NOT NULL,
    canceled       INTEGER NOT NULL,
    lease_until_ms INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    outcome        TEXT,
    history        TEXT    NOT NULL,
    PRIMARY KEY (namespace, op_key)
);

CREATE INDEX IF NOT EXISTS "surely_inbox_expires_idx" ON "surely_inbox" (expires_at_ms);
