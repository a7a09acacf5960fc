package idempotencytest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
)

var tests = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"ConcurrentClaimsOneWinner", testConcurrentClaimsOneWinner},
	{"LeaseExpiryTakeover", testLeaseExpiryTakeover},
	{"OwnerInHistory", testOwnerInHistory},
	{"StaleTokenAfterTakeover", testStaleTokenAfterTakeover},
	{"CompleteThenClaim", testCompleteThenClaim},
	{"ReleaseThenClaim", testReleaseThenClaim},
	{"LeaseEndsWithCompleteOrRelease", testLeaseEndsWithCompleteOrRelease},
	{"CompleteResentAfterApplied", testCompleteResentAfterApplied},
	{"Conflict", testConflict},
	{"ExhaustedByBudget", testExhaustedByBudget},
	{"ExhaustedByFinalRelease", testExhaustedByFinalRelease},
	{"ExhaustedByCrashLoop", testExhaustedByCrashLoop},
	{"CanceledReleaseNotCharged", testCanceledReleaseNotCharged},
	{"OutcomeRoundTrip", testOutcomeRoundTrip},
	{"RetentionForgetsDone", testRetentionForgetsDone},
	{"RetentionForgetsFailedAndExhausted", testRetentionForgetsFailedAndExhausted},
	{"RetentionForgetsAbandoned", testRetentionForgetsAbandoned},
	{"NamespacesAreIndependent", testNamespacesAreIndependent},
	{"KeysAreOpaque", testKeysAreOpaque},
	{"ExtendMovesLease", testExtendMovesLease},
	{"FencingByTokenNotTime", testFencingByTokenNotTime},
	{"InvalidRequests", testInvalidRequests},
	{"HistoryBounded", testHistoryBounded},
	{"Get", testGet},
	{"ReopenExhaustedByBudget", testReopenExhaustedByBudget},
	{"ReopenExhaustedByFinalRelease", testReopenExhaustedByFinalRelease},
	{"ReopenExhaustedByCrashLoop", testReopenExhaustedByCrashLoop},
	{"ReopenNotDone", testReopenNotDone},
	{"ReopenConflictWins", testReopenConflictWins},
	{"ReopenNotLiveLease", testReopenNotLiveLease},
	{"ReopenCreatesRecord", testReopenCreatesRecord},
	{"ReopenInvalidID", testReopenInvalidID},
	{"ReopenBudgetDiscountsCanceledAttempts", testReopenBudgetDiscountsCanceledAttempts},
	{"InProgressWaitIsStoreMeasured", testInProgressWaitIsStoreMeasured},
	{"RetryAfterDelaysClaim", testRetryAfterDelaysClaim},
	{"RetryAfterBeforeBudget", testRetryAfterBeforeBudget},
	{"RetryAfterIgnoredWhenFinalOrCanceled", testRetryAfterIgnoredWhenFinalOrCanceled},
	{"RetryAfterKeepsRecord", testRetryAfterKeepsRecord},
	{"ReleaseWithoutDelayKeepsNoNotBefore", testReleaseWithoutDelayKeepsNoNotBefore},
	{"Transitions", testTransitions},
}

// N claims race for one fresh key: exactly one wins, the others see its
// lease, and only the winner's claim is counted.
func testConcurrentClaimsOneWinner(t *testing.T, e *env) {
	const n = 32
	req := e.req("race")
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]idempotency.ClaimResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = e.h.Store.Claim(e.ctx, req)
		})
	}
	close(start)
	wg.Wait()

	var winner *idempotency.ClaimResult
	for i := range n {
		require.NoError(t, errs[i], "claim %d", i)
		if results[i].Status == idempotency.Acquired {
			require.Nil(t, winner, "two claims acquired the same key")
			winner = &results[i]
		}
	}
	require.NotNil(t, winner, "no claim acquired the key")
	require.Equal(t, 1, winner.Lease.Attempt)
	require.Empty(t, winner.Previous)
	for i, res := range results {
		if &results[i] == winner {
			continue
		}
		require.Equal(t, idempotency.InProgress, res.Status, "claim %d", i)
		require.WithinDuration(t, winner.Lease.Until, res.Until, timeTolerance, "claim %d: InProgress.Until is the winner's lease", i)
	}

	rec := e.get("race")
	require.Equal(t, idempotency.StateInProgress, rec.State)
	require.Equal(t, 1, rec.Attempts, "InProgress claims are not counted")
	require.Equal(t, winner.Lease.Token, rec.Token)
	require.Len(t, rec.History, 1)
}

// An owner that never completes loses its lease when it expires; the next
// claim gets a new token and learns that the previous outcome is unknown.
func testLeaseExpiryTakeover(t *testing.T, e *env) {
	req := e.short("k")
	req.TraceID, req.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	first := e.acquire(req, 1)

	competing := e.claim(e.req("k"))
	require.Equal(t, idempotency.InProgress, competing.Status, "a live lease blocks")
	require.WithinDuration(t, first.Lease.Until, competing.Until, timeTolerance)

	e.expireLeases()
	second := e.acquire(e.req("k"), 2)
	require.NotEqual(t, first.Lease.Token, second.Lease.Token, "a takeover mints a new token")
	require.Equal(t, idempotency.ResultUnknown, second.Previous)

	rec := e.get("k")
	require.Equal(t, idempotency.StateInProgress, rec.State)
	require.Equal(t, second.Lease.Token, rec.Token)
	require.Equal(t, 2, rec.Attempts)
	require.Len(t, rec.History, 2)
	require.Equal(t, 1, rec.History[0].Attempt)
	require.Equal(t, idempotency.ResultUnknown, rec.History[0].Result)
	require.Equal(t, req.TraceID, rec.History[0].TraceID)
	require.Equal(t, req.SpanID, rec.History[0].SpanID)
	require.Equal(t, 2, rec.History[1].Attempt)
	require.Equal(t, idempotency.ResultInProgress, rec.History[1].Result)
}

