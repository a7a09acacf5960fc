package sqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
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
		var until time.Time // when the lease or the delay ends
		untilClaimed := func(what string) idempotency.ClaimResult {
			for {
				res, err := s.Claim(ctx, req)
				require.NoError(t, err)
				if res.Status == idempotency.Acquired {
					return res
				}
				require.Equal(t, idempotency.InProgress, res.Status, what)
				require.Positive(t, res.Wait, "%s: refused with wait %v until %v", what, res.Wait, res.Until)
				require.LessOrEqual(t, res.Wait, hold, "%s: the wait is what is left of the hold", what)
				require.Equal(t, until, res.Until, what)
			}
		}
		res, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		until = res.Lease.Until
		res = untilClaimed("live lease")
		require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Error: "x", RetryAfter: hold}))
		rec, err := s.Get(ctx, "ns", "k")
		require.NoError(t, err)
		until = rec.NotBefore
		untilClaimed("retry-after delay")
	})
}

// A record whose retention ends with its lease (a row written so by hand)
// is forgotten from that millisecond on: the first claim that gets it
// makes attempt 1 of a new record, never a takeover of the old lease.
// Claims in a tight loop across the end cover that millisecond.
func TestRecordForgottenWhenRetentionEnds(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		s := newStore(t, db, b.dialect)
		end := time.Now().Add(30 * time.Millisecond).UnixMilli()
		_, err := db.ExecContext(t.Context(), rebind(b.dialect, "INSERT INTO "+quote(b.dialect, sqlstore.Table(s))+
			" (namespace, op_key, state, fingerprint, token, attempts, canceled, lease_until_ms, expires_at_ms, updated_at_ms, outcome, history)"+
			" VALUES ('ns', 'k', 'in_progress', 'fp', 't', 1, 0, ?, ?, 1, NULL, '[]')"), end, end)
		require.NoError(t, err)
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 5}
		// Bounded: a database whose clock never reaches end (30 ms ahead
		// on the test's clock) fails the test instead of looping.
		giveUp := time.Now().Add(time.Minute)
		for {
			if time.Now().After(giveUp) {
				t.Fatal("the record was never forgotten: does the database's clock run behind the test's?")
			}
			res, err := s.Claim(t.Context(), req)
			require.NoError(t, err)
			if res.Status == idempotency.Acquired {
				require.Equal(t, 1, res.Lease.Attempt, "a new record")
				require.Empty(t, res.Previous)
				return
			}
			require.Equal(t, idempotency.InProgress, res.Status)
		}
	})
}
