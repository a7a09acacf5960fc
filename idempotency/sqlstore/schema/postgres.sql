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

CREATE INDEX IF NOT EXISTS "surely_inbox_expires_idx" ON "surely_inbox" (expires_at_ms);

-- Replay reopen (idempotency.ClaimRequest.Reopen): the replay run that last
-- gave the record a fresh budget, and attempts - canceled at that moment.
ALTER TABLE "surely_inbox" ADD COLUMN reopened_by text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE "surely_inbox" ADD COLUMN budget_base integer NOT NULL DEFAULT 0;

-- Retry-after delay (idempotency.Failure.RetryAfter): a FAILED record is
-- not claimed again before this time; 0 means none.
ALTER TABLE "surely_inbox" ADD COLUMN not_before_ms bigint NOT NULL DEFAULT 0;
