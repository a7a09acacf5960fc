package integration

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/retry"
)

// outcomes counts deliveries by outcome (an OnOutcome callback).
type outcomes struct {
	mu sync.Mutex
	n  map[handler.Outcome]int
}

func (o *outcomes) record(_ context.Context, p handler.OutcomeParams) handler.OutcomeResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[p.Outcome]++
	return handler.OutcomeResult{}
}

func (o *outcomes) snapshot() map[handler.Outcome]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.n)
}

func (o *outcomes) get(k handler.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[k]
}

// runRouter runs, in this process, a router consuming the test's stream
// through a redisstream consumer group with handler.New(fn) on the Redis
// store; it is closed when the test ends.
func (s *suite) runRouter(t *testing.T, fn message.HandlerFunc, opts ...handler.Option) *outcomes {
	t.Helper()
	opt, err := redis.ParseURL(s.url)
	require.NoError(t, err)
	// The subscriber and the publisher close the client they get: each gets
	// its own, never the store's (s.rdb).
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client:                        redis.NewClient(opt),
		Consumer:                      "in-process-" + randomHex(3),
		ConsumerGroup:                 s.n.Group(),
		NackResendSleep:               50 * time.Millisecond,
		BlockTime:                     100 * time.Millisecond,
		ClaimInterval:                 200 * time.Millisecond,
		MaxIdleTime:                   5 * time.Second,
		DisableIndefiniteInitialBlock: true,
	}, watermill.NopLogger{})
	require.NoError(t, err)
	deadPub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: redis.NewClient(opt)}, watermill.NopLogger{})
	require.NoError(t, err)

	policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(1),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(500*time.Millisecond))
	require.NoError(t, err)
	o := &outcomes{n: map[handler.Outcome]int{}}
	base := []handler.Option{
		handler.WithStore(s.store, namespace),
		handler.WithDeadLetter(deadPub, s.n.Dead()),
		handler.WithPolicy(policy),
		handler.WithBreaker(nil),
		handler.WithLease(2 * time.Second),
		handler.WithConsumerGroup(s.n.Group()),
		handler.WithOnOutcome(o.record),
	}
	h, err := handler.New(fn, append(base, opts...)...)
	require.NoError(t, err)

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	router.AddConsumerHandler("orders", s.n.Stream(), sub, handler.NoPublish(h))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		require.NoError(t, router.Close()) // also closes the subscriber, and with it its client
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, deadPub.Close())
	})
	select {
	case <-router.Running():
	case <-time.After(10 * time.Second):
		t.Fatal("router did not start within 10s")
	}
	return o
}

// TestFailOnceThenSucceeds: on a real stream, each message's first attempt
// fails and the redelivery succeeds. It is processed exactly once and never
// dead-lettered: the failed claim was released, not taken for a duplicate
// (Watermill's Deduplicator acks such a redelivery and loses the message;
// see handler_test.go).
func TestFailOnceThenSucceeds(t *testing.T) {
	t.Parallel()
	s := setup(t, "failonce")
	var mu sync.Mutex
	calls := map[string]int{}
	o := s.runRouter(t, func(msg *message.Message) ([]*message.Message, error) {
		op, ok := idempotency.OperationFrom(msg.Context())
		if !ok {
			return nil, errors.New("no operation in the context")
		}
		mu.Lock()
		calls[op.Key]++
		mu.Unlock()
		if op.Attempt == 1 {
			return nil, errors.New("database busy")
		}
		return nil, s.rdb.HIncrBy(msg.Context(), s.n.Effects(), op.Key, 1).Err()
	})

	keys := []string{"order-1", "order-2", "order-3"}
	var msgs []*message.Message
	for _, k := range keys {
		msgs = append(msgs, order(k))
	}
	last := s.publish(t, msgs...)
	s.waitAcked(t, last, 15*time.Second)

	for _, k := range keys {
		require.Equal(t, int64(1), s.effects(t, k), "%s processed exactly once", k)
		mu.Lock()
		require.Equal(t, 2, calls[k], "%s: the redelivery ran the handler", k)
		mu.Unlock()
		rec := s.record(t, k)
		require.Equal(t, idempotency.StateDone, rec.State)
		require.Equal(t, 2, rec.Attempts)
		require.Len(t, rec.History, 2)
		require.Equal(t, idempotency.ResultFailed, rec.History[0].Result)
		require.Equal(t, "database busy", rec.History[0].Error)
		require.Equal(t, idempotency.ResultDone, rec.History[1].Result)
	}
	require.Empty(t, s.deadLetters(t), "nothing dead-lettered")
	require.Equal(t, len(keys), o.get(handler.OutcomeRetry))
	require.Equal(t, len(keys), o.get(handler.OutcomeProcessed))
	require.Zero(t, o.get(handler.OutcomeDuplicate))
}

