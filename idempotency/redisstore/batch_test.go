package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"
	"github.com/surely-dev/surely/idempotency/redisstore"
)

func TestBatchingConformance(t *testing.T) {
	client, prefix := setup(t)
	const (
		lease     = 400 * time.Millisecond // see TestConformance
		retention = time.Second            // see TestConformance
	)
	s := newStore(t, client, redisstore.WithPrefix(prefix), idempotency.WithRetention(retention),
		redisstore.WithBatching(16))
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		return idempotencytest.Harness{
			Store:     s,
			Advance:   func(_ *testing.T, d time.Duration) { time.Sleep(d) },
			Lease:     lease,
			Retention: retention,
		}
	})
}

// gate holds the next round trips (commands or pipelines) of a client
// until open is called: round trips "in flight" for as long as a test
// needs, without timing.
type gate struct {
	mu      sync.Mutex
	armed   int           // round trips still to hold
	arrived int           // held round trips that arrived
	entered chan struct{} // closed when every held round trip arrived
	release chan struct{}
	first   chan struct{} // releases the first held round trip alone
}

// arm makes the next n round trips wait; <-g.entered tells they all
// arrived.
func (g *gate) arm(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.arrived = n, 0
	g.entered = make(chan struct{})
	g.release = make(chan struct{})
	g.first = make(chan struct{})
}

func (g *gate) open() { close(g.release) }

// openFirst lets the first held round trip go on, the others still held.
func (g *gate) openFirst() { close(g.first) }

// inFlight arms g for two round trips and starts run for each key in turn,
// the second once the first one's round trip is held (so that the two do
// not share one); it returns when both are held. A batching store then has
// the most round trips in flight it ever has. The returned function waits
// until every run returned.
func (g *gate) inFlight(t *testing.T, run func(key string), keys ...string) (wait func()) {
	t.Helper()
	g.arm(len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() { run(key) })
		require.Eventually(t, func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return g.arrived == i+1
		}, 10*time.Second, time.Millisecond, "round trip %d held", i+1)
	}
	<-g.entered
	return wg.Wait
}

func (g *gate) hold() {
	g.mu.Lock()
	if g.armed == 0 {
		g.mu.Unlock()
		return
	}
	g.armed--
	g.arrived++
	if g.armed == 0 {
		close(g.entered)
	}
	release, first := g.release, g.first
	if g.arrived > 1 {
		first = nil // never ready
	}
	g.mu.Unlock()
	select {
	case <-release:
	case <-first:
	}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.hold()
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.hold()
		return next(ctx, cmds)
	}
}

// waitQueued waits until n calls wait in s's batch queue.
func waitQueued(t *testing.T, s *redisstore.Store, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return redisstore.Queued(s) == n }, 10*time.Second, time.Millisecond,
		"calls queued behind the round trip in flight")
}

func pipelineOf(cmd string, n int) string {
	return "pipeline(" + strings.TrimSuffix(strings.Repeat(cmd+",", n), ",") + ")"
}

// An idle batching store sends each call at once and alone, as without
// batching; calls made while two round trips are in flight go together in
// the next ones, at most maxBatch per batch script run, each with its own
// reply.
func TestBatchingRoundTrips(t *testing.T) {
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithBatching(8))
	rt, g := &roundTrips{}, &gate{}
	client.AddHook(rt)
	client.AddHook(g)
	ctx := t.Context()

	// Idle: a fresh message is two round trips, a duplicate one.
	res, err := s.Claim(ctx, claimReq("fresh"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.Equal(t, []string{"evalsha"}, rt.take(), "Claim")
	require.NoError(t, s.Complete(ctx, res.Lease, idempotency.Outcome{}))
	require.Equal(t, []string{"evalsha"}, rt.take(), "Complete")
	dup, err := s.Claim(ctx, claimReq("fresh"))
	require.NoError(t, err)
	require.Equal(t, idempotency.Completed, dup.Status)
	require.Equal(t, []string{"evalsha"}, rt.take(), "duplicate Claim")

	// Twelve claims arrive while two are in flight (the most a store has).
	leases := map[string]idempotency.Lease{}
	var mu sync.Mutex
	wait := g.inFlight(t, func(key string) {
		res, err := s.Claim(ctx, claimReq(key))
		if err != nil {
			t.Errorf("claim %s: %v", key, err)
		}
		mu.Lock()
		leases[key] = res.Lease
		mu.Unlock()
	}, "first", "second")
	const n = 12
	claims := make([]idempotency.ClaimResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { claims[i], errs[i] = s.Claim(ctx, claimReq(fmt.Sprintf("k-%d", i))) })
	}
	waitQueued(t, s, n)
	g.open()
	wg.Wait()
	wait()
	require.ElementsMatch(t, []string{"evalsha", "evalsha", batchOf("claim", 8), batchOf("claim", 4)}, rt.take())
	tokens := map[string]bool{leases["first"].Token: true, leases["second"].Token: true}
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, idempotency.Acquired, claims[i].Status)
		require.Equal(t, fmt.Sprintf("k-%d", i), claims[i].Lease.Key, "each caller gets its own reply")
		require.Equal(t, 1, claims[i].Lease.Attempt)
		tokens[claims[i].Lease.Token] = true
	}
	require.Len(t, tokens, n+2, "one token per claim")

	// Completes batch the same way; a stale token gets its own ErrLeaseLost.
	mu.Lock()
	held := maps.Clone(leases)
	mu.Unlock()
	wait = g.inFlight(t, func(key string) {
		if err := s.Complete(ctx, held[key], idempotency.Outcome{}); err != nil {
			t.Errorf("complete %s: %v", key, err)
		}
	}, "first", "second")
	stale := 3
	claims[stale].Lease.Token = "not-the-token"
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Complete(ctx, claims[i].Lease, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: claims[i].Lease.Key}}})
		})
	}
	waitQueued(t, s, n)
	g.open()
	wg.Wait()
	wait()
	require.ElementsMatch(t, []string{"evalsha", "evalsha", batchOf("complete", 8), batchOf("complete", 4)}, rt.take())
	for i := range n {
		key := fmt.Sprintf("k-%d", i)
		rec, err := s.Get(ctx, "ns", key)
		require.NoError(t, err)
		if i == stale {
			require.ErrorIs(t, errs[i], idempotency.ErrLeaseLost)
			require.Equal(t, idempotency.StateInProgress, rec.State)
			continue
		}
		require.NoError(t, errs[i])
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, key, rec.Outcome.Messages[0].UUID, "each Complete wrote its own outcome")
	}
}

