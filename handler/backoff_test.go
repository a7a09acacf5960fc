package handler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	surelydelivery "github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/faults"
	"github.com/surely-dev/surely/retry"
)

// A message that fails transiently, one attempt per delivery, is nacked
// with a delay that grows with its durable attempt number (the store's
// count, not the attempts of one delivery) and never falls below half of
// the backoff's cap for that attempt, even when the jitter draws 0.
func TestRetryNackDelayGrowsWithDurableAttempt(t *testing.T) {
	t.Parallel()
	for _, draw := range []float64{0, 0.5, 0.999} {
		mem, err := memstore.New()
		require.NoError(t, err)
		e := &env{store: faults.NewStore(mem), mem: mem, dead: faults.NewPublisher(0)}
		const initial = 10 * time.Millisecond
		policy, err := retry.NewPolicy(retry.WithMaxAttempts(5), retry.WithInProcessAttempts(1),
			retry.WithBackoff(initial, time.Second), retry.WithMaxInProcessTime(2*time.Second),
			retry.WithRand(func() float64 { return draw }))
		require.NoError(t, err)
		h := e.chain(t, func(*message.Message) ([]*message.Message, error) {
			return nil, errors.New("dependency down")
		}, handler.WithPolicy(policy))

		for attempt := 1; attempt < 5; attempt++ {
			c := &delayControl{supported: true}
			msg := delivery("order-1", "pay 10")
			msg.SetContext(surelydelivery.WithControl(context.Background(), c))
			_, err := h(msg)
			require.Error(t, err, "attempt %d is nacked", attempt)
			capN := backoffCap(initial, time.Second, attempt)
			got := c.last()
			require.GreaterOrEqual(t, got, capN/2, "draw %v: the nack after attempt %d waited %v; the floor is %v", draw, attempt, got, capN/2)
			require.LessOrEqual(t, got, capN, "draw %v: the nack after attempt %d waited %v; the cap is %v", draw, attempt, got, capN)
		}
	}
}

// retry.After(0) or a negative delay is no request for an immediate
// redelivery loop: the nack waits the policy's backoff.
func TestRetryAfterNonPositiveBacksOff(t *testing.T) {
	t.Parallel()
	for _, asked := range []time.Duration{0, -time.Second} {
		mem, err := memstore.New()
		require.NoError(t, err)
		e := &env{store: faults.NewStore(mem), mem: mem, dead: faults.NewPublisher(0)}
		policy, err := retry.NewPolicy(retry.WithMaxAttempts(3), retry.WithInProcessAttempts(1),
			retry.WithBackoff(10*time.Millisecond, time.Second), retry.WithMaxInProcessTime(2*time.Second),
			retry.WithRand(func() float64 { return 0 }))
		require.NoError(t, err)
		h := e.chain(t, func(*message.Message) ([]*message.Message, error) {
			return nil, retry.After(asked, errors.New("rate limited"))
		}, handler.WithPolicy(policy))
		c := &delayControl{supported: true}
		msg := delivery("order-1", "pay 10")
		msg.SetContext(surelydelivery.WithControl(context.Background(), c))
		_, err = h(msg)
		require.Error(t, err)
		require.GreaterOrEqual(t, c.last(), 5*time.Millisecond, "After(%v) nacked after %v", asked, c.last())
	}
}

// backoffCap is the cap of retry.WithBackoff(initial, maxDelay)'s delay
// after attempt n: min(maxDelay, initial × 2^(n-1)).
func backoffCap(initial, maxDelay time.Duration, n int) time.Duration {
	c := initial
	for i := 1; i < n && c < maxDelay; i++ {
		c *= 2
	}
	return min(c, maxDelay)
}
