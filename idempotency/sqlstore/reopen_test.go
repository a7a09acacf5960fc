package sqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// A replay run's reopen gives a fresh budget of charged attempts: canceled
// attempts were never charged, so the budget base is the attempts minus
// the canceled ones, and the reopened record is exhausted again after
// MaxAttempts charged attempts.
func TestReopenBudgetDiscountsCanceledAttempts(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		s := newStore(t, b.open(t), b.dialect)
		ctx := t.Context()
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 1}
		claim := func(req idempotency.ClaimRequest) idempotency.ClaimResult {
			res, err := s.Claim(ctx, req)
			require.NoError(t, err)
			return res
		}
		res := claim(req)
		require.Equal(t, idempotency.Acquired, res.Status)
		require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Canceled: true, Error: "shutdown"}))
		res = claim(req)
		require.Equal(t, idempotency.Acquired, res.Status, "a canceled attempt is not charged")
		require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Error: "x"}))
		require.Equal(t, idempotency.Exhausted, claim(req).Status)

		req.Reopen = "run-1"
		res = claim(req)
		require.Equal(t, idempotency.Acquired, res.Status)
		require.Equal(t, 3, res.Lease.Attempt)
		rec, err := s.Get(ctx, "ns", "k")
		require.NoError(t, err)
		require.Equal(t, 1, rec.Canceled)
		require.Equal(t, 1, rec.BudgetBase, "2 attempts, 1 canceled")
		require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Error: "x"}))
		require.Equal(t, idempotency.Exhausted, claim(req).Status, "the run's budget of 1 is spent")
	})
}