// A batch mixes claims and completes, and a call that fails on the server
// fails alone: the other calls of its batch get their replies.
func TestBatchingMixedAndFailing(t *testing.T) {
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithBatching(8))
	rt, g := &roundTrips{}, &gate{}
	client.AddHook(rt)
	client.AddHook(g)
	ctx := t.Context()

	done, err := s.Claim(ctx, claimReq("to-complete"))
	require.NoError(t, err)
	// A key of another type makes the claim script fail (WRONGTYPE).
	require.NoError(t, client.Set(ctx, prefix+"ns:not-a-record", "x", time.Minute).Err())
	rt.take()

	wait := g.inFlight(t, func(key string) {
		if err := acquireErr(ctx, s, claimReq(key)); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}, "held-1", "held-2")
	var (
		wg                      sync.WaitGroup
		fresh                   idempotency.ClaimResult
		freshErr, badErr, cmErr error
	)
	wg.Go(func() { fresh, freshErr = s.Claim(ctx, claimReq("fresh")) })
	waitQueued(t, s, 1)
	wg.Go(func() { _, badErr = s.Claim(ctx, claimReq("not-a-record")) })
	waitQueued(t, s, 2)
	wg.Go(func() { cmErr = s.Complete(ctx, done.Lease, idempotency.Outcome{}) })
	waitQueued(t, s, 3)
	g.open()
	wg.Wait()
	wait()

	require.NoError(t, freshErr)
	require.Equal(t, idempotency.Acquired, fresh.Status)
	require.ErrorContains(t, badErr, "WRONGTYPE")
	require.NoError(t, cmErr)
	require.ElementsMatch(t, []string{"evalsha", "evalsha", "batch(claim,claim,complete)"}, rt.take())
	rec, err := s.Get(ctx, "ns", "to-complete")
	require.NoError(t, err)
	require.Equal(t, idempotency.StateDone, rec.State)
}

