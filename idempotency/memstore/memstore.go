// Package memstore is an in-memory idempotency.Store for tests and examples
// only.
//
// It keeps records in the process's memory: a crash or a restart forgets
// every record, so it offers none of the durability that surely exists for.
// Use idempotency/redisstore or idempotency/sqlstore in production.
package memstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/options"
)

// DefaultRetention is how long records are kept unless
// idempotency.WithRetention is given.
const DefaultRetention = 24 * time.Hour

// Store is an in-memory idempotency.Store. The zero value is not usable; call New.
type Store struct {
	mu        sync.Mutex
	now       func() time.Time
	retention time.Duration
	records   map[recordKey]*idempotency.Record
	seq       uint64
}

type recordKey struct{ ns, key string }

// New returns an empty store. It takes idempotency.WithRetention (default
// DefaultRetention) and idempotency.WithClock (default time.Now); any other
// option is an error wrapping idempotency.ErrInvalidOption.
func New(opts ...idempotency.Option) (*Store, error) {
	set, err := options.Apply(idempotency.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(idempotency.ErrInvalidOption, "memstore.New", options.Retention, options.Clock); err != nil {
		return nil, err
	}
	return &Store{
		now:       options.Get(set, options.Clock, time.Now),
		retention: options.Get(set, options.Retention, DefaultRetention),
		records:   map[recordKey]*idempotency.Record{},
	}, nil
}

var _ idempotency.Store = (*Store)(nil)

// get returns the live record, forgetting it when its retention has passed.
func (s *Store) get(k recordKey, now time.Time) *idempotency.Record {
	r := s.records[k]
	if r == nil {
		return nil
	}
	if !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt) {
		delete(s.records, k)
		return nil
	}
	return r
}

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	if err := req.Validate(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	k := recordKey{req.Namespace, req.Key}
	r := s.get(k, now)
	prev := idempotency.Previous{}
	if r != nil {
		if r.Fingerprint != req.Fingerprint {
			return idempotency.ClaimResult{Status: idempotency.Conflict, StoredFingerprint: r.Fingerprint}, nil
		}
		switch r.State {
		case idempotency.StateDone:
			return idempotency.ClaimResult{Status: idempotency.Completed, Outcome: cloneOutcome(r.Outcome)}, nil
		case idempotency.StateExhausted:
			if !reopens(req, r) {
				return exhausted(r), nil
			}
			prev = previousOf(r.History)
		case idempotency.StateInProgress:
			if now.Before(r.LeaseUntil) {
				return idempotency.ClaimResult{Status: idempotency.InProgress, Until: r.LeaseUntil, Wait: r.LeaseUntil.Sub(now)}, nil
			}
			// The owner's lease expired without Complete or Release.
			if n := len(r.History); n > 0 && r.History[n-1].Result == idempotency.ResultInProgress {
				r.History[n-1].Result = idempotency.ResultUnknown
				r.History[n-1].Ended = r.LeaseUntil
			}
			r.State = idempotency.StateFailed
			prev = idempotency.Previous{Result: idempotency.PreviousUnknown}
		case idempotency.StateFailed:
			if now.Before(r.NotBefore) {
				// The last attempt asked for a delay: not charged.
				return idempotency.ClaimResult{Status: idempotency.InProgress, Until: r.NotBefore, Wait: r.NotBefore.Sub(now)}, nil
			}
			prev = previousOf(r.History)
		}
		if reopens(req, r) {
			// A replay run gives the record a fresh budget, once per run.
			r.ReopenedBy = req.Reopen
			r.BudgetBase = r.Attempts - r.Canceled
		}
		if r.Attempts-r.Canceled-r.BudgetBase >= req.MaxAttempts {
			r.State = idempotency.StateExhausted
			r.ExpiresAt = now.Add(s.retention)
			return exhausted(r), nil
		}
	} else {
		r = &idempotency.Record{Namespace: req.Namespace, Key: req.Key, Fingerprint: req.Fingerprint, ReopenedBy: req.Reopen}
		s.records[k] = r
	}
	s.seq++
	r.Attempts++
	r.State = idempotency.StateInProgress
	r.NotBefore = time.Time{}
	var tok [32]byte
	b := strconv.AppendUint(tok[:0], s.seq, 36)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	r.Token = string(b)
	r.LeaseUntil = now.Add(req.Lease)
	// An owner that dies leaves a failure of unknown outcome: forget it a
	// retention after its lease expires, like a FAILED record.
	r.ExpiresAt = r.LeaseUntil.Add(s.retention)
	r.History = appendHistory(r.History, idempotency.AttemptRecord{
		Attempt: r.Attempts, Started: now, Result: idempotency.ResultInProgress,
		TraceID: req.TraceID, SpanID: req.SpanID,
	})
	return idempotency.ClaimResult{
		Status:   idempotency.Acquired,
		Lease:    idempotency.Lease{Namespace: req.Namespace, Key: req.Key, Token: r.Token, Attempt: r.Attempts, Until: r.LeaseUntil},
		Previous: prev,
	}, nil
}

// reopens reports whether req reopens r: a replay ID that has not reopened
// it yet, on a FAILED or EXHAUSTED record.
func reopens(req idempotency.ClaimRequest, r *idempotency.Record) bool {
	return req.Reopen != "" && req.Reopen != r.ReopenedBy &&
		(r.State == idempotency.StateFailed || r.State == idempotency.StateExhausted)
}

