package sqlstore

import (
	"database/sql"
	_ "embed" // the schema lives in schema/*.sql
	"strconv"
	"strings"

	"github.com/surely-dev/surely/internal/sqldialect"
)

// Dialect is the SQL dialect of the database behind a Store. The store
// imports no driver: open the *sql.DB with the driver of your choice and
// name its dialect.
type Dialect int

// The supported dialects.
const (
	// Postgres is PostgreSQL (tested with github.com/jackc/pgx/v5 on PostgreSQL 15).
	Postgres Dialect = iota + 1
	// MySQL is MySQL 8 or MariaDB 10.5+ with InnoDB (tested with
	// github.com/go-sql-driver/mysql on MariaDB 10.11).
	MySQL
	// SQLite is SQLite 3.24+ (tested with modernc.org/sqlite, driver
	// "sqlite"). Set a busy timeout in the DSN; see the package doc.
	SQLite
)

var (
	//go:embed schema/postgres.sql
	schemaPostgres string
	//go:embed schema/mysql.sql
	schemaMySQL string
	//go:embed schema/sqlite.sql
	schemaSQLite string
)

// schemaFile returns the embedded schema file of d, written for defaultTable.
func (d Dialect) schemaFile() string {
	switch d {
	case Postgres:
		return schemaPostgres
	case MySQL:
		return schemaMySQL
	case SQLite:
		return schemaSQLite
	default:
		return ""
	}
}

// ddl returns the statements Migrate runs for table: those of the
// embedded schema file, with table in place of defaultTable (the table name
// and the prefix of its index name). Comment lines are dropped and the
// statements split at ";".
func (d Dialect) ddl(table string) []string {
	var b strings.Builder
	for line := range strings.Lines(d.schemaFile()) {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		b.WriteString(line)
	}
	var out []string
	for stmt := range strings.SplitSeq(b.String(), ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, strings.ReplaceAll(stmt, defaultTable, table))
		}
	}
	return out
}

// The columns of a record after its primary key (namespace, op_key), in
// the order rows are scanned and saved.
const columns = "state, fingerprint, token, attempts, canceled, lease_until_ms, expires_at_ms, updated_at_ms, outcome, history, reopened_by, budget_base, not_before_ms"

// purgeBatch is how many expired rows one Purge statement deletes.
const purgeBatch = 1000

// queries holds the store's statements, built once by New for a dialect and
// a table. Placeholders are written "?" and rebound to "$n" for PostgreSQL.
type queries struct {
	// now selects the database clock in Unix milliseconds.
	now string
	// lock takes the database's write lock (SQLite only) in a transaction
	// that did not begin with a write: a write statement first in the
	// transaction takes it; PostgreSQL and MySQL lock with selectRow's FOR
	// UPDATE. Only the inbox of a message without a record needs it.
	lock string
	// selectRow reads a record, locking its row: args namespace, key.
	// With selectNow, its first column is the database clock, read after
	// the lock (PostgreSQL: clock_timestamp() outside the subquery that
	// locks; SQLite: the transaction holds the write lock already).
	selectRow string
	selectNow bool
	// getRow reads the clock and a record without locking: args namespace, key.
	getRow string
	// save writes every column of a record: args the columns, namespace, key.
	save string
	// purge deletes up to purgeBatch rows expired at a cutoff: args cutoff
	// (MySQL, by the index on expires_at_ms), or cutoff minus the
	// retention, then cutoff twice (PostgreSQL) or once (SQLite), by the
	// index on created_at_ms (see purgeArgs).
	purge string
	// txOptions of every transaction of the store (and of the inbox).
	txOptions *sql.TxOptions
}

func newQueries(d Dialect, table string) queries {
	var q queries
	var t, forUpdate string
	switch d {
	case Postgres:
		t = `"` + table + `"`
		forUpdate = " FOR UPDATE"
		// clock_timestamp, not now(): the time of the statement, not of the
		// transaction's start.
		q.now = "(floor(extract(epoch from clock_timestamp()) * 1000))::bigint"
		// SKIP LOCKED: a row a claim holds is not waited for; the outer
		// condition is checked again on the row's newest version.
		q.purge = "DELETE FROM " + t + " WHERE (namespace, op_key) IN (SELECT namespace, op_key FROM " + t +
			" WHERE created_at_ms <= ? AND expires_at_ms <= ? LIMIT " + strconv.Itoa(purgeBatch) + " FOR UPDATE SKIP LOCKED) AND expires_at_ms <= ?"
		q.txOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	case MySQL:
		t = "`" + table + "`"
		forUpdate = " FOR UPDATE"
		// UTC_TIMESTAMP and plain arithmetic: UNIX_TIMESTAMP(NOW(6)) would go
		// through the session time zone, ambiguous in a DST fold.
		q.now = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
		// A total order, so that the statement is deterministic for
		// statement-based replication.
		q.purge = "DELETE FROM " + t + " WHERE expires_at_ms <= ? ORDER BY expires_at_ms, namespace, op_key LIMIT " + strconv.Itoa(purgeBatch)
		q.txOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	case SQLite:
		t = `"` + table + `"`
		q.now = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
		q.lock = "UPDATE " + t + " SET token = token WHERE namespace = ? AND op_key = ?"
		q.purge = "DELETE FROM " + t + " WHERE rowid IN (SELECT rowid FROM " + t +
			" WHERE created_at_ms <= ? AND expires_at_ms <= ? LIMIT " + strconv.Itoa(purgeBatch) + ")"
	}
	q.selectRow = "SELECT " + columns + " FROM " + t + " WHERE namespace = ? AND op_key = ?" + forUpdate
	switch d {
	case Postgres:
		// A subquery with FOR UPDATE is never pulled up: its row is
		// locked before the outer select reads the clock.
		q.selectRow = "SELECT " + q.now + ", l.* FROM (" + q.selectRow + ") l"
		q.selectNow = true
	case SQLite:
		q.selectRow = "SELECT " + q.now + ", " + columns + " FROM " + t + " WHERE namespace = ? AND op_key = ?"
		q.selectNow = true
	}
	q.getRow = "SELECT " + q.now + ", " + columns + " FROM " + t + " WHERE namespace = ? AND op_key = ?"
	q.save = "UPDATE " + t + " SET state = ?, fingerprint = ?, token = ?, attempts = ?, canceled = ?," +
		" lease_until_ms = ?, expires_at_ms = ?, updated_at_ms = ?, outcome = ?, history = ?, reopened_by = ?, budget_base = ?, not_before_ms = ?" +
		" WHERE namespace = ? AND op_key = ?"
	q.now = "SELECT " + q.now
	if d == Postgres {
		for _, s := range []*string{&q.selectRow, &q.getRow, &q.save, &q.purge} {
			*s = sqldialect.Rebind(*s)
		}
	}
	return q
}

// quoteTable quotes table for d.
func quoteTable(d Dialect, table string) string {
	if d == MySQL {
		return "`" + table + "`"
	}
	return `"` + table + `"`
}
