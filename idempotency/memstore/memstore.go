// Package memstore is an in-memory idempotency.Store for tests and examples
// only.
//
// It keeps records in the process's memory: a crash or a restart forgets
// every record, so it offers none of the durability that surely exists for.
// Use idempotency/redisstore or idempotency/sqlstore in production.
package memstore

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/options"
	"github.com/surely-dev/surely/internal/record"
)

// store is the in-memory idempotency.Store that New returns.
type store struct {
	mu        sync.Mutex
	now       func() time.Time
	retention time.Duration
	records   map[recordKey]*idempotency.Record
	seq       uint64
}

type recordKey struct{ ns, key string }

// New returns an empty in-memory store. It also reports its retention
// (idempotency.RetentionReporter), lists its records
// (idempotency.Lister) and reads many at once (idempotency.RecordsReader). It takes idempotency.WithRetention (default
// 24h) and idempotency.WithClock (default time.Now); any other
// option is an error wrapping idempotency.ErrInvalidOption.
func New(opts ...idempotency.Option) (idempotency.Store, error) {
	set, err := options.Apply(idempotency.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(idempotency.ErrInvalidOption, "memstore.New", options.Retention, options.Clock); err != nil {
		return nil, err
	}
	return &store{
		now:       options.Get(set, options.Clock, time.Now),
		retention: options.Get(set, options.Retention, defaults.Retention),
		records:   map[recordKey]*idempotency.Record{},
	}, nil
}

var (
	_ idempotency.RetentionReporter = (*store)(nil)
	_ idempotency.Lister            = (*store)(nil)
	_ idempotency.RecordsReader     = (*store)(nil)
)

// get returns the live record, forgetting it when its retention has passed.
func (s *store) get(k recordKey, now time.Time) *idempotency.Record {
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
func (s *store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
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
	s.seq++
	res, next := record.Claim(s.get(k, now), req, "mem."+strconv.FormatUint(s.seq, 36), now, s.retention)
	if next != nil {
		s.records[k] = next
	}
	if res.Outcome != nil {
		res.Outcome = cloneOutcome(res.Outcome)
	}
	return res, nil
}

// write stores the record that decide returns for the record of lease, as
// it is now; decide's nil record with a nil error changes nothing.
func (s *store) write(ctx context.Context, lease idempotency.Lease, decide func(cur *idempotency.Record, now time.Time) (*idempotency.Record, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	k := recordKey{lease.Namespace, lease.Key}
	next, err := decide(s.get(k, now), now)
	if next != nil {
		s.records[k] = next
	}
	return err
}

// Complete implements idempotency.Store.
//
// A Complete after the lease expired still succeeds while nobody else has
// claimed the key (the token is still current): the effect did commit. A
// Complete re-sent with the lease that completed the record succeeds and
// changes nothing.
func (s *store) Complete(ctx context.Context, lease idempotency.Lease, outcome idempotency.Outcome) error {
	return s.write(ctx, lease, func(cur *idempotency.Record, now time.Time) (*idempotency.Record, error) {
		return record.Complete(cur, lease, *cloneOutcome(&outcome), now, s.retention)
	})
}

// Release implements idempotency.Store.
func (s *store) Release(ctx context.Context, lease idempotency.Lease, f idempotency.Failure) error {
	return s.write(ctx, lease, func(cur *idempotency.Record, now time.Time) (*idempotency.Record, error) {
		return record.Release(cur, lease, f, now, s.retention)
	})
}

// Extend implements idempotency.Store.
func (s *store) Extend(ctx context.Context, lease idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	if err := ctx.Err(); err != nil {
		return lease, err
	}
	if err := record.CheckExtension(d); err != nil {
		return lease, err
	}
	err := s.write(ctx, lease, func(cur *idempotency.Record, now time.Time) (*idempotency.Record, error) {
		next, err := record.Extend(cur, lease, d, now, s.retention)
		if next != nil {
			lease.Until = next.LeaseUntil
		}
		return next, err
	})
	return lease, err
}

// Get implements idempotency.Store.
func (s *store) Get(ctx context.Context, namespace, key string) (idempotency.Record, error) {
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
func (s *store) Retention() time.Duration { return s.retention }
