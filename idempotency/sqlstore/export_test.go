package sqlstore

import (
	"database/sql"
	"time"
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
