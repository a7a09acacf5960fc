// Package mapstore is an idempotency.Store written outside surely's
// module: records in a map under one mutex, on a clock the caller gives.
// It imports only surely's public package idempotency, implements the
// state machine of idempotency's package doc itself, and offers two
// optional capabilities by implementing their interfaces:
// idempotency.Lister (what "surely ops ls" shows) and
// idempotency.RecordsReader (the batch read a replay settles its entries
// with), besides idempotency.RetentionReporter. Its test runs surely's
// conformance suite, idempotency/idempotencytest, with the tests of those
// interfaces.
//
// The records live in the process's memory: a restart forgets them. It is
// an example of the store contract, not a store to run.
package mapstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/surely-dev/surely/idempotency"
)

// The bounds of idempotency's package doc: the attempt history keeps its
// newest 20 entries, an error text 2048 bytes and a stack 4096; a page
// of a listing holds 50 records unless ListFilter.Limit says otherwise.
const (
	maxHistory   = 20
	maxErrorLen  = 2048
	maxStackLen  = 4096
	defaultLimit = 50
)

// Store is the map store. Its methods are safe for concurrent use.
type Store struct {
	mu        sync.Mutex
	now       func() time.Time
	retention time.Duration
	records   map[id]*idempotency.Record
	seq       uint64
}

type id struct{ ns, key string }

var (
	_ idempotency.Store             = (*Store)(nil)
	_ idempotency.Lister            = (*Store)(nil)
	_ idempotency.RecordsReader     = (*Store)(nil)
	_ idempotency.RetentionReporter = (*Store)(nil)
)

// New returns an empty store on clock now (time.Now when nil) that keeps a
// finished record for retention.
func New(now func() time.Time, retention time.Duration) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, retention: retention, records: map[id]*idempotency.Record{}}
}

// Retention implements idempotency.RetentionReporter.
func (s *Store) Retention() time.Duration { return s.retention }

// live returns the record of k, forgetting it when its retention passed.
func (s *Store) live(k id, now time.Time) *idempotency.Record {
	r := s.records[k]
	if r != nil && !now.Before(r.ExpiresAt) {
		delete(s.records, k)
		return nil
	}
	return r
}

// Claim implements idempotency.Store: the checks in the order of the
// package doc (fingerprint, DONE, EXHAUSTED, a live lease, a retry-after
// delay), then a replay's reopen and the budget.
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	if err := req.Validate(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now, k := s.now(), id{req.Namespace, req.Key}
	cur := s.live(k, now)
	if cur == nil {
		r := &idempotency.Record{Namespace: req.Namespace, Key: req.Key, Fingerprint: req.Fingerprint, ReopenedBy: req.Reopen}
		return s.acquire(k, r, req, now, "", ""), nil
	}
	// A replay run gives a FAILED or EXHAUSTED record a fresh budget,
	// once per run (an expired lease makes the record FAILED below).
	reopens := func(r *idempotency.Record) bool {
		return req.Reopen != "" && req.Reopen != r.ReopenedBy &&
			(r.State == idempotency.StateFailed || r.State == idempotency.StateExhausted)
	}
	switch {
	case cur.Fingerprint != req.Fingerprint:
		return idempotency.ClaimResult{Status: idempotency.Conflict, StoredFingerprint: cur.Fingerprint}, nil
	case cur.State == idempotency.StateDone:
		return idempotency.ClaimResult{Status: idempotency.Completed, Outcome: cloneOutcome(cur.Outcome)}, nil
	case cur.State == idempotency.StateExhausted && !reopens(cur):
		return exhausted(cur), nil
	case cur.State == idempotency.StateInProgress && now.Before(cur.LeaseUntil):
		return waiting(cur.LeaseUntil, now), nil
	case cur.State == idempotency.StateFailed && now.Before(cur.NotBefore):
		return waiting(cur.NotBefore, now), nil
	}
	r := clone(cur)
	var prev idempotency.AttemptResult
	var prevErr string
	if r.State == idempotency.StateInProgress {
		// The owner's lease expired without Complete or Release.
		if h := last(r); h != nil && h.Result == idempotency.ResultInProgress {
			h.Result, h.Ended = idempotency.ResultUnknown, r.LeaseUntil
		}
		r.State, prev = idempotency.StateFailed, idempotency.ResultUnknown
	} else if h := last(r); h != nil {
		switch h.Result {
		case idempotency.ResultCanceled, idempotency.ResultUnknown:
			prev = h.Result
		default:
			prev, prevErr = idempotency.ResultFailed, h.Error
		}
	}
	if reopens(r) {
		r.ReopenedBy, r.BudgetBase = req.Reopen, r.Attempts-r.Canceled
	}
	if r.Attempts-r.Canceled-r.BudgetBase >= req.MaxAttempts {
		r.State, r.LeaseUntil, r.NotBefore = idempotency.StateExhausted, time.Time{}, time.Time{}
		r.ExpiresAt = now.Add(s.retention)
		s.records[k] = r
		return exhausted(r), nil
	}
	return s.acquire(k, r, req, now, prev, prevErr), nil
}

