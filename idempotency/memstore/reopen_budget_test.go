package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// A reopened record's fresh budget counts from the charged attempts only:
// canceled attempts before the reopen neither shrink nor grow it.
func TestReopenBudgetAfterCanceledAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	s, err := memstore.New(idempotency.WithClock(clock.Now))
	require.NoError(t, err)
	req := idempotency.ClaimRequest{Namespace: "budget", Key: "k", Fingerprint: "f", Lease: 10 * time.Second, MaxAttempts: 2}

	acquire := func(req idempotency.ClaimRequest) idempotency.Lease {
		t.Helper()
		res, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		return res.Lease
	}
	// Two canceled attempts (free), then two failed ones spend the budget.
	for range 2 {
		require.NoError(t, s.Release(ctx, acquire(req), idempotency.Failure{Error: "canceled", Canceled: true}))
	}
	for range 2 {
		require.NoError(t, s.Release(ctx, acquire(req), idempotency.Failure{Error: "failed"}))
	}
	res, err := s.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, idempotency.Exhausted, res.Status)
	require.Equal(t, 4, res.Attempts)

	// The replay gets exactly MaxAttempts charged attempts again.
	req.Reopen = "replay-1"
	for range 2 {
		require.NoError(t, s.Release(ctx, acquire(req), idempotency.Failure{Error: "failed again"}))
	}
	rec, err := s.Get(ctx, "budget", "k")
	require.NoError(t, err)
	assert.Equal(t, 2, rec.BudgetBase, "four attempts, two of them canceled")
	assert.Equal(t, 2, rec.Canceled)
	res, err = s.Claim(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Exhausted, res.Status, "the reopened budget of 2 is spent")
	assert.Equal(t, 6, res.Attempts)
}
