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
  n BIGINT NOT NULL{countsKey})`,
		}
		if d == dSQLite {
			// SQLite indexes values of any length.
			stmts = append(stmts, `CREATE INDEX IF NOT EXISTS "{p}_entries_topic_idx" ON {e} (original_topic, seq)`)
		} else {
			// A PostgreSQL index entry takes at most about 2,700 bytes:
			// the topic is indexed by its MD5 (the query compares both),
			// and the counts are keyed by the SHA-256 of each column, so
			// that values of any length are archived and counted.
			stmts = append(stmts,
				`DROP INDEX IF EXISTS "{p}_entries_topic_idx"`,
				`CREATE INDEX IF NOT EXISTS "{p}_entries_topic_md5_idx" ON {e} (md5(original_topic), seq)`,
				`ALTER TABLE {c} DROP CONSTRAINT IF EXISTS "{p}_counts_pkey"`,
				`CREATE UNIQUE INDEX IF NOT EXISTS "{p}_counts_key" ON {c} (`+pgCountsKey+`)`)
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
	serial, blob, int64, countsKey := "BIGSERIAL PRIMARY KEY", "BYTEA", "BIGINT", ""
	if d == dSQLite {
		serial, blob, int64 = "INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB", "INTEGER"
		countsKey = ",\n  PRIMARY KEY (reason, original_topic, handler, error_type, error_site, state)"
	}
	r := strings.NewReplacer("{countsKey}", countsKey, "{e}", d.quote(prefix+"_entries"), "{r}", d.quote(prefix+"_replayed"),
		"{u}", d.quote(prefix+"_runs"), "{c}", d.quote(prefix+"_counts"), "{l}", d.quote(prefix+"_seqlock"), "{p}", prefix, "{serial}", serial, "{blob}", blob, "{int64}", int64)
	for i, s := range stmts {
		stmts[i] = r.Replace(s)
	}
	return stmts
}

// pgHash is the SHA-256 of the bytes of a text column (PostgreSQL), with
// immutable functions only, so that an index can hold it: decode's escape
// format reads every character as its bytes but a backslash, doubled
// first.
func pgHash(col string) string {
	return `sha256(decode(replace(` + col + `, E'\\', E'\\\\'), 'escape'))`
}

// pgCountsKey is the key of the counts table on PostgreSQL: exact (the
// SHA-256 of every column) and short, where the columns themselves could
// exceed an index entry's limit.
var pgCountsKey = pgHash("reason") + ", " + pgHash("original_topic") + ", " + pgHash("handler") + ", " +
	pgHash("error_type") + ", " + pgHash("error_site") + ", state"

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
// earlier version to the current column types: MODIFY COLUMN of each of
// cols (name, type, the rest of the definition), then extra clauses. It
// has run when every column has its type (information_schema's
// COLUMN_TYPE, in lower case).
type columnUpgrade struct {
	table string
	cols  [][3]string
	extra string
}

// stmt is the ALTER TABLE statement of u.
func (u columnUpgrade) stmt() string {
	clauses := make([]string, 0, len(u.cols)+1)
	for _, c := range u.cols {
		clauses = append(clauses, "MODIFY COLUMN "+c[0]+" "+c[1]+" "+c[2])
	}
	if u.extra != "" {
		clauses = append(clauses, u.extra)
	}
	return "ALTER TABLE " + dMySQL.quote(u.table) + " " + strings.Join(clauses, ", ")
}

// mysqlUpgrades turn the utf8mb4_bin VARCHAR and TEXT columns of the
// tables of earlier versions (PAD SPACE, the topic at most 191
// characters) into the binary columns of ddl, one ALTER TABLE per table
// (one copy of its rows), keeping every byte of every row. No unique key
// can fail: the earlier columns compared more values equal, not fewer.
func mysqlUpgrades(prefix string) []columnUpgrade {
	const blob, nn = "LONGBLOB", "NOT NULL"
	return []columnUpgrade{
		{table: prefix + "_entries", cols: [][3]string{
			{"id", "VARBINARY(2048)", nn}, {"reason", blob, nn}, {"original_topic", blob, nn}, {"handler", blob, nn},
			{"op_key", blob, nn}, {"error", blob, nn}, {"error_type", blob, nn}, {"replay_id", blob, nn},
			{"state", "VARBINARY(16)", nn + " DEFAULT 'open'"}, {"note", "VARBINARY(4000)", nn + " DEFAULT ''"},
			{"failed_again_as", "VARBINARY(2048)", nn + " DEFAULT ''"}, {"error_site", "VARBINARY(512)", nn + " DEFAULT ''"},
		}, extra: "DROP KEY " + prefix + "_entries_topic_idx, ADD KEY " + prefix + "_entries_topic_idx (original_topic(255), seq)"},
		{table: prefix + "_replayed", cols: [][3]string{{"entry_id", "VARBINARY(2048)", nn}, {"replay_id", "VARBINARY(512)", nn}}},
		{table: prefix + "_runs", cols: [][3]string{{"id", "VARBINARY(512)", nn}}},
		{table: prefix + "_counts", cols: [][3]string{
			{"reason", blob, nn}, {"original_topic", blob, nn}, {"handler", blob, nn}, {"error_type", blob, nn},
			{"error_site", "VARBINARY(512)", nn}, {"state", "VARBINARY(16)", nn},
		}},
	}
}

// upgradeColumns runs the column upgrades that have not run (when the
// types cannot be read, every one: so on the recording connection of
// surely migrate, which answers no query).
func (a *Archive) upgradeColumns(ctx context.Context) error {
	if a.dialect != dMySQL {
		return nil
	}
	for _, up := range mysqlUpgrades(a.prefix) {
		done, err := a.hasTypes(ctx, up)
		if err != nil {
			return err
		}
		if done {
			continue
		}
		if _, err := a.db.ExecContext(ctx, up.stmt()); err != nil {
			return fmt.Errorf("sqlarchive: migrate %s: binary columns in %s: %w", a.prefix, up.table, err)
		}
	}
	return nil
}

// hasTypes reports whether the columns of up have their types already;
// false when the catalog does not answer.
func (a *Archive) hasTypes(ctx context.Context, up columnUpgrade) (bool, error) {
	rows, err := a.db.QueryContext(ctx, "SELECT column_name, LOWER(column_type) FROM information_schema.columns"+
		" WHERE table_schema = DATABASE() AND table_name = ?", up.table)
	if err != nil {
		return false, nil //nolint:nilerr // no catalog: upgrade (see upgradeColumns)
	}
	defer func() { _ = rows.Close() }()
	types := map[string]string{}
	for rows.Next() {
		var col, typ string
		if err := rows.Scan(&col, &typ); err != nil {
			return false, fmt.Errorf("sqlarchive: migrate %s: read the column types: %w", a.prefix, err)
		}
		types[col] = typ
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("sqlarchive: migrate %s: read the column types: %w", a.prefix, err)
	}
	for _, c := range up.cols {
		if types[c[0]] != strings.ToLower(c[1]) {
			return false, nil
		}
	}
	return true, nil
}
