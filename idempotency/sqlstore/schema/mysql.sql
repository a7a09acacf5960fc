-- surely idempotency records and transactional inbox, MySQL and MariaDB.
-- This is exactly what (*sqlstore.Store).Migrate runs (with the table name
-- of WithTable in place of surely_inbox). Times are Unix milliseconds of the
-- database clock; 0 means none. Migrate runs each ALTER TABLE ... ADD
-- COLUMN only when the table lacks that column (a table made by an earlier
-- version gets it, with its default, and keeps its rows).
--
-- Every text column is binary (VARBINARY, LONGBLOB): keys compare byte for
-- byte (case, accents and trailing spaces count, as in every other store,
-- where utf8mb4 collations would merge "a", "A" and "a "), no connection
-- character set can alter a value, and the primary key takes 640 bytes
-- (utf8mb4 VARCHAR(128) + VARCHAR(512) would take 2560: near InnoDB's
-- 3072-byte limit, and over the 767 bytes of the COMPACT row format).
CREATE TABLE IF NOT EXISTS `surely_inbox` (
    namespace      VARBINARY(128) NOT NULL,
    op_key         VARBINARY(512) NOT NULL,
    state          VARBINARY(16)  NOT NULL,
    fingerprint    VARBINARY(255) NOT NULL,
    token          VARBINARY(64)  NOT NULL,
    attempts       INT            NOT NULL,
    canceled       INT            NOT NULL,
    lease_until_ms BIGINT         NOT NULL,
    expires_at_ms  BIGINT         NOT NULL,
    updated_at_ms  BIGINT         NOT NULL,
    outcome        LONGBLOB       NULL,
    history        LONGBLOB       NOT NULL,
    PRIMARY KEY (namespace, op_key),
    KEY `surely_inbox_expires_idx` (expires_at_ms)
) ENGINE=InnoDB;

-- Replay reopen (idempotency.ClaimRequest.Reopen): the replay run that last
-- gave the record a fresh budget, and attempts - canceled at that moment.
ALTER TABLE `surely_inbox` ADD COLUMN reopened_by VARBINARY(512) NOT NULL DEFAULT '';
ALTER TABLE `surely_inbox` ADD COLUMN budget_base INT NOT NULL DEFAULT 0;

-- Retry-after delay (idempotency.Failure.RetryAfter): a FAILED record is
-- not claimed again before this time; 0 means none.
ALTER TABLE `surely_inbox` ADD COLUMN not_before_ms BIGINT NOT NULL DEFAULT 0;

-- The time the row was inserted, which no update changes (PostgreSQL and
-- SQLite index it for Purge in place of expires_at_ms; InnoDB keeps the
-- index on expires_at_ms: InnoDB has no HOT, and MySQL no DROP INDEX IF
-- EXISTS).
ALTER TABLE `surely_inbox` ADD COLUMN created_at_ms BIGINT NOT NULL DEFAULT 0;
