package replay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A caller late by exactly the slack still passes at once and keeps the
// schedule (the slack is inclusive).
func TestLimiterLateByExactlySlack(t *testing.T) {
	t.Parallel()
	c := &manualClock{now: start}
	l := newLimiter(c, 10) // 100ms, slack 100ms
	require.NoError(t, l.Wait(t.Context()))
	c.advance(200 * time.Millisecond) // slot 100ms, now 200ms: 100ms late
	require.NoError(t, l.Wait(t.Context()))
	require.NoError(t, l.Wait(t.Context()))
	require.Empty(t, c.wakeAt, "slot 200ms is now: no sleep")
	require.NoError(t, l.Wait(t.Context()))
	require.Equal(t, []time.Time{start.Add(300 * time.Millisecond)}, c.wakeAt)
}

// A rate above one per nanosecond is still limited: the interval is never
// rounded down to "unlimited".
func TestLimiterRateAboveOnePerNanosecond(t *testing.T) {
	t.Parallel()
	c := &manualClock{now: start, frozen: true}
	l := newLimiter(c, 2e9)
	for range 3 {
		require.NoError(t, l.Wait(t.Context()))
	}
	require.Equal(t, []time.Time{start.Add(1), start.Add(2)}, c.wakeAt, "one nanosecond apart")
}
