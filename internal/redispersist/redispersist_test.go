package redispersist

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// counting is a slog.Handler that counts its records.
type counting struct{ n atomic.Int32 }

func (c *counting) Enabled(context.Context, slog.Level) bool { return true }
func (c *counting) Handle(context.Context, slog.Record) error {
	c.n.Add(1)
	return nil
}
func (c *counting) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *counting) WithGroup(string) slog.Handler      { return c }

// Warn logs a warning once per (server, warning): the same warning about
// the same server is dropped, another warning or another server logs. The
// run ID names a server, not its address: a new server on a reused
// address (or behind one Sentinel client) warns again. Each test names its
// servers after itself, so the process-wide record does not couple tests.
func TestWarnOncePerServerAndWarning(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	id := t.Name() + ":"
	a := Server{Addr: "127.0.0.1:1", RunID: id + "a"}
	b := Server{Addr: "127.0.0.1:2", RunID: id + "b"}
	reused := Server{Addr: a.Addr, RunID: id + "a-restarted"}
	noID := Server{Addr: id + "no-run-id"}
	l := &counting{}
	log := slog.New(l)

	for _, step := range []struct {
		servers []Server
		msg     string
		logs    bool
	}{
		{[]Server{a}, "no persistence", true},
		{[]Server{a}, "no persistence", false},
		{[]Server{b}, "no persistence", true},
		{[]Server{a}, "evicts", true},
		{[]Server{reused}, "no persistence", true},
		{[]Server{a, b}, "no persistence", false},
		{[]Server{a, b, {Addr: "x", RunID: id + "c"}}, "no persistence", true}, // a cluster with one new primary
		{[]Server{noID}, "no persistence", true},
		{[]Server{noID}, "no persistence", false},
	} {
		before := l.n.Load()
		require.Equal(t, step.logs, Warn(ctx, log, step.servers, step.msg), "%v %q", step.servers, step.msg)
		require.Equal(t, step.logs, l.n.Load() == before+1)
	}
}

// Of concurrent warnings about one server exactly one is logged.
func TestWarnConcurrently(t *testing.T) {
	t.Parallel()
	l := &counting{}
	log := slog.New(l)
	s := []Server{{Addr: "127.0.0.1:1", RunID: t.Name()}}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { Warn(t.Context(), log, s, "no persistence") })
	}
	wg.Wait()
	require.Equal(t, int32(1), l.n.Load())
}

// Eviction names the setting and what it evicts, and is empty where the
// server evicts none of the records.
func TestEviction(t *testing.T) {
	t.Parallel()
	const mb = 1 << 20
	for _, tc := range []struct {
		s    Settings
		ttl  bool
		want string
	}{
		{Settings{Policy: "noeviction", MaxMemory: mb}, true, ""},
		{Settings{Policy: "allkeys-lru"}, true, ""},
		{Settings{Policy: "volatile-lru", MaxMemory: mb}, false, ""},
		{Settings{Policy: "volatile-lru", MaxMemory: mb}, true,
			"maxmemory-policy volatile-lru with maxmemory 1048576 bytes: when its memory is full the server evicts keys with a TTL, and all records have one"},
		{Settings{Policy: "allkeys-random", MaxMemory: mb}, false,
			"maxmemory-policy allkeys-random with maxmemory 1048576 bytes: when its memory is full the server evicts keys, records among them"},
		{Settings{Policy: "some-future-policy", MaxMemory: mb}, false,
			"maxmemory-policy some-future-policy with maxmemory 1048576 bytes (unknown policy): when its memory is full the server can evict keys, records among them"},
		{Settings{}, false,
			"maxmemory-policy unknown (INFO did not say): unless it is noeviction or maxmemory is 0, a server whose memory is full evicts keys, records among them"},
	} {
		require.Equal(t, tc.want, tc.s.Eviction("records", tc.ttl), "%+v ttl=%v", tc.s, tc.ttl)
	}
	require.Equal(t, "maxmemory-policy unknown (boom): unless it is noeviction or maxmemory is 0, a server whose memory is full evicts keys, records among them",
		EvictionUnknown(errors.New("boom"), "records"))
}

// Of several primaries the one that evicts most decides.
func TestEvictRank(t *testing.T) {
	t.Parallel()
	order := []Settings{
		{Policy: "allkeys-lru", MaxMemory: 1},
		{},
		{Policy: "volatile-lru", MaxMemory: 1},
		{Policy: "noeviction", MaxMemory: 1},
	}
	for i := 1; i < len(order); i++ {
		require.Less(t, evictRank(order[i-1]), evictRank(order[i]), "%+v before %+v", order[i-1], order[i])
	}
	require.Equal(t, evictRank(Settings{Policy: "noeviction", MaxMemory: 1}), evictRank(Settings{Policy: "allkeys-lru"}),
		"no maxmemory evicts nothing")
	w := weakest([]Settings{
		{Policy: "noeviction", MaxMemory: 1 << 30, ConfigRead: true},
		{Policy: "allkeys-lru", MaxMemory: 2 << 20, ConfigRead: true},
		{Policy: "volatile-ttl", MaxMemory: 1 << 20, ConfigRead: true},
	})
	require.Equal(t, "allkeys-lru", w.Policy)
	require.Equal(t, int64(2<<20), w.MaxMemory, "the policy and the maxmemory of one primary")
}
