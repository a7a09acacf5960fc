package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
)

// The retention is at least 1ms: 1ms itself is a valid option, anything
// shorter is not. (Options are checked before the server is asked; the
// unreachable server makes a valid New fail for another reason.)
func TestRetentionMinimumIsOneMillisecond(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	_, err := redisstore.New(t.Context(), c, idempotency.WithRetention(time.Millisecond))
	require.Error(t, err)
	require.NotErrorIs(t, err, idempotency.ErrInvalidOption)
	_, err = redisstore.New(t.Context(), c, idempotency.WithRetention(time.Millisecond-1))
	require.ErrorIs(t, err, idempotency.ErrInvalidOption)
}

// The WAIT timeout is at least 1ms: 1ms itself is valid.
func TestWaitTimeoutMinimumIsOneMillisecond(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	_, err := redisstore.New(t.Context(), c, redisstore.WithWaitReplicas(1, time.Millisecond))
	require.Error(t, err)
	require.NotErrorIs(t, err, idempotency.ErrInvalidOption)
	_, err = redisstore.New(t.Context(), c, redisstore.WithWaitReplicas(1, time.Millisecond-1))
	require.ErrorIs(t, err, idempotency.ErrInvalidOption)
}

// Only WithWaitReplicas needs a client that can pin a connection: a ring
// without it is a valid client.
func TestRingWithoutWaitIsValid(t *testing.T) {
	t.Parallel()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = ring.Close() })
	_, err := redisstore.New(t.Context(), ring)
	require.Error(t, err, "the server is unreachable")
	require.NotErrorIs(t, err, idempotency.ErrInvalidOption)
}
