package replay_test

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
)

// Progress.Total is the number of entries the call will decide: the
// selection, or Max when Max is smaller.
func TestProgressTotalIsSelectionOrMax(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max, want int
	}{{0, 3}, {2, 2}, {3, 3}, {10, 3}} {
		clock := newFakeClock()
		a := newArchive(t, clock)
		deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
		var totals []int
		_, err := replay.Run(t.Context(), a, &recorder{clock: clock}, archive.Filter{},
			on(clock, replay.WithMax(c.max), replay.WithProgress(func(p replay.Progress) { totals = append(totals, p.Total) }))...)
		require.NoError(t, err)
		require.NotEmpty(t, totals, "max %d", c.max)
		for _, total := range totals {
			require.Equal(t, c.want, total, "max %d", c.max)
		}
	}
}

// A run whose re-failure checks (after every publish here, and the final
// one) succeed logs no warning about them.
func TestRunRefailureChecksLogNoWarning(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	a := newArchive(t, clock)
	deadLetters(t, a, 0, 4, entrySpec{retention: time.Hour})
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := replay.Run(t.Context(), a, &recorder{clock: clock}, archive.Filter{},
		on(clock, dlq.WithLogger(logger), replay.WithAbortAfter(1))...)
	require.NoError(t, err)
	require.Equal(t, 4, res.Replayed)
	require.Empty(t, logs.String())
}

// An envelope retention that is not positive is no retention: the
// DefaultRetention applies.
func TestRunZeroEnvelopeRetentionFallsBack(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	a := newArchive(t, clock)
	src := source(0)
	env := dlq.Wrap(src, dlq.Failure{
		Reason: dlq.ReasonExhausted, Err: errors.New("down"), Topic: "orders",
		OperationKey: src.Metadata.Get(idempotency.DefaultMetadataKey), At: t0.Add(-time.Minute),
	}, nil, "host-1", "group-1")
	env.Metadata.Set(dlq.KeyRetention, "0s")
	require.NoError(t, a.Publish("dead-letters", env))
	res, err := replay.Run(t.Context(), a, &recorder{clock: clock}, archive.Filter{},
		on(clock, replay.WithDefaultRetention(time.Hour))...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed, "a minute old, within the default hour")
	require.Zero(t, res.Refused)
}

// Publishes that all happen at the same instant give no achieved rate
// (zero), not an infinite one.
func TestRunRateOfInstantPublishesIsZero(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // moves only when the limiter sleeps: never here
	a := newArchive(t, clock)
	deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
	res, err := replay.Run(t.Context(), a, &recorder{clock: clock}, archive.Filter{}, on(clock)...)
	require.NoError(t, err)
	require.Equal(t, 3, res.Replayed)
	require.Zero(t, res.Rate)
}
