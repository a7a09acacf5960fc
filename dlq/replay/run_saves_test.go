package replay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
	"github.com/surely-dev/surely/internal/runcancel"
)

// cancelDuringStats is an archive on which an operator cancels run id
// while the first Stats is under way: after Resume loaded the run, before
// its first save.
type cancelDuringStats struct {
	archive.Archive
	t    *testing.T
	id   string
	now  func() time.Time
	once sync.Once
}

func (a *cancelDuringStats) Stats(ctx context.Context, f archive.Filter) (archive.Stats, error) {
	a.once.Do(func() {
		_, err := runcancel.Cancel(ctx, a.Archive, a.id, a.now())
		require.NoError(a.t, err)
	})
	return a.Archive.Stats(ctx, f)
}

// A cancel saved between Resume's load of the run and its first save
// stops the call before its first publish and stays saved: Resume's first
// save reads the run like every other save, and sees a state it did not
// load.
func TestResumeSeesACancelSavedAfterItsLoad(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 4, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("rc"), replay.WithMax(1))...)
	require.NoError(t, err)
	require.Equal(t, archive.RunPaused, sum.State)

	c.Advance(time.Second)
	sum, err = replay.Resume(t.Context(), &cancelDuringStats{Archive: a, t: t, id: "rc", now: c.Now}, pub, "rc", on(c)...)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, archive.RunCanceled, sum.State)
	require.Zero(t, sum.Replayed)
	require.Len(t, pub.all(), 1, "nothing published after the cancel")
	run, err := a.LoadReplay(t.Context(), "rc")
	require.NoError(t, err)
	require.Equal(t, archive.RunCanceled, run.State)
	require.Equal(t, 1, run.Replayed)

	// Resume of the canceled run continues it: the cancel it loaded is
	// not a new one.
	sum, err = replay.Resume(t.Context(), a, pub, "rc", on(c)...)
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, sum.State)
	require.Equal(t, 3, sum.Replayed)
}

// saveDuringMark is an archive on which run id is saved by someone else
// (change applied to it) during the first Mark: after Reconcile loaded
// the run, before it saves it.
type saveDuringMark struct {
	archive.Archive
	t      *testing.T
	id     string
	change func(*archive.ReplayRun)
	once   sync.Once
}

func (a *saveDuringMark) Mark(ctx context.Context, m archive.Mark, ids ...string) (int, error) {
	a.once.Do(func() {
		run, err := a.LoadReplay(ctx, a.id)
		require.NoError(a.t, err)
		a.change(&run)
		require.NoError(a.t, a.SaveReplay(ctx, run))
	})
	return a.Archive.Mark(ctx, m, ids...)
}

// Reconcile's save of the run adds its count to the run as saved then:
// a cancel, and a cursor moved by a call running the run, saved since
// Reconcile loaded the run, stay.
func TestReconcileKeepsASaveMadeSinceItsLoad(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 4, entrySpec{retention: time.Hour})
	st, err := memstore.New(idempotency.WithClock(c.Now))
	require.NoError(t, err)
	pub := &recorder{clock: c}
	_, err = replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("rs"), replay.WithMax(2))...)
	require.NoError(t, err)
	done(t, st, "op-0")
	got, err := replay.Reconcile(t.Context(), &saveDuringMark{Archive: a, t: t, id: "rs", change: func(r *archive.ReplayRun) {
		r.State, r.After, r.Replayed = archive.RunCanceled, r.After+1, r.Replayed+1
	}}, st, "rs")
	require.NoError(t, err)
	require.Equal(t, 1, got.Resolved)
	run, err := a.LoadReplay(t.Context(), "rs")
	require.NoError(t, err)
	require.Equal(t, archive.RunCanceled, run.State, "the cancel saved meanwhile stays")
	require.Equal(t, 3, run.Replayed, "the counters saved meanwhile stay")
	require.Equal(t, 1, run.Resolved)
}

// A call running a run keeps what Reconcile resolved meanwhile: its saves
// read the run and add Reconcile's count to its own.
func TestRunKeepsReconcilesCount(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
	st, err := memstore.New(idempotency.WithClock(c.Now))
	require.NoError(t, err)
	pub := &recorder{clock: c}
	pub.hook = func(p published) error {
		if len(pub.all()) == 1 { // the second publish: the first entry is marked
			done(t, st, "op-0")
			got, err := replay.Reconcile(context.Background(), a, st, "rk")
			require.NoError(t, err)
			require.Equal(t, 1, got.Resolved)
		}
		return nil
	}
	sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("rk"))...)
	require.NoError(t, err)
	require.Equal(t, 3, sum.Replayed)
	run, err := a.LoadReplay(t.Context(), "rk")
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, run.State)
	require.Equal(t, 1, run.Resolved, "Reconcile's count survives the run's later saves")
}

var errLoad = errors.New("archive: load refused")

// loadFailsAfter is an archive whose LoadReplay fails after its first
// call.
type loadFailsAfter struct {
	archive.Archive
	calls atomic.Int32
}

func (a *loadFailsAfter) LoadReplay(ctx context.Context, id string) (archive.ReplayRun, error) {
	if a.calls.Add(1) > 1 {
		return archive.ReplayRun{}, errLoad
	}
	return a.Archive.LoadReplay(ctx, id)
}

// A save that cannot read the run first writes nothing: the call stops
// before any publish and returns the error.
func TestSaveThatCannotReadWritesNothing(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 2, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	_, err := replay.Run(t.Context(), &loadFailsAfter{Archive: a}, pub, archive.Filter{}, on(c, replay.WithID("lf"))...)
	require.ErrorIs(t, err, errLoad)
	require.Empty(t, pub.all())
	_, err = a.LoadReplay(t.Context(), "lf")
	require.ErrorIs(t, err, archive.ErrNotFound)
}
