package memstore

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/oplist"
)

// The store's read-only listing for the surely command (internal/oplist).
func init() { oplist.Register((*store).listRecords) }

// listRecords returns the live records f selects, in (namespace, key) order,
// without their outcome. The cursor is the last entry's namespace and key.
func (s *store) listRecords(ctx context.Context, f oplist.Filter) (oplist.Page, error) {
	if err := ctx.Err(); err != nil {
		return oplist.Page{}, err
	}
	if err := f.Validate(); err != nil {
		return oplist.Page{}, err
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
	page := oplist.Page{Now: now}
	for _, k := range keys {
		r := s.get(k, now)
		if r == nil {
			continue
		}
		updated := oplist.LastChange(r.History)
		if !f.Match(*r, updated, now) {
			continue
		}
		e := oplist.Entry{Record: *r, Updated: updated}
		e.Outcome = nil
		e.History = append([]idempotency.AttemptRecord(nil), r.History...)
		page.Entries = append(page.Entries, e)
		if len(page.Entries) == f.PageSize() {
			page.Next = k.ns + "/" + k.key
			break
		}
	}
	return page, nil
}
