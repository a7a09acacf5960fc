package replay

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The wall clock's Sleep: no wait for a zero or negative duration, but an
// ended context is still reported, whatever the duration.
func TestSystemClockSleepEndedContext(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := systemClock{}
		ctx, cancel := context.WithCancel(t.Context())
		require.NoError(t, c.Sleep(ctx, 0))
		require.NoError(t, c.Sleep(ctx, -time.Second))
		start := time.Now()
		require.NoError(t, c.Sleep(ctx, time.Minute))
		require.Equal(t, time.Minute, time.Since(start))

		cancel()
		// A zero-length timer would race the ended context; the answer must
		// not depend on that race.
		for range 50 {
			require.ErrorIs(t, c.Sleep(ctx, 0), context.Canceled)
			require.ErrorIs(t, c.Sleep(ctx, -time.Second), context.Canceled)
		}
		require.ErrorIs(t, c.Sleep(ctx, time.Hour), context.Canceled)
	})
}
