package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/sqldialect"
)

// getRecordsBatch bounds the keys of one GetRecords statement.
const getRecordsBatch = 500

var _ idempotency.RecordsReader = (*Store)(nil)

// GetRecords reads the records of keys in namespace in one statement per
// 500 keys, without a transaction: a key without a live record is absent.
// Each record has its Namespace, Key, State, ReopenedBy and ExpiresAt, what
// a replay needs to settle its entries (idempotency.RecordsReader); use Get for
// a whole record.
func (s *Store) GetRecords(ctx context.Context, namespace string, keys []string) (map[string]idempotency.Record, error) {
	out := make(map[string]idempotency.Record, len(keys))
	if idem.ValidateNamespace(namespace) != nil {
		return out, nil
	}
	keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return idem.ValidateKey(k) != nil })
	now := strings.TrimPrefix(s.q.now, "SELECT ")
	for chunk := range slices.Chunk(keys, getRecordsBatch) {
		q := "SELECT op_key, state, reopened_by, expires_at_ms, " + now + " FROM " + quoteTable(s.dialect, s.table) +
			" WHERE namespace = ? AND op_key IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ") + ")"
		if s.dialect == Postgres {
			q = sqldialect.Rebind(q)
		}
		args := make([]any, 0, len(chunk)+1)
		args = append(args, namespace)
		for _, k := range chunk {
			args = append(args, k)
		}
		if err := s.readStates(ctx, q, args, namespace, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readStates runs one GetRecords statement into out.
func (s *Store) readStates(ctx context.Context, q string, args []any, namespace string, out map[string]idempotency.Record) error {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("sqlstore: get records: %w", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var (
			key, state, reopenedBy string
			expiresAt, now         int64
		)
		if err := rows.Scan(&key, &state, &reopenedBy, &expiresAt, &now); err != nil {
			return fmt.Errorf("sqlstore: get records: %w", err)
		}
		if expiresAt <= now+s.skew.Load() {
			continue
		}
		out[key] = idempotency.Record{Namespace: namespace, Key: key, State: idempotency.State(state),
			ReopenedBy: reopenedBy, ExpiresAt: fromMs(expiresAt)}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlstore: get records: %w", err)
	}
	return nil
}