// The owner of each claim (the process that made it) is kept in the
// history entry of the attempt it acquired, through the attempt's end, in
// the order of the attempts: a takeover after a lease expiry shows both
// processes. A claim without one leaves it empty.
func testOwnerInHistory(t *testing.T, e *env) {
	const (
		first  = "worker-1.example.com/4242"
		second = `worker-2/17 "b" <&> ü/\\x`
	)
	req := e.short("k")
	req.Owner = first
	e.acquire(req, 1)
	rec := e.get("k")
	require.Len(t, rec.History, 1)
	require.Equal(t, first, rec.History[0].Owner, "the acquiring claim's owner")

	// A claim that finds the lease live writes nothing.
	other := e.req("k")
	other.Owner = second
	require.Equal(t, idempotency.InProgress, e.claim(other).Status)
	require.Equal(t, first, e.get("k").History[0].Owner)

	e.expireLeases()
	l := e.acquire(other, 2).Lease
	e.release(l, testFailure)
	l = e.acquire(e.req("k"), 3).Lease
	e.complete(l, idempotency.Outcome{})

	rec = e.get("k")
	require.Len(t, rec.History, 3)
	owners := make([]string, len(rec.History))
	results := make([]idempotency.AttemptResult, len(rec.History))
	for i, h := range rec.History {
		owners[i], results[i] = h.Owner, h.Result
	}
	require.Equal(t, []string{first, second, ""}, owners, "one owner per attempt, oldest first")
	require.Equal(t, []idempotency.AttemptResult{idempotency.ResultUnknown, idempotency.ResultFailed, idempotency.ResultDone}, results)

	// The first attempt of a key, completed: its owner stays.
	req = e.req("once")
	req.Owner = first
	e.complete(e.acquire(req, 1).Lease, idempotency.Outcome{})
	rec = e.get("once")
	require.Len(t, rec.History, 1)
	require.Equal(t, first, rec.History[0].Owner)
	require.Equal(t, idempotency.ResultDone, rec.History[0].Result)

	// The longest owner accepted is kept whole.
	req = e.req("long")
	req.Owner = strings.Repeat("é", defaults.MaxOwnerLen/2) + "/"
	require.Len(t, req.Owner, defaults.MaxOwnerLen)
	e.acquire(req, 1)
	require.Equal(t, req.Owner, e.get("long").History[0].Owner)
}

// A stale owner can neither overwrite nor delete its successor's record.
func testStaleTokenAfterTakeover(t *testing.T, e *env) {
	old := e.acquire(e.short("k"), 1).Lease
	e.expireLeases()
	cur := e.acquire(e.req("k"), 2).Lease
	before := e.get("k")

	err := e.h.Store.Complete(e.ctx, old, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "stale"}}})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "Complete with a stale token")
	err = e.h.Store.Release(e.ctx, old, testFailure)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "Release with a stale token")
	err = e.h.Store.Release(e.ctx, old, idempotency.Failure{Error: "stale", Final: true})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "final Release with a stale token")
	err = e.h.Store.Release(e.ctx, old, idempotency.Failure{Error: "stale", Canceled: true})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "canceled Release with a stale token")
	_, err = e.h.Store.Extend(e.ctx, old, longLease)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "Extend with a stale token")

	for name, l := range map[string]idempotency.Lease{
		"forged token":  {Namespace: e.ns, Key: "k", Token: cur.Token + "x", Attempt: 2},
		"empty token":   {Namespace: e.ns, Key: "k", Attempt: 2},
		"missing key":   {Namespace: e.ns, Key: "missing", Token: cur.Token, Attempt: 2},
		"other ns":      {Namespace: e.ns + "-other", Key: "k", Token: cur.Token, Attempt: 2},
		"stale attempt": {Namespace: e.ns, Key: "k", Token: old.Token, Attempt: 2},
	} {
		require.ErrorIs(t, e.h.Store.Complete(e.ctx, l, idempotency.Outcome{}), idempotency.ErrLeaseLost, "Complete, %s", name)
		require.ErrorIs(t, e.h.Store.Release(e.ctx, l, testFailure), idempotency.ErrLeaseLost, "Release, %s", name)
		_, err = e.h.Store.Extend(e.ctx, l, longLease)
		require.ErrorIs(t, err, idempotency.ErrLeaseLost, "Extend, %s", name)
	}
	e.requireNotFound("missing")

	requireSameRecord(t, before, e.get("k"))
	require.Equal(t, idempotency.StateInProgress, before.State)
	require.Equal(t, cur.Token, before.Token)

	// The current owner is unaffected.
	e.complete(cur, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "current"}}})
	res := e.claim(e.req("k"))
	require.Equal(t, idempotency.Completed, res.Status)
	require.Equal(t, "current", res.Outcome.Messages[0].UUID)
}

// A DONE record answers every later claim with its outcome, whatever the
// budget, and such claims are not counted.
func testCompleteThenClaim(t *testing.T, e *env) {
	l := e.acquire(e.req("k"), 1).Lease
	out := idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "m-1", Payload: []byte("done")}}}
	e.complete(l, out)

	for range 3 {
		res := e.claim(e.req("k"))
		require.Equal(t, idempotency.Completed, res.Status)
		require.NotNil(t, res.Outcome)
		require.Equal(t, out, *res.Outcome)
	}
	budgetOne := e.req("k")
	budgetOne.MaxAttempts = 1
	res := e.claim(budgetOne)
	require.Equal(t, idempotency.Completed, res.Status, "DONE is checked before the budget")

	rec := e.get("k")
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Equal(t, 1, rec.Attempts, "Completed claims are not counted")
	require.Equal(t, fpA, rec.Fingerprint)
	require.NotNil(t, rec.Outcome)
	require.Equal(t, out, *rec.Outcome)
	require.Len(t, rec.History, 1)
	require.Equal(t, idempotency.ResultDone, rec.History[0].Result)
	require.False(t, rec.ExpiresAt.IsZero(), "a DONE record has a retention deadline")
}

