package redisstream_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	surelyredis "github.com/surely-dev/surely/adapters/redisstream"
	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/handler"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/retry"
)

// A NackAfter longer than HoldLimit does not hold the subscription: the
// entry stays pending, unacked, the next entry is handed out at once, and
// the claim loop hands the deferred entry out again once it was idle for
// ack wait, counted as a new delivery.
func TestNackAfterBeyondHoldLimitLeavesTheEntryPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := message.NewMessage(watermill.NewUUID(), []byte("A"))
	b := message.NewMessage(watermill.NewUUID(), []byte("B"))
	require.NoError(t, f.pub.Publish(f.stream, a, b))
	const idle = 500 * time.Millisecond
	_, ch := f.subscribe(t, "billing", surelyredis.WithConsumer("c1"), delivery.WithAckWait(idle),
		surelyredis.WithClaimInterval(100*time.Millisecond), delivery.WithResendInterval(time.Millisecond))

	m := next(t, ch)
	require.Equal(t, a.UUID, m.UUID)
	c, ok := delivery.ControlFrom(m.Context())
	require.True(t, ok)
	require.True(t, c.NackAfter(time.Hour), "the subscriber takes the delay")
	deferredAt := time.Now()
	m.Nack()

	m = next(t, ch)
	require.Equal(t, b.UUID, m.UUID, "the next entry comes before the deferred one, not after an hour's hold")
	p := f.pending(t, "billing")
	require.Len(t, p, 2, "the deferred entry stays pending, unacked")
	m.Ack()
	require.Eventually(t, func() bool { return len(f.pending(t, "billing")) == 1 }, 5*time.Second, 10*time.Millisecond)

	m = next(t, ch)
	require.Equal(t, a.UUID, m.UUID, "claimed again after the ack wait")
	require.GreaterOrEqual(t, time.Since(deferredAt), idle)
	require.Equal(t, delivery.Info{Count: 2, Redelivered: true}, info(t, m))
	m.Ack()
	require.Eventually(t, func() bool { return len(f.pending(t, "billing")) == 0 }, 5*time.Second, 10*time.Millisecond,
		"the ack of a once-deferred entry is not swallowed")
}

// retry.After(d) on one message must not stop the others for d: the
// message waits its delay (the dedup store's not-before time answers an
// early redelivery) while the entries behind it are handled.
func TestRetryAfterDoesNotHoldTheSubscription(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := message.NewMessage(watermill.NewUUID(), []byte("A"))
	a.Metadata.Set("idempotency_key", "A-"+watermill.NewUUID())
	b := message.NewMessage(watermill.NewUUID(), []byte("B"))
	b.Metadata.Set("idempotency_key", "B-"+watermill.NewUUID())
	require.NoError(t, f.pub.Publish(f.stream, a, b))
	_, ch := f.subscribe(t, "g", surelyredis.WithConsumer("c1"), delivery.WithAckWait(500*time.Millisecond),
		surelyredis.WithClaimInterval(100*time.Millisecond))
	mem, err := memstore.New()
	require.NoError(t, err)
	dead := gochannel.NewGoChannel(gochannel.Config{}, nil)
	t.Cleanup(func() { _ = dead.Close() })
	pol, err := retry.NewPolicy(retry.WithInProcessAttempts(1), retry.WithMaxInProcessTime(time.Second))
	require.NoError(t, err)
	const delay = 3 * time.Second
	var mu sync.Mutex
	var events []string
	var failedAt, retriedAt, bDoneAt time.Time
	h, err := handler.New(func(m *message.Message) ([]*message.Message, error) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, string(m.Payload))
		if string(m.Payload) == "A" {
			if failedAt.IsZero() {
				failedAt = time.Now()
				return nil, retry.After(delay, errors.New("429"))
			}
			retriedAt = time.Now()
		}
		return nil, nil
	}, handler.WithStore(mem, "rv"), handler.WithDeadLetter(dead, "dead"), handler.WithPolicy(pol), handler.WithBreaker(nil))
	require.NoError(t, err)

	deadline := time.Now().Add(30 * time.Second)
	for aDone := false; !aDone; {
		require.True(t, time.Now().Before(deadline), "A and B not both done in 30s")
		m := next(t, ch)
		if _, err := h(m); err != nil {
			m.Nack()
			continue
		}
		m.Ack()
		switch string(m.Payload) {
		case "A":
			aDone = true
		case "B":
			bDoneAt = time.Now()
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.False(t, bDoneAt.IsZero(), "B was handled before A's retry; events %v", events)
	require.Less(t, bDoneAt.Sub(failedAt), delay, "B did not wait for A's delay")
	require.GreaterOrEqual(t, retriedAt.Sub(failedAt), delay, "A was retried no sooner than its delay")
}
