package middleware_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// Every store call gets a deadline by default (database/sql has none of
// its own): DefaultStoreTimeout, or a third of a shorter lease.
func TestDedupStoreCallsBoundedByDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opts  []middleware.Option
		bound time.Duration
	}{
		{"default lease", nil, middleware.DefaultStoreTimeout},
		{"short lease", []middleware.Option{middleware.WithLease(900 * time.Millisecond)}, 300 * time.Millisecond},
		{"explicit", []middleware.Option{middleware.WithStoreTimeout(time.Second)}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				mem, err := memstore.New()
				require.NoError(t, err)
				store := &faultStore{Store: mem}
				var mu sync.Mutex
				seen := map[string]bool{}
				store.onCall = func(method string, ctx context.Context) {
					dl, ok := ctx.Deadline()
					require.True(t, ok, "%s has no deadline", method)
					require.Equal(t, tc.bound, time.Until(dl), "%s's deadline", method)
					mu.Lock()
					seen[method] = true
					mu.Unlock()
				}
				opts := append([]middleware.Option{middleware.WithExtension(10*time.Millisecond, time.Hour)}, tc.opts...)
				c := newLeaseChain(t, store, "bounded", func(msg *message.Message) ([]*message.Message, error) {
					time.Sleep(15 * time.Millisecond) // fake time: one extension
					if msg.Metadata.Get(idempotency.DefaultMetadataKey) == "fails" {
						return nil, errPermanent
					}
					return nil, nil
				}, opts...)
				_, err = c.deliver("ok")
				require.NoError(t, err)
				_, err = c.deliver("fails")
				require.Error(t, err)
				require.Equal(t, map[string]bool{"Claim": true, "Extend": true, "Complete": true, "Release": true, "Get": true}, seen)
			})
		})
	}
}

var errPermanent = retry.Permanent(errors.New("card declined"))

// The store timeout must be positive and shorter than the lease.
func TestDedupStoreTimeoutValidated(t *testing.T) {
	t.Parallel()
	mem, err := memstore.New()
	require.NoError(t, err)
	_, err = middleware.Dedup(mem, "v", middleware.WithStoreTimeout(0))
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
	_, err = middleware.Dedup(mem, "v", middleware.WithLease(time.Second), middleware.WithStoreTimeout(time.Second))
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
	_, err = middleware.Dedup(mem, "v", middleware.WithLease(time.Second), middleware.WithStoreTimeout(999*time.Millisecond))
	require.NoError(t, err)
}
