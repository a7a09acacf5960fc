package replay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
	"github.com/surely-dev/surely/idempotency"
)

// failedEntry archives one dead letter of op-0, dead-lettered at
// deadLettered, whose last failed attempt ended at lastFailed (zero: no
// history), with an envelope retention of retention; the run's clock is c.
func failedEntry(t *testing.T, c *fakeClock, deadLettered, lastFailed time.Time, retention time.Duration) archive.Archive {
	t.Helper()
	var hist []idempotency.AttemptRecord
	if !lastFailed.IsZero() {
		hist = []idempotency.AttemptRecord{{Attempt: 1, Started: lastFailed.Add(-time.Second), Ended: lastFailed, Result: idempotency.ResultFailed, Error: "down"}}
	}
	src := source(0)
	env := dlq.Wrap(src, dlq.Failure{
		Reason: dlq.ReasonExhausted, Err: errors.New("down"), Attempts: 1, History: hist,
		OperationKey: "op-0", Topic: "orders", Handler: "reserve", Namespace: "reserve",
		Retention: retention, At: deadLettered,
	}, nil, "host-1", "group-1")
	a := newArchive(t, c)
	require.NoError(t, a.Publish("dead-letters", env))
	return a
}

// guardReasons runs a dry run without a store and returns the refusals.
func guardReasons(t *testing.T, c *fakeClock, a archive.Archive) []string {
	t.Helper()
	var reasons []string
	_, err := replay.Run(context.Background(), a, &recorder{clock: c}, archive.Filter{},
		on(c, replay.WithDryRun(), replay.WithProgress(func(p replay.Progress) {
			if p.Reason != "" {
				reasons = append(reasons, p.Reason)
			}
		}))...)
	require.NoError(t, err)
	return reasons
}

// Without a store, the retention counts from the last failure when it came
// before the dead letter (the record's last write was that failure's
// release): dead-lettered 1h ago but last failed 3h ago, with a 2h
// retention, the record may be gone.
func TestRetentionGuardCountsFromLastFailure(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := failedEntry(t, c, t0.Add(-time.Hour), t0.Add(-3*time.Hour), 2*time.Hour)
	reasons := guardReasons(t, c, a)
	require.Len(t, reasons, 1, "refused")
	assert.Contains(t, reasons[0], "last failed 3h0m0s ago")

	// A last failure within the retention passes.
	c = newFakeClock()
	a = failedEntry(t, c, t0.Add(-time.Hour), t0.Add(-90*time.Minute), 2*time.Hour)
	assert.Empty(t, guardReasons(t, c, a))
}

// Without a store, an entry whose record was written exactly a retention
// ago is refused: a store forgets a record at ExpiresAt itself (now >=
// ExpiresAt), which is what the guard's store check says too.
func TestRetentionGuardRefusesAtExactRetention(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := failedEntry(t, c, t0.Add(-2*time.Hour), time.Time{}, 2*time.Hour)
	reasons := guardReasons(t, c, a)
	require.Len(t, reasons, 1, "refused")
	assert.Contains(t, reasons[0], "dead-lettered 2h0m0s ago")

	c = newFakeClock()
	a = failedEntry(t, c, t0.Add(-2*time.Hour+time.Nanosecond), time.Time{}, 2*time.Hour)
	assert.Empty(t, guardReasons(t, c, a), "a nanosecond within the retention passes")
}