// Release makes the key claimable at once and hands the failure to the
// next attempt.
func testReleaseThenClaim(t *testing.T, e *env) {
	l := e.acquire(e.req("k"), 1).Lease
	e.release(l, testFailure)

	rec := e.get("k")
	require.Equal(t, idempotency.StateFailed, rec.State)
	require.Equal(t, 1, rec.Attempts)
	require.Len(t, rec.History, 1)
	h := rec.History[0]
	require.Equal(t, 1, h.Attempt)
	require.Equal(t, idempotency.ResultFailed, h.Result)
	require.Equal(t, testFailure.Error, h.Error)
	require.Equal(t, testFailure.ErrorType, h.Type)
	require.Equal(t, testFailure.Reason, h.Reason)
	require.Equal(t, testFailure.Stack, h.Stack)
	require.False(t, h.Started.IsZero(), "started")
	require.False(t, h.Ended.IsZero(), "ended")
	require.False(t, h.Ended.Before(h.Started), "ended before started")

	res := e.acquire(e.req("k"), 2)
	require.NotEqual(t, l.Token, res.Lease.Token)
	require.Equal(t, []any{idempotency.ResultFailed, testFailure.Error}, []any{res.Previous, res.PreviousError})

	rec = e.get("k")
	require.Equal(t, idempotency.StateInProgress, rec.State)
	require.Len(t, rec.History, 2)
	require.Equal(t, idempotency.ResultFailed, rec.History[0].Result)
	require.Equal(t, idempotency.ResultInProgress, rec.History[1].Result)
}

// A lease ends with Complete or Release: using it again fails and changes
// nothing (a late Release must not undo a completion). A Complete re-sent
// with the lease that completed is the exception (see
// testCompleteResentAfterApplied).
func testLeaseEndsWithCompleteOrRelease(t *testing.T, e *env) {
	done := e.acquire(e.req("done"), 1).Lease
	out := idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "m-1"}}}
	e.complete(done, out)
	before := e.get("done")
	require.ErrorIs(t, e.h.Store.Release(e.ctx, done, testFailure), idempotency.ErrLeaseLost, "Release after Complete")
	require.ErrorIs(t, e.h.Store.Release(e.ctx, done, idempotency.Failure{Final: true}), idempotency.ErrLeaseLost, "final Release after Complete")
	_, err := e.h.Store.Extend(e.ctx, done, longLease)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "Extend after Complete")
	requireSameRecord(t, before, e.get("done"))

	failed := e.acquire(e.req("failed"), 1).Lease
	e.release(failed, testFailure)
	before = e.get("failed")
	require.ErrorIs(t, e.h.Store.Complete(e.ctx, failed, out), idempotency.ErrLeaseLost, "Complete after Release")
	require.ErrorIs(t, e.h.Store.Release(e.ctx, failed, testFailure), idempotency.ErrLeaseLost, "second Release")
	_, err = e.h.Store.Extend(e.ctx, failed, longLease)
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "Extend after Release")
	requireSameRecord(t, before, e.get("failed"))
}

// A Complete whose reply was lost is re-sent with the same lease: it is the
// same call, so it succeeds again and changes nothing (the first outcome
// stays). A lease that ended otherwise, or another lease, is still refused.
func testCompleteResentAfterApplied(t *testing.T, e *env) {
	l := e.acquire(e.req("k"), 1).Lease
	out := idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "m-1", Payload: []byte("p")}}}
	e.complete(l, out)
	before := e.get("k")
	require.NoError(t, e.h.Store.Complete(e.ctx, l, out), "Complete re-sent after it was applied")
	require.NoError(t, e.h.Store.Complete(e.ctx, l, idempotency.Outcome{}), "a re-send never replaces the outcome")
	requireSameRecord(t, before, e.get("k"))
	res := e.claim(e.req("k"))
	require.Equal(t, idempotency.Completed, res.Status)
	require.Equal(t, out.Messages[0].UUID, res.Outcome.Messages[0].UUID)

	other := l
	other.Token += "-other"
	require.ErrorIs(t, e.h.Store.Complete(e.ctx, other, out), idempotency.ErrLeaseLost, "another token on a DONE record")
	requireSameRecord(t, before, e.get("k"))
}

// Another fingerprint under the same key is a Conflict in every state, and
// is neither counted nor stored.
func testConflict(t *testing.T, e *env) {
	l := e.acquire(e.req("done"), 1).Lease
	e.complete(l, idempotency.Outcome{})
	l = e.acquire(e.req("failed"), 1).Lease
	e.release(l, testFailure)
	l = e.acquire(e.req("exhausted"), 1).Lease
	e.release(l, idempotency.Failure{Error: "permanent", Final: true})
	e.acquire(e.req("in_progress"), 1)

	for _, key := range []string{"done", "failed", "exhausted", "in_progress"} {
		before := e.get(key)
		other := e.req(key)
		other.Fingerprint = fpB
		res := e.claim(other)
		require.Equal(t, idempotency.Conflict, res.Status, "%s: claim with another fingerprint", key)
		require.Equal(t, fpA, res.StoredFingerprint, key)
		requireSameRecord(t, before, e.get(key))
	}
	// The original fingerprint still gets the normal answer.
	require.Equal(t, idempotency.Completed, e.claim(e.req("done")).Status)
	e.acquire(e.req("failed"), 2)
}

// The budget counts every claim across processes: three failed attempts of
// a budget of three exhaust the key.
func testExhaustedByBudget(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 3
	for i := 1; i <= 3; i++ {
		l := e.acquire(req, i).Lease
		e.release(l, idempotency.Failure{Error: fmt.Sprintf("attempt %d failed", i), Reason: "error"})
	}
	for range 2 {
		res := e.claim(req)
		require.Equal(t, idempotency.Exhausted, res.Status)
		require.Equal(t, 3, res.Attempts)
		require.Len(t, res.History, 3)
		for i, h := range res.History {
			require.Equal(t, i+1, h.Attempt)
			require.Equal(t, idempotency.ResultFailed, h.Result)
			require.Equal(t, fmt.Sprintf("attempt %d failed", i+1), h.Error)
		}
	}
	rec := e.get("k")
	require.Equal(t, idempotency.StateExhausted, rec.State)
	require.Equal(t, 3, rec.Attempts, "an Exhausted claim is not counted")
}

// A final Release exhausts the key at once, whatever budget later claims bring.
func testExhaustedByFinalRelease(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 3
	l := e.acquire(req, 1).Lease
	e.release(l, idempotency.Failure{Error: "invalid card", Reason: "permanent", Final: true})

	res := e.claim(req)
	require.Equal(t, idempotency.Exhausted, res.Status)
	require.Equal(t, 1, res.Attempts)
	require.Len(t, res.History, 1)
	require.Equal(t, idempotency.ResultFailed, res.History[0].Result)
	require.Equal(t, "invalid card", res.History[0].Error)
	require.Equal(t, "permanent", res.History[0].Reason)

	req.MaxAttempts = 100
	require.Equal(t, idempotency.Exhausted, e.claim(req).Status, "a final failure is final")
	rec := e.get("k")
	require.Equal(t, idempotency.StateExhausted, rec.State)
	require.Equal(t, 1, rec.Attempts)
}

