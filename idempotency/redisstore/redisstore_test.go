package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// setup connects to the shared Redis and returns a client and a key prefix
// of the test's own; every key under the prefix is deleted when the test
// ends. The shared server is never flushed.
func setup(t *testing.T) (*redis.Client, string) {
	t.Helper()
	client := testenv.Redis(t)
	prefix := "surely-test:" + randomHex(8) + ":"
	t.Cleanup(func() { deleteKeys(t, client, prefix) })
	return client, prefix
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func deleteKeys(t *testing.T, c *redis.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan %s*: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("delete test keys: %v", err)
			return
		}
		keys = keys[n:]
	}
}

// privateRedis starts a redis-server of the test's own, for what the shared
// server must not see (SCRIPT FLUSH, restarts, replicas).
func privateRedis(t *testing.T, extra ...string) (*testenv.RedisServer, *redis.Client) {
	t.Helper()
	srv := testenv.StartRedis(t, extra...)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

func newStore(t *testing.T, c redis.UniversalClient, opts ...idempotency.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(t.Context(), c, opts...)
	require.NoError(t, err)
	return s
}

func claimReq(key string) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{
		Namespace:   "ns",
		Key:         key,
		Fingerprint: "fp",
		Lease:       time.Minute,
		MaxAttempts: 5,
	}
}

func acquire(t *testing.T, s *redisstore.Store, req idempotency.ClaimRequest) idempotency.Lease {
	t.Helper()
	res, err := s.Claim(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	return res.Lease
}

func TestConformance(t *testing.T) {
	client, prefix := setup(t)
	const (
		lease = 400 * time.Millisecond // a loaded machine can stall a subtest 150ms between two calls
		// Longer than the suite's 400ms example: under -race on a loaded
		// machine a subtest can stall for a few hundred milliseconds between
		// two calls, and a record must not expire in between.
		retention = time.Second
	)
	s := newStore(t, client, redisstore.WithPrefix(prefix), idempotency.WithRetention(retention))
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		return idempotencytest.Harness{
			Store:     s,
			Advance:   func(_ *testing.T, d time.Duration) { time.Sleep(d) },
			Lease:     lease,
			Retention: retention,
		}
	})
}

// roundTrips counts what reaches the server: one entry per command sent
// alone, one per pipeline.
type roundTrips struct {
	mu   sync.Mutex
	sent []string
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records a command by its name, a run of the batch script as
// batch(<its calls>).
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if calls := batchCalls(cmd); calls != nil {
			r.add("batch(" + strings.Join(calls, ",") + ")")
		} else {
			r.add(cmd.Name())
		}
		return next(ctx, cmd)
	}
}

// batchCalls returns the names of the calls in a run of the batch script,
// nil when cmd is not one.
func batchCalls(cmd redis.Cmder) []string {
	args := cmd.Args() // evalsha sha numkeys key... (name n arg...)...
	if cmd.Name() != "evalsha" || len(args) < 3 || args[1] != redisstore.BatchSHA() {
		return nil
	}
	keys, _ := args[2].(int)
	var calls []string
	for i := 3 + keys; i+1 < len(args); {
		name, _ := args[i].(string)
		n, _ := args[i+1].(int)
		calls = append(calls, name)
		i += 2 + n
	}
	return calls
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		r.add("pipeline(" + strings.Join(names, ",") + ")")
		return next(ctx, cmds)
	}
}

func (r *roundTrips) add(s string) {
	if s == "hello" || s == "pipeline(client,client)" {
		return // a new connection's handshake, not the store's traffic
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, s)
}

// take returns what was sent since the last take.
func (r *roundTrips) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sent
	r.sent = nil
	return s
}

