package sqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// A claim refused while a lease or a retry-after delay runs always asks
// for a positive wait: the millisecond the lease or the delay ends, the
// key is claimable. Claims in a tight loop across the end cover that
// millisecond.
func TestRefusedClaimWaitsPositive(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		s := newStore(t, b.open(t), b.dialect)
		ctx := t.Context()
		const hold = 30 * time.Millisecond
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: hold, MaxAttempts: 5}
		untilClaimed := func(what string) idempotency.ClaimResult {
			for {
				res, err := s.Claim(ctx, req)
				require.NoError(t, err)
				if res.Status == idempotency.Acquired {
					return res
				}
				require.Equal(t, idempotency.InProgress, res.Status, what)
				require.Positive(t, res.Wait, "%s: refused with wait %v until %v", what, res.Wait, res.Until)
			}
		}
		res, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		res = untilClaimed("live lease")
		require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Error: "x", RetryAfter: hold}))
		untilClaimed("retry-after delay")
	})
}
