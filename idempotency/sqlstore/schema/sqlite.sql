-- surely idempotency records and transactional inbox, SQLite.
-- This is exactly what (*sqlstore.Store).Migrate runs (with the table name
-- of WithTable in place of surely_inbox). Times are Unix milliseconds of the
-- database clock; 0 means none. Migrate runs each ALTER TABLE ... ADD
-- COLUMN only when the table lacks that column (a table made by an earlier
-- version gets it, with its default, and keeps its rows).
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

-- Replay reopen (idempotency.ClaimRequest.Reopen): the replay run that last
-- gave the record a fresh budget, and attempts - canceled at that moment.
ALTER TABLE "surely_inbox" ADD COLUMN reopened_by TEXT NOT NULL DEFAULT '';
ALTER TABLE "surely_inbox" ADD COLUMN budget_base INTEGER NOT NULL DEFAULT 0;

-- Retry-after delay (idempotency.Failure.RetryAfter): a FAILED record is
-- not claimed again before this time; 0 means none.
ALTER TABLE "surely_inbox" ADD COLUMN not_before_ms INTEGER NOT NULL DEFAULT 0;

-- Purge's index, on the time the row was inserted, which no update
-- changes: an update then writes no index entry. It replaces an index on
-- expires_at_ms, which every update changed. Every row expires a
-- retention after its insert at the earliest; rows of earlier versions
-- have 0 here and are all Purge candidates until deleted.
ALTER TABLE "surely_inbox" ADD COLUMN created_at_ms INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS "surely_inbox_created_idx" ON "surely_inbox" (created_at_ms);
DROP INDEX IF EXISTS "surely_inbox_expires_idx";
