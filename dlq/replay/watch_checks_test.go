package replay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// When the watcher checks: one second of the run's clock after the last
// check is enough (inclusive), less is not. At one publish per second, the
// check before the third publish is the first one due.
func TestRunChecksOncePerSecond(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 4, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	pub.hook = refailing(t, a, func(published) bool { return true })
	var refailed []int
	_, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithRate(1), replay.WithAbortAfter(100), replay.WithProgress(func(p replay.Progress) { refailed = append(refailed, p.Refailed) }))...)
	require.NoError(t, err)
	require.Equal(t, []int{0, 0, 2, 3}, refailed)
}

// storeConsumer is a consumer stand-in on store: the replayed message
// number n (from 1) succeeds (DONE) when ok(n), else fails for good
// (EXHAUSTED, reopened by the run), without a dead letter: only the store
// tells.
func storeConsumer(store idempotency.Store, ok func(n int32) bool) func(p published) error {
	var n atomic.Int32
	return func(p published) error {
		req := idempotency.ClaimRequest{Namespace: "reserve", Key: p.msg.Metadata.Get(idempotency.DefaultMetadataKey),
			Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 1, Reopen: p.msg.Metadata.Get(dlq.KeyReplayID)}
		res, err := store.Claim(context.Background(), req)
		if err != nil || res.Status != idempotency.Acquired {
			return fmt.Errorf("claim: %v: %w", res.Status, err)
		}
		if ok(n.Add(1)) {
			return store.Complete(context.Background(), res.Lease, idempotency.Outcome{})
		}
		return store.Release(context.Background(), res.Lease, idempotency.Failure{Error: "still down", Final: true})
	}
}

// seedExhausted gives the archived operations op-first..op-(first+n-1)
// the EXHAUSTED records their dead letters left: with a store, the
// retention guard reads them (a missing record is refused as expired).
func seedExhausted(t *testing.T, store idempotency.Store, first, n int) {
	t.Helper()
	for k := first; k < first+n; k++ {
		res, err := store.Claim(t.Context(), idempotency.ClaimRequest{Namespace: "reserve", Key: fmt.Sprintf("op-%d", k),
			Fingerprint: "fp", Lease: time.Minute, MaxAttempts: 1})
		require.NoError(t, err)
		require.NoError(t, store.Release(t.Context(), res.Lease, idempotency.Failure{Error: "down", Final: true}))
	}
}

// With a dedup store, the records of the followed messages tell: DONE is
// a success, EXHAUSTED after a reopen by this run a re-failure, also when
// no dead letter says so and no archive scan runs (the clock stands still).
func TestRunStoreOutcomesBetweenScans(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 10, entrySpec{retention: time.Hour})
	store, err := memstore.New(idempotency.WithClock(c.Now)) // the run's clock: one clock
	require.NoError(t, err)
	seedExhausted(t, store, 0, 10)
	pub := &recorder{clock: c, hook: storeConsumer(store, func(n int32) bool { return n == 1 })}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("stored"), replay.WithAbortAfter(3), replay.WithStore(store))...)
	require.ErrorIs(t, err, replay.ErrAborted)
	// After 3 publishes: one success, two re-failures; after 6: three more.
	require.Equal(t, 6, res.Replayed)
	require.Equal(t, 5, res.Refailed)
}

// A DONE record seen by a check breaks the run of re-failures: with checks
// every 4 publishes, F F F S | S F F F | F never has 4 in a row.
func TestRunStoreSuccessBreaksRefailures(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 9, entrySpec{retention: time.Hour})
	store, err := memstore.New(idempotency.WithClock(c.Now)) // the run's clock: one clock
	require.NoError(t, err)
	seedExhausted(t, store, 0, 9)
	pub := &recorder{clock: c, hook: storeConsumer(store, func(n int32) bool { return n == 4 || n == 5 })}
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{},
		on(c, replay.WithID("broken"), replay.WithAbortAfter(4), replay.WithStore(store))...)
	require.NoError(t, err)
	require.Equal(t, archive.RunDone, res.State)
	require.Equal(t, 9, res.Replayed)
	require.Equal(t, 7, res.Refailed)
}

// Re-failures add up across checks until a success: at one publish per
// second every publish is followed by a check, and the third re-failure in
// a row aborts.
func TestRunRefailuresAddUpAcrossChecks(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := newArchive(t, c)
	deadLetters(t, a, 0, 6, entrySpec{retention: time.Hour})
	pub := &recorder{clock: c}
	pub.hook = refailing(t, a, func(published) bool { return true })
	res, err := replay.Run(t.Context(), a, pub, archive.Filter{}, on(c, replay.WithRate(1), replay.WithAbortAfter(3))...)
	require.ErrorIs(t, err, replay.ErrAborted)
	require.Equal(t, 3, res.Replayed)
	require.Equal(t, 3, res.Refailed)
}
