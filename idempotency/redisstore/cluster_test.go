package redisstore_test

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

// privateCluster starts a Redis Cluster of three primaries (no replicas) on
// servers of the test's own and returns a cluster client.
func privateCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	cli := testenv.Binary(t, "redis-cli")
	addrs := make([]string, 3)
	for i := range addrs {
		addrs[i] = testenv.StartRedis(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000").Addr
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(t.Context(), cli, args...).CombinedOutput()
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
		if err != nil {
			return false
		}
		// Every primary must also agree on the slots: a key routes and answers.
		return c.Set(t.Context(), "probe", "1", time.Second).Err() == nil
	}, 20*time.Second, 50*time.Millisecond, "cluster did not become ready")
	return c
}

// The same conformance suite on Redis Cluster: each script touches one key,
// so nothing is cross-slot, and the scripts are loaded on every shard.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := privateCluster(t)
	const (
		lease = 400 * time.Millisecond // see TestConformance
		// Longer than the suite's 400ms example: under -race on a loaded
		// machine a subtest can stall for a few hundred milliseconds between
		// two calls, and a record must not expire in between.
		retention = time.Second
	)
	s := newStore(t, c, idempotency.WithRetention(retention))
	require.Equal(t, "no persistence (no AOF, no RDB): a restart loses all DONE records; duplicates become possible",
		s.Durability().Warning, "the weakest primary decides")

	t.Run("Conformance", func(t *testing.T) {
		idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
			return idempotencytest.Harness{
				Store:     s,
				Advance:   func(_ *testing.T, d time.Duration) { time.Sleep(d) },
				Lease:     lease,
				Retention: retention,
			}
		})
	})

	// Batched: go-redis splits each pipeline by node.
	t.Run("ConformanceBatched", func(t *testing.T) {
		bs := newStore(t, c, idempotency.WithRetention(retention), redisstore.WithBatching(16))
		idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
			return idempotencytest.Harness{
				Store:     bs,
				Advance:   func(_ *testing.T, d time.Duration) { time.Sleep(d) },
				Lease:     lease,
				Retention: retention,
			}
		})
	})

	t.Run("NoScript", func(t *testing.T) {
		ctx := t.Context()
		require.NoError(t, c.ScriptFlush(ctx).Err(), "flushes every shard")
		for i := range 20 { // keys spread over the three shards
			req := claimReq("k-" + string(rune('a'+i)))
			l := acquire(t, s, req)
			require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
		}
	})

	t.Run("WaitReplicas", func(t *testing.T) {
		ws := newStore(t, c, redisstore.WithWaitReplicas(1, 50*time.Millisecond))
		_, err := ws.Claim(t.Context(), claimReq("wait"))
		require.ErrorIs(t, err, redisstore.ErrNotReplicated, "the claim is not replicated")
		l := acquire(t, s, claimReq("wait"))
		err = ws.Complete(t.Context(), l, idempotency.Outcome{})
		require.ErrorIs(t, err, redisstore.ErrNotReplicated, "the key's primary has no replica")
		_, err = ws.Claim(t.Context(), claimReq("wait"))
		require.ErrorIs(t, err, redisstore.ErrNotReplicated, "the DONE record is not confirmed")
		res, err := s.Claim(t.Context(), claimReq("wait"))
		require.NoError(t, err)
		require.Equal(t, idempotency.Completed, res.Status)
	})

	// Every primary is read: one that evicts is enough for the warning,
	// logged once for the cluster's primaries (whose persistence warning
	// the first store of this test already logged).
	t.Run("Eviction", func(t *testing.T) {
		ctx := t.Context()
		one, err := c.MasterForKey(ctx, "probe")
		require.NoError(t, err)
		require.NoError(t, one.ConfigSet(ctx, "maxmemory", "1gb").Err())
		require.NoError(t, one.ConfigSet(ctx, "maxmemory-policy", "volatile-lfu").Err())
		var (
			mu        sync.Mutex
			primaries []string
		)
		require.NoError(t, c.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			primaries = append(primaries, n.Options().Addr)
			return nil
		}))
		logs := &captured{}
		es := newStore(t, c, idempotency.WithLogger(slog.New(logs)))
		warning := "maxmemory-policy volatile-lfu with maxmemory 1073741824 bytes: when its memory is full the server evicts keys with a TTL, and all records have one" + evictionTail
		require.Equal(t, warning, es.Durability().EvictionWarning, "the primary that evicts decides")
		require.Equal(t, "volatile-lfu", es.Durability().MaxMemoryPolicy)
		require.Equal(t, []string{warning}, logs.warnings())
		require.ElementsMatch(t, primaries, logs.attr(t, "servers"), "the warning names every primary")

		logs = &captured{}
		newStore(t, c, idempotency.WithLogger(slog.New(logs)))
		require.Empty(t, logs.warnings(), "warned once for these primaries")
	})
}
