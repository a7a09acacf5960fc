package redisarchive_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
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
