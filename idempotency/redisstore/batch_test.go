package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
		lease     = 150 * time.Millisecond
		retention = time.Second // see TestConformance
	)
	s := newStore(t, client, redisstore.WithPrefix(prefix), redisstore.WithRetention(retention),
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

// gate holds the next round trip (a command or a pipeline) of a client
// until open is called: a round trip "in flight" for as long as a test
// needs, without timing.
type gate struct {
	mu      sync.Mutex
	armed   bool
	entered chan struct{} // closed when the held round trip arrived
	release chan struct{}
}

// arm makes the next round trip wait; <-g.entered tells it arrived.
func (g *gate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
	g.entered = make(chan struct{})
	g.release = make(chan struct{})
}

func (g *gate) open() { close(g.release) }

func (g *gate) hold() {
	g.mu.Lock()
	armed, entered, release := g.armed, g.entered, g.release
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(entered)
		<-release
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
// batching; calls made while a round trip is in flight go together in the
// next one, at most maxBatch per pipeline, each with its own reply.
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

	// Twelve claims arrive while one is in flight.
	g.arm()
	first := make(chan idempotency.ClaimResult, 1)
	go func() {
		res, err := s.Claim(ctx, claimReq("first"))
		if err != nil {
			t.Errorf("first claim: %v", err)
		}
		first <- res
	}()
	<-g.entered
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
	firstLease := (<-first).Lease
	require.Equal(t, []string{"evalsha", pipelineOf("evalsha", 8), pipelineOf("evalsha", 4)}, rt.take())
	tokens := map[string]bool{firstLease.Token: true}
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, idempotency.Acquired, claims[i].Status)
		require.Equal(t, fmt.Sprintf("k-%d", i), claims[i].Lease.Key, "each caller gets its own reply")
		require.Equal(t, 1, claims[i].Lease.Attempt)
		tokens[claims[i].Lease.Token] = true
	}
	require.Len(t, tokens, n+1, "one token per claim")

	// Completes batch the same way; a stale token gets its own ErrLeaseLost.
	g.arm()
	go func() {
		if err := s.Complete(ctx, firstLease, idempotency.Outcome{}); err != nil {
			t.Errorf("first complete: %v", err)
		}
	}()
	<-g.entered
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
	require.Equal(t, []string{"evalsha", pipelineOf("evalsha", 8), pipelineOf("evalsha", 4)}, rt.take())
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

	g.arm()
	ctxA, cancelA := context.WithCancel(ctx)
	defer cancelA()
	a := claim(ctxA, "in-flight")
	<-g.entered
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
	require.NoError(t, <-c)
	require.Equal(t, []string{"evalsha", "evalsha"}, rt.take(), "the canceled queued call was never sent")

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
// the calls that got NOSCRIPT.
func TestBatchingNoScript(t *testing.T) {
	t.Parallel()
	_, c := privateRedis(t)
	logs := &captured{}
	s := newStore(t, c, redisstore.WithLogger(slog.New(logs)), redisstore.WithBatching(64))
	ctx := t.Context()

	other := redis.NewClient(c.Options())
	t.Cleanup(func() { _ = other.Close() })
	rt, g := &roundTrips{}, &gate{}
	c.AddHook(rt)
	c.AddHook(g)
	c.AddHook(&flushBeforePipeline{other: other})

	g.arm()
	first := make(chan error, 1)
	go func() { _, err := s.Claim(ctx, claimReq("first")); first <- err }()
	<-g.entered
	const n = 3
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = acquireErr(ctx, s, claimReq(fmt.Sprintf("k-%d", i))) })
	}
	waitQueued(t, s, n)
	g.open()
	wg.Wait()
	require.NoError(t, <-first)
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, []string{
		"evalsha",
		pipelineOf("evalsha", n), // the scripts were flushed just before: NOSCRIPT
		pipelineOf("script", 5),  // reload
		pipelineOf("evalsha", n), // re-send
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

// flushBeforePipeline empties the server's script cache (through another
// client) just before the first pipeline of EVALSHA is sent.
type flushBeforePipeline struct {
	other *redis.Client
	once  sync.Once
}

func (f *flushBeforePipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f *flushBeforePipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (f *flushBeforePipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "evalsha" {
			var err error
			f.once.Do(func() { err = f.other.ScriptFlush(ctx).Err() })
			if err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
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
	require.Equal(t, sent, countCommands(rt.take(), "evalsha"), "one script call per Claim and per Complete")

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

// countCommands counts cmd in the round trips, inside pipelines too.
func countCommands(trips []string, cmd string) int {
	n := 0
	for _, tr := range trips {
		tr = strings.TrimSuffix(strings.TrimPrefix(tr, "pipeline("), ")")
		for _, c := range strings.Split(tr, ",") {
			if c == cmd {
				n++
			}
		}
	}
	return n
}
