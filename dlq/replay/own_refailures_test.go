package replay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/internal/archivekit"
)

// requireOneOpenPerOperation checks the archive after replays of
// operations that keep failing: each of the n operations has exactly one
// open entry (its latest dead letter), and no entry is a copy of itself
// (a replayed message dead-lettered under its own entry's ID).
func requireOneOpenPerOperation(t *testing.T, a archive.Archive, n int) {
	t.Helper()
	open := map[string]int{}
	var after int64
	for range 1000 {
		page, err := a.List(t.Context(), archive.Filter{}, archive.Page{After: after, Limit: archivekit.DefaultPageSize, OmitPayload: true})
		require.NoError(t, err)
		for _, e := range page {
			after = e.Seq
			require.Equal(t, 1, e.Copies, "entry %s (%s, replayed by %v) is a copy of itself", e.ID, e.OperationKey, e.ReplayedBy)
			if e.State == archive.StateOpen {
				open[e.OperationKey]++
			}
		}
		if len(page) < archivekit.DefaultPageSize {
			break
		}
	}
	for op, k := range open {
		require.Equal(t, 1, k, "operation %s has %d open entries", op, k)
	}
	require.Len(t, open, n, "operations with an open entry")
}

// A run replays the entries archived when it started: the dead letter of
// a replayed message that fails again (a new entry, past the run's
// cursor, carrying the run's ID) is not replayed by the same run, even
// when the run reaches it on its next page. Each operation ends with one
// open entry, the re-failure.
func TestRunDoesNotReplayItsOwnRefailures(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	n := archivekit.DefaultPageSize // a full page: the run lists the next one
	ids := deadLetters(t, a, 0, n, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	pub.hook = refailing(t, a, func(published) bool { return true })
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("own"), replay.WithAbortAfter(-1))...)
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, res.State)
	require.Equal(t, n, res.Replayed, "each entry once, none of its re-failures")
	require.Equal(t, n, res.Refailed)
	counts := pub.countByReplayOf()
	require.Len(t, counts, n)
	for _, id := range ids {
		require.Equal(t, 1, counts[id], id)
	}
	requireOneOpenPerOperation(t, a, n)
}

// Resume uses the bound the run saved when it started: it replays
// neither the re-failures of the run's earlier calls nor the entries
// archived after the run started.
func TestResumeKeepsTheRunsBound(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	n := archivekit.DefaultPageSize
	ids := deadLetters(t, a, 0, n, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	pub.hook = refailing(t, a, func(published) bool { return true })
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("bound"), replay.WithAbortAfter(-1), replay.WithMax(40))...)
	require.NoError(t, err)
	require.Equal(t, archive.RunPaused, res.State)
	require.Equal(t, 40, res.Replayed)

	later := deadLetters(t, a, n, 5, entrySpec{retention: time.Hour})
	res, err = replay.Resume(t.Context(), a, pub, "bound", on(c, replay.WithAbortAfter(-1))...)
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, res.State)
	require.Equal(t, n-40, res.Replayed, "the rest of the entries the run started with")
	counts := pub.countByReplayOf()
	require.Len(t, counts, n)
	for _, id := range ids {
		require.Equal(t, 1, counts[id], id)
	}
	for _, id := range later {
		require.Zero(t, counts[id], "%s was archived after the run started", id)
	}
	requireOneOpenPerOperation(t, a, n+len(later))
}

// A run saved without a bound (before ReplayRun.Until) gets one when it is
// resumed, and its own re-failures archived by then are still not
// replayed.
func TestResumeOfARunSavedWithoutBound(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	n := 10
	ids := deadLetters(t, a, 0, n, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	pub.hook = refailing(t, a, func(published) bool { return true })
	_, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("old"), replay.WithAbortAfter(-1), replay.WithMax(4))...)
	require.NoError(t, err)
	run, err := a.LoadReplay(t.Context(), "old")
	require.NoError(t, err)
	require.Positive(t, run.Until)
	run.Until = 0
	require.NoError(t, a.SaveReplay(t.Context(), run))

	res, err := replay.Resume(t.Context(), a, pub, "old", on(c, replay.WithAbortAfter(-1))...)
	require.NoError(t, err)
	require.Equal(t, n-4, res.Replayed, "the rest, not the 4 re-failures of the first call")
	counts := pub.countByReplayOf()
	require.Len(t, counts, n)
	for _, id := range ids {
		require.Equal(t, 1, counts[id], id)
	}
	run, err = a.LoadReplay(t.Context(), "old")
	require.NoError(t, err)
	require.Positive(t, run.Until, "the bound is saved")
	requireOneOpenPerOperation(t, a, n)
}
