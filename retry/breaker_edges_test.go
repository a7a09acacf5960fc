package retry_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/retry"
)

// The breaker's option boundaries and the tickets that tell a current probe
// from a stale one.

func TestBreakerSmallestOptions(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// A window of one result, needed once, and a cooldown that never
		// grows are all valid.
		b, err := retry.NewBreaker(retry.WithWindow(1), retry.WithMinSamples(1),
			retry.WithThreshold(1), retry.WithCooldown(time.Second, time.Second))
		require.NoError(t, err)
		record(t, b, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerClosed, b.State())
		record(t, b, retry.SignalTransient)
		assert.Equal(t, retry.BreakerOpen, b.State(), "one failure out of one opens")
		assert.Equal(t, time.Second, b.Allow().Wait)

		time.Sleep(time.Second)
		p := b.Allow()
		require.True(t, p.Probe)
		b.Record(p, retry.SignalTransient)
		assert.Equal(t, time.Second, b.Allow().Wait, "max == initial: the cooldown stays")
	})
}

func TestBreakerCooldownDoublingStopsAtOddMax(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		// Doubling 5s gives exactly 10s, under the max of 10s+1ns.
		b := setupBreaker(t, retry.WithCooldown(5*time.Second, 10*time.Second+1))
		for range 10 {
			record(t, b, retry.SignalTransient)
		}
		require.Equal(t, retry.BreakerOpen, b.State())
		time.Sleep(5 * time.Second)
		p := b.Allow()
		require.True(t, p.Probe)
		b.Record(p, retry.SignalTransient)
		assert.Equal(t, 10*time.Second, b.Allow().Wait)

		time.Sleep(10 * time.Second)
		p = b.Allow()
		require.True(t, p.Probe)
		b.Record(p, retry.SignalTransient)
		assert.Equal(t, 10*time.Second+1, b.Allow().Wait, "20s is capped at the max")
	})
}

func TestBreakerRepeatedProbeRecordIgnored(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		b := setupBreaker(t)
		for range 10 {
			record(t, b, retry.SignalTransient)
		}
		time.Sleep(5 * time.Second)
		first := b.Allow()
		require.True(t, first.Probe)
		b.Record(first, retry.SignalTransient)
		require.Equal(t, retry.BreakerOpen, b.State())

		time.Sleep(10 * time.Second)
		second := b.Allow()
		require.True(t, second.Probe)
		// The first probe's permit, recorded again, belongs to an earlier
		// half-open period: it must neither close the breaker nor free the
		// slot of the probe in flight.
		b.Record(first, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerHalfOpen, b.State())
		denied := b.Allow()
		assert.False(t, denied.Allowed, "the second probe is still in flight")

		b.Record(second, retry.SignalSuccess)
		assert.Equal(t, retry.BreakerClosed, b.State())
	})
}
