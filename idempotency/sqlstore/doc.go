// Package sqlstore is an idempotency.Store on a SQL database, PostgreSQL,
// MySQL/MariaDB or SQLite, through database/sql, and the transactional
// inbox: a handler whose effect and DONE mark commit in one transaction.
//
// The package imports no driver. Open the *sql.DB with the driver of your
// choice and name its dialect:
//
//	db, err := sql.Open("pgx", "postgres://app@db:5432/app") // github.com/jackc/pgx/v5/stdlib
//	defer db.Close() // yours: the store never closes it
//	store, err := sqlstore.New(db, sqlstore.Postgres, idempotency.WithRetention(72*time.Hour))
//	err = store.Migrate(ctx) // or apply schema/postgres.sql in your migrations
//
// It implements the state machine of package idempotency exactly as the
// reference memstore and redisstore do, and runs the conformance suite
// idempotency/idempotencytest on all three databases.
//
// # Schema and Migrate
//
// One table (default "surely_inbox", WithTable) holds one row per
// operation:
//
//	namespace, op_key  primary key (op_key: "key" is reserved in MySQL)
//	state              in_progress | done | failed | exhausted
//	fingerprint        payload fingerprint of the first claim
//	token              current (or last) lease token
//	attempts, canceled claims ever made; those refunded by a canceled release
//	lease_until_ms     lease expiry, while in progress (else 0)
//	expires_at_ms      end of the retention: from then on the row reads as absent
//	updated_at_ms      time of the last write
//	outcome            JSON of idempotency.Outcome, once done
//	history            JSON array of the newest 20 attempts
//	reopened_by, budget_base  the replay that last reopened the record, and its budget base
//	not_before_ms      retry-after time of a failed record (else 0): no claim before it
//	created_at_ms      time the row was inserted (0 for rows of earlier versions); never updated
//
// A table made by an earlier version lacks the later columns: run Migrate
// (or the ALTER TABLE statements at the end of the schema file) before
// deploying; it adds them with their defaults and keeps every row.
//
// Times are Unix milliseconds of the database clock. Purge finds its rows
// by an index on created_at_ms on PostgreSQL and SQLite, on expires_at_ms
// on MySQL (see "Statements per operation" for why).
//
// New never touches the schema. Migrate runs CREATE TABLE IF NOT EXISTS and
// CREATE INDEX IF NOT EXISTS; it is idempotent and is the only DDL in the
// package. The same statements ship as plain SQL files, schema/postgres.sql,
// schema/mysql.sql and schema/sqlite.sql, for migration tools: Migrate
// runs exactly the embedded files (the table name substituted), so the two
// cannot drift.
//
// Retention (idempotency.WithRetention, default 24h) counts from a record's last
// change, as in every store: an expired record reads as absent at once (a
// claim overwrites it in place), and Purge deletes expired rows in batches;
// call it periodically from one process.
//
// # Dialects
//
// Lease and retention times come from the database clock, never the
// consumer's: PostgreSQL statement_timestamp() or clock_timestamp(), MySQL
// UTC_TIMESTAMP(6) (by plain arithmetic, no session time zone), SQLite
// julianday('now'), read inside the statements that need them. The
// store's statements are prepared once per connection of the pool, each
// before the first call that runs it begins its transaction (until that
// succeeds it runs unprepared).
//
// A Claim of a key without a row is one statement: an INSERT of the whole
// record (the clock read inside it) that does nothing when the key has a
// row, committed on its own.
// For a key with a row (a redelivery, a duplicate), one read of the
// committed row and the clock, without a lock or a transaction, answers a
// claim that changes nothing (a live lease, a retry-after delay, a DONE or
// EXHAUSTED record, a fingerprint conflict): such an answer holds at the
// clock reading only if it held when the row was read. Any other claim (a
// takeover) is made in one transaction that locks the row and reads the
// clock after the lock (so that a wait for it does not shorten the new
// lease), decides again in Go and writes the row back. Complete, Release and Extend are each one UPDATE,
// committed on its own, fenced on the lease (see "Statements per
// operation").
//
//   - Postgres: keys are text COLLATE "C" (byte order, exact equality).
//     READ COMMITTED transactions (a BEGIN ISOLATION LEVEL, one statement);
//     INSERT ... ON CONFLICT DO NOTHING; SELECT ... FOR UPDATE for a claim
//     that writes. Purge skips
//     rows a claim holds (SKIP LOCKED). Updates are HOT (see below); the
//     inbox of a first delivery from a counting broker writes its record
//     with one INSERT and no update.
//   - MySQL (and MariaDB): InnoDB. Every text column is binary (VARBINARY,
//     LONGBLOB): keys compare byte for byte whatever the connection's
//     character set (utf8mb4 collations would merge "a", "A" and "a "), and
//     the primary key (namespace VARBINARY(128), op_key VARBINARY(512))
//     takes 640 bytes, where utf8mb4 VARCHARs would take 2560, near InnoDB's
//     3072-byte limit and over the 767 bytes of the COMPACT row format.
//     READ COMMITTED transactions (no gap locks; with binary logging on,
//     this needs binlog_format ROW or MIXED, the defaults). The driver sets
//     the level with a SET TRANSACTION statement per transaction, unless
//     the sessions are READ COMMITTED already: put
//     transaction_isolation=%27READ-COMMITTED%27 in the DSN
//     (go-sql-driver/mysql; MariaDB before 11.1: tx_isolation) and the
//     store, which checks a session once, saves that statement. INSERT ...
//     ON DUPLICATE KEY UPDATE locks an existing row exclusively (INSERT
//     IGNORE would take a shared lock, and two claims upgrading theirs with
//     FOR UPDATE deadlock), then for a claim that writes SELECT ... FOR
//     UPDATE. MySQL has no
//     RETURNING: a claim of a new key gets its lease back as the INSERT's
//     last insert ID (LAST_INSERT_ID(expr); 0 for a duplicate key). Fingerprints are limited to 255 bytes.
//   - SQLite: there are no row locks; each transaction of the store starts
//     with a write statement, which takes the database's write lock at once
//     (the effect of BEGIN IMMEDIATE, so _txlock=immediate in the DSN is
//     not needed, and does no harm): a claim of a key with a row begins
//     with the INSERT again, the inbox with its INSERT or its fenced
//     UPDATE; a claim of a new key, Complete, Release and Extend are a
//     single statement and need no transaction. Only the inbox
//     of a message without a record (handler.ProcessWithoutDedup),
//     which has no row to write, begins with an UPDATE that matches no row
//     (modernc.org/sqlite sets BEGIN IMMEDIATE only for a whole DSN,
//     _txlock=immediate, which the store does not own). Concurrent writers
//     then wait for the lock for the connection's busy timeout, which must
//     be set: with
//     modernc.org/sqlite, "file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)".
//     Without a busy timeout a concurrent claim fails at once with
//     SQLITE_BUSY (Migrate logs a warning). WAL lets Get read while a
//     transaction writes. SQLite serializes every write of the database,
//     so one slow inbox handler holds up every other claim: it is meant for
//     one process, or a few.
//
// # Statements per operation
//
// Statements sent per operation (BEGIN and COMMIT included), as
// TestStatementsPerOperation checks; each is one round trip:
//
//	operation                        PostgreSQL  MySQL  SQLite
//	Claim, new key                   1           1      1
//	Claim, key with a row, refused   2           2      2
//	Claim, key with a row, taken     6           7      7
//	Complete, Release                1           1      1
//	Extend                           1           2      1
//	Complete re-sent after success   2           2      2
//
// A refused claim of a key with a row (InProgress, Completed, Conflict,
// Exhausted) is the INSERT that finds the row and the read of the row and
// the clock, with no transaction and no commit. A claim that takes the
// key (Acquired) or marks it EXHAUSTED is the INSERT, the read, BEGIN,
// SELECT ... FOR UPDATE, the UPDATE of the whole row, COMMIT (on SQLite
// the INSERT again, first in the transaction, takes the write lock); the
// database clock is read in the SELECT on PostgreSQL (clock_timestamp()
// outside the subquery that locks, so after the lock) and SQLite, in a
// statement of its own on MySQL (whose UTC_TIMESTAMP is the statement's
// start, before a lock wait). MySQL has no RETURNING: a claim of a new key
// gets its lease back as the INSERT's last insert ID, and Extend reads its
// new expiry with a second statement.
// With go-sql-driver/mysql a transaction also costs a SET TRANSACTION
// unless the sessions are READ COMMITTED already (see Dialects).
//
// Complete, Release and Extend are each one UPDATE, committed on its own,
// fenced on the lease: WHERE the key, this token, state in_progress and
// expires_at_ms after the statement's clock (statement_timestamp(),
// UTC_TIMESTAMP(6), julianday('now')), which also computes the new times
// (the statement's start: an UPDATE that waited for the row lock of an
// inbox transaction on the same key dates its writes from before the wait).
// The attempt's end goes into the open history entry with replace() on
// its "result":"in_progress" member (the only one: a claim ends any
// earlier attempt), so the statement needs neither the record nor a read.
// A statement that matches no row is a lost lease: it changes the state
// or the expiry of a row it matches, so the count of changed rows tells,
// whether or not the MySQL driver counts found rows (clientFoundRows);
// MySQL's Extend, whose values may equal the previous ones within a
// millisecond, reads the lease back instead. Only a Complete that matched
// nothing reads the record, to tell a re-sent Complete from a lost lease.
//
// The inbox: a first delivery from a counting broker with WithInTxClaims
// is BEGIN, INSERT, the handler's statements, COMMIT (plus an UPDATE of the
// outcome when the handler produced messages); any other delivery commits
// its claim as above, then BEGIN, the fenced DONE UPDATE, the handler's
// statements, COMMIT. The statements are prepared once per connection.
//
// HOT updates (PostgreSQL). An update whose changed columns are in no
// index can be heap-only: the new row version goes on the same page and no
// index entry is written. Every update changes expires_at_ms, so Purge's
// index is on created_at_ms instead, the time the row was inserted, which
// no update changes: every write sets expires_at_ms to its clock plus at
// least the retention, so a row expired at a cutoff was inserted a
// retention before it at the latest, and Purge scans created_at_ms up to
// cutoff minus the retention and deletes the rows whose expires_at_ms has
// passed. Rows that outlive that bound (a record retried for longer than
// the retention, a key claimed again after its record expired but before
// Purge deleted it, rows of earlier versions, whose created_at_ms is 0)
// are scanned past until they expire; a Purge whose retention is longer
// than the writers' deletes their rows that much later (they read as
// absent meanwhile). Measured with BenchmarkSQLLease and BenchmarkInbox
// (package bench, pg_stat_user_tables): 98-100 % of the updates HOT with
// the default fillfactor, against none with the index on expires_at_ms,
// and 13-16 % less WAL per inbox message; a lower fillfactor was not
// needed for that, so the table keeps the default. SQLite uses the same
// index (an update then writes no index page); MySQL keeps its index on
// expires_at_ms (InnoDB has no HOT, and MySQL has no DROP INDEX IF EXISTS
// for Migrate). Migrate adds the column and the index to an existing table
// and drops the index on expires_at_ms; CREATE INDEX blocks writes while
// it builds: on a large table, create the index CONCURRENTLY beforehand
// (the schema file's name), and Migrate finds it.
//
// # Transactional inbox
//
// Inbox turns a TxHandler, func(ctx, tx, msg), into the Watermill handler
// for handler.New or middleware.Dedup used with this store: the effect and
// the DONE mark, with the produced messages, commit together or not at
// all. The dedup step then skips its Complete (the inbox tells it so through
// the message context, by a signal private to surely). A failing or panicking handler, or a failed commit, rolls
// everything back; the failure is recorded as for any attempt and the next
// delivery runs again.
//
// Where the claim goes is the design decision of this mode. By default the
// dedup step claims first, in a commit of its own, and the inbox's
// transaction marks DONE under that lease. With WithInTxClaims the dedup
// step offers the claim to the inbox (through the message context); the inbox
// accepts on its first call when the dedup step uses this very store (not
// a wrapper of it), so a process's first message takes the general path,
// and every later one the following. Use it only when the chain's handler
// is the Inbox handler itself: once accepted, the dedup step no longer
// claims before the handler runs, so code before or beside the inbox would
// run for a duplicate too.
//
//   - a first delivery from a broker that counts deliveries
//     (delivery.Info.Count == 1: NATS, RabbitMQ quorum queues, SQS, Redis
//     Streams) is one transaction: BEGIN; one INSERT of the record, DONE,
//     that does nothing when the key has a row; the handler's statements;
//     COMMIT (and one UPDATE of the outcome when the handler produced
//     messages). The row lock the INSERT holds is the lease while the
//     transaction is open (on SQLite the database's write lock); no lease
//     is extended. When the key has a row (a duplicate, a replay) the
//     general claim runs in the same transaction. When the handler fails,
//     the claim rolls back with the effect, and the inbox claims again,
//     committed, so that the dedup step records the failure on it.
//   - any other delivery (a redelivery, or a broker without a count:
//     Kafka, GoChannel, SQL) commits its claim first, one INSERT for a new
//     key; on PostgreSQL with synchronous_commit off for that statement
//     (set_config(..., true)), so the commit does not wait for the WAL
//     flush. The effect's transaction then begins with a fenced UPDATE
//     that marks the record DONE only while it is still this attempt's
//     (IN_PROGRESS, this token, not expired): otherwise it matches no row,
//     the inbox returns ErrLeaseLost and the handler does not run. That
//     UPDATE takes the row lock for the transaction.
//   - a process's first message, a store behind a wrapper, or
//     middleware.Dedup with another store: the dedup step claims first (a
//     committed claim); the inbox's transaction begins with the fenced
//     UPDATE that marks the record DONE (as above: ErrLeaseLost and no
//     handler unless the record is still this attempt's), runs the
//     handler and commits.
//
// Crash analysis, what each crash costs (the first two items with
// WithInTxClaims; by default the claim is Store.Claim, committed
// synchronously before the effect, and every attempt is counted):
//
//   - one transaction (first delivery, counting broker), crash before or
//     during COMMIT: the database rolls back the claim with the effect; no
//     record is left, so there is no lease to wait for. The broker
//     redelivers with a count of 2, and that attempt is committed before
//     its effect: from then on every crash is counted. A message that kills
//     the process every time is therefore dead-lettered after at most one
//     crash more than its budget (the first delivery's). The broker's
//     count itself is not charged to the budget, because brokers also
//     count deliveries that were nacked without an attempt (in progress
//     elsewhere, a paused consumer, a retry-after delay). A database crash
//     loses nothing committed.
//   - claim committed first, crash after the claim: the attempt is counted;
//     after the lease the redelivery takes over (ResultUnknown) and the
//     record's budget bounds a crash loop exactly. On PostgreSQL this
//     claim's commit is asynchronous: a crash of the consumer loses nothing
//     (the server has the commit); a crash of the database within about
//     three wal_writer_delay of the claim can lose the claim, and then that
//     attempt is not counted. The effect's transaction commits
//     synchronously, which flushes the claim's WAL with it, so no effect is
//     ever committed without its claim.
//   - after COMMIT, before the ack: the redelivery is a duplicate (Claim
//     answers Completed); the effect stays once and the produced messages
//     are re-emitted.
//
// The DONE record's times are those of its INSERT or fenced UPDATE (the
// start of the transaction), and in the one-transaction case an attempt that fails is
// recorded as the first attempt of a record the failure path creates.
//
// Both paths are checked. The spin model docs/model/surely.pml (-DINTX,
// see its README) runs the one transaction step by step under the row
// lock, with a crash possible after every step inside it (rolled back) and
// after COMMIT before the ack, beside the committed claims of the other
// deliveries: no effect is applied twice, an acked message's effect is
// committed, and a message that kills the process on every attempt is
// dead-lettered after at most one death more than its budget (exactly the
// budget on the default path); its seeded mutants (DONE committed after
// the effect's transaction, the attempt count not persisted, an ack before
// COMMIT) are each caught. The crash tests of this package kill a child
// process with SIGKILL inside the effect's transaction, after COMMIT
// before the ack, and on every attempt, on PostgreSQL, MySQL and SQLite,
// with WithInTxClaims and on the default path.
//
// Concurrent deliveries of one key serialize on the row. A claim's INSERT
// waits for a transaction that inserted or updated the row (PostgreSQL's
// unique check, MySQL's row lock, SQLite's write lock), and a claim that
// would take the operation over locks the row, so no claim can take it
// over while an owner's inbox transaction holds it, even if the owner's
// lease expires meanwhile: a concurrent delivery of the same key waits for
// the commit and then finds the operation completed. The price is that it
// waits instead of answering InProgress at once: a handler running longer
// than the dedup step's store timeout (middleware.WithStoreTimeout) or the
// database's own limit on lock waits (PostgreSQL lock_timeout, MySQL
// innodb_lock_wait_timeout, the SQLite busy timeout) makes such a delivery
// fail as a store error (nacked, redelivered). The lease extensions of the running attempt wait
// for the row too (the dedup step may log them as failed or lost;
// harmless, the row lock protects the attempt). Keep inbox handlers short:
// a transaction is no place for slow work anyway. On SQLite the wait is
// for the whole database (see Dialects).
//
// On PostgreSQL and MySQL the handler's transaction is READ COMMITTED.
//
// Produced messages can be written to an outbox table in the same
// transaction (Watermill's forwarder or watermill-sql) instead of being
// returned for the router to publish.
//
// # Concurrent claims of one new key
//
// When several consumers claim the same new key at once (a message
// published twice, a redelivery racing the first delivery), one INSERT
// wins. Each other claim's INSERT waits for the winner's to commit
// (PostgreSQL's unique check waits for the inserting transaction, MySQL's
// row lock, SQLite's write lock), finds the row, and reads it without a
// lock: it answers InProgress with the winner's lease (Until, Wait), with
// no error, no transaction and no attempt counted. So a loser waits for
// one commit, the winner's single-statement claim (on PostgreSQL one WAL
// flush, or none for the inbox's asynchronous claim), plus its own two
// statements; the losers do not queue behind each other's commits (on
// MySQL each loser's INSERT holds the row lock for that statement only,
// and SQLite serializes every write).
// TestConcurrentClaimsOfANewKey checks that answer and that the losers
// take no transaction; BenchmarkClaimContention measures it (see
// docs/BENCHMARKS.md). On SQLite the waits are the busy handler's sleeps
// (1, 2, 5, 10 ms, ... up to the busy timeout), since SQLite has no
// blocking lock: a loser may sleep a few ms past the winner's commit. The
// one-transaction claim of the inbox (WithInTxClaims) holds its new row
// until the handler's transaction commits: a concurrent delivery of the
// same key waits for that whole transaction (see Transactional inbox).
//
// Size the pool for the consumers' concurrency, idle connections included:
// database/sql keeps only 2 idle connections by default
// (db.SetMaxIdleConns), so a burst of 8 concurrent claims closes 6
// connections after it and opens 6 new ones for the next burst, each a
// new PostgreSQL backend on which the store prepares its statements again.
// Measured on a loaded 2-core machine, that made a loser take 265 ms
// (median) instead of 2 ms with 8 idle connections.
//
// # Durability
//
// A record is as durable as the database's commit. With durable settings
// (the defaults: PostgreSQL synchronous_commit=on, MySQL
// innodb_flush_log_at_trx_commit=1; SQLite synchronous=FULL, while
// synchronous=NORMAL in WAL mode survives a process crash but not a power
// loss) a committed transaction survives a crash of the database or of its
// machine. With weaker settings, or a failover to an asynchronous replica,
// the last commits can be lost:
//
//   - lease mode: a lost DONE record lets a later delivery of the operation
//     (a broker redelivery, a duplicate publish) run the external effect
//     again.
//   - transactional inbox: the effect and its DONE mark are lost together,
//     never one without the other. A message not yet acked is redelivered
//     and runs once; one already acked is lost with its effect, as any
//     write acknowledged by a database that then forgets it.
//
// # What a crash does
//
// Lease mode (this store with an ordinary handler: effect outside the
// database, then Complete):
//
//   - before the effect: the claim is counted; after the lease expires the
//     redelivery takes over with ResultUnknown and runs the effect.
//   - after the effect, before Complete commits: the record stays
//     IN_PROGRESS; after the lease the redelivery runs the effect again
//     (ResultUnknown tells the handler to reconcile). Lease mode survives
//     this crash only with an idempotent external effect.
//   - after Complete, before the ack: the redelivery is a duplicate; the
//     stored produced messages are re-emitted.
//
// Transactional inbox (see Transactional inbox for where the claim goes):
//
//   - inside the transaction, before COMMIT (after any part of the effect):
//     the database rolls the transaction back, effect and mark together
//     (and the claim, on a first delivery from a counting broker); the
//     redelivery takes over (after the lease, when the claim was
//     committed) and commits the effect: exactly once.
//   - during COMMIT: the database either committed both or neither.
//   - after COMMIT, before the ack: the redelivery is a duplicate (Claim
//     answers Completed); the effect stays once and the produced messages
//     are re-emitted.
//
// So the inbox survives a process crash at any point with the effect exactly
// once, provided the effect is entirely inside the transaction (a call to
// an external API inside the handler is lease mode again).
//
// A crash or restart of the database, in either mode, rolls back the
// transactions in flight: the consumer's call fails, the message is nacked
// and redelivered, and what was committed stays (see Durability).
//
// # Ownership
//
// The store never closes the *sql.DB it was given and starts no goroutine:
// there is nothing to close. An inbox transaction and a lease extension of
// the same operation can be open at once: do not limit the pool to a single
// connection (db.SetMaxOpenConns(1)), or the extension waits for the pool.
package sqlstore
