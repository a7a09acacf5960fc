package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/sqlcount"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/internal/testsql"
)

const (
	// inboxCounters is how many counter rows the effect spreads over
	// (message i updates row i % inboxCounters), so that 16 handlers do
	// not all queue on one row lock. Both variants use the same rows.
	inboxCounters = 8

	// inboxRunTimeout bounds one run of BenchmarkInbox.
	inboxRunTimeout = 10 * time.Minute
)

// inboxHandlers are the numbers of concurrent handlers of BenchmarkInbox.
var inboxHandlers = []int{1, 16}

// inboxDB is a database BenchmarkInbox runs on.
type inboxDB struct {
	name    string
	dialect sqlstore.Dialect
	// open prepares a place of the run's own (a private database on
	// PostgreSQL, a file on SQLite, the run's tables on MySQL, dropped when
	// the run ends) and returns it.
	open func(b *testing.B) *inboxPlace
	// sql is the hand-written statements: insert the key unless present,
	// bump a counter row.
	insert, update string
	// ddl creates the processed and counters tables; %s is the suffix of
	// their names.
	ddl []string
}

// inboxPlace is where one run of BenchmarkInbox writes.
type inboxPlace struct {
	// connect opens a pool on the place; through c when c is not nil.
	connect func(b *testing.B, c *sqlcount.Counter) *sql.DB
	// pg reads the server's statistics of the place (PostgreSQL only).
	pg *pgPlace
}

var inboxDBs = []inboxDB{
	{
		name: "postgres", dialect: sqlstore.Postgres, open: openPostgresPlace,
		insert: `INSERT INTO processed_%s (k) VALUES ($1) ON CONFLICT DO NOTHING`,
		update: `UPDATE counters_%s SET n = n + 1 WHERE id = $1`,
		ddl: []string{
			`CREATE TABLE processed_%s (k TEXT PRIMARY KEY)`,
			`CREATE TABLE counters_%s (id INT PRIMARY KEY, n BIGINT NOT NULL)`,
		},
	},
	{
		name: "mysql", dialect: sqlstore.MySQL, open: openMySQLPlace,
		insert: `INSERT IGNORE INTO processed_%s (k) VALUES (?)`,
		update: `UPDATE counters_%s SET n = n + 1 WHERE id = ?`,
		ddl: []string{
			`CREATE TABLE processed_%s (k VARBINARY(255) PRIMARY KEY) ENGINE=InnoDB`,
			`CREATE TABLE counters_%s (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB`,
		},
	},
	{
		name: "sqlite", dialect: sqlstore.SQLite, open: openSQLitePlace,
		insert: `INSERT INTO processed_%s (k) VALUES (?) ON CONFLICT DO NOTHING`,
		update: `UPDATE counters_%s SET n = n + 1 WHERE id = ?`,
		ddl: []string{
			`CREATE TABLE processed_%s (k TEXT PRIMARY KEY)`,
			`CREATE TABLE counters_%s (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)`,
		},
	},
}

// inboxVariant builds a message processor on a run's pool.
type inboxVariant struct {
	name string
	// newOp returns the processing of one message on db, whose tables
	// have the suffix sfx.
	newOp func(b *testing.B, d inboxDB, db *sql.DB, sfx string) func(*message.Message) error
}

var inboxVariants = []inboxVariant{
	{"handwritten", handwrittenInbox},
	{"surely", surelyInbox},
	{"surely_counted", surelyInboxCounted},
}