func TestRoundTrips(t *testing.T) {
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix))
	rt := &roundTrips{}
	client.AddHook(rt)
	ctx := t.Context()

	// A fresh message: Claim, then Complete.
	res, err := s.Claim(ctx, claimReq("fresh"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.Equal(t, []string{fastClaimTrip}, rt.take(), "Claim: no script")
	out := idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "u-1", Payload: []byte("p")}}}
	require.NoError(t, s.Complete(ctx, res.Lease, out))
	require.Equal(t, []string{"evalsha"}, rt.take(), "Complete")

	// A duplicate: one Claim answers Completed with the outcome.
	dup, err := s.Claim(ctx, claimReq("fresh"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, dup.Status)
	require.Equal(t, out, *dup.Outcome)
	require.Equal(t, []string{fastClaimTrip, "evalsha"}, rt.take(), "duplicate Claim: the native round trip, then the script")

	// A rare path (here a live lease of another owner) costs the script
	// after the native commands.
	held := acquire(t, s, claimReq("held"))
	rt.take()
	busy, err := s.Claim(ctx, claimReq("held"))
	require.NoError(t, err)
	require.Equal(t, idempotency.InProgress, busy.Status)
	require.Equal(t, held.Until, busy.Until)
	require.Equal(t, []string{fastClaimTrip, "evalsha"}, rt.take(), "Claim of a held key")

	// Release, Extend and Get are one round trip too.
	l := acquire(t, s, claimReq("other"))
	rt.take()
	_, err = s.Extend(ctx, l, time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, l, idempotency.Failure{Error: "boom"}))
	_, err = s.Get(ctx, "ns", "other")
	require.NoError(t, err)
	require.Equal(t, []string{"evalsha", "evalsha", "evalsha"}, rt.take(), "Extend, Release, Get")
}

// fastClaimTrip is the round trip of a Claim without a script: the native
// SET NX and PEXPIRETIME, pipelined.
const fastClaimTrip = "pipeline(set,pexpiretime)"

// TestKeyLayout pins the documented layout: one key per operation under
// prefix + namespace + ":" + key; a first attempt and its DONE record in
// the fast form (a string), every other record a hash; an in-progress
// record kept a retention after its lease expiry, a finished one for the
// retention.
func TestKeyLayout(t *testing.T) {
	client, prefix := setup(t)
	const retention = 10 * time.Second
	s := newStore(t, client, redisstore.WithPrefix(prefix), idempotency.WithRetention(retention))
	ctx := t.Context()
	pttl := func(key string, from, to time.Duration) {
		t.Helper()
		d := client.PTTL(ctx, key).Val()
		require.Greater(t, d, from-2*time.Second)
		require.LessOrEqual(t, d, to)
	}

	req := claimReq("order:42")
	req.TraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req.Reopen = "replay-1"
	l := acquire(t, s, req)
	require.Len(t, l.Token, 32, "16 random bytes in hex")
	key := prefix + "ns:order:42"
	keys, err := client.Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	require.Equal(t, []string{key}, keys, "one key per operation")
	require.Equal(t, "string", client.Type(ctx, key).Val())
	ids := `,"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`
	require.Equal(t, fmt.Sprintf("~1i %s 60000 10000 2 %d 8\nfp%sreplay-1", l.Token, len(ids), ids), client.Get(ctx, key).Val())
	// In progress: kept a retention after the lease expiry, which is what
	// the lease expiry is read from.
	pttl(key, time.Minute+retention, time.Minute+retention)
	exp := client.PExpireTime(ctx, key).Val()
	require.Equal(t, l.Until.UnixMilli(), exp.Milliseconds()-retention.Milliseconds())

	// DONE: the header gains the attempt's start and the retention it is
	// kept for (its end is its expiry less that), the outcome follows the
	// rest.
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
	v := client.Get(ctx, key).Val()
	head, body, _ := strings.Cut(v, "\n")
	f := strings.Fields(head)
	require.Equal(t, []string{"~1d", l.Token, "60000", "10000", "2", strconv.Itoa(len(ids)), "8"}, f[:7])
	require.Equal(t, l.Until.UnixMilli()-time.Minute.Milliseconds(), mustInt(t, f[7]), "started")
	require.Equal(t, "10000", f[8], "kept for the retention, from the end of the attempt")
	require.Equal(t, "fp"+ids+"replay-1{}", body)
	pttl(key, retention, retention)
	rec, err := s.Get(ctx, "ns", "order:42")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(retention), rec.ExpiresAt, 2*time.Second)

	// Any other path writes a hash: here an extension.
	l = acquire(t, s, claimReq("order:43"))
	key = prefix + "ns:order:43"
	l, err = s.Extend(ctx, l, 2*time.Minute)
	require.NoError(t, err)
	require.Equal(t, "hash", client.Type(ctx, key).Val())
	h := client.HGetAll(ctx, key).Val()
	require.Equal(t, "in_progress", h["state"])
	require.Equal(t, "fp", h["fp"])
	require.Equal(t, l.Token, h["token"])
	require.Equal(t, "1", h["attempts"])
	require.Equal(t, "0", h["canceled"])
	require.Equal(t, l.Until.UnixMilli(), mustInt(t, h["until_ms"]))
	pttl(key, 2*time.Minute+retention, 2*time.Minute+retention)
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
	pttl(key, retention, retention)
	h = client.HGetAll(ctx, key).Val()
	require.Equal(t, "done", h["state"])
	require.Empty(t, h["until_ms"], "no lease once done")
	require.Equal(t, "{}", h["outcome"])
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	for _, c := range s {
		require.True(t, c >= '0' && c <= '9', "not an integer: %q", s)
		n = n*10 + int64(c-'0')
	}
	return n
}

