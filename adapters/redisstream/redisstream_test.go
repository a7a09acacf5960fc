package redisstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// universalOptions turns a redis:// URL into the options the constructors take.
func universalOptions(url string) (*redis.UniversalOptions, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return &redis.UniversalOptions{
		Addrs: []string{o.Addr}, Protocol: o.Protocol, Username: o.Username, Password: o.Password,
		DB: o.DB, TLSConfig: o.TLSConfig,
	}, nil
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
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
	opts, err := universalOptions(url)
	require.NoError(t, err)
	return server{url: url, opts: opts, admin: admin}
}

// newStream returns a stream name of the test's own; every key starting
// with it is deleted when the test ends (SCAN + DEL, never FLUSH).
func (s server) newStream(t *testing.T) string {
	t.Helper()
	name := "surely-test:" + randomHex(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cursor uint64
		for range 1000 {
			keys, next, err := s.admin.Scan(ctx, cursor, name+"*", 500).Result()
			if err != nil {
				t.Errorf("cleanup: SCAN %s*: %v", name, err)
				return
			}
			if len(keys) > 0 {
				if err := s.admin.Del(ctx, keys...).Err(); err != nil {
					t.Errorf("cleanup: DEL: %v", err)
					return
				}
			}
			if cursor = next; cursor == 0 {
				return
			}
		}
	})
	return name
}
