package redisstore_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

// replicated starts a private primary and a replica of it, waits until the
// replica is in sync, and returns both servers and a client of the primary.
func replicated(t *testing.T) (primary, replica *testenv.RedisServer, c *redis.Client) {
	t.Helper()
	primary, c = privateRedis(t, "--repl-diskless-sync-delay", "0")
	host, port, err := net.SplitHostPort(primary.Addr)
	require.NoError(t, err)
	replica = testenv.StartRedis(t, "--replicaof", host, port)
	waitReplicas(t, c, 1)
	return primary, replica, c
}

// waitReplicas waits until n replicas are connected and online.
func waitReplicas(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	want := "connected_slaves:" + string(rune('0'+n))
	require.Eventually(t, func() bool {
		info, err := c.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, want) && (n == 0 || strings.Contains(info, "state=online"))
	}, 20*time.Second, 20*time.Millisecond, "replication did not reach %q", want)
}

// Under WithWaitReplicas a claim is WAITed too: an acquired claim that no
// replica acknowledged would vanish in a failover and let a second owner
// run, so Claim fails (ErrNotReplicated) and releases it, refunded. A DONE
// record found by a redelivery is confirmed the same way before Claim
// answers Completed, so a message whose Complete said ErrNotReplicated is
// not acked while its record is still on the primary alone.
func TestWaitReplicasCoversClaims(t *testing.T) {
	t.Parallel()
	_, replica, c := replicated(t)
	ctx := t.Context()
	// WAIT returns as soon as the replica answered: a long timeout costs
	// nothing while it is up, and spares a loaded machine a false failure;
	// short is the store that meets the stopped replica.
	s := newStore(t, c, redisstore.WithWaitReplicas(1, 10*time.Second))
	short := newStore(t, c, redisstore.WithWaitReplicas(1, 100*time.Millisecond))

	// With the replica up every step is confirmed.
	l := acquire(t, s, claimReq("done"))
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "u"}}}))
	res, err := s.Claim(ctx, claimReq("done"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status)

	// A DONE record the replica never acknowledged: Complete says so.
	l = acquire(t, s, claimReq("unconfirmed"))
	replica.Stop()
	waitReplicas(t, c, 0)
	err = short.Complete(ctx, l, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "v"}}})
	require.ErrorIs(t, err, redisstore.ErrNotReplicated)

	// Its redelivery finds DONE on the primary, and must not ack it yet.
	_, err = short.Claim(ctx, claimReq("unconfirmed"))
	require.ErrorIs(t, err, redisstore.ErrNotReplicated, "a DONE record not confirmed replicated is not reported Completed")

	// A new claim is not handed out unreplicated; it is released, refunded.
	_, err = short.Claim(ctx, claimReq("fresh"))
	require.ErrorIs(t, err, redisstore.ErrNotReplicated, "an unreplicated claim is not acquired")
	rec, err := s.Get(ctx, "ns", "fresh")
	require.NoError(t, err)
	require.NotEqual(t, idempotency.StateInProgress, rec.State, "the unreplicated claim was released")
	require.Equal(t, rec.Attempts, rec.Canceled, "the released claim is not charged to the budget")

	// Once the replica is back and in sync, both answer as usual.
	replica.Start(t)
	waitReplicas(t, c, 1)
	res, err = s.Claim(ctx, claimReq("unconfirmed"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status)
	require.Equal(t, "v", res.Outcome.Messages[0].UUID)
	res, err = s.Claim(ctx, claimReq("fresh"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.NoError(t, s.Complete(ctx, res.Lease, idempotency.Outcome{}))
}

// The confirmation of a DONE record is a write of this connection that
// follows the record in the replication stream, so WAIT counts only the
// replicas that hold the record, not every connected one.
func TestWaitReplicasCompletedRoundTrips(t *testing.T) {
	t.Parallel()
	_, _, c := replicated(t)
	ctx := t.Context()
	s := newStore(t, c, redisstore.WithWaitReplicas(1, 2*time.Second))
	rt := &roundTrips{}
	c.AddHook(rt)
	l := acquire(t, s, claimReq("k"))
	require.Equal(t, []string{"evalsha", "wait"}, rt.take(), "claim and WAIT, on one connection")
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
	rt.take()
	res, err := s.Claim(ctx, claimReq("k"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status)
	require.Equal(t, []string{"evalsha", "pipeline(eval,wait)"}, rt.take(),
		"claim, then the confirming write and WAIT in one round trip")
}
