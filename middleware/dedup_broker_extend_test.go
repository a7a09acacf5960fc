package middleware_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/delivery"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/middleware"
)

// brokerExtends counts the broker lease extensions asked for.
type brokerExtends struct{ n atomic.Int32 }

func (*brokerExtends) NackAfter(time.Duration) bool { return false }

func (b *brokerExtends) Extend(context.Context) error {
	b.n.Add(1)
	return nil
}

// extendFails is a store whose Extend fails (an outage, not fencing).
type extendFails struct{ idempotency.Store }

func (extendFails) Extend(_ context.Context, l idempotency.Lease, _ time.Duration) (idempotency.Lease, error) {
	return l, errors.New("store down")
}

// The broker's lease is extended with the store's, after each store
// extension that succeeded, and not after one that failed.
func TestDedupBrokerExtendFollowsStore(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		store func(t *testing.T) idempotency.Store
		want  int32
	}{
		{"store extends", func(t *testing.T) idempotency.Store { return leaseStore(t) }, 2},
		{"store fails", func(t *testing.T) idempotency.Store { return extendFails{leaseStore(t)} }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				broker := &brokerExtends{}
				h := leaseDedup(t, c.store(t), func(*message.Message) ([]*message.Message, error) {
					time.Sleep(250 * time.Millisecond) // extensions at 100ms and 200ms
					return nil, nil
				}, middleware.WithLease(time.Second), middleware.WithExtension(100*time.Millisecond, time.Minute))
				msg := leaseMsg("u-1", "k-1", `{}`)
				msg.SetContext(delivery.WithControl(context.Background(), broker))
				_, err := h(msg)
				require.NoError(t, err)
				require.Equal(t, c.want, broker.n.Load())
			})
		})
	}
}
