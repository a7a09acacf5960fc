package sqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/sqlstore"
)

// Durations are stored in whole milliseconds, rounded up and never
// lengthened otherwise: a lease runs exactly its length from the attempt's
// start, a record is retained exactly the retention after its lease or its
// end, and a retry-after delay starts at the attempt's end.
func TestDurationsInWholeMilliseconds(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		const retention = time.Hour
		s := newStore(t, b.open(t), b.dialect, idempotency.WithRetention(retention))
		ctx := t.Context()
		for _, tc := range []struct {
			lease, want time.Duration
		}{
			{time.Second, time.Second},
			{time.Millisecond, time.Millisecond},
			{1500 * time.Microsecond, 2 * time.Millisecond},
		} {
			key := "k-" + randomHex(4)
			res, err := s.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: "fp", Lease: tc.lease, MaxAttempts: 5})
			require.NoError(t, err)
			require.Equal(t, idempotency.Acquired, res.Status)
			rec, err := s.Get(ctx, "ns", key)
			require.NoError(t, err)
			require.Equal(t, tc.want, rec.LeaseUntil.Sub(rec.History[0].Started), "lease %v", tc.lease)
			require.Equal(t, res.Lease.Until, rec.LeaseUntil)
			require.Equal(t, retention, rec.ExpiresAt.Sub(rec.LeaseUntil), "lease %v", tc.lease)

			require.NoError(t, s.Release(ctx, res.Lease, idempotency.Failure{Error: "x", RetryAfter: time.Second}))
			rec, err = s.Get(ctx, "ns", key)
			require.NoError(t, err)
			require.Equal(t, time.Second, rec.NotBefore.Sub(rec.History[0].Ended))
			require.Equal(t, retention, rec.ExpiresAt.Sub(rec.NotBefore))

			// The key has a row now: the claim's other path.
			sqlstore.AdvanceClock(s, time.Second)
			res, err = s.Claim(ctx, idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: "fp", Lease: tc.lease, MaxAttempts: 5})
			require.NoError(t, err)
			require.Equal(t, idempotency.Acquired, res.Status)
			rec, err = s.Get(ctx, "ns", key)
			require.NoError(t, err)
			require.Equal(t, tc.want, rec.LeaseUntil.Sub(rec.History[1].Started), "lease %v, again", tc.lease)
			require.Equal(t, res.Lease.Until, rec.LeaseUntil)
			require.Equal(t, retention, rec.ExpiresAt.Sub(rec.LeaseUntil), "lease %v, again", tc.lease)
		}
	})
}

// A row whose history column is empty (written by hand, not by the store)
// reads as a record without attempts, and is claimed like one: a failed
// one with no previous attempt to tell of, one whose lease expired with
// an unknown previous outcome.
func TestEmptyHistoryColumn(t *testing.T) {
	forEach(t, func(t *testing.T, b backend) {
		db := b.open(t)
		s := newStore(t, db, b.dialect)
		for state, prev := range map[idempotency.State]idempotency.AttemptResult{
			idempotency.StateFailed:     idempotency.AttemptResult(""),
			idempotency.StateInProgress: idempotency.ResultUnknown,
		} {
			key := string(state)
			_, err := db.ExecContext(t.Context(), rebind(b.dialect, "INSERT INTO "+quote(b.dialect, sqlstore.Table(s))+
				" (namespace, op_key, state, fingerprint, token, attempts, canceled, lease_until_ms, expires_at_ms, updated_at_ms, outcome, history)"+
				" VALUES ('ns', ?, ?, 'fp', 't', 1, 0, 1, ?, 1, NULL, '')"), key, key, time.Now().Add(time.Hour).UnixMilli())
			require.NoError(t, err)
			rec, err := s.Get(t.Context(), "ns", key)
			require.NoError(t, err)
			require.Equal(t, state, rec.State)
			require.Empty(t, rec.History)

			res, err := s.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "ns", Key: key, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 5})
			require.NoError(t, err)
			require.Equal(t, idempotency.Acquired, res.Status, "%s", state)
			require.Equal(t, 2, res.Lease.Attempt, "%s", state)
			require.Equal(t, prev, res.Previous, "%s", state)
			rec, err = s.Get(t.Context(), "ns", key)
			require.NoError(t, err)
			require.Len(t, rec.History, 1, "%s: the new attempt", state)
			require.Equal(t, 2, rec.History[0].Attempt)
		}
	})
}
