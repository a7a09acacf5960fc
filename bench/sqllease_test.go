package bench

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/sqlcount"
)

// sqlLeaseNaive is the naive lease loop on SQL, per dialect: two
// autocommitted statements per message, as the naive Redis loop
// (naiveOp) is two commands.
//
//	claim:    INSERT INTO lease (k, token, state) VALUES ($1, $2, 'in_progress') ON CONFLICT DO NOTHING
//	complete: UPDATE lease SET state = 'done' WHERE k = $1 AND token = $2
//
// It keeps no attempt count, history, fingerprint, lease expiry or
// outcome: the least a claim-then-complete dedup on SQL can send.
var sqlLeaseNaive = map[sqlstore.Dialect]struct{ ddl, claim, complete string }{
	sqlstore.Postgres: {
		ddl:      `CREATE TABLE lease_%s (k TEXT PRIMARY KEY, token TEXT NOT NULL, state TEXT NOT NULL)`,
		claim:    `INSERT INTO lease_%s (k, token, state) VALUES ($1, $2, 'in_progress') ON CONFLICT DO NOTHING`,
		complete: `UPDATE lease_%s SET state = 'done' WHERE k = $1 AND token = $2`,
	},
	sqlstore.MySQL: {
		ddl:      `CREATE TABLE lease_%s (k VARBINARY(255) PRIMARY KEY, token VARBINARY(64) NOT NULL, state VARBINARY(16) NOT NULL) ENGINE=InnoDB`,
		claim:    `INSERT IGNORE INTO lease_%s (k, token, state) VALUES (?, ?, 'in_progress')`,
		complete: `UPDATE lease_%s SET state = 'done' WHERE k = ? AND token = ?`,
	},
	sqlstore.SQLite: {
		ddl:      `CREATE TABLE lease_%s (k TEXT PRIMARY KEY, token TEXT NOT NULL, state TEXT NOT NULL)`,
		claim:    `INSERT INTO lease_%s (k, token, state) VALUES (?, ?, 'in_progress') ON CONFLICT DO NOTHING`,
		complete: `UPDATE lease_%s SET state = 'done' WHERE k = ? AND token = ?`,
	},
}

// sqlLeaseOp processes message i: a claim, then a complete.
type sqlLeaseOp func(ctx context.Context, i int) error

var sqlLeaseVariants = []struct {
	name  string
	newOp func(b *testing.B, d inboxDB, db *sql.DB, sfx string) sqlLeaseOp
}{
	{"naive", naiveSQLLease},
	{"surely", surelySQLLease},
}

func naiveSQLLease(_ *testing.B, d inboxDB, db *sql.DB, sfx string) sqlLeaseOp {
	q := sqlLeaseNaive[d.dialect]
	claim, complete := fmt.Sprintf(q.claim, sfx), fmt.Sprintf(q.complete, sfx)
	return func(ctx context.Context, i int) error {
		k, token := strconv.Itoa(i), "t"+strconv.Itoa(i)
		for _, stmt := range []string{claim, complete} {
			res, err := db.ExecContext(ctx, stmt, k, token)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("message %d: %d rows", i, n)
			}
		}
		return nil
	}
}

// surelySQLLease is sqlstore's Claim and Complete, as the dedup step calls
// them for a fresh message in lease mode (no outcome messages).
func surelySQLLease(b *testing.B, d inboxDB, db *sql.DB, sfx string) sqlLeaseOp {
	store, err := sqlstore.New(db, d.dialect, sqlstore.WithTable("surely_inbox_"+sfx))
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, i int) error {
		res, err := store.Claim(ctx, idempotency.ClaimRequest{
			Namespace: namespace, Key: strconv.Itoa(i), Fingerprint: "fp-" + strconv.Itoa(i),
			Lease: time.Minute, MaxAttempts: 10,
		})
		if err != nil {
			return err
		}
		if res.Status != idempotency.Acquired {
			return fmt.Errorf("claim %d: %v", i, res.Status)
		}
		return store.Complete(ctx, res.Lease, idempotency.Outcome{})
	}
}

// BenchmarkSQLLease measures sqlstore in lease mode, the dedup step's
// Claim and Complete of a new key, against the naive loop
// (sqlLeaseNaive), on PostgreSQL, MySQL/MariaDB and SQLite (the places
// of BenchmarkInbox), with 1 and 16 concurrent handlers. ns/op is per
// message.
//
// Metrics, per message: msgs/s; x_naive (surely only): the naive loop's
// ns/op over surely's, from the same process; stmts/msg, commits/msg,
// prepares/msg and roundtrips/msg as in BenchmarkInbox.
func BenchmarkSQLLease(b *testing.B) {
	for _, d := range inboxDBs {
		b.Run(d.name, func(b *testing.B) {
			for _, handlers := range inboxHandlers {
				group := "sqllease/" + d.name + "/handlers=" + strconv.Itoa(handlers)
				for _, v := range sqlLeaseVariants {
					b.Run(fmt.Sprintf("handlers=%d/%s", handlers, v.name), func(b *testing.B) {
						runSQLLease(b, d, v.newOp, handlers)
						if v.name == "naive" {
							setBaseline(b, group)
						} else {
							reportSpeedup(b, group, "x_naive")
						}
					})
				}
			}
		})
	}
}

func runSQLLease(b *testing.B, d inboxDB, newOp func(*testing.B, inboxDB, *sql.DB, string) sqlLeaseOp, handlers int) {
	place := d.open(b)
	sfx := strings.ToLower(watermill.NewShortUUID())
	ctx, cancel := context.WithTimeout(context.Background(), inboxRunTimeout)
	defer cancel()

	setup := place.connect(b, nil)
	if _, err := setup.ExecContext(ctx, fmt.Sprintf(sqlLeaseNaive[d.dialect].ddl, sfx)); err != nil {
		b.Fatal(err)
	}
	if store, err := sqlstore.New(setup, d.dialect, sqlstore.WithTable("surely_inbox_"+sfx)); err != nil {
		b.Fatal(err)
	} else if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if d.dialect == sqlstore.MySQL {
		b.Cleanup(func() {
			dropTables(setup, sfx)
			_, _ = setup.ExecContext(context.Background(), "DROP TABLE IF EXISTS lease_"+sfx)
		})
	}
	setup.SetMaxIdleConns(0)

	var counts sqlcount.Counter
	db := place.connect(b, &counts)
	if d.dialect != sqlstore.SQLite {
		db.SetMaxOpenConns(handlers)
		db.SetMaxIdleConns(handlers)
	}
	op := newOp(b, d, db, sfx)
	for range 2 {
		warmSQLPool(ctx, b, db, handlers, false)
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
				if err := op(ctx, i); err != nil {
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
	reportSQLCounts(b, got, d.dialect)
	if place.pg != nil {
		// The backends report their counts when they exit.
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
		place.pg.idleXactCommit(b)
		reportHOT(b, setup, "surely_inbox_"+sfx)
	}
}
