package sqlstore_test

import (
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
			_, err := db.ExecContext(t.Context(), stmt)
			require.NoError(t, err, stmt)
		}
		require.Equal(t, 3, added, "the schema adds three columns")
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
