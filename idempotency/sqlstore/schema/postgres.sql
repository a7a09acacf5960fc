-- surely idempotency records and transactional inbox, PostgreSQL.
-- This is exactly what (*sqlstore.Store).Migrate runs (with the table name
-- of WithTable in place of surely_inbox). Times are Unix milliseconds of the
-- database clock; 0 means none. Migrate runs each ALTER TABLE ... ADD
-- COLUMN only when the table lacks that column (a table made by an earlier
-- version gets it, with its default, and keeps its rows).
CREATE TABLE IF NOT EXISTS "surely_inbox" (
    namespace      text COLLATE "C" NOT NULL,
    op_key         text COLLATE "C" NOT NULL,
    state          text    NOT NULL,
    fingerprint    text    NOT NULL,
    token          text    NOT NULL,
    attempts       integer NOT NULL,
    canceled       integer NOT NULL,
    lease_until_ms bigint  NOT NULL,
    expires_at_ms  bigint  NOT NULL,
    updated_at_ms  bigint  NOT NULL,
    outcome        text,
    history        text    NOT NULL,
    PRIMARY KEY (namespace, op_key)
);

-- Replay reopen (idempotency.ClaimRequest.Reopen): the replay run that last
-- gave the record a fresh budget, and attempts - canceled at that moment.
ALTER TABLE "surely_inbox" ADD COLUMN reopened_by text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE "surely_inbox" ADD COLUMN budget_base integer NOT NULL DEFAULT 0;

-- Retry-after delay (idempotency.Failure.RetryAfter): a FAILED record is
-- not claimed again before this time; 0 means none.
ALTER TABLE "surely_inbox" ADD COLUMN not_before_ms bigint NOT NULL DEFAULT 0;

-- Purge's index, on the time the row was inserted, which no update
-- changes: an update then writes no index entry and can be HOT (a heap-only
-- tuple, on the row's own page). It replaces an index on expires_at_ms,
-- which every update changed. Every row expires a retention after its
-- insert at the earliest; rows of earlier versions have 0 here and are
-- all Purge candidates until deleted.
ALTER TABLE "surely_inbox" ADD COLUMN created_at_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS "surely_inbox_created_idx" ON "surely_inbox" (created_at_ms);
DROP INDEX IF EXISTS "surely_inbox_expires_idx";
