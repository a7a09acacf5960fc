package redisarchive_test

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/internal/testenv"
)

// WithWaitReplicas makes Publish return only once the replicas hold the
// entry, so Ingest acks the broker's copy only then; a replica that is
// down makes Publish fail with ErrNotReplicated (Ingest then nacks).
func TestPublishWaitReplicas(t *testing.T) {
	t.Parallel()
	primary, c := privateRedis(t, "--repl-diskless-sync-delay", "0")
	host, port, err := net.SplitHostPort(primary.Addr)
	require.NoError(t, err)
	replica := testenv.StartRedis(t, "--replicaof", host, port)
	online := func(want string) {
		require.Eventually(t, func() bool {
			info, err := c.Info(t.Context(), "replication").Result()
			return err == nil && strings.Contains(info, want)
		}, 20*time.Second, 20*time.Millisecond, "replication did not reach %q", want)
	}
	online("state=online")
	quiet := dlq.WithLogger(slog.New(slog.DiscardHandler))
	// WAIT returns as soon as the replica answered: a long timeout costs
	// nothing while it is up, and spares a loaded machine a false failure.
	a, err := redisarchive.New(c, redisarchive.WithWaitReplicas(1, 10*time.Second), quiet)
	require.NoError(t, err)
	require.NoError(t, a.Publish("dead", message.NewMessage("kept", []byte("p"))))

	short, err := redisarchive.New(c, redisarchive.WithWaitReplicas(1, 100*time.Millisecond), quiet)
	require.NoError(t, err)
	replica.Stop()
	online("connected_slaves:0")
	err = short.Publish("dead", message.NewMessage("unconfirmed", []byte("p")))
	require.ErrorIs(t, err, redisarchive.ErrNotReplicated)
	require.Contains(t, err.Error(), "0 of 1 replicas acknowledged within 100ms")

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": primary.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err = redisarchive.New(ring, redisarchive.WithWaitReplicas(1, time.Second))
	require.Error(t, err, "WAIT needs one connection to the entry's primary")
	_, err = redisarchive.New(c, redisarchive.WithWaitReplicas(0, time.Second))
	require.Error(t, err)
	_, err = redisarchive.New(c, redisarchive.WithWaitReplicas(1, 0))
	require.Error(t, err)
}
