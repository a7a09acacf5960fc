package replay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// manualClock is a Clock whose Sleep records the wake-up time and moves
// the clock there at once.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	wakeAt []time.Time
	// frozen: Sleep records the wake-up time but leaves the clock alone.
	frozen bool
	// interrupt: Sleep fails as if its context ended.
	interrupt bool
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.interrupt {
		return context.Canceled
	}
	at := c.now.Add(d)
	c.wakeAt = append(c.wakeAt, at)
	if !c.frozen && at.After(c.now) {
		c.now = at
	}
	return nil
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The first Wait passes at once, the next ones are 1/rate apart: no burst.
func TestLimiterNoBurst(t *testing.T) {
	t.Parallel()
	c := &manualClock{now: start}
	l := newLimiter(c, 4) // 250ms
	var passed []time.Duration
	for range 5 {
		require.NoError(t, l.Wait(t.Context()))
		passed = append(passed, c.Now().Sub(start))
	}
	require.Equal(t, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second}, passed)
	require.Len(t, c.wakeAt, 4, "only the first Wait did not sleep")
}

// A caller late by up to the slack (one interval, at least 100ms) passes at
// once, keeping the schedule; one later than that starts a new schedule
// from now: no burst to catch up.
func TestLimiterSlack(t *testing.T) {
	t.Parallel()
	c := &manualClock{now: start}
	l := newLimiter(c, 10) // 100ms, slack 100ms
	require.NoError(t, l.Wait(t.Context()))
	require.NoError(t, l.Wait(t.Context()))
	require.Equal(t, 100*time.Millisecond, c.Now().Sub(start))
	c.advance(150 * time.Millisecond) // the publish took 150ms: 50ms late for slot 200ms
	require.NoError(t, l.Wait(t.Context()))
	require.Equal(t, 250*time.Millisecond, c.Now().Sub(start), "late within the slack: at once")
	require.NoError(t, l.Wait(t.Context()))
	require.Equal(t, 300*time.Millisecond, c.Now().Sub(start), "back on the schedule")

	c.advance(time.Second) // a stall far past the slack
	require.NoError(t, l.Wait(t.Context()))
	require.Equal(t, 1300*time.Millisecond, c.Now().Sub(start), "at once")
	require.NoError(t, l.Wait(t.Context()))
	require.Equal(t, 1400*time.Millisecond, c.Now().Sub(start), "then one interval: no catching up")

	// At a high rate the slack is 100ms, not one interval.
	c2 := &manualClock{now: start}
	fast := newLimiter(c2, 1000) // 1ms
	require.NoError(t, fast.Wait(t.Context()))
	c2.advance(99 * time.Millisecond)
	for range 99 {
		require.NoError(t, fast.Wait(t.Context()))
	}
	require.Equal(t, 99*time.Millisecond, c2.Now().Sub(start), "99 late slots made up at once")
	require.NoError(t, fast.Wait(t.Context()))
	require.Equal(t, 100*time.Millisecond, c2.Now().Sub(start), "then the schedule again")
	c2.advance(time.Second)
	require.NoError(t, fast.Wait(t.Context()))
	require.NoError(t, fast.Wait(t.Context()))
	require.Equal(t, 1101*time.Millisecond, c2.Now().Sub(start), "after a long stall: no catching up")
}

// Concurrent callers get distinct slots, 1/rate apart.
func TestLimiterConcurrentSlots(t *testing.T) {
	t.Parallel()
	c := &manualClock{now: start, frozen: true}
	l := newLimiter(c, 100) // 10ms
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { require.NoError(t, l.Wait(t.Context())) })
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Len(t, c.wakeAt, 19)
	seen := map[time.Time]bool{}
	for _, w := range c.wakeAt {
		require.False(t, seen[w], "slot %v given twice", w)
		seen[w] = true
		off := w.Sub(start)
		require.Zero(t, off%(10*time.Millisecond))
		require.Positive(t, off)
		require.LessOrEqual(t, off, 190*time.Millisecond)
	}
}

// Rate 0 never waits; a canceled context fails Wait and gives the slot back.
func TestLimiterUnlimitedAndCancel(t *testing.T) {
	t.Parallel()
	c := &manualClock{now: start}
	free := newLimiter(c, 0)
	for range 100 {
		require.NoError(t, free.Wait(t.Context()))
	}
	require.Empty(t, c.wakeAt)

	l := newLimiter(c, 1)
	require.NoError(t, l.Wait(t.Context()))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, l.Wait(ctx), context.Canceled, "canceled before")
	c.mu.Lock()
	c.interrupt = true
	c.mu.Unlock()
	require.ErrorIs(t, l.Wait(t.Context()), context.Canceled, "canceled while sleeping")
	c.mu.Lock()
	c.interrupt = false
	c.mu.Unlock()
	require.NoError(t, l.Wait(t.Context()))
	require.Equal(t, time.Second, c.Now().Sub(start), "the canceled Waits took no slot")
}
