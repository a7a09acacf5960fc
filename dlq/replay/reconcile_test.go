package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

func TestMemstoreReadsManyRecords(t *testing.T) {
	t.Parallel()
	st, err := memstore.New()
	require.NoError(t, err)
	_, ok := st.(idempotency.RecordsReader)
	require.True(t, ok, "memstore offers the batch read replays settle their entries with")
}

// done completes the record of op-<i> in namespace reserve, as the
// consumer of a replayed message does.
func done(t *testing.T, st idempotency.Store, key string) {
	t.Helper()
	ctx := context.Background()
	res, err := st.Claim(ctx, idempotency.ClaimRequest{Namespace: "reserve", Key: key, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 9})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.NoError(t, st.Complete(ctx, res.Lease, idempotency.Outcome{}))
}

// failed leaves a FAILED record of key in namespace reserve, as the
// attempts before the dead letter did.
func failed(t *testing.T, st idempotency.Store, key string) {
	t.Helper()
	ctx := context.Background()
	res, err := st.Claim(ctx, idempotency.ClaimRequest{Namespace: "reserve", Key: key, Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 9})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.NoError(t, st.Release(ctx, res.Lease, idempotency.Failure{Error: "warehouse down", Reason: "error"}))
}

// countingStore counts the reads of a store without a batch read.
type countingStore struct {
	idempotency.Store
	gets int
}

func (s *countingStore) Get(ctx context.Context, ns, key string) (idempotency.Record, error) {
	s.gets++
	return s.Store.Get(ctx, ns, key)
}

// Reconcile resolves the entries of a finished run whose operation
// completed since, leaves the others replayed, and counts both.
func TestReconcile(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 3, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("rec"))...)
	require.NoError(t, err)
	require.Equal(t, 3, sum.Replayed)
	require.Zero(t, sum.Resolved, "no store: nothing confirmed")

	st, err := memstore.New(idempotency.WithClock(c.Now)) // the run's clock: one clock
	require.NoError(t, err)
	done(t, st, "op-0")
	done(t, st, "op-2")
	got, err := replay.Reconcile(t.Context(), a, st, "rec")
	require.NoError(t, err)
	require.Equal(t, 2, got.Resolved)
	require.Equal(t, 1, got.Pending)
	for i, want := range []archive.State{archive.StateResolved, archive.StateReplayed, archive.StateResolved} {
		e, err := a.Get(t.Context(), ids[i])
		require.NoError(t, err)
		require.Equal(t, want, e.State, "entry %d", i)
	}
	run, err := a.LoadReplay(t.Context(), "rec")
	require.NoError(t, err)
	require.Equal(t, 2, run.Resolved)

	// Without a batch read it reads each pending record once.
	cs := &countingStore{Store: st}
	done(t, st, "op-1")
	got, err = replay.Reconcile(t.Context(), a, cs, "rec")
	require.NoError(t, err)
	require.Equal(t, 1, got.Resolved)
	require.Zero(t, got.Pending)
	require.Equal(t, 1, cs.gets)

	_, err = replay.Reconcile(t.Context(), a, st, "no-such-run")
	require.ErrorIs(t, err, archive.ErrNotFound)
}

// With WithStore, a run marks resolved the entries whose replayed
// operation it sees completed.
func TestRunMarksResolved(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	ids := deadLetters(t, a, 0, 2, entrySpec{retention: time.Hour})
	st, err := memstore.New(idempotency.WithClock(c.Now)) // the run's clock: one clock
	require.NoError(t, err)
	failed(t, st, "op-0")
	failed(t, st, "op-1")
	// The consumer processes each replayed message as it is published.
	pub := &recorder{clock: c, hook: func(p published) error {
		done(t, st, p.msg.Metadata.Get(idempotency.DefaultMetadataKey))
		return nil
	}}
	sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("res"), replay.WithStore(st))...)
	require.NoError(t, err)
	require.Equal(t, 2, sum.Resolved)
	for _, id := range ids {
		e, err := a.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, archive.StateResolved, e.State)
		require.Equal(t, []string{"res"}, e.ReplayedBy)
	}
	run, err := a.LoadReplay(t.Context(), "res")
	require.NoError(t, err)
	require.Equal(t, 2, run.Resolved)
}

// A run an operator cancels (saved canceled in the archive) stops before
// its next publish, stays canceled, and Resume finishes it.
func TestRunCanceled(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 4, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	pub.hook = func(published) error {
		if len(pub.all()) == 1 {
			run, err := a.LoadReplay(context.Background(), "cx")
			require.NoError(t, err)
			run.State = archive.RunCanceled
			require.NoError(t, a.SaveReplay(context.Background(), run))
		}
		return nil
	}
	sum, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithID("cx"))...)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, archive.RunCanceled, sum.State)
	require.Equal(t, 2, sum.Replayed, "the publish under way when it was canceled, then none")
	run, err := a.LoadReplay(t.Context(), "cx")
	require.NoError(t, err)
	require.Equal(t, archive.RunCanceled, run.State)

	pub.hook = nil
	sum, err = replay.Resume(t.Context(), a, pub, "cx", on(c)...)
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, sum.State)
	require.Equal(t, 2, sum.Replayed)
	require.Len(t, pub.all(), 4)
}

// A run an operator cancels in the archive while its own context ends
// too (the console does both for a run it runs) is saved canceled, not
// interrupted, even when the context ends before the run saves again:
// the final save reads the run like every other save.
func TestRunCanceledAndInterrupted(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 4, entrySpec{retention: time.Hour})
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	// The rate limiter's first sleep (before the second publish): the
	// operator's cancel is saved, then the context ends.
	sleep := func(ctx context.Context, _ time.Duration) error {
		run, err := a.LoadReplay(context.Background(), "cx2")
		require.NoError(t, err)
		run.State = archive.RunCanceled
		require.NoError(t, a.SaveReplay(context.Background(), run))
		stop()
		return ctx.Err()
	}
	pub := &recorder{clock: c}
	sum, err := replay.Run(ctx, a, pub, archive.Filter{}, dlq.WithClock(c.Now), replay.WithSleep(sleep),
		replay.WithRate(10), replay.WithID("cx2"))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, archive.RunCanceled, sum.State)
	run, err := a.LoadReplay(t.Context(), "cx2")
	require.NoError(t, err)
	require.Equal(t, archive.RunCanceled, run.State)
	require.Len(t, pub.all(), 1, "stopped before the second publish")
}
