package idempotency

import (
	"context"
	"fmt"
	"github.com/surely-dev/surely/internal/defaults"
	"time"

	"github.com/surely-dev/surely/internal/idem"
)

// Optional capabilities of a Store. A store that can do more than the
// Store contract implements one of these interfaces, as a database/sql
// driver implements driver.QueryerContext: the code that needs the
// capability checks for it with a type assertion, and idempotencytest.Run
// runs the tests of Lister and RecordsReader when the store under test
// has them. memstore, redisstore and sqlstore implement all three.

// RetentionReporter is implemented by stores that can tell how long they
// keep DONE, FAILED and EXHAUSTED records. The dead-letter step writes it
// into the envelope so a replay can refuse a message whose record may be
// gone.
type RetentionReporter interface {
	Retention() time.Duration
}

// Lister is a Store that lists its records, read only: what
// "surely ops ls" shows, and how "surely inspect" finds the namespaces of
// a key. List returns one page of the live records (those whose retention
// has not passed) that f selects, without their outcome (Get reads it).
// It must not block the store's writers: no lock a claim waits for, no
// command that stalls the server.
//
// The pages of one walk (each List called with the previous page's Next
// as f.After, until Next is empty) hold every record that f selects and
// that lived from the walk's start to its end; a record created or
// forgotten meanwhile may or may not be listed, and a store may list a
// record twice (Redis SCAN may). A page may hold fewer entries than
// f.Limit with more to come, and a store whose walk cannot stop at an
// exact count (Redis) a few more; the order of the records is the
// store's. An invalid filter, and a cursor the store cannot read, is an
// error wrapping [ErrInvalidRequest]. A store value that cannot list in its
// configuration (redisstore on a Redis Cluster) returns an error wrapping
// errors.ErrUnsupported.
type Lister interface {
	List(ctx context.Context, f ListFilter) (ListPage, error)
}

// ListFilter selects the records of a [Lister]'s List. The zero value
// selects every live record.
type ListFilter struct {
	// Namespace, when set, selects that namespace only.
	Namespace string
	// Key, when set, selects the records of that exact operation key, in
	// every namespace unless Namespace is set.
	Key string
	// State, when set, selects the records in that state.
	State State
	// OlderThan, when positive, selects the records whose last change is
	// at least that long ago by the store's clock (ListedRecord.Updated).
	OlderThan time.Duration
	// After is the Next cursor of the previous page; empty for the first.
	After string
	// Limit bounds the entries of a page: 1 to 10000, 0 for 50.
	Limit int
}

// Validate reports whether the filter is well formed: a valid namespace
// (when set), a known state, a non-negative age and a limit of 0 to
// 10000. Its errors wrap [ErrInvalidRequest].
func (f ListFilter) Validate() error {
	if f.Namespace != "" {
		if err := idem.ValidateNamespace(f.Namespace); err != nil {
			return err
		}
	}
	switch f.State {
	case "", StateInProgress, StateFailed, StateExhausted, StateDone:
	default:
		return fmt.Errorf("%w: list filter: state %q: want in_progress, failed, exhausted or done", ErrInvalidRequest, f.State)
	}
	if f.OlderThan < 0 {
		return fmt.Errorf("%w: list filter: negative age %v", ErrInvalidRequest, f.OlderThan)
	}
	if f.Limit < 0 || f.Limit > defaults.MaxListLimit {
		return fmt.Errorf("%w: list filter: limit %d: want 1..%d", ErrInvalidRequest, f.Limit, defaults.MaxListLimit)
	}
	return nil
}

// ListPage is one page of a [Lister]'s listing.
type ListPage struct {
	Records []ListedRecord
	// Next is the cursor of the next page (ListFilter.After); empty when
	// the listing is complete.
	Next string
	// Now is the store's clock when the page was read.
	Now time.Time
}

// ListedRecord is one record of a listing. Its Outcome is nil.
type ListedRecord struct {
	Record
	// Updated is when the record last changed, by the store's clock. A
	// store that keeps no such time gives the end of the newest attempt
	// of the history (its start while it runs).
	Updated time.Time
}

// RecordsReader is a Store that reads the records of many operation keys
// of one namespace at once (one round trip, one statement): a replay
// settles its entries with it (replay.Run's checks, replay.Reconcile),
// and calls Get once per key with a store that has none.
//
// GetRecords returns the records by key. A key without a live record
// (never written, or past its retention), an invalid key and every key
// of an invalid namespace are absent from the map. Each record has at
// least its Namespace, Key, State, ReopenedBy and ExpiresAt as Get gives
// them; the other fields may be left zero.
type RecordsReader interface {
	GetRecords(ctx context.Context, namespace string, keys []string) (map[string]Record, error)
}
