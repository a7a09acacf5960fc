package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

// startSentinel starts a Redis Sentinel of the test's own that monitors
// primary as "primary" (quorum 1, down after 500ms) and returns its address.
func startSentinel(t *testing.T, primary string) string {
	t.Helper()
	bin := testenv.Binary(t, "redis-server")
	host, port, err := net.SplitHostPort(primary)
	require.NoError(t, err)
	dir := t.TempDir()
	sport := testenv.FreePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil,
		"bind 127.0.0.1\nport %d\ndir %s\nlogfile %s\n"+
			"sentinel monitor primary %s %s 1\n"+
			"sentinel down-after-milliseconds primary 500\n"+
			"sentinel failover-timeout primary 5000\n",
		sport, dir, filepath.Join(dir, "sentinel.log"), host, port), 0o600))
	cmd := exec.CommandContext(context.Background(), bin, conf, "--sentinel")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = sc.Close() })
	require.Eventually(t, func() bool {
		a, err := sc.GetMasterAddrByName(t.Context(), "primary").Result()
		return err == nil && len(a) == 2 && net.JoinHostPort(a[0], a[1]) == primary
	}, 20*time.Second, 50*time.Millisecond, "sentinel does not know the primary")
	return addr
}

// The store through a Sentinel failover client (a *redis.Client): the
// conformance suite, batched too, and a failover that keeps a DONE record
// acknowledged by the replica (WithWaitReplicas), after which the store
// reloads its scripts on the new primary by itself.
func TestSentinel(t *testing.T) {
	t.Parallel()
	primary := testenv.StartRedis(t)
	host, port, err := net.SplitHostPort(primary.Addr)
	require.NoError(t, err)
	replica := testenv.StartRedis(t, "--replicaof", host, port, "--repl-diskless-sync-delay", "0")
	pc := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = pc.Close() })
	require.Eventually(t, func() bool {
		info, err := pc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, 20*time.Second, 20*time.Millisecond, "replica did not sync")
	sentinel := startSentinel(t, primary.Addr)

	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "primary", SentinelAddrs: []string{sentinel}})
	t.Cleanup(func() { _ = c.Close() })
	const (
		lease     = 400 * time.Millisecond // see TestConformance
		retention = time.Second            // see TestConformance
	)
	for name, opts := range map[string][]idempotency.Option{
		"Conformance":        {idempotency.WithRetention(retention)},
		"ConformanceBatched": {idempotency.WithRetention(retention), redisstore.WithBatching(16)},
	} {
		s := newStore(t, c, opts...)
		t.Run(name, func(t *testing.T) {
			idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
				return idempotencytest.Harness{
					Store:     s,
					Advance:   func(_ *testing.T, d time.Duration) { time.Sleep(d) },
					Lease:     lease,
					Retention: retention,
				}
			})
		})
	}

	t.Run("Failover", func(t *testing.T) {
		ctx := t.Context()
		s := newStore(t, c, redisstore.WithBatching(16), redisstore.WithWaitReplicas(1, 5*time.Second))
		l := acquire(t, s, claimReq("kept"))
		require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "u"}}}),
			"the replica acknowledged the DONE record")

		primary.Stop()
		sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
		t.Cleanup(func() { _ = sc.Close() })
		require.Eventually(t, func() bool {
			a, err := sc.GetMasterAddrByName(ctx, "primary").Result()
			return err == nil && len(a) == 2 && net.JoinHostPort(a[0], a[1]) == replica.Addr
		}, 30*time.Second, 100*time.Millisecond, "sentinel did not promote the replica")

		// The new primary has the record but not the scripts (SCRIPT LOAD
		// is not replicated): the store reloads them and answers. The first
		// calls may still meet the old primary's dead connections.
		// The new primary has no replica, so the store under
		// WithWaitReplicas would not confirm the record: read it with one
		// without.
		plain := newStore(t, c)
		var res idempotency.ClaimResult
		require.Eventually(t, func() bool {
			res, err = plain.Claim(ctx, claimReq("kept"))
			return err == nil
		}, 30*time.Second, 100*time.Millisecond, "no claim through the new primary")
		require.Equal(t, idempotency.Completed, res.Status, "the acknowledged DONE record survived the failover")
		require.Equal(t, "u", res.Outcome.Messages[0].UUID)
		_, err = s.Claim(ctx, claimReq("after-failover"))
		require.ErrorIs(t, err, redisstore.ErrNotReplicated, "the new primary has no replica: no claim is handed out")
		l = acquire(t, plain, claimReq("after-failover"))
		err = s.Complete(ctx, l, idempotency.Outcome{})
		require.ErrorIs(t, err, redisstore.ErrNotReplicated, "the new primary has no replica, yet the record is DONE")
		res, err = plain.Claim(ctx, claimReq("after-failover"))
		require.NoError(t, err)
		require.Equal(t, idempotency.Completed, res.Status)
	})
}
