package redisarchive_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/archivetest"
	"github.com/surely-dev/surely/dlq/redisarchive"
	"github.com/surely-dev/surely/internal/testenv"
)

// startCluster starts a Redis Cluster of three primaries on servers of the
// test's own (killed when it ends) and returns a cluster client.
func startCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	cli := testenv.Binary(t, "redis-cli")
	var addrs []string
	for range 3 {
		addrs = append(addrs, testenv.StartRedis(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000").Addr)
	}
	out, err := exec.CommandContext(t.Context(), cli,
		append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	require.Eventually(t, func() bool {
		err := c.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
			info, err := n.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				return context.DeadlineExceeded
			}
			return err
		})
		return err == nil && c.Set(t.Context(), "probe", "1", time.Second).Err() == nil
	}, 20*time.Second, 50*time.Millisecond, "cluster did not become ready")
	return c
}

// The conformance suite on Redis Cluster: every key of an archive carries
// its hash tag, so the scripts and transactions are never cross-slot; the
// subtests' archives (one prefix each) spread over the shards.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	archivetest.Run(t, func(t *testing.T) archive.Archive {
		var b [6]byte
		_, _ = rand.Read(b[:])
		a, err := redisarchive.New(c, archive.WithPrefix("dlq-"+hex.EncodeToString(b[:])))
		require.NoError(t, err)
		return a
	})
}
