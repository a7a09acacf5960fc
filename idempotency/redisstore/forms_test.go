package redisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
)

// TestRecordForms runs one store through every path on records of each
// form: the fast string record a first claim writes, a hash written by
// the previous release's scripts, and a hash written under
// WithHashRecords; unbatched and batched (where a claim is the claim
// script, which writes the fast record itself).
func TestRecordForms(t *testing.T) {
	t.Parallel()
	client, prefix := setup(t)
	old := loadPrevious(t, client, prefix)
	// The previous release's claim in loadPrevious names this span.
	const trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

	type form struct {
		name, redisType string
		// first makes the first attempt of key and returns its lease.
		first func(t *testing.T, s *redisstore.Store, key string) idempotency.Lease
	}
	claimFirst := func(t *testing.T, s *redisstore.Store, key string) idempotency.Lease {
		req := claimReq(key)
		req.TraceID, req.SpanID = trace, span
		return acquire(t, s, req)
	}
	forms := []form{
		{"fast", "string", claimFirst},
		{"previous release", "hash", func(t *testing.T, s *redisstore.Store, key string) idempotency.Lease {
			token := randomHex(16)
			require.Equal(t, int64(1), old.claim(key, token, trace))
			rec, err := s.Get(t.Context(), "ns", key)
			require.NoError(t, err)
			return idempotency.Lease{Namespace: "ns", Key: key, Token: token, Attempt: 1, Until: rec.LeaseUntil}
		}},
		{"WithHashRecords", "hash", func(t *testing.T, _ *redisstore.Store, key string) idempotency.Lease {
			return claimFirst(t, newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithHashRecords()), key)
		}},
	}
	stores := map[string]*redisstore.Store{
		"unbatched": newStore(t, client, redisstore.WithPrefix(prefix)),
		"batched":   newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithBatching(8)),
	}
	for storeName, s := range stores {
		for _, f := range forms {
			t.Run(storeName+"/"+f.name, func(t *testing.T) {
				ctx := t.Context()
				k := func(name string) string { return storeName + "-" + f.name + "-" + name }
				get := func(key string) idempotency.Record {
					t.Helper()
					rec, err := s.Get(ctx, "ns", key)
					require.NoError(t, err)
					return rec
				}

				// In progress: read, held against others, refused to
				// another payload, extended.
				key := k("retried")
				l := f.first(t, s, key)
				require.Equal(t, f.redisType, client.Type(ctx, prefix+"ns:"+key).Val())
				rec := get(key)
				require.Equal(t, idempotency.StateInProgress, rec.State)
				require.Equal(t, "fp", rec.Fingerprint)
				require.Equal(t, l.Token, rec.Token)
				require.Equal(t, 1, rec.Attempts)
				require.Equal(t, l.Until, rec.LeaseUntil)
				require.Len(t, rec.History, 1)
				require.Equal(t, idempotency.AttemptRecord{Attempt: 1, Started: l.Until.Add(-time.Minute), Result: "in_progress", TraceID: trace, SpanID: span}, rec.History[0])
				res, err := s.Claim(ctx, claimReq(key))
				require.NoError(t, err)
				require.Equal(t, idempotency.InProgress, res.Status)
				require.Equal(t, l.Until, res.Until)
				require.Positive(t, res.Wait)
				other := claimReq(key)
				other.Fingerprint = "other"
				res, err = s.Claim(ctx, other)
				require.NoError(t, err)
				require.Equal(t, idempotency.ClaimResult{Status: idempotency.Conflict, StoredFingerprint: "fp"}, res)
				l, err = s.Extend(ctx, l, 2*time.Minute)
				require.NoError(t, err)
				require.Equal(t, l.Until, get(key).LeaseUntil)

				// Released as failed, retried, completed, then a duplicate.
				require.NoError(t, s.Release(ctx, l, idempotency.Failure{Error: "boom"}))
				require.ErrorIs(t, s.Complete(ctx, l, idempotency.Outcome{}), idempotency.ErrLeaseLost, "a released lease")
				require.Equal(t, idempotency.StateFailed, get(key).State)
				res, err = s.Claim(ctx, claimReq(key))
				require.NoError(t, err)
				require.Equal(t, idempotency.Acquired, res.Status)
				require.Equal(t, 2, res.Lease.Attempt)
				require.Equal(t, []any{idempotency.ResultFailed, "boom"}, []any{res.Previous, res.PreviousError})
				out := idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "u", Payload: []byte("p")}}}
				require.NoError(t, s.Complete(ctx, res.Lease, out))
				res, err = s.Claim(ctx, claimReq(key))
				require.NoError(t, err)
				require.Equal(t, idempotency.Completed, res.Status)
				require.Equal(t, out, *res.Outcome)
				rec = get(key)
				require.Equal(t, idempotency.StateDone, rec.State)
				require.Equal(t, 2, rec.Attempts)
				require.Len(t, rec.History, 2)
				require.Equal(t, []idempotency.AttemptResult{"failed", "done"}, []idempotency.AttemptResult{rec.History[0].Result, rec.History[1].Result})

				// Completed by its first attempt: a duplicate, a conflict,
				// a re-sent Complete, and a stale owner changing nothing.
				key = k("done")
				l = f.first(t, s, key)
				require.NoError(t, s.Complete(ctx, l, out))
				require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}), "a re-sent Complete succeeds")
				res, err = s.Claim(ctx, claimReq(key))
				require.NoError(t, err)
				require.Equal(t, idempotency.Completed, res.Status)
				require.Equal(t, out, *res.Outcome, "the re-send changed nothing")
				res, err = s.Claim(ctx, other)
				require.NoError(t, err)
				require.Equal(t, idempotency.ClaimResult{Status: idempotency.Conflict, StoredFingerprint: "fp"}, res)
				stale := l
				stale.Token = randomHex(16)
				require.ErrorIs(t, s.Complete(ctx, stale, idempotency.Outcome{}), idempotency.ErrLeaseLost)
				require.ErrorIs(t, s.Release(ctx, l, idempotency.Failure{Error: "late"}), idempotency.ErrLeaseLost)
				_, err = s.Extend(ctx, l, time.Minute)
				require.ErrorIs(t, err, idempotency.ErrLeaseLost)
				rec = get(key)
				require.Equal(t, idempotency.StateDone, rec.State)
				require.Equal(t, l.Token, rec.Token)
				require.Equal(t, 1, rec.Attempts)
				require.Equal(t, out, *rec.Outcome)
				require.Len(t, rec.History, 1)
				h := rec.History[0]
				require.Equal(t, idempotency.ResultDone, h.Result)
				require.Equal(t, trace, h.TraceID)
				require.Equal(t, l.Until.Add(-time.Minute), h.Started)
				require.False(t, h.Ended.Before(h.Started), "ended %v, started %v", h.Ended, h.Started)
				require.True(t, h.Ended.Before(l.Until), "ended %v, lease until %v", h.Ended, l.Until)
				require.WithinDuration(t, h.Ended.Add(redisstore.DefaultRetention), rec.ExpiresAt, 5*time.Millisecond)

				// Released as canceled: not charged, claimed again.
				key = k("canceled")
				l = f.first(t, s, key)
				require.NoError(t, s.Release(ctx, l, idempotency.Failure{Canceled: true}))
				res, err = s.Claim(ctx, claimReq(key))
				require.NoError(t, err)
				require.Equal(t, idempotency.Acquired, res.Status)
				require.Equal(t, idempotency.ResultCanceled, res.Previous)
				rec = get(key)
				require.Equal(t, 2, rec.Attempts)
				require.Equal(t, 1, rec.Canceled)
			})
		}
	}
}

