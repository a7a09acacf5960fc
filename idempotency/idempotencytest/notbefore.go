package idempotencytest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
)

// requireWaiting checks an InProgress claim that asks for a wait of at
// most limit, and returns it.
func (e *env) requireWaiting(req idempotency.ClaimRequest, limit time.Duration) idempotency.ClaimResult {
	e.t.Helper()
	res := e.claim(req)
	require.Equal(e.t, idempotency.InProgress, res.Status, "Claim(%q) status", req.Key)
	require.Positive(e.t, res.Wait, "InProgress.Wait is positive")
	require.LessOrEqual(e.t, res.Wait, limit+timeTolerance, "InProgress.Wait")
	require.False(e.t, res.Until.IsZero(), "InProgress.Until")
	return res
}

// The Wait of an InProgress claim is the live lease's remaining time, as
// the store measures it: the caller's clock plays no part.
func testInProgressWaitIsStoreMeasured(t *testing.T, e *env) {
	first := e.acquire(e.req("k"), 1)
	res := e.requireWaiting(e.req("k"), longLease)
	require.WithinDuration(t, first.Lease.Until, res.Until, timeTolerance)
	// The suite runs well within half a lease of a minute.
	require.Greater(t, res.Wait, longLease/2, "Wait is what is left of the lease")
}

// passDelay moves the clock past a retry-after delay of d.
func (e *env) passDelay(d time.Duration) {
	e.t.Helper()
	e.h.Advance(e.t, d+d/2)
}

// A release that asks for a retry-after delay keeps the record from being
// claimed until the delay has passed on the store's clock; the refused
// claims are not charged.
func testRetryAfterDelaysClaim(t *testing.T, e *env) {
	l := e.acquire(e.req("k"), 1).Lease
	f := testFailure
	// The retention: long enough for real-clock stores under load.
	f.RetryAfter = e.h.Retention
	e.release(l, f)

	rec := e.get("k")
	require.Equal(t, idempotency.StateFailed, rec.State)
	require.False(t, rec.NotBefore.IsZero(), "NotBefore is kept")
	require.False(t, rec.NotBefore.Before(rec.History[0].Ended.Add(f.RetryAfter).Add(-timeTolerance)),
		"NotBefore %v is the release's time %v + RetryAfter", rec.NotBefore, rec.History[0].Ended)

	for range 2 {
		res := e.requireWaiting(e.req("k"), f.RetryAfter)
		require.WithinDuration(t, rec.NotBefore, res.Until, timeTolerance, "Until is the end of the delay")
	}
	rec = e.get("k")
	require.Equal(t, 1, rec.Attempts, "a claim refused by the delay is not charged")
	require.Equal(t, idempotency.StateFailed, rec.State)

	e.passDelay(f.RetryAfter)
	res := e.acquire(e.req("k"), 2)
	require.Equal(t, []any{idempotency.ResultFailed, f.Error}, []any{res.Previous, res.PreviousError})
	rec = e.get("k")
	require.True(t, rec.NotBefore.IsZero(), "a claim clears NotBefore")

	// A release without a delay makes the key claimable at once.
	e.release(res.Lease, testFailure)
	e.acquire(e.req("k"), 3)
}

// After the budget's last attempt the delay it asked for still runs: the
// message is not given up on before it.
func testRetryAfterBeforeBudget(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 1
	l := e.acquire(req, 1).Lease
	f := testFailure
	f.RetryAfter = e.h.Retention
	e.release(l, f)
	e.requireWaiting(req, f.RetryAfter)
	e.passDelay(f.RetryAfter)
	res := e.claim(req)
	require.Equal(t, idempotency.Exhausted, res.Status)
	require.Equal(t, 1, res.Attempts)
}

// A final or canceled release ignores RetryAfter.
func testRetryAfterIgnoredWhenFinalOrCanceled(t *testing.T, e *env) {
	l := e.acquire(e.req("canceled"), 1).Lease
	e.release(l, idempotency.Failure{Error: "shutdown", Reason: "canceled", Canceled: true, RetryAfter: longLease})
	require.True(t, e.get("canceled").NotBefore.IsZero())
	e.acquire(e.req("canceled"), 2)

	l = e.acquire(e.req("final"), 1).Lease
	e.release(l, idempotency.Failure{Error: "bad input", Reason: "permanent", Final: true, RetryAfter: longLease})
	require.Equal(t, idempotency.Exhausted, e.claim(e.req("final")).Status)
}

// A record waiting out a delay is kept a retention after the delay ends,
// not after the release.
func testRetryAfterKeepsRecord(t *testing.T, e *env) {
	l := e.acquire(e.req("k"), 1).Lease
	f := testFailure
	f.RetryAfter = e.h.Retention
	e.release(l, f)
	e.expireRecords() // 1.5 retentions: past the delay, within its retention
	rec := e.get("k")
	require.Equal(t, idempotency.StateFailed, rec.State)
	e.acquire(e.req("k"), 2)
}
