package redisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
)

// During a rolling upgrade the previous release's scripts meet records
// that carry a retry-after time (nb_ms) and this release's scripts meet
// records without one: both keep working.
func TestRollingUpgradeRetryAfter(t *testing.T) {
	t.Parallel()
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix))
	old := loadPrevious(t, client, prefix)
	ctx := t.Context()

	// This release asks for a delay; the previous one ignores it (as it
	// always did) and completes.
	l := acquire(t, s, claimReq("a"))
	require.NoError(t, s.Release(ctx, l, idempotency.Failure{Error: "rate limited", RetryAfter: time.Hour}))
	res, err := s.Claim(ctx, claimReq("a"))
	require.NoError(t, err)
	require.Equal(t, idempotency.InProgress, res.Status)
	require.Equal(t, int64(2), old.claim("a", "t2", ""))
	old.complete("a", "t2")
	res, err = s.Claim(ctx, claimReq("a"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status)

	// The previous release fails without a delay: this one claims at once.
	require.Equal(t, int64(1), old.claim("b", "t1", ""))
	old.release("b", "t1", "boom")
	res, err = s.Claim(ctx, claimReq("b"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.Equal(t, 2, res.Lease.Attempt)
	rec, err := s.Get(ctx, "ns", "b")
	require.NoError(t, err)
	require.True(t, rec.NotBefore.IsZero())
}