// A caller whose context ends returns at once: a queued call is never
// sent, an in-flight one runs without its caller.
func TestBatchingCancel(t *testing.T) {
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithBatching(64))
	rt, g := &roundTrips{}, &gate{}
	client.AddHook(rt)
	client.AddHook(g)
	ctx := t.Context()

	claim := func(ctx context.Context, key string) chan error {
		ch := make(chan error, 1)
		go func() {
			res, err := s.Claim(ctx, claimReq(key))
			if err == nil && res.Status != idempotency.Acquired {
				err = fmt.Errorf("claim %s: %v", key, res.Status)
			}
			ch <- err
		}()
		return ch
	}

	ctxA, cancelA := context.WithCancel(ctx)
	defer cancelA()
	a, a2 := make(chan error, 1), make(chan error, 1)
	wait := g.inFlight(t, func(key string) {
		if key == "in-flight" {
			a <- <-claim(ctxA, key)
		} else {
			a2 <- <-claim(ctx, key)
		}
	}, "in-flight", "in-flight-2")
	ctxB, cancelB := context.WithCancel(ctx)
	defer cancelB()
	b := claim(ctxB, "queued")
	c := claim(ctx, "kept")
	waitQueued(t, s, 2)

	cancelB()
	require.ErrorIs(t, <-b, context.Canceled, "a queued caller returns while the round trip is still held")
	require.Equal(t, 1, redisstore.Queued(s), "and its call left the queue")
	cancelA()
	require.ErrorIs(t, <-a, context.Canceled, "an in-flight caller returns while the round trip is still held")

	g.open()
	wait()
	require.NoError(t, <-c)
	require.NoError(t, <-a2)
	// The in-flight call of the canceled caller still runs: wait for it.
	require.Eventually(t, func() bool { return redisstore.Idle(s) }, 10*time.Second, time.Millisecond)
	require.Equal(t, []string{"evalsha", "evalsha", "evalsha"}, rt.take(), "the canceled queued call was never sent")

	_, err := s.Get(ctx, "ns", "queued")
	require.ErrorIs(t, err, idempotency.ErrNotFound)
	res, err := s.Claim(ctx, claimReq("in-flight"))
	require.NoError(t, err)
	require.Equal(t, idempotency.InProgress, res.Status, "the in-flight claim ran without its caller")

	// A context already done sends nothing.
	rt.take()
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Claim(done, claimReq("never"))
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, rt.take())
}

// When the server lost its scripts, a batch reloads them once and re-sends
// its calls.
func TestBatchingNoScript(t *testing.T) {
	t.Parallel()
	_, c := privateRedis(t)
	logs := &captured{}
	s := newStore(t, c, idempotency.WithLogger(slog.New(logs)), redisstore.WithBatching(64))
	ctx := t.Context()

	other := redis.NewClient(c.Options())
	t.Cleanup(func() { _ = other.Close() })
	rt, g := &roundTrips{}, &gate{}
	c.AddHook(rt)
	c.AddHook(g)
	c.AddHook(&flushBeforeBatch{other: other})

	held := make(chan error, 2)
	wait := g.inFlight(t, func(key string) { held <- acquireErr(ctx, s, claimReq(key)) }, "first", "second")
	const n = 3
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = acquireErr(ctx, s, claimReq(fmt.Sprintf("k-%d", i))) })
	}
	waitQueued(t, s, n)
	// The first round trip returns and its flusher sends the batch; the
	// second stays held until the batch is done, so that it cannot reload
	// the scripts in between.
	g.openFirst()
	wg.Wait()
	g.open()
	wait()
	require.NoError(t, <-held)
	require.NoError(t, <-held)
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, []string{
		"evalsha", "evalsha",
		batchOf("claim", n),     // the scripts were flushed just before: NOSCRIPT
		pipelineOf("script", 6), // reload
		batchOf("claim", n),     // re-send
	}, rt.take())
	require.Contains(t, logs.warnings(), "redisstore: the server's script cache is empty (restart, failover or SCRIPT FLUSH); reloading the scripts")
}

func acquireErr(ctx context.Context, s *redisstore.Store, req idempotency.ClaimRequest) error {
	res, err := s.Claim(ctx, req)
	if err != nil {
		return err
	}
	if res.Status != idempotency.Acquired {
		return fmt.Errorf("claim %s: %v", req.Key, res.Status)
	}
	return nil
}

// flushBeforeBatch empties the server's script cache (through another
// client) just before the first batch script call is sent.
type flushBeforeBatch struct {
	other *redis.Client
	once  sync.Once
}