// A first attempt whose owner died is taken over once its lease expires,
// as an attempt of unknown outcome, from the fast record.
func TestFastRecordTakeover(t *testing.T) {
	t.Parallel()
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix))
	ctx := t.Context()
	req := claimReq("k")
	req.Lease = time.Millisecond
	dead := acquire(t, s, req)
	require.Equal(t, "string", client.Type(ctx, prefix+"ns:k").Val())
	var res idempotency.ClaimResult
	require.Eventually(t, func() bool {
		var err error
		res, err = s.Claim(ctx, claimReq("k"))
		require.NoError(t, err)
		return res.Status == idempotency.Acquired
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, 2, res.Lease.Attempt)
	require.Equal(t, idempotency.ResultUnknown, res.Previous)
	require.ErrorIs(t, s.Complete(ctx, dead, idempotency.Outcome{}), idempotency.ErrLeaseLost, "the dead owner is fenced off")
	require.NoError(t, s.Complete(ctx, res.Lease, idempotency.Outcome{}))
	rec, err := s.Get(ctx, "ns", "k")
	require.NoError(t, err)
	require.Equal(t, []idempotency.AttemptResult{"unknown", "done"}, []idempotency.AttemptResult{rec.History[0].Result, rec.History[1].Result})
	require.Equal(t, dead.Until, rec.History[0].Ended, "the unknown attempt ended with its lease")
}