func TestOptionsAreValidated(t *testing.T) {
	// Options are checked before the server is asked: no server needed.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	for name, opt := range map[string]idempotency.Option{
		"empty prefix":       redisstore.WithPrefix(""),
		"zero retention":     idempotency.WithRetention(0),
		"sub-ms retention":   idempotency.WithRetention(time.Microsecond),
		"negative retention": idempotency.WithRetention(-time.Hour),
		"nil logger":         idempotency.WithLogger(nil),
		"zero replicas":      redisstore.WithWaitReplicas(0, time.Second),
		"zero WAIT timeout":  redisstore.WithWaitReplicas(1, 0),
		"batch of 1":         redisstore.WithBatching(1),
		"batch of 0":         redisstore.WithBatching(0),
		"batch too large":    redisstore.WithBatching(redisstore.MaxBatch + 1),
	} {
		_, err := redisstore.New(t.Context(), c, opt)
		require.ErrorIs(t, err, idempotency.ErrInvalidOption, name)
	}
	_, err := redisstore.New(t.Context(), nil)
	require.ErrorIs(t, err, idempotency.ErrInvalidOption, "nil client")

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err = redisstore.New(t.Context(), ring, redisstore.WithWaitReplicas(1, time.Second))
	require.ErrorIs(t, err, idempotency.ErrInvalidOption, "WAIT needs a client that can pin a connection")

	// Valid options against an unreachable server: New fails (it loads the scripts).
	_, err = redisstore.New(t.Context(), c, idempotency.WithRetention(time.Hour))
	require.Error(t, err)
	require.NotErrorIs(t, err, idempotency.ErrInvalidOption)
}

func TestStoreNeverClosesClient(t *testing.T) {
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix))
	acquire(t, s, claimReq("k"))
	require.NoError(t, client.Ping(t.Context()).Err(), "the caller's client is still open")
}

// captured is a slog.Handler that keeps the records it is given.
type captured struct {
	mu      sync.Mutex
	records []slog.Record
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r.Clone())
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

func (c *captured) warnings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.records {
		if r.Level == slog.LevelWarn {
			out = append(out, r.Message)
		}
	}
	return out
}