// TestSlowHandlerNotRunTwiceConcurrently: two consumer processes in one
// group; the handler takes 3× the lease and the stream's MaxIdleTime is far
// shorter, so the stream does hand the message to the second consumer while
// the first still works on it. surely's lease, extended while the handler
// runs, makes the second one refuse (in_progress, nack) until the first
// completed, then ack it as a duplicate: one run, never two at once.
func TestSlowHandlerNotRunTwiceConcurrently(t *testing.T) {
	t.Parallel()
	s := setup(t, "slow")
	const key = "order-slow"
	const lease = 1500 * time.Millisecond

	cfg := baseConfig()
	cfg.Lease = lease
	cfg.HandlerSleep = 3 * lease
	cfg.MaxIdle = 300 * time.Millisecond
	// The first consumer never claims idle entries, so the handoff can only
	// go to the second one.
	firstCfg := cfg
	firstCfg.ClaimInterval = time.Minute
	first := s.startChild(t, firstCfg)
	last := s.publish(t, order(key))
	first.WaitFor(t, 15*time.Second, "RUN "+key+" 1 ")

	secondCfg := cfg
	secondCfg.ClaimInterval = 100 * time.Millisecond
	second := s.startChild(t, secondCfg)
	second.WaitFor(t, 15*time.Second, "OUTCOME in_progress "+key)
	first.WaitFor(t, 15*time.Second, "OUTCOME processed "+key)
	second.WaitFor(t, 15*time.Second, "OUTCOME duplicate "+key)
	s.waitAcked(t, last, 10*time.Second)

	require.Equal(t, int64(1), s.effects(t, key), "the effect ran once")

	// The runs list is in the server's order: a start while another run is
	// open would be an overlap.
	runs, err := s.rdb.LRange(context.Background(), s.n.Runs(), 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, runs, 2, "one run: %q", runs)
	open := map[string]bool{}
	var started int64
	for _, r := range runs {
		f := strings.Fields(r) // start|end <token> <attempt> <consumer> <unix ms>
		require.Len(t, f, 5, r)
		switch f[0] {
		case "start":
			require.Empty(t, open, "run %s started while %v was running", f[1], open)
			open[f[1]] = true
			started, err = strconv.ParseInt(f[4], 10, 64)
			require.NoError(t, err)
			require.Equal(t, first.Name, f[3])
		case "end":
			require.True(t, open[f[1]], "end of a run that is not open: %s", r)
			delete(open, f[1])
		}
	}
	require.Empty(t, open)

	rec := s.record(t, key)
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, 1, rec.Attempts, "nobody took the lease over")

	// The second consumer was refused after the first lease term had run
	// out: the extension, not the initial lease, kept the operation held.
	refusals, err := s.rdb.LRange(context.Background(), s.n.InProgress(), 0, -1).Result()
	require.NoError(t, err)
	require.NotEmpty(t, refusals)
	latest := int64(0)
	for _, r := range refusals {
		ms, err := strconv.ParseInt(r, 10, 64)
		require.NoError(t, err)
		latest = max(latest, ms)
	}
	require.Greater(t, latest, started+lease.Milliseconds(),
		"a claim was refused %dms after the run started, past the %v lease", latest-started, lease)
	n, err := s.rdb.HGet(context.Background(), s.n.Outcomes(), second.Name+"|"+string(handler.OutcomeInProgress)).Int()
	require.NoError(t, err)
	require.Positive(t, n)
	require.Empty(t, s.deadLetters(t))
}
