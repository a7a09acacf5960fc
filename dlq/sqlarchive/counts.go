package sqlarchive

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/internal/archivekit"
)

// group is one row of the counts table: the columns Stats breaks down by.
type group struct{ reason, topic, handler, etype, site, state string }

func (g group) compare(h group) int {
	return cmp.Or(cmp.Compare(g.reason, h.reason), cmp.Compare(g.topic, h.topic), cmp.Compare(g.handler, h.handler),
		cmp.Compare(g.etype, h.etype), cmp.Compare(g.site, h.site), cmp.Compare(g.state, h.state))
}

// add counts n entries of g into s.
func (g group) add(s *archive.Stats, n int) {
	s.Total += n
	s.ByReason[g.reason] += n
	s.ByTopic[g.topic] += n
	s.ByHandler[g.handler] += n
	s.ByErrorType[g.etype] += n
	s.ByFailureGroup[[2]string{g.etype, g.site}] += n
	s.ByState[g.state] += n
}

// deltas are the changes of a transaction to the counts.
type deltas map[group]int

// groupCols are the entries' columns of a group, in group order.
const groupCols = "e.reason, e.original_topic, e.handler, e.error_type, e.error_site, e.state"

// mysqlGroupKey is the counts table's key on MySQL, which cannot index
// TEXT columns whole: a hash of the group's columns (%s), the same
// whether computed from an entry's columns or from arguments.
const mysqlGroupKey = "SHA2(CONCAT_WS(CHAR(0), %s), 256)"

// readGroups adds sign times the entries that query (selecting groupCols
// and a count) returns to d.
func readGroups(ctx context.Context, tx *sql.Tx, d deltas, sign int, query string, args ...any) error {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var g group
		var n int
		if err := rows.Scan(&g.reason, &g.topic, &g.handler, &g.etype, &g.site, &g.state, &n); err != nil {
			return err
		}
		d[g] += sign * n
	}
	return rows.Err()
}

// applyCounts adds d to the counts table. The caller holds the write lock
// (lock), so no other transaction changes the counts meanwhile.
func (a *Archive) applyCounts(ctx context.Context, tx *sql.Tx, d deltas) error {
	var stmt string
	switch a.dialect {
	case dMySQL:
		stmt = "INSERT INTO " + a.counts + " (grp, reason, original_topic, handler, error_type, error_site, state, n) VALUES (" +
			fmt.Sprintf(mysqlGroupKey, "?, ?, ?, ?, ?, ?") + ", ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE n = n + VALUES(n)"
	default:
		key := "reason, original_topic, handler, error_type, error_site, state"
		if a.dialect == dPostgres {
			key = pgCountsKey
		}
		stmt = a.q("INSERT INTO " + a.counts + " AS c (reason, original_topic, handler, error_type, error_site, state, n) VALUES (?, ?, ?, ?, ?, ?, ?)" +
			" ON CONFLICT (" + key + ") DO UPDATE SET n = c.n + excluded.n")
	}
	for _, g := range slices.SortedFunc(maps.Keys(d), group.compare) {
		n := d[g]
		if n == 0 {
			continue
		}
		args := []any{g.reason, g.topic, g.handler, g.etype, g.site, g.state, n}
		if a.dialect == dMySQL {
			args = append([]any{g.reason, g.topic, g.handler, g.etype, g.site, g.state}, args...)
		}
		if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
			return fmt.Errorf("sqlarchive: update the counts: %w", err)
		}
	}
	return nil
}

// recount rebuilds the counts table from the entries, in one transaction
// under the write lock (Migrate). It only writes (no statement reads into
// Go), so that surely migrate can record it like the DDL.
func (a *Archive) recount(ctx context.Context) error {
	cols := "reason, original_topic, handler, error_type, error_site, state"
	insert := "INSERT INTO " + a.counts + " (" + cols + ", n) SELECT " + cols + ", COUNT(*) FROM " + a.entries + " GROUP BY " + cols
	lock := "SELECT pg_advisory_xact_lock(hashtextextended('surely_dlq_seq:" + a.prefix + "', 0))"
	switch a.dialect {
	case dMySQL:
		insert = "INSERT INTO " + a.counts + " (grp, " + cols + ", n) SELECT " + fmt.Sprintf(mysqlGroupKey, cols) +
			", " + cols + ", COUNT(*) FROM " + a.entries + " GROUP BY " + cols
		lock = "UPDATE " + a.seqLock + " SET id = id WHERE id = 1"
	case dSQLite:
		lock = "UPDATE " + a.counts + " SET n = n WHERE 1 = 0"
	}
	return a.inTx(ctx, func(tx *sql.Tx) error {
		for _, stmt := range []string{lock, "DELETE FROM " + a.counts, insert} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("sqlarchive: migrate %s: count the entries: %w", a.prefix, err)
			}
		}
		return nil
	})
}

