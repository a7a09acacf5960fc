package replay_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
)

// Dead letters of the run archived before the call are not re-failures of
// this call, however many pages of them there are (the page is 100).
func TestRunSkipsEarlierDeadLettersOfTheRunAcrossPages(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	for i := range 101 {
		src := source(i)
		src.Metadata.Set(dlq.KeyReplayID, "run-1") // dead-lettered by an earlier call of run-1
		env := dlq.Wrap(src, dlq.Failure{
			Reason: dlq.ReasonExhausted, Err: errors.New("down"), Topic: "orders",
			OperationKey: src.Metadata.Get(idempotency.DefaultMetadataKey), Namespace: "reserve",
			Retention: time.Hour, At: t0.Add(-time.Minute),
		}, nil, "host-1", "group-1")
		require.NoError(t, a.Publish("dead-letters", env))
		// Kept out of this call's selection: only the watcher sees it.
		_, err := a.Mark(t.Context(), archive.Mark{To: archive.StateReplayed, Run: "run-1"}, env.UUID)
		require.NoError(t, err)
	}
	deadLetters(t, a, 200, 1, entrySpec{retention: time.Hour})
	res, err := replay.Run(t.Context(), a, &recorder{clock: c}, archive.Filter{}, on(c, replay.WithID("run-1"))...)
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	require.Zero(t, res.Refailed, "none of them is a re-failure of this call")
}

// Between the archive scans (at most one per second of the run's clock),
// the re-failures of the messages the watcher follows still count: here
// the clock stands still, so only the first check scans.
func TestRunAbortsOnFollowedRefailuresBetweenScans(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 10, entrySpec{retention: time.Hour})
	var publishes atomic.Int32
	pub := &recorder{clock: c}
	// The first replayed message succeeds, every later one fails again.
	pub.hook = refailing(t, a, func(published) bool { return publishes.Add(1) > 1 })
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("followed"), replay.WithAbortAfter(3))...)
	require.ErrorIs(t, err, replay.ErrAborted)
	// The check after 3 publishes (a scan) finds 2 in a row, the one after
	// 6 publishes (no scan) 3 more: abort before the 7th.
	require.Equal(t, 6, res.Replayed)
	require.Equal(t, 5, res.Refailed)
}