// handwrittenInbox is the inbox a careful user writes by hand, one
// transaction per message:
//
//	BEGIN
//	INSERT INTO processed (k) VALUES ($1) ON CONFLICT DO NOTHING  -- MySQL: INSERT IGNORE
//	UPDATE counters SET n = n + 1 WHERE id = $2                    -- only if the insert inserted
//	COMMIT
//
// with the driver's default transaction options.
func handwrittenInbox(_ *testing.B, d inboxDB, db *sql.DB, sfx string) func(*message.Message) error {
	insert, update := fmt.Sprintf(d.insert, sfx), fmt.Sprintf(d.update, sfx)
	return func(msg *message.Message) error {
		ctx := msg.Context()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		res, err := tx.ExecContext(ctx, insert, msg.Metadata.Get(idempotency.DefaultMetadataKey))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 1 {
			if _, err := tx.ExecContext(ctx, update, counterOf(msg)); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
}

// surelyInbox is handler.New(store.Inbox(effect), WithStore, WithDeadLetter)
// with sqlstore on the same pool, the effect the hand-written UPDATE in the
// inbox's transaction.
func surelyInbox(b *testing.B, d inboxDB, db *sql.DB, sfx string) func(*message.Message) error {
	store, err := sqlstore.New(db, d.dialect, sqlstore.WithTable("surely_inbox_"+sfx), sqlstore.WithInTxClaims())
	if err != nil {
		b.Fatal(err)
	}
	update := fmt.Sprintf(d.update, sfx)
	effect := store.Inbox(func(ctx context.Context, tx *sql.Tx, msg *message.Message) ([]*message.Message, error) {
		_, err := tx.ExecContext(ctx, update, counterOf(msg))
		return nil, err
	})
	ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	b.Cleanup(func() { _ = ps.Close() })
	h := surelyChain(b, ps, effect, store)
	return func(msg *message.Message) error {
		_, err := h(msg)
		return err
	}
}

// surelyInboxCounted is surelyInbox for a first delivery from a broker
// that counts deliveries (NATS, RabbitMQ quorum queues, SQS, Redis
// Streams): the message's context carries delivery.Info{Count: 1}, so with
// WithInTxClaims the claim, the effect and DONE are one transaction (the
// sqlstore package doc). A process's first message takes the general path.
func surelyInboxCounted(b *testing.B, d inboxDB, db *sql.DB, sfx string) func(*message.Message) error {
	process := surelyInbox(b, d, db, sfx)
	return func(msg *message.Message) error {
		msg.SetContext(delivery.WithInfo(msg.Context(), delivery.Info{Count: 1}))
		return process(msg)
	}
}

// counterOf is the counter row message i updates: i % inboxCounters, i
// being the number at the end of its key.
func counterOf(msg *message.Message) int {
	key := msg.Metadata.Get(idempotency.DefaultMetadataKey)
	i, _ := strconv.Atoi(key[strings.LastIndexByte(key, '-')+1:])
	return i % inboxCounters
}

// BenchmarkInbox compares surely's transactional inbox (idempotency/sqlstore
// Inbox through handler.New) with the hand-written one (handwrittenInbox),
// on PostgreSQL, MySQL/MariaDB and SQLite (a file, WAL, synchronous NORMAL,
// one connection), with 1 and 16 concurrent handlers. Every message is new
// (a unique key); the effect is one UPDATE of one of 8 counter rows, in
// the message's transaction in every variant; handlers call the chain
// directly (no broker). "surely" is a delivery without broker facts (Kafka,
// GoChannel: the claim commits first), "surely_counted" a first delivery
// from a broker that counts deliveries (one transaction). ns/op is per
// message.
//
// Metrics, per message: msgs/s; x_handwritten (surely variants): the
// hand-written loop's ns/op over surely's, from the same process (0.25:
// a quarter of its throughput); stmts/msg: statements the client executed
// (BEGIN and COMMIT included), counted by a database/sql driver wrapper
// (internal/sqlcount); commits/msg: COMMITs plus statements run outside a
// transaction, counted by the same; prepares/msg, when the driver prepares;
// roundtrips/msg (PostgreSQL, MySQL): writes answered by a read on the
// connections; and on PostgreSQL, from the server: xact_commit/msg, the
// delta of pg_stat_database.xact_commit of the run's private database
// (surely_bench_<random>, dropped afterwards); wal_bytes/msg, the WAL
// written (pg_current_wal_lsn) while the run was timed; and wal_syncs/msg,
// the delta of pg_stat_wal.wal_sync (WAL flushes) over the run. The last
// two are the whole server's: other clients of the server add to them.
//
// Without SURELY_POSTGRES_URL or SURELY_MYSQL_URL that database is skipped
// (failed under SURELY_REQUIRE_SERVICES=1); SQLite always runs.
func BenchmarkInbox(b *testing.B) {
	for _, d := range inboxDBs {
		b.Run(d.name, func(b *testing.B) {
			for _, handlers := range inboxHandlers {
				group := "inbox/" + d.name + "/handlers=" + strconv.Itoa(handlers)
				for _, v := range inboxVariants {
					b.Run(fmt.Sprintf("handlers=%d/%s", handlers, v.name), func(b *testing.B) {
						runInbox(b, d, v, handlers)
						if v.name == "handwritten" {
							setBaseline(b, group)
						} else {
							reportSpeedup(b, group, "x_handwritten")
						}
					})
				}
			}
		})
	}
}

func runInbox(b *testing.B, d inboxDB, v inboxVariant, handlers int) {
	place := d.open(b)
	sfx := strings.ToLower(watermill.NewShortUUID())
	ctx, cancel := context.WithTimeout(context.Background(), inboxRunTimeout)
	defer cancel()

	// The tables, through a pool that is not counted.
	setup := place.connect(b, nil)
	for _, q := range d.ddl {
		if _, err := setup.ExecContext(ctx, fmt.Sprintf(q, sfx)); err != nil {
			b.Fatal(err)
		}
	}
	for id := range inboxCounters {
		if _, err := setup.ExecContext(ctx, fmt.Sprintf(`INSERT INTO counters_%s (id, n) VALUES (%d, 0)`, sfx, id)); err != nil {
			b.Fatal(err)
		}
	}
	if store, err := sqlstore.New(setup, d.dialect, sqlstore.WithTable("surely_inbox_"+sfx)); err != nil {
		b.Fatal(err)
	} else if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if d.dialect == sqlstore.MySQL {
		b.Cleanup(func() { dropTables(setup, sfx) })
	}
	// No idle connection of setup's stays: on PostgreSQL, idleXactCommit
	// waits until the database has no backend.
	setup.SetMaxIdleConns(0)
	var xactBefore, syncsBefore int64
	if place.pg != nil {
		place.pg.idleXactCommit(b)
	}

	var counts sqlcount.Counter
	db := place.connect(b, &counts)
	if d.dialect != sqlstore.SQLite {
		db.SetMaxOpenConns(handlers)
		db.SetMaxIdleConns(handlers)
	}
	op := v.newOp(b, d, db, sfx)
	// Twice: pgx pings a connection the first time the pool hands it out
	// again (database/sql's ResetSession), and these pings are
	// transactions of their own.
	for range 2 {
		warmSQLPool(ctx, b, db, handlers, place.pg != nil)
	}
	if place.pg != nil {
		// The setup's backends are gone and warmSQLPool had the pool's
		// report their counts: from here on, the database's commits are
		// the run's.
		xactBefore = place.pg.xactCommit(b)
		syncsBefore = place.pg.walSyncs(b)
	}
	run := watermill.NewShortUUID()

	var walBefore string
	if place.pg != nil {
		walBefore = place.pg.walLSN(b)
	}
	before := counts.Snapshot()
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	b.ResetTimer()
	for range handlers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N || ctx.Err() != nil {
					return
				}
				msg := newMessage(run, i)
				msg.SetContext(ctx)
				if err := op(msg); err != nil {
					once.Do(func() { first = fmt.Errorf("message %d: %w", i, err) })
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		b.Fatal(first)
	}
	got := counts.Snapshot().Sub(before)
	msgs := reportSQLCounts(b, got, d.dialect)
	if place.pg != nil {
		b.ReportMetric(float64(place.pg.walDiff(b, walBefore))/msgs, "wal_bytes/msg")
		// The server counts a backend's commits when it reports its
		// statistics, at the latest when it exits: close the pool, wait
		// until the database has no backend left.
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(place.pg.idleXactCommit(b)-xactBefore)/msgs, "xact_commit/msg")
		b.ReportMetric(float64(place.pg.walSyncs(b)-syncsBefore)/msgs, "wal_syncs/msg")
		reportHOT(b, setup, "surely_inbox_"+sfx)
	}

	// Every message had its effect, once.
	var sum int64
	if err := setup.QueryRowContext(ctx, fmt.Sprintf(`SELECT COALESCE(SUM(n), 0) FROM counters_%s`, sfx)).Scan(&sum); err != nil {
		b.Fatal(err)
	}
	if sum != int64(b.N) {
		b.Fatalf("counters sum to %d after %d messages", sum, b.N)
	}
}

// warmSQLPool opens n connections (at most the pool's limit) before the
// timer starts. With pgFlush, each runs pg_stat_force_next_flush(), so that
// its backend reports its counts (its start included) before the query
// returns.
func warmSQLPool(ctx context.Context, b *testing.B, db *sql.DB, n int, pgFlush bool) {
	if limit := db.Stats().MaxOpenConnections; limit > 0 {
		n = min(n, limit)
	}
	conns := make([]*sql.Conn, 0, n)
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if pgFlush {
			_, err = c.ExecContext(ctx, `SELECT pg_stat_force_next_flush()`)
		} else {
			err = c.PingContext(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		_ = c.Close() // back to the pool
	}
}

func dropTables(db *sql.DB, sfx string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, t := range []string{"processed_", "counters_", "surely_inbox_"} {
		_, _ = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t+sfx)
	}
}

// pgPlace is a private PostgreSQL database and a connection to the
// server's own database to read its statistics from (its queries are not
// counted in the private database's).
type pgPlace struct {
	name  string
	admin *sql.DB
}

func openPostgresPlace(b *testing.B) *inboxPlace {
	admin := testsql.Postgres(b)
	url := testenv.URL(b, "SURELY_POSTGRES_URL")
	name := "surely_bench_" + strings.ToLower(watermill.NewShortUUID())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	// Registered after testsql's Close of admin, so it runs first; FORCE
	// ends the backends of pools not yet closed (theirs close later).
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			b.Errorf("drop database %s: %v", name, err)
		}
	})
	connect := func(b *testing.B, c *sqlcount.Counter) *sql.DB {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			b.Fatal(err)
		}
		cfg.Database = name
		var conn = stdlib.GetConnector(*cfg)
		if c != nil {
			cfg.DialFunc = pgconn.DialFunc(c.Dial(sqlcount.DialFunc(cfg.DialFunc)))
			conn = c.Connector(stdlib.GetConnector(*cfg))
		}
		db := sql.OpenDB(conn)
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	return &inboxPlace{connect: connect, pg: &pgPlace{name: name, admin: admin}}
}

