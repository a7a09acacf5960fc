package replay_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
)

var errFinalSave = errors.New("archive: final save refused")

// finalSaveFails is an archive whose SaveReplay fails once the run has left
// the running state: the save at the end of a call.
type finalSaveFails struct {
	archive.Archive
}

func (a finalSaveFails) SaveReplay(ctx context.Context, run archive.ReplayRun) error {
	if run.State != archive.RunRunning {
		return errFinalSave
	}
	return a.Archive.SaveReplay(ctx, run)
}

// A run that published everything but could not save its final state
// says so.
func TestRunFinalSaveErrorReturned(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 2, entrySpec{retention: time.Hour})
	res, err := replay.Run(t.Context(), finalSaveFails{a}, &recorder{clock: c}, archive.Filter{}, on(c)...)
	require.ErrorIs(t, err, errFinalSave)
	require.Equal(t, 2, res.Replayed)
	require.Equal(t, archive.RunDone, res.State)
}

// The error that stopped a run wins over a failed final save.
func TestRunStopErrorBeatsFinalSaveError(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
	broken := errors.New("broker unavailable")
	var calls atomic.Int32
	pub := &recorder{clock: c, hook: func(published) error {
		if calls.Add(1) == 2 {
			return broken
		}
		return nil
	}}
	res, err := replay.Run(t.Context(), finalSaveFails{a}, pub, archive.Filter{}, on(c)...)
	require.ErrorIs(t, err, broken)
	require.NotErrorIs(t, err, errFinalSave)
	require.Equal(t, archive.RunInterrupted, res.State)
}