// attr returns the []string value of the attribute key of the only
// warning logged.
func (c *captured) attr(t *testing.T, key string) []string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	n := 0
	for _, r := range c.records {
		if r.Level != slog.LevelWarn {
			continue
		}
		n++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, ok := a.Value.Any().([]string)
				require.True(t, ok, "attribute %s is %T", key, a.Value.Any())
				out = v
			}
			return true
		})
	}
	require.Equal(t, 1, n, "one warning")
	return out
}

// The shared test server runs without AOF and with --save "": New must say
// that a restart forgets every DONE record. Other tests of this process
// open stores on the same server, and the process warns once per server
// (TestDurabilityWarnsOncePerServer), so this test sees the warning or
// nothing; Durability reports it either way.
func TestDurabilityWarnsWithoutPersistence(t *testing.T) {
	client, prefix := setup(t)
	logs := &captured{}
	s := newStore(t, client, redisstore.WithPrefix(prefix), idempotency.WithLogger(slog.New(logs)))
	d := s.Durability()
	require.False(t, d.AOF, "the shared test server runs without AOF")
	require.False(t, d.RDB, "the shared test server runs with --save \"\"")
	require.True(t, d.ConfigRead)
	require.Contains(t, []string{"always", "everysec", "no"}, d.AppendFsync)
	require.Equal(t, "no persistence (no AOF, no RDB): a restart loses all DONE records; duplicates become possible", d.Warning)
	if w := logs.warnings(); len(w) > 0 {
		require.Equal(t, []string{d.Warning}, w)
	}
}

func TestDurabilityLevels(t *testing.T) {
	const (
		noAOF    = "no AOF: a restart loses the DONE records written since the last RDB save; duplicates become possible"
		noConfig = "no AOF: a restart loses the DONE records written since the last RDB save, or all of them without save points (CONFIG GET refused); duplicates become possible"
		everysec = "AOF appendfsync everysec: a crash of the Redis process or its machine can lose up to about 2 seconds of acknowledged DONE records; duplicates become possible"
	)
	for _, tc := range []struct {
		name  string
		args  []string
		want  redisstore.Durability
		warns bool
	}{
		{
			name: "RDB only",
			args: []string{"--save", "3600 1"},
			want: redisstore.Durability{RDB: true, AppendFsync: "everysec", ConfigRead: true, MaxMemoryPolicy: "noeviction", Warning: noAOF},
		},
		{
			name: "AOF always",
			args: []string{"--appendonly", "yes", "--appendfsync", "always"},
			want: redisstore.Durability{AOF: true, AppendFsync: "always", ConfigRead: true, MaxMemoryPolicy: "noeviction"},
		},
		{
			name: "AOF everysec",
			args: []string{"--appendonly", "yes"},
			want: redisstore.Durability{AOF: true, AppendFsync: "everysec", ConfigRead: true, MaxMemoryPolicy: "noeviction", Warning: everysec},
		},
		{
			// Managed services often disable CONFIG: RDB is unknown then,
			// so the warning is the one that does not claim there is none.
			name: "CONFIG disabled",
			args: []string{"--rename-command", "CONFIG", ""},
			want: redisstore.Durability{MaxMemoryPolicy: "noeviction", Warning: noConfig},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := privateRedis(t, tc.args...)
			logs := &captured{}
			s := newStore(t, c, idempotency.WithLogger(slog.New(logs)))
			require.Equal(t, tc.want, s.Durability())
			if tc.want.Warning == "" {
				require.Empty(t, logs.warnings())
			} else {
				require.Equal(t, []string{tc.want.Warning}, logs.warnings())
			}
		})
	}
}

