package redisstore_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/faults"
)

const (
	// noPersistence is the persistence warning of a private server.
	noPersistence = "no persistence (no AOF, no RDB): a restart loses all DONE records; duplicates become possible"
	// evictionTail ends every eviction warning of the store.
	evictionTail = ": an evicted DONE record lets a redelivery run the handler again (a duplicate), " +
		"an evicted lease lets a second owner run the operation beside the first; set maxmemory-policy noeviction"
)

// A server that evicts under memory pressure forgets records before their
// retention: New says so, and the danger is real. A DONE record evicted by
// allkeys-lru lets the redelivery of its message run the handler again, and
// an evicted lease lets a second owner claim an operation that still runs.
func TestEvictionLosesRecords(t *testing.T) {
	t.Parallel()
	_, c := privateRedis(t, "--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
	ctx := t.Context()
	logs := &captured{}
	s := newStore(t, c, idempotency.WithLogger(slog.New(logs)))
	warning := "maxmemory-policy allkeys-lru with maxmemory 4194304 bytes: " +
		"when its memory is full the server evicts keys, records among them" + evictionTail
	d := s.Durability()
	require.Equal(t, "allkeys-lru", d.MaxMemoryPolicy)
	require.Equal(t, int64(4<<20), d.MaxMemory)
	require.Equal(t, warning, d.EvictionWarning)
	require.Equal(t, []string{noPersistence, warning}, logs.warnings())

	var runs atomic.Int32
	h, err := handler.New(func(*message.Message) ([]*message.Message, error) {
		runs.Add(1)
		return nil, nil
	}, handler.WithStore(s, "orders"), handler.WithDeadLetter(faults.NewPublisher(0), "dead"))
	require.NoError(t, err)
	deliver := func() {
		t.Helper()
		msg := message.NewMessage(watermill.NewUUID(), []byte("charge 10 EUR"))
		msg.Metadata.Set(idempotency.DefaultMetadataKey, "order-1")
		msg.SetContext(ctx)
		_, err := h(msg)
		require.NoError(t, err)
	}
	deliver()
	deliver()
	require.Equal(t, int32(1), runs.Load(), "before the eviction the redelivery is a duplicate")

	// A lease held by a handler that still runs.
	held, err := s.Claim(ctx, claimReq("running"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, held.Status)

	// Memory pressure: other keys on the same server, as a cache sharing
	// it would write, until the server evicted both records.
	done, lease := redisstore.DefaultPrefix+"orders:order-1", redisstore.DefaultPrefix+"ns:running"
	filler := strings.Repeat("x", 64<<10)
	evicted := false
	for i := 0; i < 2000 && !evicted; i++ {
		require.NoError(t, c.Set(ctx, fmt.Sprintf("cache:%d", i), filler, 0).Err())
		n, err := c.Exists(ctx, done, lease).Result()
		require.NoError(t, err)
		evicted = n == 0
	}
	require.True(t, evicted, "allkeys-lru evicted neither record")
	info, err := c.Info(ctx, "stats").Result()
	require.NoError(t, err)
	require.NotContains(t, info, "evicted_keys:0\r\n")

	deliver()
	require.Equal(t, int32(2), runs.Load(), "the redelivery of a completed operation ran the handler again")
	second, err := s.Claim(ctx, claimReq("running"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, second.Status, "a second owner got the running operation")
	require.NotEqual(t, held.Lease.Token, second.Lease.Token)
}

// Each policy's eviction warning, and none where the server evicts no
// record: noeviction, or no maxmemory whatever the policy. The policy is
// read from INFO, so a server that refuses CONFIG is read too.
func TestEvictionWarnsEveryEvictingPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		policy string
		max    int64
		warn   string // "" for no eviction warning
	}{
		{
			name: "allkeys-lfu", args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu"},
			policy: "allkeys-lfu", max: 64 << 20,
			warn: "maxmemory-policy allkeys-lfu with maxmemory 67108864 bytes: when its memory is full the server evicts keys, records among them" + evictionTail,
		},
		{
			// Every record has a TTL (its lease, then its retention).
			name: "volatile-ttl", args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"},
			policy: "volatile-ttl", max: 64 << 20,
			warn: "maxmemory-policy volatile-ttl with maxmemory 67108864 bytes: when its memory is full the server evicts keys with a TTL, and all records have one" + evictionTail,
		},
		{
			name: "CONFIG disabled", args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", ""},
			policy: "volatile-lru", max: 64 << 20,
			warn: "maxmemory-policy volatile-lru with maxmemory 67108864 bytes: when its memory is full the server evicts keys with a TTL, and all records have one" + evictionTail,
		},
		{
			// A full server refuses writes: claims fail, messages wait.
			name: "noeviction", args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "noeviction"},
			policy: "noeviction", max: 64 << 20,
		},
		{
			// No maxmemory: the server never evicts. Durability still
			// shows the policy, for a health check that wants noeviction.
			name: "no maxmemory", args: []string{"--maxmemory-policy", "allkeys-lru"},
			policy: "allkeys-lru",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := privateRedis(t, tc.args...)
			logs := &captured{}
			s := newStore(t, c, idempotency.WithLogger(slog.New(logs)))
			d := s.Durability()
			require.Equal(t, tc.policy, d.MaxMemoryPolicy)
			require.Equal(t, tc.max, d.MaxMemory)
			require.Equal(t, tc.warn, d.EvictionWarning)
			if tc.warn == "" {
				require.NotContains(t, strings.Join(logs.warnings(), "\n"), "maxmemory")
			} else {
				require.Contains(t, logs.warnings(), tc.warn)
			}
		})
	}
}

// A process logs each warning once per server: a second store on the same
// server logs nothing, yet its Durability reports the condition; another
// server, or another condition on the same server, logs again.
func TestDurabilityWarnsOncePerServer(t *testing.T) {
	t.Parallel()
	_, a := privateRedis(t)
	_, b := privateRedis(t)
	open := func(c *redis.Client, opts ...idempotency.Option) (*redisstore.Store, []string) {
		t.Helper()
		logs := &captured{}
		s := newStore(t, c, append(opts, idempotency.WithLogger(slog.New(logs)))...)
		return s, logs.warnings()
	}

	_, w := open(a)
	require.Equal(t, []string{noPersistence}, w, "the first store on a server warns")
	s, w := open(a, redisstore.WithPrefix("other:"))
	require.Empty(t, w, "the second store on the same server does not")
	require.Equal(t, noPersistence, s.Durability().Warning, "Durability reports the condition all the same")

	_, w = open(b)
	require.Equal(t, []string{noPersistence}, w, "another server warns")

	// Another condition on server a (a private server: CONFIG SET is ours).
	require.NoError(t, a.ConfigSet(t.Context(), "maxmemory", "1gb").Err())
	require.NoError(t, a.ConfigSet(t.Context(), "maxmemory-policy", "allkeys-lru").Err())
	s, w = open(a)
	eviction := "maxmemory-policy allkeys-lru with maxmemory 1073741824 bytes: when its memory is full the server evicts keys, records among them" + evictionTail
	require.Equal(t, []string{eviction}, w, "a new condition warns, the old one does not again")
	require.Equal(t, noPersistence, s.Durability().Warning)
	require.Equal(t, eviction, s.Durability().EvictionWarning)
}

// Stores opened at once on one server log its warning once between them.
func TestDurabilityWarnsOnceConcurrently(t *testing.T) {
	t.Parallel()
	_, c := privateRedis(t)
	logs := &captured{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := redisstore.New(t.Context(), c, idempotency.WithLogger(slog.New(logs)))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, []string{noPersistence}, logs.warnings())
}
