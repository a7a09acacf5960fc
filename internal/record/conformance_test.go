package record_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// The state machine's real guard is the stores' conformance suite: its
// cases state what each answer and record must be, where the pure-function
// tests above only check properties. This runs the suite against memstore,
// which stores what the functions decide and nothing else, so that the
// package's own tests are the ones that decide whether a change to a
// decision is noticed (scripts/mutation.sh measures internal/record with
// them). The suite's Transitions case compares a store with these very
// functions and so cannot notice a change to them here; every other case
// states its expectations on its own.
func TestConformanceThroughMemstore(t *testing.T) {
	t.Parallel()
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		const retention = time.Hour
		clock := &fakeClock{now: t0}
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

// fakeClock is the store's only clock: it moves when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
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
