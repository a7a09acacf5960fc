package redisarchive_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/internal/testenv"
)

// captured is a slog.Handler that keeps the messages of its warnings.
type captured struct {
	mu    sync.Mutex
	warns []string
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Level == slog.LevelWarn {
		c.warns = append(c.warns, r.Message)
	}
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

func (c *captured) warnings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.warns...)
}

// privateRedis starts a redis-server of the test's own.
func privateRedis(t *testing.T, extra ...string) (*testenv.RedisServer, *redis.Client) {
	t.Helper()
	srv := testenv.StartRedis(t, extra...)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

// The first Publish reads the server's persistence once and warns, like
// the Redis store, when a crash or restart can lose acknowledged dead
// letters: their broker copies are acked, so such a loss is final.
func TestPublishWarnsAboutPersistence(t *testing.T) {
	t.Parallel()
	const lost = "; an acknowledged dead letter lost this way is gone for good"
	for _, tc := range []struct {
		name string
		args []string
		warn string
	}{
		{"no persistence", nil,
			"redisarchive: no persistence (no AOF, no RDB): a restart loses all dead letters" + lost},
		{"AOF everysec", []string{"--appendonly", "yes", "--appendfsync", "everysec"},
			"redisarchive: AOF appendfsync everysec: a crash of the Redis process or its machine can lose up to about 2 seconds of acknowledged dead letters" + lost},
		{"AOF no", []string{"--appendonly", "yes", "--appendfsync", "no"},
			"redisarchive: AOF appendfsync no: a crash of the machine loses the acknowledged dead letters the OS has not yet written to disk (typically up to about 30 seconds)" + lost},
		{"AOF always", []string{"--appendonly", "yes", "--appendfsync", "always"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := privateRedis(t, tc.args...)
			logs := &captured{}
			a, err := redisarchive.New(c, dlq.WithLogger(slog.New(logs)))
			require.NoError(t, err)
			require.NoError(t, a.Publish("dead", message.NewMessage("m-1", []byte("p"))))
			require.NoError(t, a.Publish("dead", message.NewMessage("m-2", []byte("p"))))
			if tc.warn == "" {
				require.Empty(t, logs.warnings())
			} else {
				require.Equal(t, []string{tc.warn}, logs.warnings(), "one warning, at the first Publish")
			}
		})
	}
}

// Without WithLogger the warning goes to slog.Default(). Not parallel: it
// replaces the process's default logger while it runs.
func TestPublishWarnsByDefault(t *testing.T) {
	_, c := privateRedis(t)
	logs := &captured{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })
	a, err := redisarchive.New(c)
	require.NoError(t, err)
	require.NoError(t, a.Publish("dead", message.NewMessage("m-1", []byte("p"))))
	require.Len(t, logs.warnings(), 1)
	require.True(t, strings.HasPrefix(logs.warnings()[0], "redisarchive: no persistence"), logs.warnings()[0])
}

// noPersistence is the persistence warning of a private server.
const noPersistence = "redisarchive: no persistence (no AOF, no RDB): a restart loses all dead letters; an acknowledged dead letter lost this way is gone for good"

// evictionTail ends every eviction warning of the archive.
const evictionTail = "; an evicted dead letter is gone for good (its broker copy was acked); set maxmemory-policy noeviction"

// A server that evicts any key when its memory is full (allkeys-*) drops
// dead letters whose broker copies were acked: the first Publish says so,
// and the danger is real. No entry has a TTL, so volatile-* policies evict
// none (a full server refuses the Publish instead, as noeviction does).
func TestPublishWarnsAboutEviction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy string
		warn   string // "" for no eviction warning
	}{
		{"allkeys-lru", "allkeys-lru",
			"redisarchive: maxmemory-policy allkeys-lru with maxmemory 4194304 bytes: when its memory is full the server evicts keys, dead letters among them" + evictionTail},
		{"volatile-lru", "volatile-lru", ""},
		{"noeviction", "noeviction", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := privateRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", tc.policy)
			ctx := t.Context()
			logs := &captured{}
			a, err := redisarchive.New(c, dlq.WithLogger(slog.New(logs)))
			require.NoError(t, err)
			require.NoError(t, a.Publish("dead", message.NewMessage("m-1", []byte("p"))))
			d := a.Durability(ctx)
			require.Equal(t, tc.policy, d.MaxMemoryPolicy)
			require.Equal(t, int64(4<<20), d.MaxMemory)
			require.Equal(t, tc.warn, d.EvictionWarning)
			if tc.warn == "" {
				require.Equal(t, []string{noPersistence}, logs.warnings())
				return
			}
			require.Equal(t, []string{noPersistence, tc.warn}, logs.warnings())

			// Memory pressure from other keys on the server evicts the entry.
			filler := strings.Repeat("x", 64<<10)
			gone := false
			for i := 0; i < 2000 && !gone; i++ {
				require.NoError(t, c.Set(ctx, fmt.Sprintf("cache:%d", i), filler, 0).Err())
				_, err := a.Get(ctx, "m-1")
				if err != nil {
					require.ErrorIs(t, err, archive.ErrNotFound)
					gone = true
				}
			}
			require.True(t, gone, "allkeys-lru evicted no entry")
		})
	}
}

// A process logs each warning once per server: a second archive on the
// same server logs nothing, yet its Durability reports the condition; a
// Durability call before any Publish runs the check (and warns).
func TestDurabilityWarnsOncePerServer(t *testing.T) {
	t.Parallel()
	_, c := privateRedis(t)
	_, other := privateRedis(t)
	ctx := t.Context()
	open := func(c *redis.Client) (*redisarchive.Archive, *captured) {
		t.Helper()
		logs := &captured{}
		a, err := redisarchive.New(c, dlq.WithLogger(slog.New(logs)))
		require.NoError(t, err)
		return a, logs
	}
	a, logs := open(c)
	require.Equal(t, noPersistence, a.Durability(ctx).Warning)
	require.Equal(t, []string{noPersistence}, logs.warnings(), "Durability before any Publish checks and warns")
	require.NoError(t, a.Publish("dead", message.NewMessage("m-1", []byte("p"))))
	require.Len(t, logs.warnings(), 1, "the check runs once")

	b, logs := open(c)
	require.NoError(t, b.Publish("dead", message.NewMessage("m-2", []byte("p"))))
	require.Empty(t, logs.warnings(), "the second archive on the same server does not warn")
	d := b.Durability(ctx)
	require.Equal(t, noPersistence, d.Warning, "Durability reports the condition all the same")
	require.Equal(t, "noeviction", d.MaxMemoryPolicy)

	o, logs := open(other)
	require.NoError(t, o.Publish("dead", message.NewMessage("m-3", []byte("p"))))
	require.Equal(t, []string{noPersistence}, logs.warnings(), "another server warns")
}
