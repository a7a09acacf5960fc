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
