package record_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/record"
)

var t0 = time.Unix(1_800_000_000, 0)

func req(budget int) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{Namespace: "ns", Key: "k", Fingerprint: "fp", Lease: time.Minute, MaxAttempts: budget}
}

// The functions are pure: the stored record they are given stays as it
// was, whatever they decide, so a store that keeps it (memstore) is
// changed only by what it stores.
func TestDecisionsLeaveTheStoredRecordAlone(t *testing.T) {
	t.Parallel()
	_, r := record.Claim(nil, req(3), "t1", t0, time.Hour)
	require.NotNil(t, r)
	snapshot := *r
	snapshot.History = append([]idempotency.AttemptRecord(nil), r.History...)

	// An expired lease: the claim marks the old attempt unknown in its copy.
	res, next := record.Claim(r, req(3), "t2", t0.Add(2*time.Minute), time.Hour)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.Equal(t, idempotency.ResultUnknown, res.Previous)
	require.Equal(t, idempotency.ResultUnknown, next.History[0].Result)
	require.Equal(t, snapshot, *r, "Claim changed the stored record")

	_, err := record.Release(next, res.Lease, idempotency.Failure{Error: "x"}, t0.Add(3*time.Minute), time.Hour)
	require.NoError(t, err)
	_, err = record.Complete(next, res.Lease, idempotency.Outcome{}, t0.Add(3*time.Minute), time.Hour)
	require.NoError(t, err)
	_, err = record.Extend(next, res.Lease, time.Minute, t0.Add(3*time.Minute), time.Hour)
	require.NoError(t, err)
	require.Equal(t, idempotency.ResultInProgress, next.History[1].Result, "a decision changed its input")
	require.Equal(t, idempotency.StateInProgress, next.State)
}

// The history keeps the newest MaxHistory attempts, and a release bounds
// the texts it keeps.
func TestBounds(t *testing.T) {
	t.Parallel()
	var r *idempotency.Record
	now := t0
	long := strings.Repeat("é", defaults.MaxErrorLen) // two bytes each
	for i := range defaults.MaxHistory + 3 {
		res, next := record.Claim(r, req(100), "t", now, time.Hour)
		require.Equal(t, idempotency.Acquired, res.Status, "claim %d", i)
		r, _ = record.Release(next, res.Lease, idempotency.Failure{Error: long, Stack: long}, now, time.Hour)
		now = now.Add(time.Second)
	}
	require.Len(t, r.History, defaults.MaxHistory)
	require.Equal(t, defaults.MaxHistory+3, r.History[len(r.History)-1].Attempt)
	require.Equal(t, 4, r.History[0].Attempt)
	require.Len(t, r.History[0].Error, defaults.MaxErrorLen)
	require.Len(t, r.History[0].Stack, defaults.MaxStackLen)
}

// A lease is current only while its record is in progress under its
// token; a Complete re-sent after it was applied changes nothing.
func TestFencing(t *testing.T) {
	t.Parallel()
	res, r := record.Claim(nil, req(3), "t1", t0, time.Hour)
	done, err := record.Complete(r, res.Lease, idempotency.Outcome{}, t0, time.Hour)
	require.NoError(t, err)
	again, err := record.Complete(done, res.Lease, idempotency.Outcome{}, t0, time.Hour)
	require.NoError(t, err)
	require.Nil(t, again, "a re-sent Complete stores nothing")
	_, err = record.Release(done, res.Lease, idempotency.Failure{}, t0, time.Hour)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	empty := res.Lease
	empty.Token = ""
	_, err = record.Extend(r, empty, time.Minute, t0, time.Hour)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	_, err = record.Complete(nil, res.Lease, idempotency.Outcome{}, t0, time.Hour)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost)
	require.ErrorIs(t, record.CheckExtension(0), idempotency.ErrInvalidRequest)
}

// The stored form of a history keeps every field of every attempt, its
// times in milliseconds (an open attempt's end stays unset), and an empty
// history is stored and read back as none.
func TestHistoryForms(t *testing.T) {
	t.Parallel()
	h := []idempotency.AttemptRecord{
		{
			Attempt: 1, Started: t0, Ended: t0.Add(1500 * time.Millisecond), Result: idempotency.ResultFailed,
			Error: "gateway timeout", Type: "*net.OpError", Reason: "error", Stack: "main.pay()",
			TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", Owner: "host-1/42",
		},
		{Attempt: 2, Started: t0.Add(2 * time.Second), Result: idempotency.ResultInProgress, Owner: "host-2/7"},
	}
	stored := record.Entries(h)
	require.Len(t, stored, 2)
	require.Equal(t, t0.UnixMilli(), stored[0].Started)
	require.Equal(t, t0.UnixMilli()+1500, stored[0].Ended)
	require.Zero(t, stored[1].Ended, "an open attempt has no end")
	require.Equal(t, h, record.Attempts(stored))

	// redisstore reads its numbers as float64.
	floats := []record.Entry[float64]{{Attempt: 3, Started: float64(t0.UnixMilli()), Result: idempotency.ResultUnknown}}
	require.Equal(t, []idempotency.AttemptRecord{{Attempt: 3, Started: t0, Result: idempotency.ResultUnknown}}, record.Attempts(floats))

	require.Nil(t, record.Entries(nil))
	require.Nil(t, record.Entries([]idempotency.AttemptRecord{}))
	require.Nil(t, record.Attempts[int64](nil))
	require.Nil(t, record.Attempts([]record.Entry[int64]{}))
}

// Milliseconds since 1970 and back: 0 (and less) is the zero time, the
// first millisecond is a time.
func TestMilliseconds(t *testing.T) {
	t.Parallel()
	require.True(t, record.FromMs(0).IsZero())
	require.True(t, record.FromMs(-1).IsZero())
	require.Equal(t, time.UnixMilli(1), record.FromMs(1))
	require.Equal(t, t0, record.FromMs(t0.UnixMilli()))
	require.Zero(t, record.Ms(time.Time{}))
	require.Equal(t, t0.UnixMilli(), record.Ms(t0))
	require.Equal(t, int64(1), record.Ms(time.UnixMilli(1)))
}

// Durations round up to whole milliseconds, a whole one stays as it is.
func TestRoundMs(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]time.Duration{
		0:                                  0,
		time.Nanosecond:                    time.Millisecond,
		time.Millisecond - time.Nanosecond: time.Millisecond,
		time.Millisecond:                   time.Millisecond,
		time.Millisecond + time.Nanosecond: 2 * time.Millisecond,
		1500 * time.Microsecond:            2 * time.Millisecond,
		time.Minute:                        time.Minute,
	} {
		require.Equal(t, want, record.RoundMs(d), "RoundMs(%v)", d)
	}
}

// A store may hold an in-progress record without a history (sqlstore reads
// an empty history column as none): a claim after its lease expired takes
// it over like any other, with an unknown previous attempt.
func TestClaimTakesOverInProgressWithoutHistory(t *testing.T) {
	t.Parallel()
	cur := &idempotency.Record{
		Namespace: "ns", Key: "k", Fingerprint: "fp", State: idempotency.StateInProgress,
		Token: "t1", Attempts: 1, LeaseUntil: t0, ExpiresAt: t0.Add(time.Hour),
	}
	res, next := record.Claim(cur, req(3), "t2", t0.Add(time.Second), time.Hour)
	require.Equal(t, idempotency.Acquired, res.Status)
	require.Equal(t, 2, res.Lease.Attempt)
	require.Equal(t, idempotency.ResultUnknown, res.Previous)
	require.Len(t, next.History, 1, "the new attempt only")
	require.Equal(t, 2, next.History[0].Attempt)
}
