package sqlstore_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// A table made by a version without the reopen columns (only its CREATE
// statements) is upgraded by Migrate in place: its rows are kept and read
// as never reopened, and a replay can reopen them.
func TestMigrateAddsReopenColumns(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		table := "surely_test_" + randomHex(6)
		dropTable(t, db, b.dialect, table)
		var added int
		for _, stmt := range sqlstore.DDL(b.dialect, table) {
			if strings.HasPrefix(stmt, "ALTER TABLE") {
				added++
				continue
			}
			if strings.Contains(stmt, "created_at_ms") {
				continue // the index of a column this old table lacks
			}
			_, err := db.ExecContext(t.Context(), stmt)
			require.NoError(t, err, stmt)
		}
		require.Equal(t, 4, added, "the schema adds four columns")
		far := time.Now().Add(time.Hour).UnixMilli()
		_, err := db.ExecContext(t.Context(), rebind(b.dialect, "INSERT INTO "+quote(b.dialect, table)+
			" (namespace, op_key, state, fingerprint, token, attempts, canceled, lease_until_ms, expires_at_ms, updated_at_ms, outcome, history)"+
			" VALUES ('ns', 'k', 'exhausted', 'fp', 'old-token', 3, 0, 0, ?, 0, NULL, '[]')"), far)
		require.NoError(t, err)

		s, err := sqlstore.New(db, b.dialect, sqlstore.WithTable(table))
		require.NoError(t, err)
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 3}
		_, err = s.Claim(t.Context(), req)
		require.Error(t, err, "the old table lacks the new columns")

		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, s.Migrate(t.Context()), "Migrate again skips the columns it added")
		rec, err := s.Get(t.Context(), "ns", "k")
		require.NoError(t, err)
		require.Equal(t, idempotency.StateExhausted, rec.State, "the row is kept")
		require.Equal(t, 3, rec.Attempts)
		require.Empty(t, rec.ReopenedBy)
		require.Zero(t, rec.BudgetBase)

		res, err := s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Exhausted, res.Status)
		req.Reopen = "replay-1"
		res, err = s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		require.Equal(t, 4, res.Lease.Attempt)
		rec, err = s.Get(t.Context(), "ns", "k")
		require.NoError(t, err)
		require.Equal(t, "replay-1", rec.ReopenedBy)
		require.Equal(t, 3, rec.BudgetBase)
	})
}

// A table of the version before the index on created_at_ms (every
// statement of the schema but those of created_at_ms, and the index on
// expires_at_ms it had) is upgraded by Migrate in place: its rows are kept
// (created at 0) and purged once expired; on PostgreSQL and SQLite the
// index on expires_at_ms, which kept every update from being HOT, is
// replaced.
func TestMigrateReplacesExpiresIndex(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		table := "surely_test_" + randomHex(6)
		dropTable(t, db, b.dialect, table)
		for _, stmt := range sqlstore.DDL(b.dialect, table) {
			if strings.Contains(stmt, "created_at_ms") || strings.HasPrefix(stmt, "DROP INDEX") {
				continue
			}
			_, err := db.ExecContext(t.Context(), stmt)
			require.NoError(t, err, stmt)
		}
		if b.dialect != sqlstore.MySQL { // MySQL's CREATE TABLE has it
			_, err := db.ExecContext(t.Context(), "CREATE INDEX "+quote(b.dialect, table+"_expires_idx")+
				" ON "+quote(b.dialect, table)+" (expires_at_ms)")
			require.NoError(t, err)
		}
		past := time.Now().Add(-time.Hour).UnixMilli()
		far := time.Now().Add(time.Hour).UnixMilli()
		for key, expires := range map[string]int64{"expired": past, "live": far} {
			_, err := db.ExecContext(t.Context(), rebind(b.dialect, "INSERT INTO "+quote(b.dialect, table)+
				" (namespace, op_key, state, fingerprint, token, attempts, canceled, lease_until_ms, expires_at_ms, updated_at_ms, outcome, history)"+
				" VALUES ('ns', ?, 'done', 'fp', 'old-token', 1, 0, 0, ?, 0, '{}', '[]')"), key, expires)
			require.NoError(t, err)
		}

		s, err := sqlstore.New(db, b.dialect, sqlstore.WithTable(table), idempotency.WithRetention(time.Minute))
		require.NoError(t, err)
		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, s.Migrate(t.Context()), "Migrate again changes nothing")

		want := []string{table + "_created_idx"}
		if b.dialect == sqlstore.MySQL {
			want = []string{table + "_expires_idx"}
		}
		require.ElementsMatch(t, want, indexes(t, db, b.dialect, table))

		n, err := s.Purge(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the expired row of the old table is purged")
		rec, err := s.Get(t.Context(), "ns", "live")
		require.NoError(t, err, "the live row is kept")
		require.Equal(t, idempotency.StateDone, rec.State)
	})
}

// indexes lists the secondary indexes of table.
func indexes(t *testing.T, db *sql.DB, d sqlstore.Dialect, table string) []string {
	t.Helper()
	q := map[sqlstore.Dialect]string{
		sqlstore.Postgres: `SELECT indexname FROM pg_indexes WHERE tablename = $1 AND indexname <> $1 || '_pkey'`,
		sqlstore.MySQL:    `SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? AND index_name <> 'PRIMARY'`,
		sqlstore.SQLite:   `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL`,
	}[d]
	rows, err := db.QueryContext(t.Context(), q, table)
	require.NoError(t, err)
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		out = append(out, name)
	}
	require.NoError(t, rows.Err())
	return out
}