// idleXactCommit waits until no backend is connected to the database and
// returns its xact_commit. A backend reports its counts to the statistics
// at most once a second while it runs, and at the latest when it exits.
func (p *pgPlace) idleXactCommit(b *testing.B) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		var backends, commits int64
		err := p.admin.QueryRowContext(ctx,
			`SELECT numbackends, xact_commit FROM pg_stat_database WHERE datname = $1`, p.name).Scan(&backends, &commits)
		if err != nil {
			b.Fatalf("pg_stat_database of %s: %v", p.name, err)
		}
		if backends == 0 {
			return commits
		}
		// Not a sleep to let time pass: the server has no event to wait
		// for, so poll, within ctx's bound.

		select {
		case <-ctx.Done():
			b.Fatalf("%s still has %d backends", p.name, backends)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// reportHOT reports the updates of table per message (upd/msg) and the
// share of them that were HOT (hot_pct, from pg_stat_user_tables: an
// update that wrote no index entry), read through db, a pool on the
// run's private database, once every backend that wrote has exited (its
// counts reported). Nothing when table had no update.
func reportHOT(b *testing.B, db *sql.DB, table string) {
	var upd, hot int64
	err := db.QueryRowContext(context.Background(),
		`SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = $1`, table).Scan(&upd, &hot)
	if err != nil {
		b.Fatalf("pg_stat_user_tables of %s: %v", table, err)
	}
	b.ReportMetric(float64(upd)/float64(b.N), "upd/msg")
	if upd > 0 {
		b.ReportMetric(100*float64(hot)/float64(upd), "hot_pct")
	}
}

func (p *pgPlace) xactCommit(b *testing.B) int64 {
	var n int64
	err := p.admin.QueryRowContext(context.Background(),
		`SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, p.name).Scan(&n)
	if err != nil {
		b.Fatalf("pg_stat_database of %s: %v", p.name, err)
	}
	return n
}

// walSyncs is pg_stat_wal.wal_sync: the WAL flushes to disk of the whole
// server, as far as its backends have reported them.
func (p *pgPlace) walSyncs(b *testing.B) int64 {
	var n int64
	if err := p.admin.QueryRowContext(context.Background(), `SELECT wal_sync FROM pg_stat_wal`).Scan(&n); err != nil {
		b.Fatalf("pg_stat_wal: %v", err)
	}
	return n
}

func (p *pgPlace) walLSN(b *testing.B) string {
	var lsn string
	if err := p.admin.QueryRowContext(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// walDiff is the WAL written since the position from, in bytes.
func (p *pgPlace) walDiff(b *testing.B, from string) int64 {
	var n int64
	err := p.admin.QueryRowContext(context.Background(),
		`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, from).Scan(&n)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

func openMySQLPlace(b *testing.B) *inboxPlace {
	testsql.MySQL(b) // skips or fails when the server is missing
	dsn := testenv.URL(b, "SURELY_MYSQL_URL")
	connect := func(b *testing.B, c *sqlcount.Counter) *sql.DB {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			b.Fatal(err)
		}
		if c != nil {
			cfg.DialFunc = c.Dial(nil)
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if c != nil {
			conn = c.Connector(conn)
		}
		db := sql.OpenDB(conn)
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	return &inboxPlace{connect: connect}
}

func openSQLitePlace(b *testing.B) *inboxPlace {
	dsn := "file:" + filepath.Join(b.TempDir(), "inbox.db") +
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	probe, err := sql.Open("sqlite", "")
	if err != nil {
		b.Fatal(err)
	}
	drv := probe.Driver()
	_ = probe.Close()
	connect := func(b *testing.B, c *sqlcount.Counter) *sql.DB {
		conn, err := sqlcount.DriverConnector(drv, dsn)
		if err != nil {
			b.Fatal(err)
		}
		if c != nil {
			conn = c.Connector(conn)
		}
		db := sql.OpenDB(conn)
		// One connection, as in surelySQLiteInbox: SQLite has one writer
		// at a time, and Go's pool queues the others.
		db.SetMaxOpenConns(1)
		b.Cleanup(func() { _ = db.Close() })
		return db
	}
	return &inboxPlace{connect: connect}
}

// reportSQLCounts reports a timed run's rate and what the driver wrapper
// counted per message (statements, commits, prepares and, off SQLite,
// round trips), and returns the number of messages.
func reportSQLCounts(b *testing.B, got sqlcount.Counts, dialect sqlstore.Dialect) float64 {
	msgs := float64(b.N)
	b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(got.Statements())/msgs, "stmts/msg")
	b.ReportMetric(float64(got.Transactions())/msgs, "commits/msg")
	if got.Prepares > 0 {
		b.ReportMetric(float64(got.Prepares)/msgs, "prepares/msg")
	}
	if dialect != sqlstore.SQLite {
		b.ReportMetric(float64(got.RoundTrips)/msgs, "roundtrips/msg")
	}
	return msgs
}
