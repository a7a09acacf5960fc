package retry_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/retry"
)

// setupBreaker returns a breaker with a window of 10, opening at 8 transient
// failures out of at least 10, cooling down 5s then 10s, 20s... up to 40s.
func setupBreaker(t *testing.T, opts ...retry.Option) *retry.Breaker {
	t.Helper()
	base := []retry.Option{
		retry.WithWindow(10),
		retry.WithMinSamples(10),
		retry.WithThreshold(0.8),
		retry.WithCooldown(5*time.Second, 40*time.Second),
	}
	b, err := retry.NewBreaker(append(base, opts...)...)
	require.NoError(t, err)
	return b
}

// record runs one allowed attempt with result r.
func record(t *testing.T, b *retry.Breaker, r retry.Signal) {
	t.Helper()
	p := b.Allow()
	require.True(t, p.Allowed, "attempt denied in state %v", b.State())
	require.False(t, p.Probe)
	b.Record(p, r)
}

// openBreaker drives a closed breaker open with transient failures.
func openBreaker(t *testing.T, b *retry.Breaker) {
	t.Helper()
	for range 10 {
		record(t, b, retry.SignalTransient)
	}
	require.Equal(t, retry.BreakerOpen, b.State())
}

func TestBreakerDefaults(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, err := retry.NewBreaker()
		require.NoError(t, err)
		assert.Equal(t, retry.BreakerClosed, b.State())
		// Nine transient failures: below MinSamples (10).
		for range 9 {
			record(t, b, retry.SignalTransient)
		}
		assert.Equal(t, retry.BreakerClosed, b.State())
		record(t, b, retry.SignalTransient)
		require.Equal(t, retry.BreakerOpen, b.State())
		p := b.Allow()
		assert.False(t, p.Allowed)
		assert.Equal(t, 5*time.Second, p.Wait, "default cooldown")
	})
}

func TestBreakerOpensAtThreshold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		// 2 successes, then 7 transient: 7/9, below MinSamples anyway.
		record(t, b, retry.SignalSuccess)
		record(t, b, retry.SignalSuccess)
		for range 7 {
			record(t, b, retry.SignalTransient)
		}
		assert.Equal(t, retry.BreakerClosed, b.State())
		// 10th sample: 8/10 transient = threshold.
		record(t, b, retry.SignalTransient)
		assert.Equal(t, retry.BreakerOpen, b.State())
	})
}

func TestBreakerStaysClosedBelowThreshold(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		// 7 of every 10 fail, forever: never 80%.
		for range 50 {
			for i := range 10 {
				r := retry.SignalTransient
				if i%10 < 3 {
					r = retry.SignalSuccess
				}
				record(t, b, r)
			}
		}
		assert.Equal(t, retry.BreakerClosed, b.State())
	})
}

func TestBreakerWindowForgets(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		// 3 successes then 7 failures: 7/10.
		for range 3 {
			record(t, b, retry.SignalSuccess)
		}
		for range 7 {
			record(t, b, retry.SignalTransient)
		}
		assert.Equal(t, retry.BreakerClosed, b.State())
		// The next failure pushes out the oldest success: 8/10.
		record(t, b, retry.SignalTransient)
		assert.Equal(t, retry.BreakerOpen, b.State())
	})
}

func TestBreakerNeutralNotCounted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		for range 100 {
			record(t, b, retry.SignalNeutral)
		}
		assert.Equal(t, retry.BreakerClosed, b.State())
		// Neutral results neither fill the window nor dilute the ratio.
		for range 9 {
			record(t, b, retry.SignalTransient)
			record(t, b, retry.SignalNeutral)
		}
		assert.Equal(t, retry.BreakerClosed, b.State(), "9 samples < MinSamples")
		record(t, b, retry.SignalTransient)
		assert.Equal(t, retry.BreakerOpen, b.State())
	})
}

func TestBreakerOpenDenies(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		openBreaker(t, b)

		p := b.Allow()
		assert.False(t, p.Allowed)
		assert.False(t, p.Probe)
		assert.Equal(t, 5*time.Second, p.Wait)

		time.Sleep(2 * time.Second)
		p = b.Allow()
		assert.False(t, p.Allowed)
		assert.Equal(t, 3*time.Second, p.Wait, "the remaining cooldown")

		time.Sleep(2950 * time.Millisecond)
		p = b.Allow()
		assert.False(t, p.Allowed)
		assert.Equal(t, retry.MinWait, p.Wait, "never below MinWait")
		assert.Equal(t, retry.BreakerOpen, b.State())

		// Recording a denied permit changes nothing.
		b.Record(p, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerOpen, b.State())
	})
}