func (f *flushBeforeBatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *flushBeforeBatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if batchCalls(cmd) != nil {
			var err error
			f.once.Do(func() { err = f.other.ScriptFlush(ctx).Err() })
			if err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (f *flushBeforeBatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Many concurrent callers on a small batch: each gets its own, consistent
// reply, and every message costs exactly one Claim and one Complete script
// call. Run under -race.
func TestBatchingConcurrent(t *testing.T) {
	client, prefix := setup(t)
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithBatching(4))
	rt := &roundTrips{}
	client.AddHook(rt)
	ctx := t.Context()

	const workers, keys = 16, 160
	// Every key is handled by two workers at once: exactly one acquires it.
	var (
		mu       sync.Mutex
		acquired = map[string]int{}
		sent     int
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range keys {
				if k%workers != w && (k+1)%workers != w {
					continue
				}
				key := fmt.Sprintf("k-%d", k)
				res, err := s.Claim(ctx, claimReq(key))
				if err != nil {
					t.Errorf("claim %s: %v", key, err)
					return
				}
				mu.Lock()
				sent++
				mu.Unlock()
				switch res.Status {
				case idempotency.Acquired:
					if res.Lease.Key != key {
						t.Errorf("claim %s: lease of %s", key, res.Lease.Key)
					}
					if err := s.Complete(ctx, res.Lease, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: key}}}); err != nil {
						t.Errorf("complete %s: %v", key, err)
						return
					}
					mu.Lock()
					acquired[key]++
					sent++
					mu.Unlock()
				case idempotency.Completed:
					if res.Outcome == nil || len(res.Outcome.Messages) != 1 || res.Outcome.Messages[0].UUID != key {
						t.Errorf("claim %s: completed with %+v", key, res.Outcome)
					}
				case idempotency.InProgress:
				default:
					t.Errorf("claim %s: %v", key, res.Status)
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, acquired, keys)
	for key, n := range acquired {
		require.Equal(t, 1, n, key)
	}
	require.Equal(t, 3*keys, sent, "two claims and one complete per key")
	require.Equal(t, sent, scriptCalls(rt.take()), "one script call per Claim and per Complete")

	// Callers canceled at random points: each gets either its reply or its
	// context's error, and the records stay consistent.
	status := make([]string, keys)
	for w := range workers {
		wg.Go(func() {
			for k := w; k < keys; k += workers {
				key := fmt.Sprintf("c-%d", k)
				cctx, cancel := context.WithCancel(ctx)
				go func() {
					for range k % 7 {
						time.Sleep(0) // lets the claim get anywhere from not queued to done
					}
					cancel()
				}()
				res, err := s.Claim(cctx, claimReq(key))
				cancel()
				switch {
				case errors.Is(err, context.Canceled):
					status[k] = "canceled"
				case err != nil:
					t.Errorf("claim %s: %v", key, err)
				case res.Status != idempotency.Acquired:
					t.Errorf("claim %s: %v", key, res.Status)
				default:
					if err := s.Complete(ctx, res.Lease, idempotency.Outcome{}); err != nil {
						t.Errorf("complete %s: %v", key, err)
					}
					status[k] = "done"
				}
			}
		})
	}
	wg.Wait()
	for k, st := range status {
		rec, err := s.Get(ctx, "ns", fmt.Sprintf("c-%d", k))
		if st == "done" {
			require.NoError(t, err)
			require.Equal(t, idempotency.StateDone, rec.State)
			continue
		}
		require.Equal(t, "canceled", st)
		if err == nil {
			require.Equal(t, idempotency.StateInProgress, rec.State, "sent, its caller gone")
		} else {
			require.ErrorIs(t, err, idempotency.ErrNotFound, "never sent")
		}
	}
}

// scriptCalls counts the store's script calls in the round trips: each
// EVALSHA, and each call inside a batch.
func scriptCalls(trips []string) int {
	n := 0
	for _, tr := range trips {
		switch {
		case tr == "evalsha":
			n++
		case strings.HasPrefix(tr, "batch("):
			n += len(strings.Split(strings.TrimSuffix(strings.TrimPrefix(tr, "batch("), ")"), ","))
		}
	}
	return n
}

// batchOf names a batch script run of n calls of one kind, as roundTrips
// records it.
func batchOf(call string, n int) string {
	return "batch(" + strings.TrimSuffix(strings.Repeat(call+",", n), ",") + ")"
}

// A call that fails on the server with an error that clients treat
// specially inside an array (OOM here) fails alone too: the batch's
// read-only duplicates still get their answers.
func TestBatchingOutOfMemoryFailsAlone(t *testing.T) {
	t.Parallel()
	_, c := privateRedis(t, "--maxmemory-policy", "noeviction")
	s := newStore(t, c, redisstore.WithBatching(8))
	ctx := t.Context()
	done := acquire(t, s, claimReq("done"))
	require.NoError(t, s.Complete(ctx, done, idempotency.Outcome{}))
	// From now on the server refuses every write (OOM) and serves reads.
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	require.True(t, redis.HasErrorPrefix(c.Set(ctx, "probe", "x", 0).Err(), "OOM"), "writes are refused")

	g := &gate{}
	c.AddHook(g)
	wait := g.inFlight(t, func(key string) {
		res, err := s.Claim(ctx, claimReq("done"))
		if err != nil || res.Status != idempotency.Completed {
			t.Errorf("held duplicate %s: %v %v", key, res.Status, err)
		}
	}, "held-1", "held-2")
	const n = 5 // duplicates around one fresh claim
	results := make([]idempotency.ClaimResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		key := "done"
		if i == n/2 {
			key = "fresh"
		}
		wg.Go(func() { results[i], errs[i] = s.Claim(ctx, claimReq(key)) })
		waitQueued(t, s, i+1)
	}
	g.open()
	wg.Wait()
	wait()
	for i := range n {
		if i == n/2 {
			require.Error(t, errs[i])
			require.True(t, redis.HasErrorPrefix(errs[i], "OOM"), "a redis.Error, as unbatched: %v", errs[i])
			continue
		}
		require.NoError(t, errs[i], "duplicate %d", i)
		require.Equal(t, idempotency.Completed, results[i].Status, "duplicate %d", i)
	}
}
