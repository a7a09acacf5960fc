package sqlstore

import "time"

// AdvanceClock moves s's view of the database clock forward by d, so that
// lease and retention tests need not sleep. Every time the store reads from
// the database clock is shifted by the same amount.
func AdvanceClock(s *Store, d time.Duration) { s.skew.Add(ms(d)) }

// DDL returns the statements Migrate runs for table.
func DDL(d Dialect, table string) []string { return d.ddl(table) }
