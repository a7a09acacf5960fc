// Package record is the state machine of package idempotency as pure
// functions over one operation's record: given the stored record (or
// none), a request and the store's "now", each decides the answer and the
// record to store. memstore and sqlstore run them; the conformance suite
// (idempotencytest) holds every store to them, redisstore's Lua scripts
// included.
package record

import (
	"fmt"
	"slices"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/idem"
)

// Claim decides a claim of req at now (the store's clock). cur is the
// stored record, nil when there is none (never written, or past its
// retention: a store forgets such a record). token is the lease token an
// acquiring claim takes; retention is the store's.
//
// It returns the answer and the record to store, nil when the claim
// changes nothing (Conflict, Completed, InProgress, and Exhausted of an
// EXHAUSTED record that is not reopened). cur is never changed; the
// answer's Outcome is cur's, shared.
//
// The checks run in the order of the package doc of idempotency: a
// different fingerprint is a Conflict whatever the state; then DONE, a
// live lease, a pending retry-after delay; then a replay's reopen, and
// the budget.
func Claim(cur *idempotency.Record, req idempotency.ClaimRequest, token string, now time.Time, retention time.Duration) (idempotency.ClaimResult, *idempotency.Record) {
	if cur == nil {
		// A replayed message that creates the record spends its run's
		// reopen on it.
		r := &idempotency.Record{Namespace: req.Namespace, Key: req.Key, Fingerprint: req.Fingerprint, ReopenedBy: req.Reopen}
		return acquire(r, req, token, now, retention, "", "")
	}
	if res, done := refused(cur, req, now); done {
		return res, nil
	}
	r := clone(cur)
	var prev idempotency.AttemptResult
	var prevErr string
	switch r.State {
	case idempotency.StateInProgress:
		// The owner's lease expired without Complete or Release: it died
		// or hung, so its effect may or may not have happened.
		if n := len(r.History); n > 0 && r.History[n-1].Result == idempotency.ResultInProgress {
			r.History[n-1].Result = idempotency.ResultUnknown
			r.History[n-1].Ended = r.LeaseUntil
		}
		r.State = idempotency.StateFailed
		prev = idempotency.ResultUnknown
	case idempotency.StateFailed, idempotency.StateExhausted:
		prev, prevErr = Previous(r.History)
	}
	if reopens(req, r) {
		// A replay run gives the record a fresh budget, once per run.
		r.ReopenedBy = req.Reopen
		r.BudgetBase = r.Attempts - r.Canceled
	}
	if r.Attempts-r.Canceled-r.BudgetBase >= req.MaxAttempts {
		r.State = idempotency.StateExhausted
		r.LeaseUntil, r.NotBefore = time.Time{}, time.Time{}
		r.ExpiresAt = now.Add(retention)
		return exhausted(r), r
	}
	return acquire(r, req, token, now, retention, prev, prevErr)
}

// refused answers the claims that change nothing: a conflict, a DONE
// record, an EXHAUSTED one that req does not reopen, a live lease, a
// pending retry-after delay.
func refused(cur *idempotency.Record, req idempotency.ClaimRequest, now time.Time) (idempotency.ClaimResult, bool) {
	if cur.Fingerprint != req.Fingerprint {
		return idempotency.ClaimResult{Status: idempotency.Conflict, StoredFingerprint: cur.Fingerprint}, true
	}
	switch cur.State {
	case idempotency.StateDone:
		return idempotency.ClaimResult{Status: idempotency.Completed, Outcome: cur.Outcome}, true
	case idempotency.StateExhausted:
		if !reopens(req, cur) {
			return exhausted(cur), true
		}
	case idempotency.StateInProgress:
		if now.Before(cur.LeaseUntil) {
			return waiting(cur.LeaseUntil, now), true
		}
	case idempotency.StateFailed:
		if now.Before(cur.NotBefore) {
			// The last attempt asked for a delay: not charged.
			return waiting(cur.NotBefore, now), true
		}
	}
	return idempotency.ClaimResult{}, false
}

// acquire charges a new attempt to r, under token.
func acquire(r *idempotency.Record, req idempotency.ClaimRequest, token string, now time.Time, retention time.Duration, prev idempotency.AttemptResult, prevErr string) (idempotency.ClaimResult, *idempotency.Record) {
	r.Attempts++
	r.State = idempotency.StateInProgress
	r.Token = token
	r.NotBefore = time.Time{}
	r.LeaseUntil = now.Add(req.Lease)
	// Never forgotten while leased; an owner that dies leaves a failure of
	// unknown outcome, forgotten a retention after its lease expires.
	r.ExpiresAt = r.LeaseUntil.Add(retention)
	r.Outcome = nil
	r.History = append(r.History, idempotency.AttemptRecord{
		Attempt: r.Attempts, Started: now, Result: idempotency.ResultInProgress,
		TraceID: req.TraceID, SpanID: req.SpanID, Owner: req.Owner,
	})
	if n := len(r.History); n > defaults.MaxHistory {
		r.History = slices.Clone(r.History[n-defaults.MaxHistory:])
	}
	return idempotency.ClaimResult{
		Status: idempotency.Acquired,
		Lease: idempotency.Lease{
			Namespace: req.Namespace, Key: req.Key, Token: token,
			Attempt: r.Attempts, Until: r.LeaseUntil,
		},
		Previous:      prev,
		PreviousError: prevErr,
	}, r
}

