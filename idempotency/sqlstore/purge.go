package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
)

// Purge deletes the records whose retention has passed (they already read
// as absent), in batches of 1000 rows, each its own transaction, until none
// is left or ctx ends. It returns how many rows it deleted. Call it
// periodically (e.g. hourly) from one process; rows a claim holds are
// skipped (PostgreSQL) or waited for.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			cutoff, err := s.now(ctx, tx)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, s.q.purge, s.purgeArgs(cutoff)...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sqlstore: purge %s: %w", s.table, err)
		}
		total += n
		if n < purgeBatch {
			s.logger.LogAttrs(ctx, slog.LevelDebug, "sqlstore: purged expired records",
				slog.String("table", s.table), slog.Int64("deleted", total))
			return total, nil
		}
	}
}

// purgeArgs are the arguments of the purge statement at cutoff. On
// PostgreSQL and SQLite it finds its rows by the index on created_at_ms:
// a row expires a retention after its insert at the earliest (every write
// sets expires_at_ms to its clock plus at least the retention), so every
// row expired at cutoff was inserted at cutoff minus the retention or
// before, and expires_at_ms decides. With a retention longer than the
// writers', rows are deleted that much later (they read as absent anyway).
func (s *Store) purgeArgs(cutoff int64) []any {
	switch s.dialect {
	case Postgres:
		return []any{cutoff - ms(s.retention), cutoff, cutoff}
	case SQLite:
		return []any{cutoff - ms(s.retention), cutoff}
	default:
		return []any{cutoff}
	}
}
