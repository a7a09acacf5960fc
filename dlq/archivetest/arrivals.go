package archivetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
)

// capabilityTests are the tests of the optional interfaces of package
// archive. Each runs when the archive under test implements its
// interface and is skipped, with the reason, when it does not.
var capabilityTests = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"Arrivals", testArrivals},
}

// Arrivals counts the entries by their dead-lettering time, every state
// included, each bucket closed at its start and open at its end: what
// counting a listing of every entry gives.
func testArrivals(t *testing.T, e *env) {
	ac, ok := e.a.(archive.ArrivalCounter)
	if !ok {
		t.Skipf("%T is no archive.ArrivalCounter", e.a)
	}
	from := base.Truncate(time.Hour)
	at := []time.Time{
		from.Add(-time.Nanosecond),             // before the window
		from,                                   // bucket 0, at its start
		from.Add(59 * time.Minute),             // bucket 0
		from.Add(time.Hour - time.Nanosecond),  // bucket 0, at its end
		from.Add(time.Hour),                    // bucket 1
		from.Add(2*time.Hour + 30*time.Minute), // bucket 2
		from.Add(2*time.Hour + 31*time.Minute), // bucket 2
		from.Add(3 * time.Hour),                // after the window
	}
	for i, t0 := range at {
		e.publish(envelope(letter{source: fmt.Sprintf("arrival-%d", i), reason: dlq.ReasonExhausted, topic: "orders", at: t0}))
	}
	// An entry's state does not matter.
	e.markReplayed(e.listAll(archive.Filter{}, 0)[2].ID, "run-1")
	n, err := e.a.Mark(e.ctx, archive.Mark{To: archive.StateDiscarded, Note: "test"}, e.listAll(archive.Filter{}, 0)[4].ID)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got, err := ac.Arrivals(e.ctx, from, time.Hour, 3)
	require.NoError(t, err)
	require.Equal(t, []int{3, 1, 2}, got)

	listed := make([]int, 6)
	for _, en := range e.listAll(archive.Filter{}, 0) {
		if i := en.DeadLetteredAt.Sub(from.Add(-time.Hour)); i >= 0 && int(i/time.Hour) < len(listed) {
			listed[i/time.Hour]++
		}
	}
	got, err = ac.Arrivals(e.ctx, from.Add(-time.Hour), time.Hour, 6)
	require.NoError(t, err)
	require.Equal(t, listed, got, "what counting a listing gives")
	require.Equal(t, []int{1, 3, 1, 2, 1, 0}, got)

	got, err = ac.Arrivals(e.ctx, from.Add(-48*time.Hour), time.Hour, 24)
	require.NoError(t, err)
	require.Equal(t, make([]int, 24), got, "an empty window")

	for _, bad := range []struct {
		width time.Duration
		n     int
	}{{0, 3}, {-time.Hour, 3}, {time.Hour, 0}, {time.Hour, -1}} {
		_, err := ac.Arrivals(e.ctx, from, bad.width, bad.n)
		require.ErrorIs(t, err, dlq.ErrInvalidOption, "%d buckets of %v", bad.n, bad.width)
	}
}
