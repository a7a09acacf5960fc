package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/redisstore"
	"github.com/surely-dev/surely/internal/testenv"
	"github.com/surely-dev/surely/retry"
)

// completeRecorder counts, per key, the Complete calls that failed: each one
// is an effect that ran without its DONE mark.
type completeRecorder struct {
	idempotency.Store
	mu     sync.Mutex
	failed map[string]int
}

func (r *completeRecorder) Complete(ctx context.Context, l idempotency.Lease, o idempotency.Outcome) error {
	err := r.Store.Complete(ctx, l, o)
	if err != nil {
		r.mu.Lock()
		r.failed[l.Key]++
		r.mu.Unlock()
	}
	return err
}

func (r *completeRecorder) failedFor(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed[key]
}

// ledger is the test's view of the business: effects, acks and violations.
type ledger struct {
	mu         sync.Mutex
	effects    map[string]int
	acked      map[string]int
	down       bool           // set only while the server is certainly dead
	effectDown map[string]int // effects that ran while the store was down
	ackedDown  int            // acks while the store was down
	violations []string       // acks without an effect
}

// TestRedisOutageMidStream: the store's Redis (a private redis-server) is
// killed in the middle of a stream of 200 messages and restarted on the same
// port 1.5s later. Nothing is acked without its effect, every message is
// processed once the store is back, nothing is dead-lettered (the breaker
// pauses the consumer instead of spending attempt budgets), and an effect
// runs twice only for an operation whose Complete failed after its effect.
func TestRedisOutageMidStream(t *testing.T) {
	t.Parallel()
	const total = 200
	srv := testenv.StartRedis(t)
	client := redis.NewClient(&redis.Options{
		Addr: srv.Addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		MaxRetries: 1,
	})
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := redisstore.New(ctx, client, redisstore.WithPrefix("surely-it:outage:"))
	require.NoError(t, err)
	store := &completeRecorder{Store: rs, failed: map[string]int{}}

	// The broker is in process: only the store goes away.
	pubSub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	deadCh, err := pubSub.Subscribe(ctx, "dead")
	require.NoError(t, err)
	var deadMu sync.Mutex
	var dead []*message.Message
	deadDone := make(chan struct{})
	go func() {
		defer close(deadDone)
		for m := range deadCh {
			deadMu.Lock()
			dead = append(dead, m)
			deadMu.Unlock()
			m.Ack()
		}
	}()

	l := &ledger{effects: map[string]int{}, acked: map[string]int{}, effectDown: map[string]int{}}
	breaker, err := retry.NewBreaker(retry.WithWindow(10), retry.WithMinSamples(5),
		retry.WithCooldown(100*time.Millisecond, 400*time.Millisecond))
	require.NoError(t, err)
	policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(2),
		retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(300*time.Millisecond))
	require.NoError(t, err)
	o := &outcomes{n: map[handler.Outcome]int{}}
	h, err := handler.New(func(msg *message.Message) ([]*message.Message, error) {
		key := idempotency.KeyFrom(msg.Context())
		l.mu.Lock()
		l.effects[key]++
		if l.down {
			l.effectDown[key]++
		}
		l.mu.Unlock()
		time.Sleep(2 * time.Millisecond) // some work, so that the stream is still flowing when the store dies
		return nil, nil
	},
		handler.WithStore(store, namespace),
		handler.WithDeadLetter(pubSub, "dead"),
		handler.WithPolicy(policy),
		handler.WithBreaker(breaker),
		handler.WithLease(2*time.Second),
		handler.WithOnOutcome(o.record),
	)
	require.NoError(t, err)

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	// Outside the surely chain: the chain returned nil, so the router acks.
	router.AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			msgs, err := next(msg)
			if err == nil {
				key := msg.Metadata.Get(idempotency.DefaultMetadataKey)
				l.mu.Lock()
				l.acked[key]++
				if l.down {
					l.ackedDown++
				}
				if l.effects[key] == 0 {
					l.violations = append(l.violations, fmt.Sprintf("%s acked without its effect (store down: %v)", key, l.down))
				}
				l.mu.Unlock()
			}
			return msgs, err
		}
	})
	router.AddConsumerHandler("orders", "orders", pubSub, handler.NoPublish(h))
	runDone := make(chan error, 1)
	go func() { runDone <- router.Run(ctx) }()
	<-router.Running()

	pubDone := make(chan error, 1)
	go func() {
		for i := range total {
			if err := pubSub.Publish("orders", order(fmt.Sprintf("order-%03d", i))); err != nil {
				pubDone <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		pubDone <- nil
	}()

	effectCount := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.effects)
	}
	eventually(t, 20*time.Second, "60 messages processed before the outage", func() (bool, string) {
		n := effectCount()
		return n >= 60, fmt.Sprintf("%d processed", n)
	})
	srv.Stop() // SIGKILL
	l.mu.Lock()
	l.down = true // after the kill: whatever is seen from now on happened without a store
	l.mu.Unlock()
	before := effectCount()
	time.Sleep(1500 * time.Millisecond)
	l.mu.Lock()
	l.down = false // before the restart, for the same reason
	l.mu.Unlock()
	srv.Start(t) // same port; no persistence, so every record is gone
	require.Less(t, before, total, "the outage must hit the stream mid-way")

	require.NoError(t, <-pubDone)
	eventually(t, 30*time.Second, "every message acked after the restart", func() (bool, string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.acked) == total, fmt.Sprintf("%d of %d keys acked, breaker %v", len(l.acked), total, breaker.State())
	})
	require.NoError(t, router.Close()) // closes the GoChannel, which ends the dead-letter reader
	require.NoError(t, <-runDone)
	<-deadDone

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.violations, "no message acked without its effect")
	doubled := 0
	for i := range total {
		key := fmt.Sprintf("order-%03d", i)
		require.GreaterOrEqual(t, l.effects[key], 1, "%s lost", key)
		// At-least-once, effectively-once: an effect runs again only when
		// its Complete failed after the effect (lease mode's window; the
		// restart without persistence also forgot the IN_PROGRESS record,
		// so the redelivery claims afresh). Every operation whose Complete
		// committed, before or after the outage, ran exactly once.
		failed := store.failedFor(key)
		if failed == 0 {
			require.Equal(t, 1, l.effects[key], "%s: its Complete committed, yet the effect ran again", key)
		} else {
			require.LessOrEqual(t, l.effects[key], 1+failed, "%s: at most one rerun per failed Complete", key)
		}
		// A handler that ran while the store was down had claimed before
		// the kill; its Complete cannot have committed.
		if l.effectDown[key] > 0 {
			require.Positive(t, failed, "%s ran while the store was down, yet its Complete did not fail", key)
		}
		if l.effects[key] > 1 {
			doubled++
		}
	}
	// GoChannel hands every published message to the router at once (one
	// goroutine each), so many deliveries are in flight and paused together
	// during the outage: the paused count is per delivery, not per message.
	t.Logf("processed before the outage: %d, effects while down: %d, acks while down: %d, doubled by a failed Complete: %d, outcomes: %v",
		before, len(l.effectDown), l.ackedDown, doubled, o.snapshot())
	require.Positive(t, o.get(handler.OutcomePaused)+o.get(handler.OutcomeRetry), "the outage was noticed")
	require.Equal(t, retry.BreakerClosed, breaker.State(), "the breaker closed again after a successful probe")
	deadMu.Lock()
	defer deadMu.Unlock()
	require.Empty(t, dead, "an outage dead-letters nothing")
	require.Zero(t, o.get(handler.OutcomeDeadLettered))
}
