package replay_test

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/replay"
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
		archive(t, a, 0, 3, entrySpec{retention: time.Hour})
		var totals []int
		_, err := replay.Run(t.Context(), a, &recorder{clock: clock}, replay.Options{
			Max: c.max, Clock: clock,
			Progress: func(p replay.Progress) { totals = append(totals, p.Total) },
		})
		require.NoError(t, err)
		require.NotEmpty(t, totals, "max %d", c.max)
		for _, total := range totals {
			require.Equal(t, c.want, total, "max %d", c.max)
		}
	}
}

// A run whose final re-failure check succeeds logs no warning about it.
func TestRunFinalCheckLogsNoWarning(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	a := newArchive(t, clock)
	archive(t, a, 0, 2, entrySpec{retention: time.Hour})
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := replay.Run(t.Context(), a, &recorder{clock: clock}, replay.Options{Clock: clock, Logger: logger})
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	require.Empty(t, logs.String())
}