func TestBreakerHalfOpensAfterCooldown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		openBreaker(t, b)
		time.Sleep(5 * time.Second)
		assert.Equal(t, retry.BreakerHalfOpen, b.State())

		probe := b.Allow()
		assert.True(t, probe.Allowed)
		assert.True(t, probe.Probe)

		other := b.Allow()
		assert.False(t, other.Allowed)
		assert.False(t, other.Probe)
		assert.Equal(t, time.Second, other.Wait, "re-check interval: min(cooldown, 1s)")
	})
}

func TestBreakerProbeSuccessCloses(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		openBreaker(t, b)
		time.Sleep(5 * time.Second)

		probe := b.Allow()
		require.True(t, probe.Probe)
		b.Record(probe, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerClosed, b.State())

		// The window was reset: nine failures are below MinSamples again.
		for range 9 {
			record(t, b, retry.SignalTransient)
		}
		assert.Equal(t, retry.BreakerClosed, b.State())
		record(t, b, retry.SignalTransient)
		assert.Equal(t, retry.BreakerOpen, b.State())
		assert.Equal(t, 5*time.Second, b.Allow().Wait, "the cooldown was reset")
	})
}

func TestBreakerProbeFailureDoublesCooldown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		openBreaker(t, b)

		for _, cooldown := range []time.Duration{5, 10, 20, 40, 40, 40} {
			cooldown *= time.Second
			p := b.Allow()
			require.False(t, p.Allowed)
			require.Equal(t, cooldown, p.Wait)

			time.Sleep(cooldown - time.Millisecond)
			require.Equal(t, retry.BreakerOpen, b.State())
			time.Sleep(time.Millisecond)
			require.Equal(t, retry.BreakerHalfOpen, b.State())

			probe := b.Allow()
			require.True(t, probe.Probe)
			b.Record(probe, retry.SignalTransient)
			require.Equal(t, retry.BreakerOpen, b.State())
		}

		// Success resets the cooldown to its initial value.
		time.Sleep(40 * time.Second)
		probe := b.Allow()
		require.True(t, probe.Probe)
		b.Record(probe, retry.SignalSuccess)
		openBreaker(t, b)
		assert.Equal(t, 5*time.Second, b.Allow().Wait)
	})
}

func TestBreakerNeutralProbe(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		openBreaker(t, b)
		time.Sleep(5 * time.Second)

		probe := b.Allow()
		require.True(t, probe.Probe)
		require.False(t, b.Allow().Allowed, "one probe at a time")
		b.Record(probe, retry.SignalNeutral)
		assert.Equal(t, retry.BreakerHalfOpen, b.State(), "a neutral probe decides nothing")

		next := b.Allow()
		require.True(t, next.Allowed, "the slot was freed")
		require.True(t, next.Probe)
		b.Record(next, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerClosed, b.State())
	})
}

func TestBreakerLateResultsIgnored(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		// Attempts admitted while closed, finishing after the breaker opened.
		late := make([]retry.Permit, 5)
		for i := range late {
			late[i] = b.Allow()
			require.True(t, late[i].Allowed)
		}
		openBreaker(t, b)

		for _, p := range late {
			b.Record(p, retry.SignalSuccess)
		}
		assert.Equal(t, retry.BreakerOpen, b.State(), "late successes do not close an open breaker")

		time.Sleep(5 * time.Second)
		probe := b.Allow()
		require.True(t, probe.Probe)
		for _, p := range late {
			b.Record(p, retry.SignalTransient)
		}
		assert.Equal(t, retry.BreakerHalfOpen, b.State(), "late failures do not reopen a half-open breaker")
		require.False(t, b.Allow().Allowed, "nor free the probe slot")

		b.Record(probe, retry.SignalSuccess)
		require.Equal(t, retry.BreakerClosed, b.State())

		// Late results from the earlier closed period stay out of the new window:
		// with them, 9 failures would reach 10 samples.
		for _, p := range late {
			b.Record(p, retry.SignalTransient)
		}
		for range 9 {
			record(t, b, retry.SignalTransient)
		}
		assert.Equal(t, retry.BreakerClosed, b.State())

		// A stale probe permit is ignored too.
		b.Record(probe, retry.SignalTransient)
		assert.Equal(t, retry.BreakerClosed, b.State())
	})
}

func TestBreakerLostProbe(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		openBreaker(t, b)
		time.Sleep(5 * time.Second)

		lost := b.Allow()
		require.True(t, lost.Probe)
		time.Sleep(39 * time.Second)
		require.False(t, b.Allow().Allowed, "the probe is still in flight")
		time.Sleep(time.Second)

		// After the max cooldown the probe is given up and a new one issued.
		next := b.Allow()
		require.True(t, next.Allowed)
		require.True(t, next.Probe)
		b.Record(lost, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerHalfOpen, b.State(), "the lost probe's result is stale")
		b.Record(next, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerClosed, b.State())
	})
}

