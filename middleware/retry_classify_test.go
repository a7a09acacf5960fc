package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/middleware"
	"github.com/surely-dev/surely/retry"
)

// The retry step's classification of a handler error: how many in-process
// attempts it makes, and what the outage breaker is told (only a transient
// failure counts against it).

// retryStep returns the retry step over fn with three in-process attempts,
// no backoff, and a breaker that one transient failure out of one opens.
func retryStep(t *testing.T, fn message.HandlerFunc) (message.HandlerFunc, *retry.Breaker) {
	t.Helper()
	policy, err := retry.NewPolicy(retry.WithInProcessAttempts(3), retry.WithMaxAttempts(5),
		retry.WithBackoff(0, 0), retry.WithMaxInProcessTime(time.Hour))
	require.NoError(t, err)
	breaker, err := retry.NewBreaker(retry.WithWindow(1), retry.WithMinSamples(1), retry.WithThreshold(1),
		retry.WithCooldown(time.Minute, time.Minute))
	require.NoError(t, err)
	mw, err := middleware.Retry(policy, breaker)
	require.NoError(t, err)
	return mw(fn), breaker
}

func TestRetryRejectsNilPolicy(t *testing.T) {
	t.Parallel()
	_, err := middleware.Retry(nil, nil)
	require.ErrorIs(t, err, middleware.ErrInvalidOption)
}

func TestRetryClassification(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testRetryClassification)
}

func testRetryClassification(t *testing.T) {
	boom := errors.New("boom")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	// counted: the failure is transient, so the breaker hears it, opens,
	// and holds the second attempt back (ErrPaused after its cooldown).
	cases := []struct {
		name     string
		ctx      context.Context
		err      error
		attempts int
		counted  bool
	}{
		{"success", context.Background(), nil, 1, false},
		{"transient", context.Background(), boom, 1, true},
		{"permanent", context.Background(), retry.Permanent(boom), 1, false},
		{"final", context.Background(), dlq.Final(dlq.ReasonConflict, boom), 1, false},
		{"final wrapping a transient", context.Background(), dlq.Final(dlq.ReasonExhausted, fmt.Errorf("x: %w", boom)), 1, false},
		{"canceled", canceled, fmt.Errorf("call: %w", context.Canceled), 1, false},
		{"canceled error, live context", context.Background(), context.Canceled, 1, true},
	}
	for _, c := range cases {
		var calls int
		h, breaker := retryStep(t, func(*message.Message) ([]*message.Message, error) {
			calls++
			return nil, c.err
		})
		msg := message.NewMessage("m-1", []byte("{}"))
		msg.SetContext(c.ctx)
		_, err := h(msg)
		assert.Equal(t, c.attempts, calls, c.name)
		switch {
		case c.counted:
			assert.ErrorIs(t, err, middleware.ErrPaused, c.name)
			assert.NotEqual(t, retry.BreakerClosed, breaker.State(), c.name)
		case c.err == nil:
			assert.NoError(t, err, c.name)
			assert.Equal(t, retry.BreakerClosed, breaker.State(), c.name)
		default:
			assert.Same(t, c.err, err, "%s: the error goes back unchanged", c.name)
			assert.Equal(t, retry.BreakerClosed, breaker.State(), "%s: not counted", c.name)
		}
	}
}

// Without a breaker, a transient error is tried InProcessAttempts times
// and then given back.
func TestRetryTransientUsesInProcessAttempts(t *testing.T) {
	t.Parallel()
	policy, err := retry.NewPolicy(retry.WithInProcessAttempts(3), retry.WithBackoff(0, 0))
	require.NoError(t, err)
	mw, err := middleware.Retry(policy, nil)
	require.NoError(t, err)
	boom := errors.New("boom")
	var calls int
	_, herr := mw(func(*message.Message) ([]*message.Message, error) { calls++; return nil, boom })(message.NewMessage("m-1", nil))
	require.Same(t, boom, herr)
	require.Equal(t, 3, calls)
}

// Another owner's live lease and a lost lease are neither retried in
// process nor counted by the breaker: the message goes back after a wait.
func TestRetryInProgressAndLeaseLostNotRetried(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		for _, err := range []error{
			&middleware.InProgressError{Key: "k", Until: time.Now().Add(time.Second)},
			&middleware.LeaseLostError{Key: "k", Err: errors.New("lost")},
		} {
			var calls int
			h, breaker := retryStep(t, func(*message.Message) ([]*message.Message, error) { calls++; return nil, err })
			_, herr := h(message.NewMessage("m-1", nil))
			assert.Same(t, err, herr)
			assert.Equal(t, 1, calls, "%T", err)
			assert.Equal(t, retry.BreakerClosed, breaker.State(), "%T is neutral", err)
		}
	})
}

// A consumer shutting down stops in-process retries, also with no backoff
// to wait: the next attempt never starts once the message context ended.
func TestRetryNoAttemptAfterShutdown(t *testing.T) {
	t.Parallel()
	policy, err := retry.NewPolicy(retry.WithInProcessAttempts(3), retry.WithBackoff(0, 0))
	require.NoError(t, err)
	mw, err := middleware.Retry(policy, nil)
	require.NoError(t, err)
	boom := errors.New("boom")
	for range 20 { // a zero-length timer would race the ended context
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		h := mw(func(*message.Message) ([]*message.Message, error) {
			calls++
			cancel() // shutdown during the attempt; the error itself is transient
			return nil, boom
		})
		msg := message.NewMessage("m-1", nil)
		msg.SetContext(ctx)
		_, herr := h(msg)
		cancel()
		require.Same(t, boom, herr)
		require.Equal(t, 1, calls)
	}
}

// The in-process time budget: a delay that would cross
// MaxInProcessTime gives the message back instead of sleeping; one that
// lands exactly on it still sleeps and retries.
func TestRetryInProcessTimeBudget(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		policy, err := retry.NewPolicy(retry.WithInProcessAttempts(5), retry.WithMaxInProcessTime(time.Second))
		require.NoError(t, err)
		mw, err := middleware.Retry(policy, nil)
		require.NoError(t, err)
		boom := errors.New("boom")
		run := func(after time.Duration) (int, time.Duration) {
			calls := 0
			h := mw(func(*message.Message) ([]*message.Message, error) { calls++; return nil, retry.After(after, boom) })
			start := time.Now()
			_, herr := h(message.NewMessage("m-1", nil))
			require.ErrorIs(t, herr, boom)
			return calls, time.Since(start)
		}
		calls, took := run(2 * time.Second)
		assert.Equal(t, 1, calls, "2s would cross the 1s budget: no in-process retry")
		assert.Equal(t, time.Second, took, "the wait is capped at the budget")

		calls, took = run(time.Second)
		assert.Equal(t, 2, calls, "1s lands exactly on the budget: one retry")
		assert.Equal(t, 2*time.Second, took)
	})
}

// Another owner's lease that already ran out is waited on for a short
// floor (10ms), not retried at once.
func TestRetryInProgressWaitFloor(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		policy, err := retry.NewPolicy()
		require.NoError(t, err)
		mw, err := middleware.Retry(policy, nil)
		require.NoError(t, err)
		ip := &middleware.InProgressError{Key: "k", Until: time.Now().Add(-time.Second)}
		start := time.Now()
		_, herr := mw(func(*message.Message) ([]*message.Message, error) { return nil, ip })(message.NewMessage("m-1", nil))
		require.Same(t, ip, herr)
		require.Equal(t, 10*time.Millisecond, time.Since(start))
	})
}
