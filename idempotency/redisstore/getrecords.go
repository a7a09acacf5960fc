package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
)

var _ idempotency.RecordsReader = (*Store)(nil)

// GetRecords reads the records of keys in namespace in one round trip (a
// pipeline of the Get script; one per shard on a cluster): a key without
// a live record is absent. Each record has its Namespace, Key, State,
// ReopenedBy and ExpiresAt, what a replay needs to settle its entries
// (idempotency.RecordsReader); use Get for a whole record. When the pipeline
// fails as a whole (the script cache was flushed), it reads key by key.
func (s *Store) GetRecords(ctx context.Context, namespace string, keys []string) (map[string]idempotency.Record, error) {
	out := make(map[string]idempotency.Record, len(keys))
	if idem.ValidateNamespace(namespace) != nil || len(keys) == 0 {
		return out, nil //nolint:nilerr // an invalid namespace holds no record: none found, as Get finds none
	}
	cmds := make([]*redis.Cmd, len(keys))
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.EvalSha(ctx, scriptGet.sha, []string{s.redisKey(namespace, k)})
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.getEach(ctx, namespace, keys)
	}
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: get records: %w", err)
		}
		r, err := replyOf(v)
		if err != nil {
			return nil, fmt.Errorf("redisstore: get records: %w", err)
		}
		if len(r.vals) == 0 {
			continue
		}
		out[keys[i]] = idempotency.Record{Namespace: namespace, Key: keys[i], State: idempotency.State(r.str(0)),
			ReopenedBy: r.str(9), ExpiresAt: fromMs(r.int(8))}
	}
	return out, nil
}

// getEach is GetRecords with one Get per key.
func (s *Store) getEach(ctx context.Context, namespace string, keys []string) (map[string]idempotency.Record, error) {
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