// A message that kills its process (claim, lease expires, claim...) is
// counted too and ends Exhausted.
func testExhaustedByCrashLoop(t *testing.T, e *env) {
	req := e.short("k")
	req.MaxAttempts = 3
	for i := 1; i <= 3; i++ {
		res := e.acquire(req, i)
		if i > 1 {
			require.Equal(t, idempotency.ResultUnknown, res.Previous, "attempt %d", i)
		}
		e.expireLeases()
	}
	res := e.claim(req)
	require.Equal(t, idempotency.Exhausted, res.Status)
	require.Equal(t, 3, res.Attempts)
	require.Len(t, res.History, 3)
	for i, h := range res.History {
		require.Equal(t, i+1, h.Attempt)
		require.Equal(t, idempotency.ResultUnknown, h.Result, "attempt %d", i+1)
	}
	require.Equal(t, idempotency.StateExhausted, e.get("k").State)
}

// A canceled attempt (shutdown) is refunded: it is counted in Attempts but
// not charged to the budget, and Final is ignored on it.
func testCanceledReleaseNotCharged(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 1
	l := e.acquire(req, 1).Lease
	e.release(l, idempotency.Failure{Error: "context canceled", Canceled: true})

	res := e.acquire(req, 2)
	require.Equal(t, idempotency.ResultCanceled, res.Previous)
	rec := e.get("k")
	require.Equal(t, 2, rec.Attempts)
	require.Equal(t, 1, rec.Canceled)
	require.Equal(t, idempotency.ResultCanceled, rec.History[0].Result)
	require.Equal(t, "context canceled", rec.History[0].Error)

	e.release(res.Lease, idempotency.Failure{Error: "context canceled", Canceled: true, Final: true})
	res = e.acquire(req, 3)
	require.Equal(t, idempotency.ResultCanceled, res.Previous, "Final is ignored on a canceled release")
	rec = e.get("k")
	require.Equal(t, 3, rec.Attempts)
	require.Equal(t, 2, rec.Canceled)

	// The one charged attempt spends the budget of one.
	e.release(res.Lease, testFailure)
	ex := e.claim(req)
	require.Equal(t, idempotency.Exhausted, ex.Status)
	require.Equal(t, 3, ex.Attempts)
}

// The outcome, with the produced messages, comes back byte for byte, and
// neither the caller's nor a reader's copy aliases the stored one.
func testOutcomeRoundTrip(t *testing.T, e *env) {
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(i)
	}
	out := idempotency.Outcome{Messages: []idempotency.StoredMessage{
		{
			UUID:     "0190f5a4-6c1e-7cc2-a1c7-3f1f9d2b8e01",
			Metadata: map[string]string{"name": "order.paid", "unicode": "größe ✓ 支付", "empty": "", "quote": `"x":{y}`},
			Payload:  []byte(`{"order":42,"amount":"12.50"}`),
		},
		{
			UUID:     "0190f5a4-6c1e-7cc2-a1c7-3f1f9d2b8e02",
			Metadata: map[string]string{"content-type": "application/octet-stream"},
			Payload:  []byte{0x00, 0xff, 0xfe, 0x80, 0xc3, 0x28, '\n', 0x00, '"', '\\'},
		},
		{UUID: "0190f5a4-6c1e-7cc2-a1c7-3f1f9d2b8e03", Payload: big},
		{UUID: "no-metadata-no-payload"},
	}}
	want := cloneOutcome(out)

	l := e.acquire(e.req("k"), 1).Lease
	e.complete(l, out)
	// The caller reusing its buffers must not change the stored outcome.
	out.Messages[0].Payload[0] = 'X'
	out.Messages[0].Metadata["name"] = "changed"
	out.Messages[1].UUID = "changed"

	res := e.claim(e.req("k"))
	require.Equal(t, idempotency.Completed, res.Status)
	require.NotNil(t, res.Outcome)
	require.Equal(t, want, *res.Outcome)
	res.Outcome.Messages[1].Payload[1] = 0
	res.Outcome.Messages[0].Metadata["unicode"] = "changed"

	res = e.claim(e.req("k"))
	require.Equal(t, idempotency.Completed, res.Status)
	require.Equal(t, want, *res.Outcome, "a second duplicate re-emits the same messages")
	rec := e.get("k")
	require.NotNil(t, rec.Outcome)
	require.Equal(t, want, *rec.Outcome)

	// An outcome without messages is still an outcome.
	l = e.acquire(e.req("empty"), 1).Lease
	e.complete(l, idempotency.Outcome{})
	res = e.claim(e.req("empty"))
	require.Equal(t, idempotency.Completed, res.Status)
	require.NotNil(t, res.Outcome, "Completed always carries an Outcome")
	require.Empty(t, res.Outcome.Messages)
}

// A DONE record is forgotten a retention after Complete (not after the
// claim's lease would have ended), fingerprint included.
func testRetentionForgetsDone(t *testing.T, e *env) {
	l := e.acquire(e.outlivingRetention("k"), 1).Lease
	e.complete(l, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "m-1"}}})
	require.Equal(t, idempotency.StateDone, e.get("k").State)

	e.expireRecords()
	e.requireNotFound("k")
	req := e.req("k")
	req.Fingerprint = fpB
	res := e.acquire(req, 1)
	require.Empty(t, res.Previous)
	rec := e.get("k")
	require.Equal(t, fpB, rec.Fingerprint)
	require.Len(t, rec.History, 1)
}

