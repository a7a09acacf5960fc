package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/idempotency/memstore"
)

// retentionSetup is the reproduction of the issue: order-1 DONE at T-1h
// in a store keeping records 24h, a conflicting payload for the same key
// dead-lettered at T (envelope retention 24h). The record expires at
// T+23h. The archive holds the conflict's dead letter.
type retentionSetup struct {
	clock *fakeClock
	store idempotency.Store
	arch  archive.Archive
	entry string
}

func newRetentionSetup(t *testing.T, reason dlq.Reason, storeRetention time.Duration) retentionSetup {
	t.Helper()
	ctx := context.Background()
	c := newFakeClock() // T = t0
	st, err := memstore.New(idempotency.WithClock(c.Now), idempotency.WithRetention(storeRetention))
	require.NoError(t, err)
	c.Advance(-time.Hour)
	res, err := st.Claim(ctx, idempotency.ClaimRequest{Namespace: "reserve", Key: "order-1", Fingerprint: "fp-a", Lease: time.Minute, MaxAttempts: 3})
	require.NoError(t, err)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.NoError(t, st.Complete(ctx, res.Lease, idempotency.Outcome{}))
	c.Advance(time.Hour)

	src := message.NewMessage("src-conflict", []byte(`{"order":1,"amount":"99.00"}`))
	src.Metadata.Set(idempotency.DefaultMetadataKey, "order-1")
	env := dlq.Wrap(src, dlq.Failure{
		Reason: reason, Err: errors.New("fingerprint mismatch"), Attempts: 1,
		OperationKey: "order-1", Fingerprint: "fp-b", Topic: "orders", Handler: "reserve",
		Namespace: "reserve", Retention: 24 * time.Hour, At: c.Now(),
	}, nil, "host-1", "group-1")
	a := newArchive(t, c)
	require.NoError(t, a.Publish("dead-letters", env))
	return retentionSetup{clock: c, store: st, arch: a, entry: env.UUID}
}

// replayAt runs a replay at T+d and returns the published count and the
// refusal reasons.
func (s retentionSetup) replayAt(t *testing.T, d time.Duration, store idempotency.Store) (int, []string) {
	t.Helper()
	s.clock.Advance(d - s.clock.Now().Sub(t0))
	rec := &recorder{clock: s.clock}
	var reasons []string
	opts := on(s.clock, replay.WithDryRun(), replay.WithProgress(func(p replay.Progress) {
		if p.Reason != "" {
			reasons = append(reasons, p.Reason)
		}
	}))
	if store != nil {
		opts = append(opts, replay.WithStore(store))
	}
	_, err := replay.Run(context.Background(), s.arch, rec, archive.Filter{}, opts...)
	require.NoError(t, err)
	return len(reasons), reasons
}

// TestRetentionGuardConflictWithoutStore: the record of a conflict is the
// other payload's DONE, written before the conflicting message came, up
// to a whole retention earlier: without the store its expiry is unknown,
// and replaying after it would run a second charge under the same key.
func TestRetentionGuardConflictWithoutStore(t *testing.T) {
	t.Parallel()
	s := newRetentionSetup(t, dlq.ReasonConflict, 24*time.Hour)
	n, reasons := s.replayAt(t, 23*time.Hour+30*time.Minute, nil)
	require.Equal(t, 1, n, "refused: %v", reasons)
	assert.Contains(t, reasons[0], "conflict")
}

// TestRetentionGuardReadsStoreRecord: with the store, the guard reads the
// record itself: alive at T+22h (replayed), expired at T+23.5h although
// the envelope's retention (24h from the dead letter) has not run out.
func TestRetentionGuardReadsStoreRecord(t *testing.T) {
	t.Parallel()
	alive := newRetentionSetup(t, dlq.ReasonConflict, 24*time.Hour)
	n, reasons := alive.replayAt(t, 22*time.Hour, alive.store)
	assert.Zero(t, n, "the record lives until T+23h: %v", reasons)

	gone := newRetentionSetup(t, dlq.ReasonConflict, 24*time.Hour)
	n, reasons = gone.replayAt(t, 23*time.Hour+30*time.Minute, gone.store)
	require.Equal(t, 1, n, "the record expired at T+23h")
	assert.Contains(t, reasons[0], "dedup record")
}

// TestRetentionGuardShortenedRetention: the store's retention was cut to 2h
// after the dead letter; the envelope still says 24h. The store's record
// (its ExpiresAt, or its absence) decides.
func TestRetentionGuardShortenedRetention(t *testing.T) {
	t.Parallel()
	s := newRetentionSetup(t, dlq.ReasonExhausted, 2*time.Hour)
	n, reasons := s.replayAt(t, 3*time.Hour, s.store)
	require.Equal(t, 1, n, "the record expired at T+1h: %v", reasons)
	assert.Contains(t, reasons[0], "dedup record")
}

// TestRetentionGuardWithStoreAndForce: Force publishes what the store
// check refuses.
func TestRetentionGuardWithStoreAndForce(t *testing.T) {
	t.Parallel()
	s := newRetentionSetup(t, dlq.ReasonConflict, 24*time.Hour)
	s.clock.Advance(23*time.Hour + 30*time.Minute)
	rec := &recorder{clock: s.clock}
	res, err := replay.Run(context.Background(), s.arch, rec, archive.Filter{},
		on(s.clock, replay.WithStore(s.store), replay.WithForce())...)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Replayed)
	assert.Len(t, rec.all(), 1)
}
