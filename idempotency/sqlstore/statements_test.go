package sqlstore_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/sqlcount"
	"github.com/surely-dev/surely/internal/testenv"
)

// countedDB opens a second pool on b's database whose statements c counts.
func countedDB(t *testing.T, b backend, c *sqlcount.Counter) *sql.DB {
	t.Helper()
	drv := b.open(t).Driver()
	var dsn string
	switch b.dialect {
	case sqlstore.SQLite:
		dsn = sqliteDSN(filepath.Join(t.TempDir(), "counted.db"))
	case sqlstore.Postgres:
		dsn = testenv.URL(t, "SURELY_POSTGRES_URL")
	case sqlstore.MySQL:
		dsn = testenv.URL(t, "SURELY_MYSQL_URL")
	}
	conn, err := sqlcount.DriverConnector(drv, dsn)
	require.NoError(t, err)
	db := sql.OpenDB(c.Connector(conn))
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// The statements each operation sends, as the package doc lists them:
// Complete, Release and Extend are one fenced statement each (Extend two
// on MySQL, which has no RETURNING), a claim of a new key one INSERT, a
// claim of a key with a row that changes nothing (a duplicate) the INSERT
// and a read without a transaction, and one that takes the key over the
// INSERT, the read and a transaction that reads the clock in its locking
// SELECT (separately on MySQL).
func TestStatementsPerOperation(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		var c sqlcount.Counter
		db := countedDB(t, b, &c)
		s := newStore(t, db, b.dialect)
		ctx := t.Context()
		count := func(op func()) sqlcount.Counts {
			before := c.Snapshot()
			op()
			return c.Snapshot().Sub(before)
		}
		claim := func(key string) idempotency.ClaimResult {
			res, err := s.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 5})
			require.NoError(t, err)
			return res
		}
		claim("warm-up") // prepares the statements

		var lease idempotency.Lease
		got := count(func() { lease = claim("k").Lease })
		require.EqualValues(t, map[sqlstore.Dialect]int64{sqlstore.Postgres: 1, sqlstore.MySQL: 1, sqlstore.SQLite: 1}[b.dialect],
			got.Statements(), "claim of a new key: %+v", got)

		// A duplicate while the lease is live: the INSERT that finds the
		// row and one read of it, no transaction (no row lock).
		got = count(func() { require.Equal(t, idempotency.InProgress, claim("k").Status) })
		require.EqualValues(t, 2, got.Statements(), "claim of a key in progress: %+v", got)
		require.Zero(t, got.Begins, "claim of a key in progress: %+v", got)

		got = count(func() {
			_, err := s.Extend(ctx, lease, time.Minute)
			require.NoError(t, err)
		})
		require.EqualValues(t, map[sqlstore.Dialect]int64{sqlstore.Postgres: 1, sqlstore.MySQL: 2, sqlstore.SQLite: 1}[b.dialect],
			got.Statements(), "extend: %+v", got)
		require.Zero(t, got.Begins, "extend: %+v", got)

		got = count(func() { require.NoError(t, s.Release(ctx, lease, idempotency.Failure{Error: "x"})) })
		require.EqualValues(t, 1, got.Statements(), "release: %+v", got)

		got = count(func() { lease = claim("k").Lease })
		require.Equal(t, 2, lease.Attempt)
		// The INSERT that found the row, the read that finds the claim
		// writes, BEGIN, the locking SELECT, the UPDATE, COMMIT (MySQL:
		// and a read of the clock; SQLite: and the INSERT again, first in
		// the transaction, for the write lock).
		require.EqualValues(t, map[sqlstore.Dialect]int64{sqlstore.Postgres: 6, sqlstore.MySQL: 7, sqlstore.SQLite: 7}[b.dialect],
			got.Statements(), "claim of a key with a row: %+v", got)

		got = count(func() { require.NoError(t, s.Complete(ctx, lease, idempotency.Outcome{})) })
		require.EqualValues(t, 1, got.Statements(), "complete: %+v", got)
		require.Zero(t, got.Begins, "complete: %+v", got)

		// A duplicate of a DONE record: the INSERT and the read.
		got = count(func() { require.Equal(t, idempotency.Completed, claim("k").Status) })
		require.EqualValues(t, 2, got.Statements(), "claim of a completed key: %+v", got)
		require.Zero(t, got.Begins, "claim of a completed key: %+v", got)
	})
}

// Release writes the attempt's end into the open history entry whatever
// its error text holds: JSON that looks like the entry's own members, or
// the digits the statements' clock stands in for.
func TestReleaseKeepsAnyErrorText(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		s := newStore(t, b.open(t), b.dialect)
		ctx := t.Context()
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 5, TraceID: "trace"}
		res, err := s.Claim(ctx, req)
		require.NoError(t, err)
		msg := `"result":"in_progress" -7777777777777 "ended_ms":1}] \u00e9 ü`
		require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Error: msg, ErrorType: "T", Reason: "r", Stack: "s"}))
		rec, err := s.Get(ctx, "ns", "k")
		require.NoError(t, err)
		require.Len(t, rec.History, 1)
		h := rec.History[0]
		require.Equal(t, idempotency.ResultFailed, h.Result)
		require.Equal(t, msg, h.Error)
		require.Equal(t, "T", h.Type)
		require.Equal(t, "r", h.Reason)
		require.Equal(t, "s", h.Stack)
		require.Equal(t, "trace", h.TraceID)
		require.False(t, h.Ended.Before(h.Started), "ended %v, started %v", h.Ended, h.Started)

		res, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		require.Equal(t, idempotency.ResultFailed, res.Previous)
		require.Equal(t, msg, res.PreviousError)
		// Extensions back to back, within one millisecond or not, keep
		// the lease (MySQL counts a row set to its own values as unchanged).
		for range 3 {
			_, err := s.Extend(ctx, res.Lease, time.Minute)
			require.NoError(t, err)
		}
		require.NoError(t, s.Complete(ctx, res.Lease, idempotency.Outcome{}))
		rec, err = s.Get(ctx, "ns", "k")
		require.NoError(t, err)
		require.Len(t, rec.History, 2)
		require.Equal(t, idempotency.ResultFailed, rec.History[0].Result)
		require.Equal(t, idempotency.ResultDone, rec.History[1].Result)
		require.Equal(t, msg, rec.History[0].Error)
	})
}

// The store prepares each statement once and reuses it: after a round of
// every operation (a new key's claim, Complete, a key with a row claimed
// again, Release, Extend), the same round prepares nothing more. On one
// connection, so that database/sql has no second connection to prepare
// them on.
func TestStatementsArePreparedOnce(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		var c sqlcount.Counter
		db := countedDB(t, b, &c)
		db.SetMaxOpenConns(1)
		s := newStore(t, db, b.dialect)
		ctx := t.Context()
		round := func(key string) {
			req := idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 5}
			res, err := s.Claim(ctx, req)
			require.NoError(t, err)
			require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Error: "x"}))
			res, err = s.Claim(ctx, req)
			require.NoError(t, err)
			require.Equal(t, idempotency.Acquired, res.Status)
			_, err = s.Extend(ctx, res.Lease, time.Minute)
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, res.Lease, idempotency.Outcome{}))
		}
		round("warm-up")
		prepared := sqlstore.PreparedStatements(s)
		require.NotZero(t, prepared, "the operations' statements are prepared")
		before := c.Snapshot()
		round("again")
		got := c.Snapshot().Sub(before)
		require.Zero(t, got.Prepares, "the second round reuses the prepared statements: %+v", got)
		require.Equal(t, prepared, sqlstore.PreparedStatements(s))
	})
}