// FAILED and EXHAUSTED records left alone are forgotten a retention after
// their release too.
func testRetentionForgetsFailedAndExhausted(t *testing.T, e *env) {
	l := e.acquire(e.outlivingRetention("failed"), 1).Lease
	e.release(l, testFailure)
	l = e.acquire(e.outlivingRetention("final"), 1).Lease
	e.release(l, idempotency.Failure{Error: "permanent", Final: true})
	budgetOne := e.outlivingRetention("exhausted")
	budgetOne.MaxAttempts = 1
	l = e.acquire(budgetOne, 1).Lease
	e.release(l, testFailure)
	require.Equal(t, idempotency.Exhausted, e.claim(budgetOne).Status)

	e.expireRecords()
	for _, key := range []string{"failed", "final", "exhausted"} {
		e.requireNotFound(key)
		req := e.req(key)
		req.MaxAttempts = 1
		res := e.acquire(req, 1)
		require.Empty(t, res.Previous, key)
	}
}

// A record whose owner died (its lease expired, nobody claimed since) is a
// failure of unknown outcome: it is forgotten a retention after the lease
// expired, like a FAILED one, so crashed claims do not pile up. An extended
// lease counts from its new expiry.
func testRetentionForgetsAbandoned(t *testing.T, e *env) {
	e.acquire(e.short("abandoned"), 1)
	l := e.acquire(e.short("extended"), 1).Lease
	_, err := e.h.Store.Extend(e.ctx, l, 2*e.h.Retention)
	require.NoError(t, err)

	e.h.Advance(t, e.h.Lease+e.h.Retention*3/2)
	e.requireNotFound("abandoned")
	require.Equal(t, idempotency.StateInProgress, e.get("extended").State,
		"kept for a retention after its extended expiry")

	e.h.Advance(t, 2*e.h.Retention)
	e.requireNotFound("extended")
	res := e.acquire(e.req("abandoned"), 1)
	require.Empty(t, res.Previous)
}

// The same key in two namespaces is two records.
func testNamespacesAreIndependent(t *testing.T, e *env) {
	nsB := randomNamespace()
	reqA := e.req("k")
	reqB := e.req("k")
	reqB.Namespace = nsB
	reqB.Fingerprint = fpB // no Conflict across namespaces

	a := e.acquire(reqA, 1).Lease
	b := e.acquire(reqB, 1).Lease
	require.NotEqual(t, a.Token, b.Token)

	// A lease of one namespace does not act on the other.
	crossed := b
	crossed.Token = a.Token
	require.ErrorIs(t, e.h.Store.Release(e.ctx, crossed, testFailure), idempotency.ErrLeaseLost)

	e.complete(a, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "from-a"}}})
	require.Equal(t, idempotency.InProgress, e.claim(reqB).Status, "completing A leaves B in progress")
	require.Equal(t, idempotency.Completed, e.claim(reqA).Status)

	recB, err := e.h.Store.Get(e.ctx, nsB, "k")
	require.NoError(t, err)
	require.Equal(t, nsB, recB.Namespace)
	require.Equal(t, idempotency.StateInProgress, recB.State)
	require.Equal(t, fpB, recB.Fingerprint)
	require.Equal(t, b.Token, recB.Token)
	recA := e.get("k")
	require.Equal(t, e.ns, recA.Namespace)
	require.Equal(t, idempotency.StateDone, recA.State)
	require.Equal(t, fpA, recA.Fingerprint)
}

// Keys are opaque: separators, glob and hash-tag characters, Unicode and the
// longest allowed key each name their own record.
func testKeysAreOpaque(t *testing.T, e *env) {
	keys := []string{
		"a", "A", "a:b", "a:b:c", "b:c", "{a}", "{a}:b", "*", "a*", "?", "[a]", "a b",
		"a\u00a0b", "größe/支付 ✓", "🙂", "../a", "%s", `"a"`, `a\b`,
		strings.Repeat("k", defaults.MaxKeyLen),
	}
	for i, key := range keys {
		req := e.req(key)
		req.Fingerprint = fmt.Sprintf("fp-%d", i)
		l := e.acquire(req, 1).Lease
		if i%2 == 0 {
			e.complete(l, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: fmt.Sprintf("uuid-%d", i)}}})
		}
	}
	for i, key := range keys {
		req := e.req(key)
		req.Fingerprint = fmt.Sprintf("fp-%d", i)
		res := e.claim(req)
		rec := e.get(key)
		require.Equal(t, key, rec.Key, "key %q", key)
		require.Equal(t, req.Fingerprint, rec.Fingerprint, "key %q", key)
		require.Equal(t, 1, rec.Attempts, "key %q", key)
		if i%2 == 0 {
			require.Equal(t, idempotency.Completed, res.Status, "key %q", key)
			require.Equal(t, fmt.Sprintf("uuid-%d", i), res.Outcome.Messages[0].UUID, "key %q", key)
		} else {
			require.Equal(t, idempotency.InProgress, res.Status, "key %q", key)
		}
	}
}

// Extend moves the lease expiry to now+d: a competitor stays out past the
// original expiry, and the owner still completes.
func testExtendMovesLease(t *testing.T, e *env) {
	l := e.acquire(e.short("k"), 1).Lease
	ext, err := e.h.Store.Extend(e.ctx, l, 3*e.h.Lease)
	require.NoError(t, err)
	require.Equal(t, l.Token, ext.Token, "Extend keeps the token")
	require.Equal(t, l.Attempt, ext.Attempt)
	require.Equal(t, l.Namespace, ext.Namespace)
	require.Equal(t, l.Key, ext.Key)
	require.False(t, ext.Until.Before(l.Until.Add(2*e.h.Lease-timeTolerance)), "Extend moves Until to now+d: %v, claimed until %v", ext.Until, l.Until)
	require.WithinDuration(t, ext.Until, e.get("k").LeaseUntil, timeTolerance)

	e.h.Advance(t, 2*e.h.Lease)
	res := e.claim(e.req("k"))
	require.Equal(t, idempotency.InProgress, res.Status, "the extended lease is still live")
	require.WithinDuration(t, ext.Until, res.Until, timeTolerance)

	e.complete(ext, idempotency.Outcome{})
	require.Equal(t, idempotency.Completed, e.claim(e.req("k")).Status)
	require.Equal(t, 1, e.get("k").Attempts)
}

