package retry_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/retry"
)

// The smallest values each Policy option accepts are accepted and kept.
func TestPolicySmallestOptions(t *testing.T) {
	t.Parallel()
	p, err := retry.NewPolicy(
		retry.WithMaxAttempts(1),
		retry.WithInProcessAttempts(1),
		retry.WithBackoff(0, 0),
		retry.WithMaxInProcessTime(time.Nanosecond),
	)
	require.NoError(t, err)
	assert.Equal(t, 1, p.MaxAttempts(), "a budget of one attempt: dead-letter at the first failure")
	assert.Equal(t, 1, p.InProcessAttempts())
	assert.Equal(t, time.Nanosecond, p.MaxInProcessTime())
	assert.Zero(t, p.Delay(1, nil), "initial 0 retries without waiting")

	p, err = retry.NewPolicy(retry.WithBackoff(time.Second, time.Second))
	require.NoError(t, err)
	assert.Equal(t, retry.Backoff{Initial: time.Second, Max: time.Second, Multiplier: retry.DefaultMultiplier}, p.Backoff())
}