// countable reports whether the counts table answers Stats for f: f
// selects by grouped columns only.
func countable(f archive.Filter) bool {
	return len(f.IDs) == 0 && f.Key == "" && f.ErrorContains == "" && f.Search == "" && f.ReplayID == "" &&
		f.NotReplayedBy == "" && f.ReplayedBy == "" && f.DeadLetteredAfter.IsZero() && f.DeadLetteredBefore.IsZero()
}

// countedStats is Stats for a countable filter: the counts table's rows
// that match, then the oldest and newest dead-lettering times, each an
// index lookup per state that stops at its first row.
func (a *Archive) countedStats(ctx context.Context, f archive.Filter) (archive.Stats, error) {
	conds, args := a.groupConds(f, "")
	conds = append(conds, "n > 0")
	rows, err := a.db.QueryContext(ctx, a.q("SELECT reason, original_topic, handler, error_type, error_site, state, n FROM "+a.counts+
		" WHERE "+strings.Join(conds, " AND ")), args...)
	if err != nil {
		return archive.Stats{}, fmt.Errorf("sqlarchive: stats: %w", err)
	}
	defer func() { _ = rows.Close() }()
	s := archivekit.NewStats()
	for rows.Next() {
		var g group
		var n int
		if err := rows.Scan(&g.reason, &g.topic, &g.handler, &g.etype, &g.site, &g.state, &n); err != nil {
			return archive.Stats{}, fmt.Errorf("sqlarchive: stats: %w", err)
		}
		g.add(&s, n)
	}
	if err := rows.Err(); err != nil {
		return archive.Stats{}, fmt.Errorf("sqlarchive: stats: %w", err)
	}
	_ = rows.Close()
	if s.Total == 0 {
		return s, nil
	}
	// One state at a time, so that each lookup walks the (state,
	// dead_lettered_at) index in order; without states, the
	// dead_lettered_at index.
	states := []archive.State{""}
	if len(f.States) > 0 {
		states = f.States
	}
	for _, st := range states {
		one := f
		one.States = nil
		if st != "" {
			one.States = []archive.State{st}
		}
		oldest, newest, err := a.timeBounds(ctx, one)
		if err != nil {
			return archive.Stats{}, err
		}
		if !oldest.IsZero() && (s.Oldest.IsZero() || oldest.Before(s.Oldest)) {
			s.Oldest = oldest
		}
		if newest.After(s.Newest) {
			s.Newest = newest
		}
	}
	return s, nil
}

// timeBounds returns the oldest and newest dead-lettering times of the
// entries f selects (f is countable, with at most one state); zero times
// when it selects none.
func (a *Archive) timeBounds(ctx context.Context, f archive.Filter) (oldest, newest time.Time, err error) {
	conds, args := a.groupConds(f, "e.")
	from := a.entries + " e"
	if a.dialect == dSQLite {
		// SQLite has no statistics unless ANALYZE ran: name the index
		// that yields the rows in time order, or it may sort them all.
		idx := "_entries_dl_idx"
		if len(f.States) > 0 {
			idx = "_entries_state_dl_idx"
		}
		from += ` INDEXED BY "` + a.prefix + idx + `"`
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	for _, end := range []struct {
		order string
		t     *time.Time
	}{{"ASC", &oldest}, {"DESC", &newest}} {
		var ns int64
		err := a.db.QueryRowContext(ctx, a.q("SELECT e.dead_lettered_at FROM "+from+where+
			" ORDER BY e.dead_lettered_at "+end.order+" LIMIT 1"), args...).Scan(&ns)
		if errors.Is(err, sql.ErrNoRows) {
			continue // none (changed since the counts were read)
		}
		if err != nil {
			return time.Time{}, time.Time{}, fmt.Errorf("sqlarchive: stats: %w", err)
		}
		*end.t = time.Unix(0, ns).UTC()
	}
	return oldest, newest, nil
}

// groupConds renders the grouped columns of f as conditions on columns
// named with prefix ("" for the counts table, "e." for the entries).
func (a *Archive) groupConds(f archive.Filter, prefix string) ([]string, []any) {
	var conds []string
	var args []any
	eq := func(col, v string) {
		if v != "" {
			conds = append(conds, prefix+col+" = ?")
			args = append(args, text(v))
		}
	}
	eq("reason", string(f.Reason))
	if f.Topic != "" && prefix != "" && a.dialect == dPostgres {
		// The entries' topic index is on its MD5 (see ddl).
		conds = append(conds, "md5("+prefix+"original_topic) = md5(CAST(? AS TEXT))")
		args = append(args, text(f.Topic))
	}
	eq("original_topic", f.Topic)
	eq("handler", f.Handler)
	eq("error_type", f.ErrorType)
	eq("error_site", f.ErrorSite)
	if len(f.States) > 0 {
		conds = append(conds, prefix+"state IN ("+placeholders(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	return conds, args
}

// groupsOf are the statements' text for the groups of some entries:
// where is a WHERE clause over the entries (alias e).
func (a *Archive) groupsOf(where string) string {
	return a.q("SELECT " + groupCols + ", COUNT(*) FROM " + a.entries + " e " + where + " GROUP BY " + groupCols)
}
