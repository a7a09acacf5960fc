package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/dlq/replay"
)

// dlq.WithClock alone is the run's time source: the retention guard reads
// it although no sleep hook is given. An entry an hour old by the given
// clock, with a retention of two hours, passes, where the wall clock (far
// after t0) would refuse it.
func TestWithClockAloneDrivesTheGuard(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	a := failedEntry(t, c, t0.Add(-time.Hour), time.Time{}, 2*time.Hour)
	var reasons []string
	_, err := replay.Run(context.Background(), a, &recorder{clock: c}, archive.Filter{},
		dlq.WithClock(c.Now), replay.WithDryRun(), replay.WithProgress(func(p replay.Progress) {
			if p.Reason != "" {
				reasons = append(reasons, p.Reason)
			}
		}))
	require.NoError(t, err)
	assert.Empty(t, reasons, "an hour old by the given clock: within the retention")
}

// The sleep hook alone paces a rate-limited run, on the wall clock's time.
func TestSleepHookAlonePacesTheRun(t *testing.T) {
	t.Parallel()
	c := newFakeClock()
	now := time.Now()
	a := newArchive(t, c)
	for i := range 3 {
		src := source(i)
		require.NoError(t, a.Publish("dead-letters", dlq.Wrap(src, dlq.Failure{
			Reason: dlq.ReasonPermanent, Err: assert.AnError, Attempts: 1,
			OperationKey: src.UUID, Topic: "orders", Handler: "reserve", Namespace: "reserve",
			Retention: 24 * time.Hour, At: now,
		}, nil, "host-1", "group-1")))
	}
	res, err := replay.Run(context.Background(), a, &recorder{clock: c}, archive.Filter{},
		replay.WithSleep(c.Sleep), replay.WithRate(10))
	require.NoError(t, err)
	require.Equal(t, 3, res.Replayed, "%+v", res)
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.NotEmpty(t, c.sleeps, "the limiter slept through the hook")
}