// reopens reports whether req reopens r: a replay ID that has not reopened
// it yet, on a FAILED or EXHAUSTED record.
func reopens(req idempotency.ClaimRequest, r *idempotency.Record) bool {
	return req.Reopen != "" && req.Reopen != r.ReopenedBy &&
		(r.State == idempotency.StateFailed || r.State == idempotency.StateExhausted)
}

// Previous tells how the last attempt of a FAILED or EXHAUSTED record's
// history h ended: "" when h is empty, ResultCanceled, ResultUnknown, or
// else ResultFailed with its error.
func Previous(h []idempotency.AttemptRecord) (idempotency.AttemptResult, string) {
	n := len(h)
	if n == 0 {
		return "", ""
	}
	switch last := h[n-1]; last.Result {
	case idempotency.ResultCanceled, idempotency.ResultUnknown:
		return last.Result, ""
	default:
		return idempotency.ResultFailed, last.Error
	}
}

// waiting is the InProgress answer of a claim at now refused until until
// (a live lease or a retry-after delay).
func waiting(until, now time.Time) idempotency.ClaimResult {
	return idempotency.ClaimResult{Status: idempotency.InProgress, Until: until, Wait: until.Sub(now)}
}

func exhausted(r *idempotency.Record) idempotency.ClaimResult {
	return idempotency.ClaimResult{Status: idempotency.Exhausted, Attempts: r.Attempts, History: slices.Clone(r.History)}
}

// clone copies r and its history (the outcome is shared: nothing here
// writes to one).
func clone(r *idempotency.Record) *idempotency.Record {
	c := *r
	c.History = slices.Clone(r.History)
	return &c
}

// owned reports whether lease is the current, open lease of cur.
func owned(cur *idempotency.Record, lease idempotency.Lease) bool {
	return cur != nil && cur.State == idempotency.StateInProgress && lease.Token != "" && cur.Token == lease.Token
}

// closeAttempt ends the open attempt of r (the last of its history) with
// result at now.
func closeAttempt(r *idempotency.Record, result idempotency.AttemptResult, now time.Time) *idempotency.AttemptRecord {
	n := len(r.History)
	if n == 0 {
		return &idempotency.AttemptRecord{}
	}
	h := &r.History[n-1]
	h.Result, h.Ended = result, now
	return h
}

// Complete decides a Complete of lease with outcome at now. It returns
// the record to store; nil and no error when it is a re-send of the
// Complete that was applied (the record is DONE under the lease's token:
// nothing changes); idempotency.ErrLeaseLost when lease is not cur's
// current, open lease.
//
// A Complete after the lease expired still succeeds while nobody else has
// claimed the key (the token is still current): the effect did commit.
func Complete(cur *idempotency.Record, lease idempotency.Lease, outcome idempotency.Outcome, now time.Time, retention time.Duration) (*idempotency.Record, error) {
	if !owned(cur, lease) {
		if cur != nil && cur.State == idempotency.StateDone && lease.Token != "" && cur.Token == lease.Token {
			return nil, nil
		}
		return nil, idempotency.ErrLeaseLost
	}
	r := clone(cur)
	r.State = idempotency.StateDone
	r.Outcome = &outcome
	r.LeaseUntil = time.Time{}
	r.ExpiresAt = now.Add(retention)
	closeAttempt(r, idempotency.ResultDone, now)
	return r, nil
}

// Release decides a Release of lease with f at now: the record to store,
// or idempotency.ErrLeaseLost. The error and stack texts are bounded
// (defaults.MaxErrorLen, defaults.MaxStackLen).
func Release(cur *idempotency.Record, lease idempotency.Lease, f idempotency.Failure, now time.Time, retention time.Duration) (*idempotency.Record, error) {
	if !owned(cur, lease) {
		return nil, idempotency.ErrLeaseLost
	}
	r := clone(cur)
	r.State = idempotency.StateFailed
	result := idempotency.ResultFailed
	switch {
	case f.Canceled:
		// Interrupted by shutdown: not charged to the budget, Final
		// and RetryAfter ignored.
		r.Canceled++
		result = idempotency.ResultCanceled
	case f.Final:
		r.State = idempotency.StateExhausted
	}
	r.LeaseUntil, r.NotBefore = time.Time{}, time.Time{}
	r.ExpiresAt = now.Add(retention)
	if r.State == idempotency.StateFailed && !f.Canceled && f.RetryAfter > 0 {
		r.NotBefore = now.Add(f.RetryAfter)
		r.ExpiresAt = r.NotBefore.Add(retention)
	}
	h := closeAttempt(r, result, now)
	h.Error = idem.Truncate(f.Error, defaults.MaxErrorLen)
	h.Type = f.ErrorType
	h.Reason = f.Reason
	h.Stack = idem.Truncate(f.Stack, defaults.MaxStackLen)
	return r, nil
}

// Extend decides an Extend of lease by d at now: the record to store, or
// idempotency.ErrLeaseLost. d must have been checked (CheckExtension).
func Extend(cur *idempotency.Record, lease idempotency.Lease, d time.Duration, now time.Time, retention time.Duration) (*idempotency.Record, error) {
	if !owned(cur, lease) {
		return nil, idempotency.ErrLeaseLost
	}
	r := clone(cur)
	r.LeaseUntil = now.Add(d)
	r.ExpiresAt = r.LeaseUntil.Add(retention)
	return r, nil
}

// CheckExtension is the error of every store's Extend by d when d is not
// positive.
func CheckExtension(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: extension must be positive, got %v", idempotency.ErrInvalidRequest, d)
	}
	return nil
}
