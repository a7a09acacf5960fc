package handler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelydelivery "github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// delayControl is a broker's delivery.Control: it records the delay of
// the nack that follows, when it supports one.
type delayControl struct {
	supported bool
	mu        sync.Mutex
	delays    []time.Duration
}

func (c *delayControl) NackAfter(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delays = append(c.delays, d)
	return c.supported
}

func (c *delayControl) Extend(context.Context) error { return nil }

// last returns the delay of the last nack the broker took, 0 if none.
func (c *delayControl) last() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.supported || len(c.delays) == 0 {
		return 0
	}
	return c.delays[len(c.delays)-1]
}

// A handler that asks for retry.After(60s) every time is attempted no
// sooner than 60s after each failure, on a broker with a delayed nack
// (the broker waits all of it) and on one without (it redelivers at once
// after the chain's capped wait; the store's NotBefore answers those early
// redeliveries with InProgress, uncharged). It is dead-lettered EXHAUSTED
// after its 5 attempts, not before 5 × 60s.
func TestRetryAfterIsNotBeforeOnEveryBroker(t *testing.T) {
	t.Parallel()
	for _, brokerDelay := range []bool{true, false} {
		name := map[bool]string{true: "BrokerDelay", false: "NoBrokerDelay"}[brokerDelay]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				const asked = 60 * time.Second
				mem, err := memstore.New()
				require.NoError(t, err)
				e := &env{store: faults.NewStore(mem), mem: mem, dead: faults.NewPublisher(0)}
				policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(3),
					retry.WithBackoff(10*time.Millisecond, 100*time.Millisecond), retry.WithMaxInProcessTime(2*time.Second))
				require.NoError(t, err)
				var runs []time.Time
				h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
					runs = append(runs, time.Now())
					return nil, retry.After(asked, errors.New("rate limited"))
				}, handler.WithPolicy(policy))

				start := time.Now()
				deliveries := 0
				for ; deliveries < 1000 && len(e.dead.Published(deadTopic)) == 0; deliveries++ {
					c := &delayControl{supported: brokerDelay}
					msg := delivery("order-1", "pay 10")
					msg.SetContext(surelydelivery.WithControl(context.Background(), c))
					if _, err := h(msg); err == nil {
						break
					}
					time.Sleep(c.last()) // the broker's delay, if it took one; else at once
				}
				dead := e.dead.Published(deadTopic)
				require.Len(t, dead, 1, "dead-lettered after %d deliveries", deliveries)
				require.Equal(t, string(dlq.ReasonExhausted), dead[0].Metadata.Get(dlq.KeyReason))
				require.GreaterOrEqual(t, time.Since(start), 5*asked, "dead-lettered before 5 × %v had been waited", asked)

				require.Len(t, runs, 5, "the handler runs once per attempt of the budget")
				for i := 1; i < len(runs); i++ {
					require.GreaterOrEqual(t, runs[i].Sub(runs[i-1]), asked, "attempt %d ran %v after attempt %d", i+1, runs[i].Sub(runs[i-1]), i)
				}
				rec, err := mem.Get(context.Background(), "orders", "order-1")
				require.NoError(t, err)
				require.Equal(t, 5, rec.Attempts, "early redeliveries are not charged")
				if !brokerDelay {
					require.Positive(t, e.count(handler.OutcomeInProgress), "early redeliveries were answered InProgress")
				}
			})
		})
	}
}

// The nack delay of an InProgress delivery is the other owner's remaining
// lease as the store measured it: a consumer whose clock is an hour ahead
// of the store's does not redeliver in a 10ms loop.
func TestInProgressWaitIgnoresClientClockSkew(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(idempotency.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
		require.NoError(t, err)
		e := &env{store: faults.NewStore(mem), mem: mem, dead: faults.NewPublisher(0)}
		release := make(chan struct{})
		var closeOnce sync.Once
		defer closeOnce.Do(func() { close(release) }) // a failed check must not strand the owner
		var calls atomic.Int32
		h := e.chain(t, func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			<-release
			return nil, nil
		}, handler.WithLease(3*time.Second))
		done := make(chan error, 1)
		go func() { _, err := h(delivery("order-1", "pay 10")); done <- err }()
		synctest.Wait()

		c := &delayControl{supported: true}
		msg := delivery("order-1", "pay 10")
		msg.SetContext(surelydelivery.WithControl(context.Background(), c))
		_, err = h(msg)
		var ip *middleware.InProgressError
		require.ErrorAs(t, err, &ip)
		require.Equal(t, []time.Duration{3 * time.Second}, c.delays, "nacked for the rest of the other owner's lease, by the store's clock")

		// Without a broker delay the chain waits that long itself.
		c = &delayControl{}
		msg = delivery("order-1", "pay 10")
		msg.SetContext(surelydelivery.WithControl(context.Background(), c))
		start := time.Now()
		_, err = h(msg)
		require.ErrorAs(t, err, &ip)
		require.Equal(t, 3*time.Second, time.Since(start))
		closeOnce.Do(func() { close(release) })
		require.NoError(t, <-done)
		require.EqualValues(t, 1, calls.Load())
	})
}
