package redisstream_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// server is the shared Redis of SURELY_REDIS_URL: its options and an admin
// client (closed when the test ends).
type server struct {
	url   string
	opts  *redis.UniversalOptions
	admin *redis.Client
}

func redisServer(t *testing.T) server {
	t.Helper()
	admin := testenv.Redis(t)
	url := testenv.URL(t, "SURELY_REDIS_URL")
	opts, err := testenv.UniversalOptions(url)
	require.NoError(t, err)
	return server{url: url, opts: opts, admin: admin}
}

// newStream returns a stream name of the test's own; every key starting
// with it is deleted when the test ends (SCAN + DEL, never FLUSH).
func (s server) newStream(t *testing.T) string {
	t.Helper()
	return testenv.RedisStream(t, s.admin)
}
