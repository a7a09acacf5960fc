package memstore

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/oplist"
)

// List returns the live records f selects (idempotency.Lister), in
// (namespace, key) order, without their outcome, under one lock. The
// cursor is the last entry's namespace and key.
func (s *store) List(ctx context.Context, f idempotency.ListFilter) (idempotency.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ListPage{}, err
	}
	if err := f.Validate(); err != nil {
		return idempotency.ListPage{}, err
	}
	afterNS, afterKey, _ := strings.Cut(f.After, "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	keys := make([]recordKey, 0, len(s.records))
	for k := range s.records {
		if f.After != "" && cmp.Or(cmp.Compare(k.ns, afterNS), cmp.Compare(k.key, afterKey)) <= 0 {
			continue
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b recordKey) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.key, b.key)) })
	page := idempotency.ListPage{Now: now}
	for _, k := range keys {
		r := s.get(k, now)
		if r == nil {
			continue
		}
		updated := oplist.LastChange(r.History)
		if !oplist.Match(f, *r, updated, now) {
			continue
		}
		e := idempotency.ListedRecord{Record: *r, Updated: updated}
		e.Outcome = nil
		e.History = append([]idempotency.AttemptRecord(nil), r.History...)
		page.Records = append(page.Records, e)
		if len(page.Records) == oplist.PageSize(f) {
			page.Next = k.ns + "/" + k.key
			break
		}
	}
	return page, nil
}
