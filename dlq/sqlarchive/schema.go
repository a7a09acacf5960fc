package sqlarchive

import (
	"context"
	"fmt"
	"strings"

	"github.com/surely-dev/surely/internal/sqldialect"
)

// Dialect is the SQL dialect of the database behind an Archive. The
// archive imports no driver: open the *sql.DB with the driver of your
// choice and name its dialect.
type dialect int

// The supported dialects.
const (
	// Postgres is PostgreSQL (tested with github.com/jackc/pgx/v5/stdlib).
	dPostgres dialect = iota + 1
	// MySQL is MySQL 8 or MariaDB 10.5+ with InnoDB (tested with
	// github.com/go-sql-driver/mysql on MariaDB).
	dMySQL
	// SQLite is SQLite 3.24+ (tested with modernc.org/sqlite, driver
	// "sqlite"). Set a busy timeout in the DSN, e.g.
	// "file:dlq.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)".
	dSQLite
)

func (d dialect) valid() bool { return d >= dPostgres && d <= dSQLite }

// quote quotes a validated identifier.
func (d dialect) quote(name string) string {
	if d == dMySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// rebind turns "?" placeholders into $n for PostgreSQL. The statements
// contain no "?" other than placeholders.
func (d dialect) rebind(q string) string {
	if d != dPostgres {
		return q
	}
	return sqldialect.Rebind(q)
}

// ddl returns the statements Migrate runs: {e}, {r}, {u}, {c}, {l} stand for the
// entries, replayed, runs, counts and (MySQL) seqlock tables, {p} for the bare prefix (index names).
func (d dialect) ddl(prefix string) []string {
	var stmts []string
	switch d {
	case dPostgres, dSQLite:
		// The same tables in the two dialects; only the column types differ.
		stmts = []string{
			`CREATE TABLE IF NOT EXISTS {e} (
  seq {serial},
  id TEXT NOT NULL UNIQUE,
  payload {blob} NOT NULL,
  metadata {blob} NOT NULL,
  copies INTEGER NOT NULL,
  archived_at {int64} NOT NULL,
  reason TEXT NOT NULL,
  original_topic TEXT NOT NULL,
  handler TEXT NOT NULL,
  op_key TEXT NOT NULL,
  error TEXT NOT NULL,
  error_type TEXT NOT NULL,
  dead_lettered_at {int64} NOT NULL,
  replay_id TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'open',
  state_at {int64} NOT NULL DEFAULT 0,
  note TEXT NOT NULL DEFAULT '',
  failed_again_as TEXT NOT NULL DEFAULT '',
  error_site TEXT NOT NULL DEFAULT '')`,
			`CREATE INDEX IF NOT EXISTS "{p}_entries_dl_idx" ON {e} (dead_lettered_at)`,
			`CREATE INDEX IF NOT EXISTS "{p}_entries_topic_idx" ON {e} (original_topic, seq)`,
			`CREATE TABLE IF NOT EXISTS {r} (
  ord {serial},
  entry_id TEXT NOT NULL,
  replay_id TEXT NOT NULL,
  UNIQUE (entry_id, replay_id))`,
			`CREATE TABLE IF NOT EXISTS {u} (id TEXT PRIMARY KEY, body TEXT NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS {c} (
  reason TEXT NOT NULL,
  original_topic TEXT NOT NULL,
  handler TEXT NOT NULL,
  error_type TEXT NOT NULL,
  error_site TEXT NOT NULL,
  state TEXT NOT NULL,
  n BIGINT NOT NULL,
  PRIMARY KEY (reason, original_topic, handler, error_type, error_site, state))`,
		}
	case dMySQL:
		// Binary columns (VARBINARY, LONGBLOB), as sqlstore's: values
		// compare byte for byte, like the other dialects (utf8mb4_bin is
		// PAD SPACE: "orders" = "orders "). The values a broker or an
		// application chooses (topic, handler, key, reason, error type)
		// are LONGBLOB, of any length; the topic's index takes its first
		// 255 bytes. mysqlColumns are the types, mysqlUpgrade brings
		// tables of earlier versions to them.
		stmts = []string{
			`CREATE TABLE IF NOT EXISTS {e} (
  seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  id VARBINARY(2048) NOT NULL,
  payload LONGBLOB NOT NULL,
  metadata LONGBLOB NOT NULL,
  copies INT NOT NULL,
  archived_at BIGINT NOT NULL,
  reason LONGBLOB NOT NULL,
  original_topic LONGBLOB NOT NULL,
  handler LONGBLOB NOT NULL,
  op_key LONGBLOB NOT NULL,
  error LONGBLOB NOT NULL,
  error_type LONGBLOB NOT NULL,
  dead_lettered_at BIGINT NOT NULL,
  replay_id LONGBLOB NOT NULL,
  state VARBINARY(16) NOT NULL DEFAULT 'open',
  state_at BIGINT NOT NULL DEFAULT 0,
  note VARBINARY(4000) NOT NULL DEFAULT '',
  failed_again_as VARBINARY(2048) NOT NULL DEFAULT '',
  error_site VARBINARY(512) NOT NULL DEFAULT '',
  UNIQUE KEY {p}_entries_id (id),
  KEY {p}_entries_dl_idx (dead_lettered_at),
  KEY {p}_entries_topic_idx (original_topic(255), seq),
  KEY {p}_entries_state_idx (state, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
			`CREATE TABLE IF NOT EXISTS {r} (
  ord BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  entry_id VARBINARY(2048) NOT NULL,
  replay_id VARBINARY(512) NOT NULL,
  UNIQUE KEY {p}_replayed_uq (entry_id, replay_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
			`CREATE TABLE IF NOT EXISTS {u} (id VARBINARY(512) NOT NULL PRIMARY KEY, body LONGTEXT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
			`CREATE TABLE IF NOT EXISTS {c} (
  grp CHAR(64) NOT NULL PRIMARY KEY,
  reason LONGBLOB NOT NULL,
  original_topic LONGBLOB NOT NULL,
  handler LONGBLOB NOT NULL,
  error_type LONGBLOB NOT NULL,
  error_site VARBINARY(512) NOT NULL,
  state VARBINARY(16) NOT NULL,
  n BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
			// One row, locked by every Publish until it commits: Seq
			// order is commit order.
			`CREATE TABLE IF NOT EXISTS {l} (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB`,
			`INSERT IGNORE INTO {l} (id) VALUES (1)`,
		}
	}
	serial, blob, int64 := "BIGSERIAL PRIMARY KEY", "BYTEA", "BIGINT"
	if d == dSQLite {
		serial, blob, int64 = "INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB", "INTEGER"
	}
	r := strings.NewReplacer("{e}", d.quote(prefix+"_entries"), "{r}", d.quote(prefix+"_replayed"),
		"{u}", d.quote(prefix+"_runs"), "{c}", d.quote(prefix+"_counts"), "{l}", d.quote(prefix+"_seqlock"), "{p}", prefix, "{serial}", serial, "{blob}", blob, "{int64}", int64)
	for i, s := range stmts {
		stmts[i] = r.Replace(s)
	}
	return stmts
}

// lifecycleColumns are the columns added to the entries table since its
// first version (the lifecycle's, then the call site), added to tables
// created before them: name and definition per dialect.
func (d dialect) lifecycleColumns() [][2]string {
	switch d {
	case dMySQL:
		return [][2]string{
			{"state", "state VARBINARY(16) NOT NULL DEFAULT 'open', ADD KEY {p}_entries_state_idx (state, seq)"},
			{"state_at", "state_at BIGINT NOT NULL DEFAULT 0"},
			{"note", "note VARBINARY(4000) NOT NULL DEFAULT ''"},
			{"failed_again_as", "failed_again_as VARBINARY(2048) NOT NULL DEFAULT ''"},
			{"error_site", "error_site VARBINARY(512) NOT NULL DEFAULT ''"},
		}
	case dSQLite:
		return [][2]string{
			{"state", "state TEXT NOT NULL DEFAULT 'open'"},
			{"state_at", "state_at INTEGER NOT NULL DEFAULT 0"},
			{"note", "note TEXT NOT NULL DEFAULT ''"},
			{"failed_again_as", "failed_again_as TEXT NOT NULL DEFAULT ''"},
			{"error_site", "error_site TEXT NOT NULL DEFAULT ''"},
		}
	}
	return [][2]string{
		{"state", "state TEXT NOT NULL DEFAULT 'open'"},
		{"state_at", "state_at BIGINT NOT NULL DEFAULT 0"},
		{"note", "note TEXT NOT NULL DEFAULT ''"},
		{"failed_again_as", "failed_again_as TEXT NOT NULL DEFAULT ''"},
		{"error_site", "error_site TEXT NOT NULL DEFAULT ''"},
	}
}

// stateIndex is the statement that indexes the lifecycle state, where it
// is not part of the MySQL column's ALTER ("" there).
func (d dialect) stateIndex(prefix string) string {
	if d == dMySQL {
		return ""
	}
	return `CREATE INDEX IF NOT EXISTS "` + prefix + `_entries_state_idx" ON ` + d.quote(prefix+"_entries") + ` (state, seq)`
}

// stateTimeIndex indexes the entries by (state, dead_lettered_at): the
// oldest and newest entry of a state (Stats) are its first and last rows.
func (a *Archive) stateTimeIndex(ctx context.Context) error {
	name := a.prefix + "_entries_state_dl_idx"
	stmt := `CREATE INDEX IF NOT EXISTS "` + name + `" ON ` + a.entries + ` (state, dead_lettered_at)`
	if a.dialect == dMySQL {
		// MySQL has no CREATE INDEX IF NOT EXISTS: a query that names
		// the index fails while it is missing.
		if rows, err := a.db.QueryContext(ctx, "SELECT 1 FROM "+a.entries+" FORCE INDEX ("+name+") WHERE 1 = 0"); err == nil {
			_ = rows.Close()
			return nil
		}
		stmt = "ALTER TABLE " + a.entries + " ADD KEY " + name + " (state, dead_lettered_at)"
	}
	if _, err := a.db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("sqlarchive: migrate %s: %w", a.prefix, err)
	}
	return nil
}

// A columnUpgrade is one ALTER TABLE of Migrate that brings a table of an
// earlier version to the current column types: it has run when column
// of table has type colType (information_schema's COLUMN_TYPE).
type columnUpgrade struct{ table, column, colType, stmt string }

// mysqlUpgrades turn the utf8mb4_bin VARCHAR and TEXT columns of the
// tables of earlier versions (PAD SPACE, the topic at most 191
// characters) into the binary columns of ddl, one ALTER TABLE per table
// (one copy of its rows), keeping every byte of every row. No unique key
// can fail: the earlier columns compared more values equal, not fewer.
func mysqlUpgrades(prefix string) []columnUpgrade {
	q := dMySQL.quote
	e, r, u, c := q(prefix+"_entries"), q(prefix+"_replayed"), q(prefix+"_runs"), q(prefix+"_counts")
	return []columnUpgrade{
		{prefix + "_entries", "original_topic", "longblob", "ALTER TABLE " + e +
			" MODIFY COLUMN id VARBINARY(2048) NOT NULL, MODIFY COLUMN reason LONGBLOB NOT NULL," +
			" MODIFY COLUMN handler LONGBLOB NOT NULL, MODIFY COLUMN op_key LONGBLOB NOT NULL," +
			" MODIFY COLUMN error LONGBLOB NOT NULL, MODIFY COLUMN error_type LONGBLOB NOT NULL," +
			" MODIFY COLUMN replay_id LONGBLOB NOT NULL, MODIFY COLUMN state VARBINARY(16) NOT NULL DEFAULT 'open'," +
			" MODIFY COLUMN note VARBINARY(4000) NOT NULL DEFAULT '', MODIFY COLUMN failed_again_as VARBINARY(2048) NOT NULL DEFAULT ''," +
			" MODIFY COLUMN error_site VARBINARY(512) NOT NULL DEFAULT '', MODIFY COLUMN original_topic LONGBLOB NOT NULL," +
			" DROP KEY " + prefix + "_entries_topic_idx, ADD KEY " + prefix + "_entries_topic_idx (original_topic(255), seq)"},
		{prefix + "_replayed", "entry_id", "varbinary(2048)", "ALTER TABLE " + r +
			" MODIFY COLUMN entry_id VARBINARY(2048) NOT NULL, MODIFY COLUMN replay_id VARBINARY(512) NOT NULL"},
		{prefix + "_runs", "id", "varbinary(512)", "ALTER TABLE " + u + " MODIFY COLUMN id VARBINARY(512) NOT NULL"},
		{prefix + "_counts", "original_topic", "longblob", "ALTER TABLE " + c +
			" MODIFY COLUMN reason LONGBLOB NOT NULL, MODIFY COLUMN original_topic LONGBLOB NOT NULL," +
			" MODIFY COLUMN handler LONGBLOB NOT NULL, MODIFY COLUMN error_type LONGBLOB NOT NULL," +
			" MODIFY COLUMN error_site VARBINARY(512) NOT NULL, MODIFY COLUMN state VARBINARY(16) NOT NULL"},
	}
}

// upgradeColumns runs the column upgrades that have not run (a column
// whose type cannot be read counts as not upgraded: so on the recording
// connection of surely migrate, which answers no query).
func (a *Archive) upgradeColumns(ctx context.Context) error {
	if a.dialect != dMySQL {
		return nil
	}
	for _, up := range mysqlUpgrades(a.prefix) {
		var typ string
		err := a.db.QueryRowContext(ctx, "SELECT LOWER(COLUMN_TYPE) FROM information_schema.columns"+
			" WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?", up.table, up.column).Scan(&typ)
		if err == nil && typ == up.colType {
			continue
		}
		if _, err := a.db.ExecContext(ctx, up.stmt); err != nil {
			return fmt.Errorf("sqlarchive: migrate %s: binary columns in %s: %w", a.prefix, up.table, err)
		}
	}
	return nil
}