// acquire charges a new attempt to r under a new token and stores it.
func (s *Store) acquire(k id, r *idempotency.Record, req idempotency.ClaimRequest, now time.Time, prev idempotency.AttemptResult, prevErr string) idempotency.ClaimResult {
	s.seq++
	r.Attempts++
	r.State, r.Token, r.Outcome, r.NotBefore = idempotency.StateInProgress, "map."+strconv.FormatUint(s.seq, 10), nil, time.Time{}
	r.LeaseUntil = now.Add(req.Lease)
	r.ExpiresAt = r.LeaseUntil.Add(s.retention) // an abandoned claim is forgotten a retention after its lease
	r.History = append(r.History, idempotency.AttemptRecord{
		Attempt: r.Attempts, Started: now, Result: idempotency.ResultInProgress,
		TraceID: req.TraceID, SpanID: req.SpanID, Owner: req.Owner,
	})
	if n := len(r.History); n > maxHistory {
		r.History = slices.Clone(r.History[n-maxHistory:])
	}
	s.records[k] = r
	return idempotency.ClaimResult{
		Status:   idempotency.Acquired,
		Lease:    idempotency.Lease{Namespace: r.Namespace, Key: r.Key, Token: r.Token, Attempt: r.Attempts, Until: r.LeaseUntil},
		Previous: prev, PreviousError: prevErr,
	}
}

// change applies f to a copy of the record whose current, open lease is
// lease and stores it. Without such a record it returns ErrLeaseLost, or
// nil when done(cur) says that the call was applied already.
func (s *Store) change(ctx context.Context, lease idempotency.Lease, done func(cur *idempotency.Record) bool, f func(r *idempotency.Record, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now, k := s.now(), id{lease.Namespace, lease.Key}
	cur := s.live(k, now)
	if cur == nil || lease.Token == "" || cur.Token != lease.Token || cur.State != idempotency.StateInProgress {
		if cur != nil && lease.Token != "" && cur.Token == lease.Token && done != nil && done(cur) {
			return nil
		}
		return idempotency.ErrLeaseLost
	}
	r := clone(cur)
	f(r, now)
	s.records[k] = r
	return nil
}

// Complete implements idempotency.Store. A Complete re-sent with the lease
// that completed the record succeeds and changes nothing.
func (s *Store) Complete(ctx context.Context, lease idempotency.Lease, outcome idempotency.Outcome) error {
	completed := func(cur *idempotency.Record) bool { return cur.State == idempotency.StateDone }
	return s.change(ctx, lease, completed, func(r *idempotency.Record, now time.Time) {
		r.State, r.LeaseUntil, r.ExpiresAt = idempotency.StateDone, time.Time{}, now.Add(s.retention)
		r.Outcome = cloneOutcome(&outcome)
		if h := last(r); h != nil {
			h.Result, h.Ended = idempotency.ResultDone, now
		}
	})
}

// Release implements idempotency.Store: a canceled attempt is refunded, a
// final one exhausts the record, a RetryAfter delays the next claim.
func (s *Store) Release(ctx context.Context, lease idempotency.Lease, f idempotency.Failure) error {
	return s.change(ctx, lease, nil, func(r *idempotency.Record, now time.Time) {
		r.State, r.LeaseUntil, r.NotBefore = idempotency.StateFailed, time.Time{}, time.Time{}
		r.ExpiresAt = now.Add(s.retention)
		result := idempotency.ResultFailed
		switch {
		case f.Canceled:
			r.Canceled++
			result = idempotency.ResultCanceled
		case f.Final:
			r.State = idempotency.StateExhausted
		case f.RetryAfter > 0:
			r.NotBefore = now.Add(f.RetryAfter)
			r.ExpiresAt = r.NotBefore.Add(s.retention)
		}
		if h := last(r); h != nil {
			h.Result, h.Ended, h.Type, h.Reason = result, now, f.ErrorType, f.Reason
			h.Error, h.Stack = truncate(f.Error, maxErrorLen), truncate(f.Stack, maxStackLen)
		}
	})
}

// Extend implements idempotency.Store.
func (s *Store) Extend(ctx context.Context, lease idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	if d <= 0 {
		return lease, fmt.Errorf("%w: extension must be positive, got %v", idempotency.ErrInvalidRequest, d)
	}
	err := s.change(ctx, lease, nil, func(r *idempotency.Record, now time.Time) {
		r.LeaseUntil = now.Add(d)
		r.ExpiresAt = r.LeaseUntil.Add(s.retention)
		lease.Until = r.LeaseUntil
	})
	return lease, err
}

// Get implements idempotency.Store.
func (s *Store) Get(ctx context.Context, namespace, key string) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.live(id{namespace, key}, s.now())
	if r == nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	return *clone(r), nil
}