// Fencing is by token, not time: an owner whose lease expired but that
// nobody replaced still completes, releases or extends.
func testFencingByTokenNotTime(t *testing.T, e *env) {
	complete := e.acquire(e.short("complete"), 1).Lease
	release := e.acquire(e.short("release"), 1).Lease
	extend := e.acquire(e.short("extend"), 1).Lease
	e.expireLeases()

	e.complete(complete, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "late"}}})
	res := e.claim(e.req("complete"))
	require.Equal(t, idempotency.Completed, res.Status)
	require.Equal(t, "late", res.Outcome.Messages[0].UUID)
	require.Equal(t, idempotency.ResultDone, e.get("complete").History[0].Result)

	e.release(release, testFailure)
	res = e.acquire(e.req("release"), 2)
	require.Equal(t, []any{idempotency.ResultFailed, testFailure.Error}, []any{res.Previous, res.PreviousError},
		"the late Release is recorded, not an unknown outcome")

	ext, err := e.h.Store.Extend(e.ctx, extend, longLease)
	require.NoError(t, err, "Extend of an expired lease nobody took over")
	require.Equal(t, extend.Token, ext.Token)
	require.Equal(t, idempotency.InProgress, e.claim(e.req("extend")).Status, "the revived lease is live")
	e.complete(ext, idempotency.Outcome{})
	require.Equal(t, 1, e.get("extend").Attempts)
}

// Malformed requests wrap ErrInvalidRequest and store nothing.
func testInvalidRequests(t *testing.T, e *env) {
	cases := []struct {
		name   string
		mutate func(r *idempotency.ClaimRequest)
	}{
		{"empty key", func(r *idempotency.ClaimRequest) { r.Key = "" }},
		{"newline in key", func(r *idempotency.ClaimRequest) { r.Key = "a\nb" }},
		{"NUL in key", func(r *idempotency.ClaimRequest) { r.Key = "a\x00b" }},
		{"DEL in key", func(r *idempotency.ClaimRequest) { r.Key = "a\x7fb" }},
		{"C1 control in key", func(r *idempotency.ClaimRequest) { r.Key = "a\u0085b" }},
		{"key not UTF-8", func(r *idempotency.ClaimRequest) { r.Key = "a\xffb" }},
		{"key too long", func(r *idempotency.ClaimRequest) { r.Key = strings.Repeat("k", defaults.MaxKeyLen+1) }},
		{"empty namespace", func(r *idempotency.ClaimRequest) { r.Namespace = "" }},
		{"namespace with colon", func(r *idempotency.ClaimRequest) { r.Namespace += ":x" }},
		{"namespace with space", func(r *idempotency.ClaimRequest) { r.Namespace += " x" }},
		{"namespace with brace", func(r *idempotency.ClaimRequest) { r.Namespace += "{x}" }},
		{"namespace too long", func(r *idempotency.ClaimRequest) { r.Namespace = strings.Repeat("n", 129) }},
		{"zero lease", func(r *idempotency.ClaimRequest) { r.Lease = 0 }},
		{"negative lease", func(r *idempotency.ClaimRequest) { r.Lease = -longLease }},
		{"zero max attempts", func(r *idempotency.ClaimRequest) { r.MaxAttempts = 0 }},
		{"negative max attempts", func(r *idempotency.ClaimRequest) { r.MaxAttempts = -1 }},
		{"owner too long", func(r *idempotency.ClaimRequest) { r.Owner = strings.Repeat("o", defaults.MaxOwnerLen+1) }},
		{"newline in owner", func(r *idempotency.ClaimRequest) { r.Owner = "host\n/1" }},
		{"owner not UTF-8", func(r *idempotency.ClaimRequest) { r.Owner = "host\xff/1" }},
	}
	for i, tc := range cases {
		req := e.req(fmt.Sprintf("invalid-%d", i))
		tc.mutate(&req)
		_, err := e.h.Store.Claim(e.ctx, req)
		require.ErrorIs(t, err, idempotency.ErrInvalidRequest, tc.name)

		_, err = e.h.Store.Get(e.ctx, req.Namespace, req.Key)
		require.True(t, errors.Is(err, idempotency.ErrNotFound) || errors.Is(err, idempotency.ErrInvalidRequest),
			"%s: Get after a rejected claim: %v", tc.name, err)
		// Nothing was stored under the well-formed parts either.
		valid := e.req(fmt.Sprintf("invalid-%d", i))
		e.requireNotFound(valid.Key)
		e.acquire(valid, 1)
	}

	// A non-positive extension is invalid too, and leaves the lease alone.
	l := e.acquire(e.req("extend"), 1).Lease
	before := e.get("extend")
	for _, d := range []time.Duration{0, -longLease} {
		_, err := e.h.Store.Extend(e.ctx, l, d)
		require.ErrorIs(t, err, idempotency.ErrInvalidRequest, "Extend by %v", d)
	}
	requireSameRecord(t, before, e.get("extend"))
}

// The attempt history keeps the newest MaxHistory entries, and error and
// stack texts are truncated (on a UTF-8 boundary).
func testHistoryBounded(t *testing.T, e *env) {
	n := defaults.MaxHistory + 5
	req := e.req("k")
	req.MaxAttempts = n + 1
	for i := 1; i <= n; i++ {
		l := e.acquire(req, i).Lease
		e.release(l, idempotency.Failure{Error: fmt.Sprintf("err %d", i)})
	}
	rec := e.get("k")
	require.Equal(t, n, rec.Attempts)
	require.Len(t, rec.History, defaults.MaxHistory)
	for j, h := range rec.History {
		attempt := n - defaults.MaxHistory + 1 + j
		require.Equal(t, attempt, h.Attempt, "newest entries are kept, oldest first")
		require.Equal(t, fmt.Sprintf("err %d", attempt), h.Error)
	}
	res := e.acquire(req, n+1)
	require.Equal(t, fmt.Sprintf("err %d", n), res.PreviousError)
	rec = e.get("k")
	require.Len(t, rec.History, defaults.MaxHistory)
	require.Equal(t, n+1, rec.History[defaults.MaxHistory-1].Attempt)
	require.Equal(t, idempotency.ResultInProgress, rec.History[defaults.MaxHistory-1].Result)

	// Truncation: the byte limit falls inside a two-byte rune.
	longErr := "x" + strings.Repeat("é", defaults.MaxErrorLen)
	longStack := "y" + strings.Repeat("ü", defaults.MaxStackLen)
	l := e.acquire(e.req("long"), 1).Lease
	e.release(l, idempotency.Failure{Error: longErr, Stack: longStack})
	h := e.get("long").History[0]
	requireTruncated(t, longErr, h.Error, defaults.MaxErrorLen)
	requireTruncated(t, longStack, h.Stack, defaults.MaxStackLen)
	res = e.acquire(e.req("long"), 2)
	requireTruncated(t, longErr, res.PreviousError, defaults.MaxErrorLen)
}

