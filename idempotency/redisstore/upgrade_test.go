package redisstore_test

import (
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/defaults"
)

// previous runs the scripts of the previous release (testdata/previous),
// which wrote the whole history with cjson, its members in any order. During
// a rolling upgrade processes of both releases work on the same records.
type previous struct {
	t      *testing.T
	client *redis.Client
	prefix string
	src    map[string]string
}

func loadPrevious(t *testing.T, client *redis.Client, prefix string) *previous {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile("testdata/previous/" + name + ".lua")
		require.NoError(t, err)
		return string(b)
	}
	p := &previous{t: t, client: client, prefix: prefix, src: map[string]string{}}
	for _, name := range []string{"claim", "complete", "release"} {
		p.src[name] = read("prelude") + read(name)
	}
	return p
}

func (p *previous) run(name, key string, args ...any) any {
	p.t.Helper()
	v, err := p.client.Eval(p.t.Context(), p.src[name], []string{p.prefix + "ns:" + key}, args...).Result()
	require.NoError(p.t, err)
	return v
}

// claim returns the attempt it acquired.
func (p *previous) claim(key, token, traceID string) int64 {
	p.t.Helper()
	v := p.run("claim", key, "fp", 60000, 5, token, 60000, defaults.MaxHistory, traceID, "00f067aa0ba902b7", "")
	r, ok := v.([]any)
	require.True(p.t, ok, "reply %v", v)
	require.Equal(p.t, "acquired", r[0])
	return r[1].(int64)
}

func (p *previous) complete(key, token string) {
	p.t.Helper()
	require.Equal(p.t, int64(1), p.run("complete", key, token, randomHex(16), "{}", 60000))
}

func (p *previous) release(key, token, msg string) {
	p.t.Helper()
	require.Equal(p.t, int64(1), p.run("release", key, token, randomHex(16), 60000, "0", "0", msg, "", "", ""))
}

// TestRollingUpgrade runs the previous release's scripts and this one's on
// the same records, in both directions: each reads what the other wrote.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix))
	old := loadPrevious(t, client, prefix)
	ctx := t.Context()
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	// Not an OTel ID, but nothing forbids it: the history must keep it.
	const oddTrace = `a "quoted" \ <trace>`

	history := func(key string) []idempotency.AttemptRecord {
		t.Helper()
		rec, err := s.Get(ctx, "ns", key)
		require.NoError(t, err)
		require.Equal(t, idempotency.StateDone, rec.State)
		now, err := client.Time(ctx).Result()
		require.NoError(t, err)
		for _, h := range rec.History {
			require.False(t, h.Started.IsZero(), "attempt %d started", h.Attempt)
			require.False(t, h.Ended.Before(h.Started), "attempt %d ended before it started", h.Attempt)
			require.WithinDuration(t, now, h.Ended, time.Minute, "attempt %d ended by the server clock", h.Attempt)
		}
		return rec.History
	}
	type attempt struct {
		N             int
		Result, Error string
		TraceID, Span string
	}
	attempts := func(hs []idempotency.AttemptRecord) []attempt {
		out := make([]attempt, len(hs))
		for i, h := range hs {
			out[i] = attempt{h.Attempt, string(h.Result), h.Error, h.TraceID, h.SpanID}
		}
		return out
	}
	lease := func(key, token string) idempotency.Lease {
		return idempotency.Lease{Namespace: "ns", Key: key, Token: token}
	}

	t.Run("previous claims, this completes", func(t *testing.T) {
		require.Equal(t, int64(1), old.claim("a", "t1", trace))
		require.NoError(t, s.Complete(ctx, lease("a", "t1"), idempotency.Outcome{}))
		require.Equal(t, []attempt{{1, "done", "", trace, "00f067aa0ba902b7"}}, attempts(history("a")))
	})

	t.Run("previous fails, this retries", func(t *testing.T) {
		require.Equal(t, int64(1), old.claim("b", "t1", trace))
		old.release("b", "t1", "boom")
		req := claimReq("b")
		req.TraceID = oddTrace
		res, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idempotency.Acquired, res.Status)
		require.Equal(t, 2, res.Lease.Attempt)
		require.Equal(t, []any{idempotency.ResultFailed, "boom"}, []any{res.Previous, res.PreviousError})
		require.NoError(t, s.Complete(ctx, res.Lease, idempotency.Outcome{}))
		require.Equal(t, []attempt{
			{1, "failed", "boom", trace, "00f067aa0ba902b7"},
			{2, "done", "", oddTrace, ""},
		}, attempts(history("b")))
	})

	t.Run("this claims, previous completes", func(t *testing.T) {
		// The upgrade rule: while processes of the previous release run,
		// this one writes hashes only.
		hs := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithHashRecords())
		req := claimReq("c")
		req.TraceID, req.SpanID = oddTrace, "00f067aa0ba902b7"
		l := acquire(t, hs, req)
		require.Equal(t, "hash", client.Type(ctx, prefix+"ns:c").Val())
		old.complete("c", l.Token)
		require.Equal(t, []attempt{{1, "done", "", oddTrace, "00f067aa0ba902b7"}}, attempts(history("c")))
	})

	t.Run("previous meets a fast record: an error, never a second owner", func(t *testing.T) {
		l := acquire(t, s, claimReq("f"))
		for _, call := range []struct {
			name string
			args []any
		}{
			{"claim", []any{"fp", 60000, 5, "t2", 60000, defaults.MaxHistory, "", "", ""}},
			{"complete", []any{l.Token, l.Token, "{}", 60000}},
			{"release", []any{l.Token, randomHex(16), 60000, "0", "0", "boom", "", "", ""}},
		} {
			_, err := client.Eval(ctx, old.src[call.name], []string{prefix + "ns:f"}, call.args...).Result()
			require.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "%s: %v", call.name, err)
		}
		require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
		_, err := client.Eval(ctx, old.src["claim"], []string{prefix + "ns:f"},
			"fp", 60000, 5, "t2", 60000, defaults.MaxHistory, "", "", "").Result()
		require.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "claim of a fast DONE record: %v", err)
		require.Equal(t, []attempt{{1, "done", "", "", ""}}, attempts(history("f")))
	})

	t.Run("this fails, previous retries, this completes", func(t *testing.T) {
		req := claimReq("d")
		req.TraceID = trace
		l := acquire(t, s, req)
		require.NoError(t, s.Release(ctx, l, idempotency.Failure{Error: "boom"}))
		require.Equal(t, int64(2), old.claim("d", "t2", oddTrace))
		require.NoError(t, s.Complete(ctx, lease("d", "t2"), idempotency.Outcome{}))
		require.Equal(t, []attempt{
			{1, "failed", "boom", trace, ""},
			{2, "done", "", oddTrace, "00f067aa0ba902b7"},
		}, attempts(history("d")))
	})

	t.Run("a history whose open attempt is not last in member order", func(t *testing.T) {
		key := prefix + "ns:e"
		require.NoError(t, client.HSet(ctx, key, "state", "in_progress", "fp", "fp", "token", "t1",
			"attempts", "1", "canceled", "0", "until_ms", time.Now().Add(time.Minute).UnixMilli(),
			"history", `[{"result":"in_progress","started_ms":1700000000000,"attempt":1}]`).Err())
		require.NoError(t, s.Complete(ctx, lease("e", "t1"), idempotency.Outcome{}))
		require.Equal(t, []attempt{{1, "done", "", "", ""}}, attempts(history("e")))
	})
}
