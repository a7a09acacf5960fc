// Package oplist holds what the listings of surely's stores share (each
// store's List, idempotency.Lister): the page size of a filter, the
// filter's test of one record, and the last change of a record that keeps
// no such time. A store outside this module writes its own.
//
// A listing never blocks its store: the Redis store walks the keyspace
// with SCAN and a bounded COUNT (never KEYS), the SQL store reads with
// plain SELECTs (no FOR UPDATE, no transaction) of at most a page of rows
// in primary-key order, resumed by keyset (the Next cursor), and the
// memory store holds its lock for one page.
package oplist

import (
	"github.com/surely-dev/surely/internal/defaults"
	"time"

	"github.com/surely-dev/surely/idempotency"
)

// PageSize is f.Limit, or defaults.ListLimit when it is 0.
func PageSize(f idempotency.ListFilter) int {
	if f.Limit == 0 {
		return defaults.ListLimit
	}
	return f.Limit
}

// Match reports whether a record whose last change was at updated matches
// f at now (store clock). Stores that filter in Go use it.
func Match(f idempotency.ListFilter, r idempotency.Record, updated, now time.Time) bool {
	switch {
	case f.Namespace != "" && r.Namespace != f.Namespace,
		f.Key != "" && r.Key != f.Key,
		f.State != "" && r.State != f.State:
		return false
	}
	return f.OlderThan <= 0 || !updated.After(now.Add(-f.OlderThan))
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