// After a restart (or SCRIPT FLUSH, or a failover) the server has no
// scripts: the store reloads them and retries, and the caller sees nothing.
func TestNoScriptRecovery(t *testing.T) {
	t.Parallel()
	srv, c := privateRedis(t)
	logs := &captured{}
	s := newStore(t, c, idempotency.WithLogger(slog.New(logs)))
	ctx := t.Context()
	rt := &roundTrips{}
	c.AddHook(rt)

	require.NoError(t, c.ScriptFlush(ctx).Err())
	rt.take()
	l := acquire(t, s, claimReq("after-flush"))
	require.Equal(t, []string{fastClaimTrip}, rt.take(), "a new key's claim runs no script")
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
	require.Equal(t, []string{"evalsha", pipelineOf("script", 6), "evalsha"}, rt.take(),
		"NOSCRIPT, reload every script in one round trip, retry")
	_, err := s.Get(ctx, "ns", "after-flush")
	require.NoError(t, err)
	require.Equal(t, []string{"evalsha"}, rt.take(), "the reload covered Get too")
	require.Contains(t, logs.warnings(), "redisstore: the server's script cache is empty (restart, failover or SCRIPT FLUSH); reloading the scripts")

	// A restart empties the script cache (and, without persistence, the data).
	srv.Stop()
	srv.Start(t)
	l = acquire(t, s, claimReq("after-restart"))
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
	res, err := s.Claim(ctx, claimReq("after-restart"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status)
	l = acquire(t, s, claimReq("after-restart-2"))
	for _, op := range []func() error{
		func() error { _, err := s.Get(ctx, "ns", "after-restart"); return err },
		func() error { _, err := s.Extend(ctx, l, time.Second); return err },
		func() error { return s.Release(ctx, l, idempotency.Failure{}) },
	} {
		require.NoError(t, c.ScriptFlush(ctx).Err())
		err := op()
		require.NotContains(t, errString(err), "NOSCRIPT")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// With WithWaitReplicas and no replica, Complete says the record was not
// replicated, yet the record is DONE on the primary. (The claim is taken
// by a store without the option: under it, the claim would fail too.)
func TestWaitReplicasWithoutReplica(t *testing.T) {
	t.Parallel()
	_, c := privateRedis(t)
	const timeout = 50 * time.Millisecond
	s := newStore(t, c, redisstore.WithWaitReplicas(1, timeout))
	plain := newStore(t, c)
	ctx := t.Context()

	l := acquire(t, plain, claimReq("k"))
	start := time.Now()
	err := s.Complete(ctx, l, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "u"}}})
	require.ErrorIs(t, err, redisstore.ErrNotReplicated)
	require.Contains(t, err.Error(), "0 of 1 replicas acknowledged within 50ms")
	require.GreaterOrEqual(t, time.Since(start), timeout, "WAIT waited for the timeout")

	res, err := plain.Claim(ctx, claimReq("k"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, res.Status, "the record is DONE on the primary")
	require.Equal(t, "u", res.Outcome.Messages[0].UUID)

	// A re-sent Complete is the same call: it asks the replicas again.
	require.ErrorIs(t, s.Complete(ctx, l, idempotency.Outcome{}), redisstore.ErrNotReplicated)

	// A lost lease is reported as such, without waiting.
	stale := l
	stale.Token += "-stale"
	start = time.Now()
	require.ErrorIs(t, s.Complete(ctx, stale, idempotency.Outcome{}), idempotency.ErrLeaseLost)
	require.Less(t, time.Since(start), timeout)
}

// With a replica attached, WAIT returns once it acknowledged the record.
func TestWaitReplicasWithReplica(t *testing.T) {
	t.Parallel()
	primary, c := privateRedis(t, "--repl-diskless-sync-delay", "0")
	host, port, err := net.SplitHostPort(primary.Addr)
	require.NoError(t, err)
	privateRedis(t, "--replicaof", host, port)
	ctx := t.Context()
	require.Eventually(t, func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, 10*time.Second, 20*time.Millisecond, "replica did not sync")

	rt := &roundTrips{}
	s := newStore(t, c, redisstore.WithWaitReplicas(1, 2*time.Second))
	c.AddHook(rt)
	l := acquire(t, s, claimReq("k"))
	rt.take()
	require.NoError(t, s.Complete(ctx, l, idempotency.Outcome{}))
	require.Equal(t, []string{"evalsha", "wait"}, rt.take(), "Complete and WAIT, on one connection")
}
