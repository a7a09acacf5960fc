package mapstore_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/idempotencytest"

	"example.com/externalstore/mapstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is the store's only clock in a test: the suite moves it
// (Harness.Advance), nothing reads the real one.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// The store passes surely's conformance suite, the tests of the optional
// interfaces it implements (idempotency.Lister, idempotency.RecordsReader)
// included.
func TestConformance(t *testing.T) {
	idempotencytest.Run(t, func(t *testing.T) idempotencytest.Harness {
		const retention = time.Hour
		c := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
		return idempotencytest.Harness{
			Store:     mapstore.New(c.Now, retention),
			Advance:   func(_ *testing.T, d time.Duration) { c.Advance(d) },
			Lease:     10 * time.Second,
			Retention: retention,
		}
	})
}

// The optional capabilities are plain interfaces: nothing is registered,
// a type assertion finds them.
func TestCapabilities(t *testing.T) {
	var s idempotency.Store = mapstore.New(nil, time.Hour)
	if _, ok := s.(idempotency.Lister); !ok {
		t.Error("mapstore is no idempotency.Lister")
	}
	if _, ok := s.(idempotency.RecordsReader); !ok {
		t.Error("mapstore is no idempotency.RecordsReader")
	}
	if r, ok := s.(idempotency.RetentionReporter); !ok || r.Retention() != time.Hour {
		t.Error("mapstore does not report its retention")
	}
}
