package memstore

import (
	"context"
	"errors"

	"github.com/surely-dev/surely/idempotency"
)

// GetRecords returns the records of keys in namespace, by key; a key
// without a live record is absent. It is the batch read of
// replay.RecordsReader (a replay confirms many operations done at once).
func (s *Store) GetRecords(ctx context.Context, namespace string, keys []string) (map[string]idempotency.Record, error) {
	out := make(map[string]idempotency.Record, len(keys))
	for _, k := range keys {
		rec, err := s.Get(ctx, namespace, k)
		switch {
		case errors.Is(err, idempotency.ErrNotFound):
		case err != nil:
			return nil, err
		default:
			out[k] = rec
		}
	}
	return out, nil
}
