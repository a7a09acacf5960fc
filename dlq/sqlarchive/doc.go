// Package sqlarchive is an archive.Archive on PostgreSQL, MySQL/MariaDB or
// SQLite, through database/sql.
//
//	db, err := sql.Open("pgx", "postgres://...") // yours: the archive never closes it
//	arch, err := sqlarchive.New(db, sqlstore.Postgres)
//	err = arch.Migrate(ctx) // creates the tables unless they exist
//	h, err := handler.New(fn, handler.WithStore(store, "billing"),
//		handler.WithDeadLetter(arch, "dead")) // the topic is ignored
//
// It imports no driver: open the *sql.DB with the driver of your choice
// (tested with github.com/jackc/pgx/v5/stdlib, github.com/go-sql-driver/mysql
// and modernc.org/sqlite) and name its dialect (sqlstore.Dialect, the one the store and the outbox take). It runs the conformance
// suite dlq/archivetest against each of the three.
//
// # Tables
//
// archive.WithPrefix (default "surely_dlq") names four tables (five on MySQL):
//
//	<prefix>_entries   one row per entry: seq (auto-increment, the entry's
//	                   Seq), id (unique), payload and metadata (binary,
//	                   byte for byte), copies, archived_at, and the
//	                   envelope fields that filters and stats read: reason,
//	                   original_topic, handler, op_key, error, error_type
//	                   (root of the type chain), dead_lettered_at (Unix ns),
//	                   replay_id; and the lifecycle: state, state_at (Unix
//	                   ns), note, failed_again_as
//	<prefix>_replayed  (entry_id, replay_id): the runs that republished
//	                   each entry (Mark to replayed), in order
//	<prefix>_runs      replay runs, JSON
//	<prefix>_counts    the number of entries per (reason, original_topic,
//	                   handler, error_type, state), kept by every write in
//	                   its own transaction (MySQL keys it by grp, a SHA-256
//	                   of the columns; PostgreSQL by the SHA-256 of each)
//	<prefix>_seqlock   MySQL only: one row, the archive's write lock
//
// Values compare byte for byte in every dialect, as Filter.Match compares
// them: "orders" and "orders " are two topics, "k1" and "k1 " two keys. On
// MySQL every text column is binary (VARBINARY or LONGBLOB, as sqlstore's
// keys), since the utf8mb4 collations are PAD SPACE or case-insensitive.
// The values a broker or an application chooses (reason, original topic,
// handler, operation key, error, error type) have no length limit on any
// dialect; MySQL indexes the first 255 bytes of the topic, PostgreSQL its
// MD5 (an index entry there holds at most about 2,700 bytes). Entry IDs are
// at most 2,048 bytes on MySQL (about 2,700 on PostgreSQL, whose indexes
// take no longer keys), replay run IDs 512 (replay.WithID's limit), notes
// 1,000 characters (archive.Mark's), call sites are cut to 512 bytes.
//
// Every Filter field is a WHERE condition: List is one query plus one for
// the page's replay marks. Stats of a filter by those five columns only
// (Reason, Topic, Handler, ErrorType, States: an overview, a gauge, a
// console's list) reads the counts table, plus two index lookups per state
// for the oldest and newest times: about a millisecond at 100,000 entries
// (docs/BENCHMARKS.md). Any other filter (a key, a text, a time window, a
// replay run) is one GROUP BY over the entries it selects, which reads
// them all. Indexes cover the dead-lettering time, (original_topic, seq)
// (see above for MySQL and PostgreSQL), (state, seq) and (state,
// dead_lettered_at); other filters scan.
// ErrorContains and Search are literal substrings (no LIKE wildcards). The filter
// columns hold the envelope values made valid UTF-8 without NUL bytes (what
// every dialect's text columns accept); the metadata column keeps them
// exactly, and entries are always read from it.
//
// # Ordering
//
// Publish stores a batch in one transaction and is idempotent by ID (ON
// CONFLICT / ON DUPLICATE KEY counts a copy). Every write (Publish, Mark,
// Delete, Prune) takes the archive's write lock first, held until it
// commits, and changes the counts in the same transaction as the entries,
// so Stats never sees one without the other. Seq order is commit order,
// as archive.Entry.Seq promises to cursors (List After, replay runs, the
// re-failure watch): each publish takes a lock held until it commits
// before its rows take their Seqs, so a transaction that took a lower Seq
// has always committed before a higher one is visible. Without it two
// concurrent publishes could commit out of order, and a List between the
// commits paged past the later-committed lower Seq for good. The lock is a
// transaction-level advisory lock on PostgreSQL (keyed by the table
// prefix), the row of <prefix>_seqlock (SELECT ... FOR UPDATE) on MySQL;
// SQLite runs one write transaction at a time, and each starts with a
// write that takes it. Seqs may have gaps (a copy of an archived ID uses
// one up).
//
// The cost: concurrent publishes to one archive are serialised, commit
// included. Measured on 2 shared, loaded cores (load average ~17, so
// ±30 %), 256-byte envelopes, one Publish per transaction:
//
//	go test ./dlq/sqlarchive -run '^$' -bench 'PublishParallel/(postgres|mysql)' -benchtime 1500x -count 2
//
//	publishes/s          before (no lock)   after
//	PostgreSQL,  2 gor.       800-1300      540-730
//	PostgreSQL, 16 gor.      4300-5000      300-320
//	MariaDB,     2 gor.       690-1400      500-790
//	MariaDB,    16 gor.      2200-3200      500-1400
//
// Keeping the counts (see Tables) costs one more statement per transaction:
// measured 2026-12-02 on a quiet machine, PostgreSQL 2 goroutines 721-767
// publishes/s (1,009-1,036 before), 16 goroutines 516-525 (537-694); MariaDB
// 723-900 and 728-817 (1,164-1,340 and 883-1,111); SQLite unchanged
// (docs/BENCHMARKS.md).
//
// Dead letters are the exception path, so a few hundred archived per
// second is the budget of one archive; a burst beyond that waits for the
// lock (the dead-letter step's publish takes longer) rather than failing.
// An application that archives faster can spread its handlers over
// archives with different prefixes. Marks (a replay's, a discard) wait for
// the same lock: a replay of 1,000 entries marks them in a few
// transactions, not one per entry.
//
// # Upgrades
//
// Migrate creates what an archive of an earlier version lacks (the
// lifecycle columns, <prefix>_seqlock on MySQL, <prefix>_counts and the
// (state, dead_lettered_at) index). On MySQL it turns the utf8mb4_bin
// VARCHAR and TEXT columns of earlier versions into binary ones (one ALTER
// TABLE per table, which copies the table while writers wait: 13 s for
// 100,000 entries of about 1 KB on MariaDB 10.11, 2 cores at load 23); on
// PostgreSQL it replaces the topic's index and the counts' primary key,
// which refused values beyond about 2,700 bytes, by the indexes of hashes
// above. It then counts the entries into <prefix>_counts under the write
// lock, per exact value (so counts of keys that earlier MySQL columns
// merged are right again): one GROUP BY over the entries, about half a
// second at 100,000 on PostgreSQL or SQLite. Run it before deploying this
// version: until then Publish fails (the counts table is missing) or
// refuses what the earlier schema refused. Every writer of an archive must
// run this version: a writer of an earlier one changes entries without
// their counts (on PostgreSQL, after this Migrate, it fails), and Stats of
// the counted filters is then off until Migrate runs again (it recounts
// every time, so it also repairs counts changed by hand).
//
// # Durability
//
// Publish returns once its transaction committed, and Ingest (or the
// dead-letter step) then acks the broker's copy: an acknowledged dead
// letter survives whatever the database's committed transactions survive.
// With the defaults (PostgreSQL synchronous_commit on, InnoDB
// innodb_flush_log_at_trx_commit=1, SQLite's synchronous=FULL) that is a
// crash of the process or of the machine; a
// database tuned to acknowledge commits before they reach the disk
// (synchronous_commit off, innodb_flush_log_at_trx_commit 0 or 2, SQLite
// synchronous below FULL) can lose the last ones, and asynchronous
// replicas can lose them in a failover. The archive does not check these
// settings.
//
// # Retention
//
// Nothing is deleted unless asked: dlq.WithRetention(d) makes Prune delete the
// entries dead-lettered more than d ago, in one transaction, and log how
// many (slog, Info). Call it from a ticker of your own.
package sqlarchive