// previousOf tells how the last attempt of a FAILED or EXHAUSTED record ended.
func previousOf(h []idempotency.AttemptRecord) idempotency.Previous {
	n := len(h)
	if n == 0 {
		return idempotency.Previous{}
	}
	switch last := h[n-1]; last.Result {
	case idempotency.ResultCanceled:
		return idempotency.Previous{Result: idempotency.PreviousCanceled}
	case idempotency.ResultUnknown:
		return idempotency.Previous{Result: idempotency.PreviousUnknown}
	default:
		return idempotency.Previous{Result: idempotency.PreviousFailed, Error: last.Error}
	}
}

func exhausted(r *idempotency.Record) idempotency.ClaimResult {
	return idempotency.ClaimResult{Status: idempotency.Exhausted, Attempts: r.Attempts, History: append([]idempotency.AttemptRecord(nil), r.History...)}
}

func appendHistory(h []idempotency.AttemptRecord, a idempotency.AttemptRecord) []idempotency.AttemptRecord {
	h = append(h, a)
	if len(h) > idempotency.MaxHistory {
		h = append(h[:0:0], h[len(h)-idempotency.MaxHistory:]...)
	}
	return h
}

// owned returns the record if lease is its current, live lease.
func (s *Store) owned(lease idempotency.Lease, now time.Time) (*idempotency.Record, error) {
	r := s.get(recordKey{lease.Namespace, lease.Key}, now)
	if r == nil || r.State != idempotency.StateInProgress || r.Token != lease.Token || lease.Token == "" {
		return nil, idempotency.ErrLeaseLost
	}
	return r, nil
}

// Complete implements idempotency.Store.
//
// A Complete after the lease expired still succeeds while nobody else has
// claimed the key (the token is still current): the effect did commit. A
// Complete re-sent with the lease that completed the record succeeds and
// changes nothing.
func (s *Store) Complete(ctx context.Context, lease idempotency.Lease, outcome idempotency.Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r, err := s.owned(lease, now)
	if err != nil {
		if d := s.get(recordKey{lease.Namespace, lease.Key}, now); d != nil &&
			d.State == idempotency.StateDone && d.Token == lease.Token && lease.Token != "" {
			return nil
		}
		return err
	}
	r.State = idempotency.StateDone
	r.Outcome = cloneOutcome(&outcome)
	r.LeaseUntil = time.Time{}
	r.ExpiresAt = now.Add(s.retention)
	if n := len(r.History); n > 0 {
		r.History[n-1].Result = idempotency.ResultDone
		r.History[n-1].Ended = now
	}
	return nil
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, lease idempotency.Lease, f idempotency.Failure) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r, err := s.owned(lease, now)
	if err != nil {
		return err
	}
	r.State = idempotency.StateFailed
	result := idempotency.ResultFailed
	if f.Canceled {
		r.Canceled++
		result = idempotency.ResultCanceled
	} else if f.Final {
		r.State = idempotency.StateExhausted
	}
	r.LeaseUntil = time.Time{}
	r.NotBefore = time.Time{}
	r.ExpiresAt = now.Add(s.retention)
	if r.State == idempotency.StateFailed && !f.Canceled && f.RetryAfter > 0 {
		r.NotBefore = now.Add(f.RetryAfter)
		r.ExpiresAt = r.NotBefore.Add(s.retention)
	}
	if n := len(r.History); n > 0 {
		h := &r.History[n-1]
		h.Result, h.Ended = result, now
		h.Error = idempotency.Truncate(f.Error, idempotency.MaxErrorLen)
		h.Type = f.ErrorType
		h.Reason = f.Reason
		h.Stack = idempotency.Truncate(f.Stack, idempotency.MaxStackLen)
	}
	return nil
}

// Extend implements idempotency.Store.
func (s *Store) Extend(ctx context.Context, lease idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	if err := ctx.Err(); err != nil {
		return lease, err
	}
	if d <= 0 {
		return lease, fmt.Errorf("%w: extension must be positive, got %v", idempotency.ErrInvalidRequest, d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r, err := s.owned(lease, now)
	if err != nil {
		return lease, err
	}
	r.LeaseUntil = now.Add(d)
	r.ExpiresAt = r.LeaseUntil.Add(s.retention)
	lease.Until = r.LeaseUntil
	return lease, nil
}

// Get implements idempotency.Store.
func (s *Store) Get(ctx context.Context, namespace, key string) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(recordKey{namespace, key}, s.now())
	if r == nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	out := *r
	out.Outcome = cloneOutcome(r.Outcome)
	out.History = append([]idempotency.AttemptRecord(nil), r.History...)
	return out, nil
}

// emptyOutcome is shared by every outcome without messages; nobody writes to it.
var emptyOutcome = &idempotency.Outcome{}

func cloneOutcome(o *idempotency.Outcome) *idempotency.Outcome {
	if o == nil {
		return nil
	}
	if len(o.Messages) == 0 {
		return emptyOutcome
	}
	c := &idempotency.Outcome{Messages: make([]idempotency.StoredMessage, len(o.Messages))}
	for i, m := range o.Messages {
		c.Messages[i] = idempotency.StoredMessage{UUID: m.UUID, Payload: append([]byte(nil), m.Payload...)}
		if m.Metadata != nil {
			c.Messages[i].Metadata = make(map[string]string, len(m.Metadata))
			for k, v := range m.Metadata {
				c.Messages[i].Metadata[k] = v
			}
		}
	}
	return c
}

// Retention is how long DONE, FAILED and EXHAUSTED records are kept
// (idempotency.RetentionReporter).
func (s *Store) Retention() time.Duration { return s.retention }
