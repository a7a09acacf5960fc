package retry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/retry"
)

// One Option type configures NewPolicy and NewBreaker; each refuses the
// other's options instead of ignoring them.
func TestConstructorsRefuseOptionsTheyDoNotTake(t *testing.T) {
	t.Parallel()
	policyOpts := map[string]retry.Option{
		"WithMaxAttempts":       retry.WithMaxAttempts(3),
		"WithInProcessAttempts": retry.WithInProcessAttempts(2),
		"WithBackoff":           retry.WithBackoff(time.Millisecond, time.Second),
		"WithMaxInProcessTime":  retry.WithMaxInProcessTime(time.Second),
		"WithRand":              retry.WithRand(func() float64 { return 0.5 }),
	}
	breakerOpts := map[string]retry.Option{
		"WithWindow":     retry.WithWindow(10),
		"WithMinSamples": retry.WithMinSamples(5),
		"WithThreshold":  retry.WithThreshold(0.5),
		"WithCooldown":   retry.WithCooldown(time.Second, time.Minute),
	}
	for name, o := range policyOpts {
		_, err := retry.NewPolicy(o)
		require.NoError(t, err, name)
		_, err = retry.NewBreaker(o)
		require.ErrorIs(t, err, retry.ErrInvalidOption, name)
		require.ErrorContains(t, err, "retry.NewBreaker does not take option "+name)
	}
	for name, o := range breakerOpts {
		_, err := retry.NewBreaker(o)
		require.NoError(t, err, name)
		_, err = retry.NewPolicy(o)
		require.ErrorIs(t, err, retry.ErrInvalidOption, name)
		require.ErrorContains(t, err, "retry.NewPolicy does not take option "+name)
	}
}
