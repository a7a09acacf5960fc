package replay

import (
	"context"
	"sync"
	"time"
)

// clock is the time source of a run: the rate limiter sleeps on it and the
// retention guard and the achieved rate read it.
type clock interface {
	Now() time.Time
	// Sleep waits for d, or returns ctx's error as soon as ctx ends.
	Sleep(ctx context.Context, d time.Duration) error
}

// systemClock is the wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// injectedClock reads the time from now (dlq.WithClock) and sleeps with
// sleep (a test hook); either nil is the wall clock's.
type injectedClock struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func (c injectedClock) Now() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

func (c injectedClock) Sleep(ctx context.Context, d time.Duration) error {
	if c.sleep == nil {
		return systemClock{}.Sleep(ctx, d)
	}
	return c.sleep(ctx, d)
}

// limiter spaces publishes 1/rate apart on a clock. The first one passes
// at once and the second one 1/rate later: no burst at the start. After
// that the limiter keeps the long-run rate on a fixed schedule (slot k at
// start + k/rate): a caller that comes late by up to the slack (one
// interval, at least minSlack) passes at once, so the jitter of sleeps and
// publishes is made up; one later than that starts a new schedule from
// now, without a burst to catch up.
type limiter struct {
	clock    clock
	interval time.Duration // 0: unlimited
	slack    time.Duration

	mu   sync.Mutex
	next time.Time // the slot of the next Wait; zero before the first
}

// minSlack is the least lateness the limiter makes up (timer and scheduler
// jitter on a busy machine).
const minSlack = 100 * time.Millisecond

func newLimiter(c clock, rate float64) *limiter {
	l := &limiter{clock: c}
	if rate > 0 {
		l.interval = time.Duration(float64(time.Second) / rate)
		if l.interval <= 0 {
			l.interval = 1
		}
		l.slack = max(l.interval, minSlack)
	}
	return l
}

// Wait reserves the next slot and sleeps until it. It returns ctx's error,
// without a slot, when ctx ends first.
func (l *limiter) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.interval == 0 {
		return nil
	}
	l.mu.Lock()
	now := l.clock.Now()
	slot := l.next
	if slot.IsZero() || now.Sub(slot) > l.slack {
		slot = now
	}
	prev := l.next
	l.next = slot.Add(l.interval)
	l.mu.Unlock()
	if d := slot.Sub(now); d > 0 {
		if err := l.clock.Sleep(ctx, d); err != nil {
			l.mu.Lock()
			// Give the slot back if nobody reserved one after it.
			if l.next.Equal(slot.Add(l.interval)) {
				l.next = prev
			}
			l.mu.Unlock()
			return err
		}
	}
	return nil
}
