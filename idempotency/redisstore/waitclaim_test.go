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
	require.Equal(t, []string{fastClaimTrip, "wait"}, rt.take(), "claim and WAIT, on one connection")
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
	rt.take()
	res, err := s.Claim(ctx, claimReq("k"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status)
	require.Equal(t, []string{fastClaimTrip, "evalsha", "pipeline(eval,wait)"}, rt.take(),
		"claim, then the confirming write and WAIT in one round trip")
}

// A replica that is connected but behind does not confirm a DONE record it
// has not received: the confirming write follows the record in the
// replication stream, so WAIT waits for the record itself, not only for
// what this connection wrote before. (Redis documents WAIT as counting the
// writes of its own connection; Redis 7.0.15, the version tested, was
// seen to count every write made before the connection's last command, so
// there this test passes without the confirming write too.)
func TestWaitReplicasLaggingReplicaDoesNotConfirmDone(t *testing.T) {
	t.Parallel()
	primary, replica, c := replicated(t)
	ctx := t.Context()
	s := newStore(t, c, redisstore.WithWaitReplicas(1, 10*time.Second))
	// The record is written by one process and found by another, whose
	// connection has written nothing yet: a WAIT of its own alone would
	// count every connected replica.
	fresh := redis.NewClient(&redis.Options{Addr: primary.Addr})
	t.Cleanup(func() { _ = fresh.Close() })
	short := newStore(t, fresh, redisstore.WithWaitReplicas(1, 100*time.Millisecond))
	plain := newStore(t, c)

	// Every write so far is acknowledged: a WAIT of a connection that wrote
	// nothing since would answer 1 at once.
	caughtUp(t, c)
	replica.Pause(t) // connected, online, and frozen at its last ack
	t.Cleanup(func() { replica.Resume(t) })
	l := acquire(t, plain, claimReq("lagging"))
	require.NoError(t, plain.Complete(ctx, l, idempotency.Outcome{}))
	_, err := short.Claim(ctx, claimReq("lagging"))
	require.ErrorIs(t, err, redisstore.ErrNotReplicated, "the paused replica never received the DONE record")

	replica.Resume(t)
	res, err := s.Claim(ctx, claimReq("lagging"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status)
}

// caughtUp waits until the one replica has acknowledged everything the
// primary has written (its offset in INFO replication equals
// master_repl_offset).
func caughtUp(t *testing.T, c *redis.Client) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := c.Info(t.Context(), "replication").Result()
		if err != nil {
			return false
		}
		var master, acked string
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
				master = v
			}
			if v, ok := strings.CutPrefix(line, "slave0:"); ok {
				for _, kv := range strings.Split(v, ",") {
					if o, ok := strings.CutPrefix(kv, "offset="); ok {
						acked = o
					}
				}
			}
		}
		return master != "" && master == acked
	}, 20*time.Second, 20*time.Millisecond, "the replica did not catch up")
}
