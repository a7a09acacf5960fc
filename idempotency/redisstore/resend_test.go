package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/testenv"
)

// go-redis re-sends a command whose connection broke before the reply. The
// scripts must answer a re-sent call as they answered the first one. This
// test replays the exact arguments of a call, as such a retry does.
func TestResentCallsAnswerAsTheFirst(t *testing.T) {
	client := testenv.Redis(t)
	prefix := "surely-test:" + newID()[:16] + ":"
	t.Cleanup(func() {
		// t.Context is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := client.Keys(ctx, prefix+"*").Result()
		require.NoError(t, err)
		require.NoError(t, client.Del(ctx, keys...).Err())
	})
	s, err := New(t.Context(), client, WithPrefix(prefix))
	require.NoError(t, err)
	ctx := t.Context()
	key := s.redisKey("ns", "k")
	retention := ms(s.retention)

	claim := func(token string) idempotency.ClaimResult {
		t.Helper()
		req := idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 5}
		v, err := s.evalSha(ctx, s.client, scriptClaim, key, s.claimArgs(req, token)...)
		require.NoError(t, err)
		res, err := claimResult(v, req, token)
		require.NoError(t, err)
		return res
	}
	release := func(token, req string) any {
		t.Helper()
		v, err := s.evalSha(ctx, s.client, scriptRelease, key, token, req, retention, "0", "0", "boom", "", "", "")
		require.NoError(t, err)
		return v
	}
	complete := func(token, req string) any {
		t.Helper()
		v, err := s.evalSha(ctx, s.client, scriptComplete, key, token, req, "{}", retention)
		require.NoError(t, err)
		return v
	}

	first := claim("t1")
	require.Equal(t, idempotency.Acquired, first.Status)
	require.Equal(t, 1, first.Lease.Attempt)
	require.Empty(t, first.Previous)
	require.Equal(t, first, claim("t1"), "a re-sent first claim")
	require.Equal(t, idempotency.InProgress, claim("t-other").Status, "another claim sees the live lease")

	require.Equal(t, int64(1), release("t1", "r1"))
	require.Equal(t, int64(1), release("t1", "r1"), "a re-sent release")
	require.Equal(t, int64(0), release("t1", "r2"), "a second release")

	second := claim("t2")
	require.Equal(t, idempotency.Acquired, second.Status)
	require.Equal(t, 2, second.Lease.Attempt)
	require.Equal(t, []any{idempotency.ResultFailed, "boom"}, []any{second.Previous, second.PreviousError})
	require.Equal(t, second, claim("t2"), "a re-sent claim after a failure")

	require.Equal(t, int64(1), complete("t2", "c1"))
	require.Equal(t, int64(1), complete("t2", "c1"), "a re-sent complete")
	require.Equal(t, int64(0), complete("t2", "c2"), "another request ID on a DONE record")
	require.Equal(t, idempotency.Completed, claim("t2").Status, "a claim re-sent after Complete sees DONE")

	rec, err := s.Get(ctx, "ns", "k")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, 2, rec.Attempts)
	require.Len(t, rec.History, 2)
}
