package sqlstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// A table made by the version before retry-after delays (every statement
// of the schema but the not_before_ms column) is upgraded by Migrate in
// place: its FAILED rows are kept and claimable at once, and a release
// with a delay is then kept and honoured.
func TestMigrateAddsNotBeforeColumn(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		table := "surely_test_" + randomHex(6)
		dropTable(t, db, b.dialect, table)
		skipped := 0
		for _, stmt := range sqlstore.DDL(b.dialect, table) {
			if strings.Contains(stmt, "not_before_ms") {
				skipped++
				continue
			}
			_, err := db.ExecContext(t.Context(), stmt)
			require.NoError(t, err, stmt)
		}
		require.Equal(t, 1, skipped, "one statement adds not_before_ms")
		far := time.Now().Add(time.Hour).UnixMilli()
		_, err := db.ExecContext(t.Context(), rebind(b.dialect, "INSERT INTO "+quote(b.dialect, table)+
			" (namespace, op_key, state, fingerprint, token, attempts, canceled, lease_until_ms, expires_at_ms, updated_at_ms, outcome, history)"+
			" VALUES ('ns', 'k', 'failed', 'fp', 'old-token', 1, 0, 0, ?, 0, NULL, '[]')"), far)
		require.NoError(t, err)

		s, err := sqlstore.New(db, b.dialect, sqlstore.WithTable(table))
		require.NoError(t, err)
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 5}
		_, err = s.Claim(t.Context(), req)
		require.Error(t, err, "the old table lacks not_before_ms")

		require.NoError(t, s.Migrate(t.Context()))
		require.NoError(t, s.Migrate(t.Context()), "Migrate again skips the column it added")
		rec, err := s.Get(t.Context(), "ns", "k")
		require.NoError(t, err)
		require.Equal(t, idempotency.StateFailed, rec.State, "the row is kept")
		require.True(t, rec.NotBefore.IsZero(), "an old row has no delay")

		res, err := s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		require.Equal(t, 2, res.Lease.Attempt)
		require.NoError(t, s.Release(t.Context(), res.Lease, idempotency.Failure{Error: "rate limited", RetryAfter: time.Hour}))
		res, err = s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.InProgress, res.Status, "the delay is honoured")
		require.Greater(t, res.Wait, 59*time.Minute)
		sqlstore.AdvanceClock(s, time.Hour)
		res, err = s.Claim(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		require.Equal(t, 3, res.Lease.Attempt, "the refused claim was not charged")
	})
}