func requireTruncated(t *testing.T, full, got string, limit int) {
	t.Helper()
	require.LessOrEqual(t, len(got), limit, "truncated to the limit")
	require.Greater(t, len(got), limit-utf8.UTFMax, "keeps as much as fits")
	require.True(t, utf8.ValidString(got), "truncated on a rune boundary")
	require.True(t, strings.HasPrefix(full, got), "a prefix of the original")
}

// Get returns ErrNotFound for a missing key and the full record otherwise.
func testGet(t *testing.T, e *env) {
	e.requireNotFound("k")
	_, err := e.h.Store.Get(e.ctx, randomNamespace(), "k")
	require.ErrorIs(t, err, idempotency.ErrNotFound, "unknown namespace")

	req := e.req("k")
	req.TraceID, req.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	l := e.acquire(req, 1).Lease

	rec := e.get("k")
	require.Equal(t, e.ns, rec.Namespace)
	require.Equal(t, "k", rec.Key)
	require.Equal(t, idempotency.StateInProgress, rec.State)
	require.Equal(t, fpA, rec.Fingerprint)
	require.Equal(t, l.Token, rec.Token)
	require.Equal(t, 1, rec.Attempts)
	require.Zero(t, rec.Canceled)
	require.WithinDuration(t, l.Until, rec.LeaseUntil, timeTolerance)
	require.Len(t, rec.History, 1)
	h := rec.History[0]
	require.Equal(t, 1, h.Attempt)
	require.Equal(t, idempotency.ResultInProgress, h.Result)
	require.Equal(t, req.TraceID, h.TraceID)
	require.Equal(t, req.SpanID, h.SpanID)
	require.True(t, h.Ended.IsZero(), "a running attempt has not ended")
	// Started is the store's now at the claim: the lease runs from there.
	require.WithinDuration(t, h.Started.Add(longLease), rec.LeaseUntil, timeTolerance, "LeaseUntil is claim time + lease")
	require.True(t, rec.LeaseUntil.After(h.Started), "LeaseUntil is in the future")
	require.Equal(t, idempotency.InProgress, e.claim(e.req("k")).Status, "and the store agrees it is live")

	// Get returns a copy: changing it changes nothing stored.
	rec.History[0].Result = "tampered"
	require.Equal(t, idempotency.ResultInProgress, e.get("k").History[0].Result)
}

// reopen is req with a replay run ID.
func reopen(req idempotency.ClaimRequest, id string) idempotency.ClaimRequest {
	req.Reopen = id
	return req
}

// A record exhausted by its budget is reopened once per replay ID with a
// fresh budget; the attempt counter keeps increasing.
func testReopenExhaustedByBudget(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 3
	for i := 1; i <= 3; i++ {
		e.release(e.acquire(req, i).Lease, idempotency.Failure{Error: fmt.Sprintf("attempt %d failed", i)})
	}
	require.Equal(t, idempotency.Exhausted, e.claim(req).Status)
	require.Equal(t, idempotency.StateExhausted, e.get("k").State)

	// Replay run r1: a fresh budget of 3 more attempts.
	res := e.acquire(reopen(req, "r1"), 4)
	require.Equal(t, idempotency.ResultFailed, res.Previous)
	require.Equal(t, "attempt 3 failed", res.PreviousError)
	rec := e.get("k")
	require.Equal(t, "r1", rec.ReopenedBy)
	require.Equal(t, 3, rec.BudgetBase)
	require.Equal(t, 4, rec.Attempts)
	e.release(res.Lease, idempotency.Failure{Error: "attempt 4 failed"})

	// A redelivered copy of the replayed message (same ID) claims within the
	// new budget and does not reopen again: the base stays.
	for i := 5; i <= 6; i++ {
		e.release(e.acquire(reopen(req, "r1"), i).Lease, idempotency.Failure{Error: fmt.Sprintf("attempt %d failed", i)})
	}
	rec = e.get("k")
	require.Equal(t, 3, rec.BudgetBase, "the same replay ID does not reopen twice")
	ex := e.claim(reopen(req, "r1"))
	require.Equal(t, idempotency.Exhausted, ex.Status, "the second budget is spent")
	require.Equal(t, 6, ex.Attempts)
	require.Equal(t, idempotency.Exhausted, e.claim(req).Status, "a claim without a replay ID does not reopen")
	require.Equal(t, idempotency.StateExhausted, e.get("k").State)

	// Another run reopens it again.
	res = e.acquire(reopen(req, "r2"), 7)
	require.Equal(t, "attempt 6 failed", res.PreviousError)
	rec = e.get("k")
	require.Equal(t, "r2", rec.ReopenedBy)
	require.Equal(t, 6, rec.BudgetBase)
	e.complete(res.Lease, idempotency.Outcome{})
	require.Equal(t, idempotency.Completed, e.claim(reopen(req, "r3")).Status)
}

// A record exhausted by a final failure is reopened once per replay ID.
func testReopenExhaustedByFinalRelease(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 5
	e.release(e.acquire(req, 1).Lease, idempotency.Failure{Error: "invalid card", Reason: "permanent", Final: true})
	require.Equal(t, idempotency.Exhausted, e.claim(req).Status)

	res := e.acquire(reopen(req, "r1"), 2)
	require.Equal(t, idempotency.ResultFailed, res.Previous)
	require.Equal(t, "invalid card", res.PreviousError)
	rec := e.get("k")
	require.Equal(t, "r1", rec.ReopenedBy)
	require.Equal(t, 1, rec.BudgetBase)
	e.release(res.Lease, idempotency.Failure{Error: "still invalid", Reason: "permanent", Final: true})

	ex := e.claim(reopen(req, "r1"))
	require.Equal(t, idempotency.Exhausted, ex.Status, "a final failure after the reopen is final for that run")
	require.Equal(t, 2, ex.Attempts)
	require.Len(t, ex.History, 2)
	require.Equal(t, "still invalid", ex.History[1].Error)

	e.acquire(reopen(req, "r2"), 3)
	require.Equal(t, "r2", e.get("k").ReopenedBy)
}