// GetRecords implements idempotency.RecordsReader, under one lock.
func (s *Store) GetRecords(ctx context.Context, namespace string, keys []string) (map[string]idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make(map[string]idempotency.Record, len(keys))
	for _, k := range keys {
		if r := s.live(id{namespace, k}, now); r != nil {
			out[k] = *clone(r)
		}
	}
	return out, nil
}

// List implements idempotency.Lister: the records f selects in (namespace,
// key) order, under one lock; the cursor is the last one's namespace and
// key, which a namespace never contains a "/" to confuse.
func (s *Store) List(ctx context.Context, f idempotency.ListFilter) (idempotency.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ListPage{}, err
	}
	if err := f.Validate(); err != nil {
		return idempotency.ListPage{}, err
	}
	limit := cmp.Or(f.Limit, defaultLimit)
	afterNS, afterKey, _ := strings.Cut(f.After, "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var ids []id
	for k := range s.records {
		if f.After == "" || cmp.Or(cmp.Compare(k.ns, afterNS), cmp.Compare(k.key, afterKey)) > 0 {
			ids = append(ids, k)
		}
	}
	slices.SortFunc(ids, func(a, b id) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.key, b.key)) })
	page := idempotency.ListPage{Now: now}
	for _, k := range ids {
		r := s.live(k, now)
		if r == nil || !matches(f, r, now) {
			continue
		}
		listed := idempotency.ListedRecord{Record: *clone(r), Updated: updated(r)}
		listed.Outcome = nil
		page.Records = append(page.Records, listed)
		if len(page.Records) == limit {
			page.Next = k.ns + "/" + k.key
			break
		}
	}
	return page, nil
}

// matches reports whether f selects r at now.
func matches(f idempotency.ListFilter, r *idempotency.Record, now time.Time) bool {
	switch {
	case f.Namespace != "" && r.Namespace != f.Namespace,
		f.Key != "" && r.Key != f.Key,
		f.State != "" && r.State != f.State:
		return false
	}
	return f.OlderThan <= 0 || !updated(r).After(now.Add(-f.OlderThan))
}

// updated is when r last changed: the end of its newest attempt, or its
// start while it runs.
func updated(r *idempotency.Record) time.Time {
	h := last(r)
	if h == nil {
		return time.Time{}
	}
	return cmp.Or(h.Ended, h.Started)
}

// last is r's newest attempt, nil when it has none.
func last(r *idempotency.Record) *idempotency.AttemptRecord {
	if len(r.History) == 0 {
		return nil
	}
	return &r.History[len(r.History)-1]
}

func waiting(until, now time.Time) idempotency.ClaimResult {
	return idempotency.ClaimResult{Status: idempotency.InProgress, Until: until, Wait: until.Sub(now)}
}

func exhausted(r *idempotency.Record) idempotency.ClaimResult {
	return idempotency.ClaimResult{Status: idempotency.Exhausted, Attempts: r.Attempts, History: slices.Clone(r.History)}
}

// clone copies r with its history and outcome, so that nothing a caller
// holds shares memory with the store.
func clone(r *idempotency.Record) *idempotency.Record {
	c := *r
	c.History = slices.Clone(r.History)
	c.Outcome = cloneOutcome(r.Outcome)
	return &c
}

func cloneOutcome(o *idempotency.Outcome) *idempotency.Outcome {
	if o == nil {
		return nil
	}
	c := idempotency.Outcome{Messages: slices.Clone(o.Messages)}
	for i, m := range c.Messages {
		c.Messages[i].Payload = slices.Clone(m.Payload)
		if m.Metadata != nil {
			c.Messages[i].Metadata = make(map[string]string, len(m.Metadata))
			for k, v := range m.Metadata {
				c.Messages[i].Metadata[k] = v
			}
		}
	}
	return &c
}

// truncate shortens s to at most n bytes without splitting a UTF-8
// sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
