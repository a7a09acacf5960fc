// Package oplist is the read-only listing of an idempotency store's
// records: what "surely ops ls" shows, and how "surely inspect" finds the
// namespaces of a key. It is internal on purpose: the listing is an
// operator's tool, not a promise of the library, so it adds no exported
// identifier to the store packages.
//
// Each store package implements the listing in its own file (list.go) as
// an unexported method and registers it here from an init function, as
// database/sql drivers register themselves; For finds the lister of a
// store value. Registration happens only at program start and is read
// only after that.
//
// A listing never blocks its store: the Redis store walks the keyspace
// with SCAN and a bounded COUNT (never KEYS), the SQL store reads with
// plain SELECTs (no FOR UPDATE, no transaction) of at most Filter.Limit
// rows in primary-key order, resumed by keyset (the Next cursor), and the
// memory store holds its lock for one page.
package oplist

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
)

// DefaultLimit is the page size when Filter.Limit is 0; MaxLimit bounds it.
const (
	DefaultLimit = 50
	MaxLimit     = 10000
)

// ErrInvalidFilter wraps every validation error of a Filter.
var ErrInvalidFilter = errors.New("oplist: invalid filter")

// ErrUnsupported is returned by For for a store that cannot be listed.
var ErrUnsupported = errors.New("oplist: this store cannot be listed")

// Filter selects records. The zero value selects every live record (one
// whose retention has not passed).
type Filter struct {
	// Namespace, when set, selects that namespace only.
	Namespace string
	// Key, when set, selects the records of that exact operation key, in
	// every namespace unless Namespace is set.
	Key string
	// State, when set, selects records in that state.
	State idempotency.State
	// OlderThan, when positive, selects records whose last change is at
	// least that long ago by the store's clock (see Entry.Updated).
	OlderThan time.Duration
	// After is the Next cursor of the previous page; empty for the first.
	After string
	// Limit bounds the entries of a page (0: DefaultLimit). A Redis page
	// ends where a SCAN call ended, so it may hold a few more.
	Limit int
}

// Validate checks the filter.
func (f Filter) Validate() error {
	if f.Namespace != "" {
		if err := idem.ValidateNamespace(f.Namespace); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidFilter, err)
		}
	}
	switch f.State {
	case "", idempotency.StateInProgress, idempotency.StateFailed, idempotency.StateExhausted, idempotency.StateDone:
	default:
		return fmt.Errorf("%w: state %q: want in_progress, failed, exhausted or done", ErrInvalidFilter, f.State)
	}
	if f.OlderThan < 0 {
		return fmt.Errorf("%w: negative age %v", ErrInvalidFilter, f.OlderThan)
	}
	if f.Limit < 0 || f.Limit > MaxLimit {
		return fmt.Errorf("%w: limit %d: want 1..%d", ErrInvalidFilter, f.Limit, MaxLimit)
	}
	return nil
}

// PageSize is Limit, or DefaultLimit when Limit is 0.
func (f Filter) PageSize() int {
	if f.Limit == 0 {
		return DefaultLimit
	}
	return f.Limit
}

// Match reports whether a record whose last change was at updated matches
// the filter at now (store clock). Stores that filter in Go use it.
func (f Filter) Match(r idempotency.Record, updated, now time.Time) bool {
	switch {
	case f.Namespace != "" && r.Namespace != f.Namespace,
		f.Key != "" && r.Key != f.Key,
		f.State != "" && r.State != f.State:
		return false
	}
	return f.OlderThan <= 0 || !updated.After(now.Add(-f.OlderThan))
}

// Entry is one listed record. Its Outcome is left out (a listing shows
// no payloads); Get reads it.
type Entry struct {
	idempotency.Record
	// Updated is when the record last changed, by the store's clock: the
	// SQL store's updated_at column; for the Redis and memory stores, which
	// keep no such time, the end of the newest attempt (its start while it
	// runs).
	Updated time.Time
}

// LastChange is the Updated time of a record that keeps no such time: the
// end of its newest attempt, or the start while it runs.
func LastChange(h []idempotency.AttemptRecord) time.Time {
	if len(h) == 0 {
		return time.Time{}
	}
	last := h[len(h)-1]
	if !last.Ended.IsZero() {
		return last.Ended
	}
	return last.Started
}

// Page is one page of a listing.
type Page struct {
	Entries []Entry
	// Next is the cursor of the next page (Filter.After); empty when the
	// listing is complete.
	Next string
	// Now is the store's clock when the page was read.
	Now time.Time
}

// Lister lists a store's records.
type Lister interface {
	List(ctx context.Context, f Filter) (Page, error)
}

var (
	mu      sync.RWMutex
	finders []func(store any) (Lister, bool)
)

// Register makes list the listing of the stores of type S (a store
// package's *Store). Store packages call it from init, with a method
// expression: oplist.Register((*Store).listRecords).
func Register[S idempotency.Store](list func(S, context.Context, Filter) (Page, error)) {
	mu.Lock()
	defer mu.Unlock()
	finders = append(finders, func(store any) (Lister, bool) {
		s, ok := store.(S)
		if !ok {
			return nil, false
		}
		return listerFunc(func(ctx context.Context, f Filter) (Page, error) { return list(s, ctx, f) }), true
	})
}

// listerFunc is a Lister of one store.
type listerFunc func(context.Context, Filter) (Page, error)

func (l listerFunc) List(ctx context.Context, f Filter) (Page, error) { return l(ctx, f) }

// For returns the Lister of store, or ErrUnsupported.
func For(store idempotency.Store) (Lister, error) {
	mu.RLock()
	defer mu.RUnlock()
	for _, find := range finders {
		if l, ok := find(store); ok {
			return l, nil
		}
	}
	return nil, fmt.Errorf("%w (%T)", ErrUnsupported, store)
}
