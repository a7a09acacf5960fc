package memstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"
	"github.com/surely-dev/surely/idempotency/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is the store's clock in tests: it moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		const retention = time.Hour
		clock := newFakeClock()
		s, err := memstore.New(idempotency.WithClock(clock.Now), idempotency.WithRetention(retention))
		require.NoError(t, err)
		return idempotencytest.Harness{
			Store:     s,
			Advance:   func(_ *testing.T, d time.Duration) { clock.Advance(d) },
			Lease:     10 * time.Second,
			Retention: retention,
		}
	})
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	_, err := memstore.New(idempotency.WithClock(nil))
	require.ErrorIs(t, err, idempotency.ErrInvalidOption)
	_, err = memstore.New(idempotency.WithRetention(0))
	require.ErrorIs(t, err, idempotency.ErrInvalidOption)
}