// A crash loop that exhausted the budget is reopened too, and the next
// attempt learns that the last one's outcome is unknown.
func testReopenExhaustedByCrashLoop(t *testing.T, e *env) {
	req := e.short("k")
	req.MaxAttempts = 2
	for i := 1; i <= 2; i++ {
		e.acquire(req, i)
		e.expireLeases()
	}
	require.Equal(t, idempotency.Exhausted, e.claim(req).Status)
	res := e.acquire(reopen(req, "r1"), 3)
	require.Equal(t, idempotency.ResultUnknown, res.Previous)
	require.Equal(t, 2, e.get("k").BudgetBase)
}

// A DONE record is never reopened: the replay is a duplicate.
func testReopenNotDone(t *testing.T, e *env) {
	req := e.req("k")
	e.complete(e.acquire(req, 1).Lease, idempotency.Outcome{Messages: []idempotency.StoredMessage{{UUID: "out-1"}}})
	res := e.claim(reopen(req, "r1"))
	require.Equal(t, idempotency.Completed, res.Status)
	require.NotNil(t, res.Outcome)
	require.Len(t, res.Outcome.Messages, 1)
	rec := e.get("k")
	require.Equal(t, idempotency.StateDone, rec.State)
	require.Empty(t, rec.ReopenedBy)
	require.Zero(t, rec.BudgetBase)
	require.Equal(t, 1, rec.Attempts)
}

// A different fingerprint is a Conflict even with a replay ID, and the
// record is not reopened.
func testReopenConflictWins(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 1
	e.release(e.acquire(req, 1).Lease, idempotency.Failure{Error: "boom"})
	before := e.get("k")

	other := reopen(req, "r1")
	other.Fingerprint = fpB
	res := e.claim(other)
	require.Equal(t, idempotency.Conflict, res.Status)
	require.Equal(t, fpA, res.StoredFingerprint)
	after := e.get("k")
	requireSameRecord(t, before, after)
	require.Empty(t, after.ReopenedBy)

	// The matching payload still reopens with that ID.
	e.acquire(reopen(req, "r1"), 2)
}

// A live lease is never taken over by a replay ID; once it has expired
// the claim reopens the record.
func testReopenNotLiveLease(t *testing.T, e *env) {
	req := e.short("k")
	req.MaxAttempts = 1
	l := e.acquire(req, 1).Lease
	before := e.get("k")

	res := e.claim(reopen(req, "r1"))
	require.Equal(t, idempotency.InProgress, res.Status)
	require.WithinDuration(t, l.Until, res.Until, timeTolerance)
	after := e.get("k")
	requireSameRecord(t, before, after)
	require.Empty(t, after.ReopenedBy)

	// The owner dies: without a replay ID the spent budget exhausts the
	// record, with one the claim gets a fresh budget.
	e.expireLeases()
	res = e.acquire(reopen(req, "r1"), 2)
	require.Equal(t, idempotency.ResultUnknown, res.Previous)
	rec := e.get("k")
	require.Equal(t, "r1", rec.ReopenedBy)
	require.Equal(t, 1, rec.BudgetBase)
}

// A claim with a replay ID that finds no record (it was never kept, or its
// retention passed) creates one and remembers the ID: the replayed
// message gets one budget for the run.
func testReopenCreatesRecord(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 1
	e.release(e.acquire(reopen(req, "r1"), 1).Lease, idempotency.Failure{Error: "boom"})
	rec := e.get("k")
	require.Equal(t, "r1", rec.ReopenedBy)
	require.Zero(t, rec.BudgetBase)
	require.Equal(t, idempotency.Exhausted, e.claim(reopen(req, "r1")).Status)
	e.acquire(reopen(req, "r2"), 2)
}

// A reopened record's fresh budget counts charged attempts only: the
// canceled attempts before the reopen neither shrink nor grow it (the base
// is Attempts - Canceled at the reopen), and one canceled after it is free
// as well.
func testReopenBudgetDiscountsCanceledAttempts(t *testing.T, e *env) {
	req := e.req("k")
	req.MaxAttempts = 2
	canceled := idempotency.Failure{Error: "context canceled", Canceled: true}
	attempt := 0
	next := func(req idempotency.ClaimRequest) idempotency.Lease {
		t.Helper()
		attempt++
		return e.acquire(req, attempt).Lease
	}
	// Two canceled attempts (free), then two failed ones spend the budget.
	e.release(next(req), canceled)
	e.release(next(req), canceled)
	e.release(next(req), testFailure)
	e.release(next(req), testFailure)
	ex := e.claim(req)
	require.Equal(t, idempotency.Exhausted, ex.Status)
	require.Equal(t, 4, ex.Attempts)

	// The replay run gets exactly MaxAttempts charged attempts again.
	run := reopen(req, "r1")
	e.release(next(run), testFailure)
	rec := e.get("k")
	require.Equal(t, 2, rec.BudgetBase, "four attempts, two of them canceled")
	require.Equal(t, 2, rec.Canceled)
	e.release(next(run), canceled)
	e.release(next(run), testFailure)
	ex = e.claim(run)
	require.Equal(t, idempotency.Exhausted, ex.Status, "the reopened budget of 2 is spent")
	require.Equal(t, 7, ex.Attempts)
	rec = e.get("k")
	require.Equal(t, 2, rec.BudgetBase, "the same run does not reopen twice")
	require.Equal(t, 3, rec.Canceled)
}

// A malformed replay ID is an invalid request and stores nothing.
func testReopenInvalidID(t *testing.T, e *env) {
	for i, id := range []string{"a\nb", "a\x00b", "a\xffb", strings.Repeat("r", defaults.MaxKeyLen+1)} {
		key := fmt.Sprintf("bad-reopen-%d", i)
		_, err := e.h.Store.Claim(e.ctx, reopen(e.req(key), id))
		require.ErrorIs(t, err, idempotency.ErrInvalidRequest, "reopen ID %q", id)
		e.requireNotFound(key)
	}
}
