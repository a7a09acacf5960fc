package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/surely-dev/surely/retry"
)

// The edges of Backoff's documented value rules: a cap that lands exactly on
// the largest Duration, a draw at the top of the range, and a cap of zero
// that draws nothing.

func TestBackoffCapReachesLargestDuration(t *testing.T) {
	t.Parallel()
	// Initial * 2 is exactly 2^63, one past the largest Duration: the cap
	// is the largest Duration, not a wrapped-around negative one.
	b := retry.Backoff{Initial: 1 << 62, Multiplier: 2}
	assert.Equal(t, time.Duration(math.MaxInt64), b.Cap(2))
	assert.Equal(t, time.Duration(1<<62), b.Cap(1))
}

func TestBackoffDelayDrawOfOneIsCap(t *testing.T) {
	t.Parallel()
	one := func() float64 { return 1 }
	// A draw of 1 (outside [0, 1), clamped) gives the cap itself, also
	// when the cap is the largest Duration.
	b := retry.Backoff{Initial: 1 << 62, Multiplier: 2}
	assert.Equal(t, time.Duration(math.MaxInt64), b.Delay(2, one))
	small := retry.Backoff{Initial: time.Second, Max: 10 * time.Second}
	assert.Equal(t, 2*time.Second, small.Delay(2, one))
}

func TestBackoffZeroCapDrawsNothing(t *testing.T) {
	t.Parallel()
	draws := 0
	rnd := func() float64 { draws++; return 0.5 }
	assert.Zero(t, retry.Backoff{}.Delay(3, rnd))
	assert.Zero(t, retry.Backoff{Initial: -time.Second}.Delay(1, rnd))
	assert.Zero(t, draws, "no delay to draw, so the jitter source is left alone")
	assert.Equal(t, 750*time.Millisecond, retry.Backoff{Initial: time.Second}.Delay(1, rnd), "equal jitter: half the cap plus the draw of the other half")
	assert.Equal(t, 1, draws)
}
