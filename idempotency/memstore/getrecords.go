package memstore

import (
	"context"

	"github.com/surely-dev/surely/idempotency"
)

// GetRecords returns the records of keys in namespace, by key, read under
// one lock; a key without a live record is absent
// (idempotency.RecordsReader: a replay confirms many operations done at
// once).
func (s *store) GetRecords(ctx context.Context, namespace string, keys []string) (map[string]idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]idempotency.Record, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, k := range keys {
		if r := s.get(recordKey{namespace, k}, now); r != nil {
			rec := *r
			rec.Outcome = cloneOutcome(r.Outcome)
			rec.History = append([]idempotency.AttemptRecord(nil), r.History...)
			out[k] = rec
		}
	}
	return out, nil
}
