package sqlstore

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
)

// addColumnRE matches the ADD COLUMN statements of the schema files:
// the quoted table and the column.
var addColumnRE = regexp.MustCompile("^ALTER TABLE ([\"`][a-z0-9_]+[\"`]) ADD COLUMN ([a-z_]+) ")

// Migrate creates the table and its index unless they exist (CREATE ... IF
// NOT EXISTS) and adds the columns that later versions introduced to a
// table that lacks them (ALTER TABLE ... ADD COLUMN, run only when a probe
// of the column fails), running exactly the statements of the dialect's
// schema file (schema/<dialect>.sql in the module). It is idempotent, keeps
// every row, and is the only call that changes the schema. Run it from one process at a time (a deploy
// step): two concurrent first creations can collide in PostgreSQL's catalog.
//
// On SQLite it also warns (through the logger) when the connection it used
// has no busy timeout.
func (s *Store) Migrate(ctx context.Context) error {
	for _, stmt := range s.dialect.ddl(s.table) {
		if m := addColumnRE.FindStringSubmatch(stmt); m != nil {
			// Not every dialect has ADD COLUMN IF NOT EXISTS: probe the column.
			probe := "SELECT " + m[2] + " FROM " + m[1] + " WHERE 1 = 0"
			if rows, err := s.db.QueryContext(ctx, probe); err == nil {
				_ = rows.Close()
				continue
			}
		}
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlstore: migrate %s: %w", s.table, err)
		}
	}
	if s.dialect == SQLite {
		var ms int64
		if err := s.db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err == nil && ms == 0 {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "sqlstore: SQLite connection without a busy timeout: concurrent claims fail with SQLITE_BUSY; add _pragma=busy_timeout(5000) to the DSN")
		}
	}
	return nil
}
