package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/surely-dev/surely/retry"
)

// An Initial of 0 gives no delay at any attempt, also where
// Multiplier^(n-1) overflows float64 to +Inf (0 * Inf is NaN, which must not
// turn into the Max cap).
func TestBackoffZeroInitialNoDelayPastFloatRange(t *testing.T) {
	t.Parallel()
	assert.Zero(t, retry.Backoff{Max: time.Hour}.Cap(1100), "2^1099 overflows float64")
	assert.Zero(t, retry.Backoff{Multiplier: math.Inf(1)}.Cap(2))
	assert.Zero(t, retry.Backoff{Max: time.Hour, Multiplier: 1e300}.Delay(3, func() float64 { return 0.5 }))
}

// A draw of 0 gives the lower end of the range, Cap - Cap/2, to the
// nanosecond, also for a Max that float64 cannot hold exactly.
func TestBackoffDrawOfZeroIsExactFloor(t *testing.T) {
	t.Parallel()
	zero := func() float64 { return 0 }
	const limit = time.Duration(1<<60 + 1) // above 2^53: not exact in float64
	b := retry.Backoff{Initial: limit, Max: limit}
	assert.Equal(t, limit-limit/2, b.Delay(1, zero))
}