func TestBreakerSingleProbeUnderConcurrency(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		openBreaker(t, b)
		time.Sleep(5 * time.Second)

		const workers = 64
		var (
			probes  atomic.Int32
			denied  atomic.Int32
			started sync.WaitGroup
			start   = make(chan struct{})
			probeCh = make(chan retry.Permit, workers)
		)
		started.Add(workers)
		for range workers {
			go func() {
				started.Done()
				<-start
				p := b.Allow()
				switch {
				case p.Probe:
					probes.Add(1)
					probeCh <- p
				case !p.Allowed:
					denied.Add(1)
				}
			}()
		}
		started.Wait()
		close(start)
		synctest.Wait()

		assert.Equal(t, int32(1), probes.Load())
		assert.Equal(t, int32(workers-1), denied.Load())
		b.Record(<-probeCh, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerClosed, b.State())
	})
}

// TestBreakerConcurrentUse hammers every method from many goroutines, for -race.
func TestBreakerConcurrentUse(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t, retry.WithCooldown(10*time.Millisecond, 80*time.Millisecond))
		var (
			wg         sync.WaitGroup
			inFlight   atomic.Int32
			violations atomic.Int32
		)
		for w := range 16 {
			wg.Go(func() {
				for i := range 200 {
					p := b.Allow()
					_ = b.State()
					if !p.Allowed {
						time.Sleep(p.Wait)
						continue
					}
					if p.Probe {
						if inFlight.Add(1) > 1 {
							violations.Add(1)
						}
						time.Sleep(time.Millisecond)
						inFlight.Add(-1)
					}
					r := retry.SignalTransient
					switch {
					case i%7 == 0:
						r = retry.SignalNeutral
					case (i+w)%5 == 0 && i > 100:
						r = retry.SignalSuccess
					}
					b.Record(p, r)
				}
			})
		}
		wg.Wait()
		assert.Zero(t, violations.Load(), "never two probes in flight")
	})
}

func TestBreakerNil(t *testing.T) {
	t.Parallel()
	var b *retry.Breaker
	p := b.Allow()
	assert.True(t, p.Allowed)
	assert.False(t, p.Probe)
	b.Record(p, retry.SignalTransient)
	assert.Equal(t, retry.BreakerClosed, b.State())
}

func TestBreakerMinSamplesDefaultFollowsWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b, err := retry.NewBreaker(retry.WithWindow(4))
		require.NoError(t, err)
		for range 4 {
			record(t, b, retry.SignalTransient)
		}
		assert.Equal(t, retry.BreakerOpen, b.State(), "MinSamples defaults to the window when it is below 10")
	})
}

func TestBreakerInvalidOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []retry.Option
	}{
		{"window 0", []retry.Option{retry.WithWindow(0)}},
		{"window negative", []retry.Option{retry.WithWindow(-1)}},
		{"min samples 0", []retry.Option{retry.WithMinSamples(0)}},
		{"min samples above default window", []retry.Option{retry.WithMinSamples(21)}},
		{"min samples above window", []retry.Option{retry.WithMinSamples(5), retry.WithWindow(4)}},
		{"threshold 0", []retry.Option{retry.WithThreshold(0)}},
		{"threshold negative", []retry.Option{retry.WithThreshold(-0.5)}},
		{"threshold above 1", []retry.Option{retry.WithThreshold(1.01)}},
		{"threshold NaN", []retry.Option{retry.WithThreshold(math.NaN())}},
		{"cooldown 0", []retry.Option{retry.WithCooldown(0, time.Second)}},
		{"cooldown negative", []retry.Option{retry.WithCooldown(-time.Second, time.Second)}},
		{"cooldown max below initial", []retry.Option{retry.WithCooldown(time.Second, time.Millisecond)}},
		{"nil option", []retry.Option{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := retry.NewBreaker(tt.opts...)
			require.ErrorIs(t, err, retry.ErrInvalidOption)
			assert.Nil(t, b)
		})
	}

	b, err := retry.NewBreaker(retry.WithWindow(4), retry.WithMinSamples(4), retry.WithThreshold(1))
	require.NoError(t, err, "MinSamples == window and threshold 1 are valid")
	require.NotNil(t, b)
}

func TestBreakerStrings(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "closed", retry.BreakerClosed.String())
	assert.Equal(t, "open", retry.BreakerOpen.String())
	assert.Equal(t, "half-open", retry.BreakerHalfOpen.String())
	assert.Equal(t, "BreakerState(9)", retry.BreakerState(9).String())
	assert.Equal(t, "success", retry.SignalSuccess.String())
	assert.Equal(t, "transient", retry.SignalTransient.String())
	assert.Equal(t, "neutral", retry.SignalNeutral.String())
	assert.Equal(t, "Signal(9)", retry.Signal(9).String())
	assert.Equal(t, retry.SignalTransient, retry.SignalOf(retry.ClassTransient))
	assert.Equal(t, retry.SignalNeutral, retry.SignalOf(retry.ClassPermanent))
	assert.Equal(t, retry.SignalNeutral, retry.SignalOf(retry.ClassCanceled))
}
