package sqlstore

import (
	"database/sql"
	"time"

	"github.com/surely-dev/surely/internal/sqldialect"
)

// AdvanceClock moves s's view of the database clock forward by d, so that
// lease and retention tests need not sleep. Every time the store reads from
// the database clock is shifted by the same amount.
func AdvanceClock(s *Store, d time.Duration) { s.skew.Add(ms(d)) }

// DDL returns the statements Migrate runs for table.
func DDL(d Dialect, table string) []string { return d.ddl(table) }

// TxIsolation returns the isolation level of the store's transactions
// (sql.LevelDefault: the driver's and the session's).
func TxIsolation(s *Store) sql.IsolationLevel {
	if o := s.txOptions(); o != nil {
		return o.Isolation
	}
	return sql.LevelDefault
}

// PreparedStatements returns how many statements the store holds prepared.
func PreparedStatements(s *Store) int {
	if m := s.prep.stmts.Load(); m != nil {
		return len(*m)
	}
	return 0
}

// Table returns the name of the store's table.
func Table(s *Store) string { return s.table }

// ErrNoOperation is the error of an Inbox handler run outside the dedup step.
var ErrNoOperation = errNoOperation

// DialectName is the name of d (its schema file's).
func DialectName(d Dialect) string { return sqldialect.Name(int(d)) }

// The defaults and bounds the package doc states.
const (
	DefaultTable      = defaultTable
	MaxFingerprintLen = maxFingerprintLen
)
