package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/oplist"
	"github.com/surely-dev/surely/internal/record"
	"github.com/surely-dev/surely/internal/sqldialect"
)

var _ idempotency.Lister = (*Store)(nil)

// listColumns are the columns a listing reads: a record without its
// outcome.
const listColumns = "namespace, op_key, state, fingerprint, token, attempts, canceled, lease_until_ms, expires_at_ms, updated_at_ms, history, reopened_by, budget_base, not_before_ms"

// List returns the live records f selects (idempotency.Lister), in primary-key order (namespace,
// op_key), without their outcome. It runs plain SELECTs outside any
// transaction, without FOR UPDATE, each reading at most f's page size of
// rows, so it takes no lock a claim would wait for (on SQLite in
// rollback-journal mode a write waits, within its busy timeout, for the one
// statement). The cursor is the last row's namespace and key (keyset
// pagination). A Key without a Namespace finds the table's namespaces
// first, one index lookup each (SELECT MIN(namespace) ... WHERE namespace >
// ?), then reads the key's row in each.
func (s *Store) List(ctx context.Context, f idempotency.ListFilter) (idempotency.ListPage, error) {
	if err := f.Validate(); err != nil {
		return idempotency.ListPage{}, err
	}
	now, err := s.now(ctx, nil)
	if err != nil {
		return idempotency.ListPage{}, fmt.Errorf("sqlstore: list %s: %w", s.table, err)
	}
	page := idempotency.ListPage{Now: fromMs(now)}
	if f.Key != "" && f.Namespace == "" {
		return s.listKeyInEveryNamespace(ctx, f, now, page)
	}
	page.Records, err = s.listQuery(ctx, f, now, oplist.PageSize(f))
	if err != nil {
		return idempotency.ListPage{}, fmt.Errorf("sqlstore: list %s: %w", s.table, err)
	}
	if n := len(page.Records); n == oplist.PageSize(f) {
		page.Next = page.Records[n-1].Namespace + "/" + page.Records[n-1].Key
	}
	return page, nil
}

// listKeyInEveryNamespace lists the rows of f.Key, one namespace at a time.
func (s *Store) listKeyInEveryNamespace(ctx context.Context, f idempotency.ListFilter, now int64, page idempotency.ListPage) (idempotency.ListPage, error) {
	t := quoteTable(s.dialect, s.table)
	next := s.listRebind("SELECT MIN(namespace) FROM " + t + " WHERE namespace > ?")
	ns, _, _ := strings.Cut(f.After, "/")
	for {
		var found sql.NullString
		if err := s.db.QueryRowContext(ctx, next, ns).Scan(&found); err != nil {
			return idempotency.ListPage{}, fmt.Errorf("sqlstore: list %s: %w", s.table, err)
		}
		if !found.Valid {
			return page, nil
		}
		ns = found.String
		one := f
		one.Namespace, one.After = ns, ""
		es, err := s.listQuery(ctx, one, now, 1)
		if err != nil {
			return idempotency.ListPage{}, fmt.Errorf("sqlstore: list %s: %w", s.table, err)
		}
		page.Records = append(page.Records, es...)
		if len(page.Records) == oplist.PageSize(f) {
			page.Next = ns + "/" + f.Key
			return page, nil
		}
	}
}

// listQuery reads up to limit rows f selects.
func (s *Store) listQuery(ctx context.Context, f idempotency.ListFilter, now int64, limit int) ([]idempotency.ListedRecord, error) {
	where := []string{"expires_at_ms > ?"}
	args := []any{now}
	if f.Namespace != "" {
		where, args = append(where, "namespace = ?"), append(args, f.Namespace)
	}
	if f.Key != "" {
		where, args = append(where, "op_key = ?"), append(args, f.Key)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, string(f.State))
	}
	if f.OlderThan > 0 {
		where, args = append(where, "updated_at_ms <= ?"), append(args, now-ms(f.OlderThan))
	}
	if f.After != "" {
		ns, key, _ := strings.Cut(f.After, "/")
		where = append(where, "(namespace > ? OR (namespace = ? AND op_key > ?))")
		args = append(args, ns, ns, key)
	}
	q := "SELECT " + listColumns + " FROM " + quoteTable(s.dialect, s.table) +
		" WHERE " + strings.Join(where, " AND ") + " ORDER BY namespace, op_key LIMIT " + strconv.Itoa(limit)
	rows, err := s.db.QueryContext(ctx, s.listRebind(q), args...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []idempotency.ListedRecord
	for rows.Next() {
		e, err := scanListed(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// scanListed reads one row of listColumns.
func scanListed(rows *sql.Rows) (idempotency.ListedRecord, error) {
	var (
		e                                              idempotency.ListedRecord
		state, history                                 []byte
		leaseUntil, expiresAt, updatedAt, notBefore    int64
		namespace, key, fingerprint, token, reopenedBy []byte
	)
	if err := rows.Scan(&namespace, &key, &state, &fingerprint, &token, &e.Attempts, &e.Canceled,
		&leaseUntil, &expiresAt, &updatedAt, &history, &reopenedBy, &e.BudgetBase, &notBefore); err != nil {
		return e, err
	}
	e.Namespace, e.Key, e.State = string(namespace), string(key), idempotency.State(state)
	e.Fingerprint, e.Token, e.ReopenedBy = string(fingerprint), string(token), string(reopenedBy)
	e.LeaseUntil, e.ExpiresAt, e.NotBefore, e.Updated = fromMs(leaseUntil), fromMs(expiresAt), fromMs(notBefore), fromMs(updatedAt)
	if len(history) > 0 {
		var hs []histEntry
		if err := json.Unmarshal(history, &hs); err != nil {
			return e, fmt.Errorf("decode the history of %q in %q: %w", e.Key, e.Namespace, err)
		}
		e.History = record.Attempts(hs)
	}
	return e, nil
}

// listRebind writes q's placeholders for the store's dialect.
func (s *Store) listRebind(q string) string {
	if s.dialect == Postgres {
		return sqldialect.Rebind(q)
	}
	return q
}
