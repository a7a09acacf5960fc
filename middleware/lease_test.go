package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
)

// An extension refused by fencing cancels the handler at once with cause
// idempotency.ErrLeaseLost; the attempt ends lease_lost (nack, not a dead
// letter), without Complete or Release.
func TestDedupLeaseLostCancelsHandler(t *testing.T) {
	t.Parallel()
	for _, returns := range []string{"its error", "nil"} {
		t.Run("handler returns "+returns, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				mem, err := memstore.New()
				require.NoError(t, err)
				store := &faultStore{Store: mem}
				store.extend = func(context.Context, idempotency.Lease, time.Duration) (idempotency.Lease, error) {
					return idempotency.Lease{}, idempotency.ErrLeaseLost
				}
				var cause error
				c := newLeaseChain(t, store, "lost", func(msg *message.Message) ([]*message.Message, error) {
					<-msg.Context().Done()
					cause = context.Cause(msg.Context())
					if returns == "nil" {
						return produceOne(msg)
					}
					return nil, wrapped(msg.Context().Err())
				}, middleware.WithLease(30*time.Second))

				start := time.Now()
				msgs, err := c.deliver("op-1")
				require.ErrorIs(t, cause, idempotency.ErrLeaseLost, "the handler's context names the cause")
				require.Equal(t, 10*time.Second, time.Since(start), "canceled at the first extension")
				require.Nil(t, msgs)
				var ll *middleware.LeaseLostError
				require.ErrorAs(t, err, &ll)
				require.ErrorIs(t, err, idempotency.ErrLeaseLost)
				_, final := dlq.AsFinal(err)
				require.False(t, final, "a lost lease is never dead-lettered")
				require.NotErrorIs(t, err, context.Canceled, "the handler's error is not classified")
				require.Equal(t, delivery.OutcomeLeaseLost, c.lastOutcome())
				require.Zero(t, store.completes.Load(), "no Complete on a lost lease")
				require.Zero(t, store.releases.Load(), "no Release on a lost lease")
			})
		})
	}
}

// wrapped is a handler error that would otherwise be classified (canceled).
func wrapped(err error) error { return fmt.Errorf("charge card: %w", err) }

// An Extend that hangs (even one that ignores its context) must not delay
// Complete: the extender holds no lock across the store call.
func TestDedupHungExtendDoesNotDelayComplete(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	store := &faultStore{Store: mem}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { close(release) })
	store.extend = func(context.Context, idempotency.Lease, time.Duration) (idempotency.Lease, error) {
		once.Do(func() { close(entered) })
		<-release // hung, deaf to its context
		return idempotency.Lease{}, errors.New("hung")
	}
	const lease = 3 * time.Second // store timeout by default: lease/3
	var returned time.Time
	c := newLeaseChain(t, store, "hung-extend", func(msg *message.Message) ([]*message.Message, error) {
		<-entered
		returned = time.Now()
		return produceOne(msg)
	}, middleware.WithLease(lease), middleware.WithExtension(10*time.Millisecond, time.Minute))

	type result struct {
		msgs []*message.Message
		err  error
		at   time.Time
	}
	done := make(chan result, 1)
	go func() {
		msgs, err := c.deliver("op-1")
		done <- result{msgs, err, time.Now()}
	}()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Len(t, r.msgs, 1)
		require.Less(t, r.at.Sub(returned), lease/3, "Complete waited for the hung Extend")
	case <-time.After(30 * time.Second):
		t.Fatal("the delivery did not end while an Extend hangs: Complete waits for it")
	}
	require.Equal(t, delivery.OutcomeProcessed, c.lastOutcome())
	require.Equal(t, int32(1), store.completes.Load())
}
