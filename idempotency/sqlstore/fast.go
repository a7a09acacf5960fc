package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/sqldialect"
)

// The statements of the common paths read the database clock inside
// themselves (no statement of its own for it), are prepared once per
// connection, and write a whole record in one statement:
//
//   - a claim of a key without a record is one INSERT (claimNew), committed
//     on its own;
//   - the inbox of a first delivery from a broker that counts deliveries
//     inserts the record DONE (insertDone) in the handler's transaction;
//   - the inbox after a committed claim marks the record DONE with a
//     fenced UPDATE (fencedDone), the transaction's first statement, which
//     also takes the row lock (on SQLite, the database's write lock);
//   - Complete, Release and Extend, and the inbox after a claim the dedup
//     step made, are one UPDATE fenced on the lease (complete, release,
//     extend).
//
// A claim of a record that exists takes the general path (Store.claim):
// lock the row and read the clock (one statement but on MySQL), decide in
// Go, write the row back.

// fastQueries are the statements of the common paths, built by New.
// Each lists the names of its arguments in order (see bind).
type fastQueries struct {
	claimNew, claimNewAsync, insertDone, fencedDone, setOutcome stmtText
	// complete, release and extend are Complete, Release and Extend, each
	// one statement fenced on the lease (see fenced); extendReturns:
	// extend returns the new lease expiry (RETURNING), else extendCheck
	// reads it (MySQL).
	complete, release, extend, extendCheck stmtText
	extendReturns                          bool
	// claimNewReturns: claimNew returns the lease expiry (RETURNING).
	// On MySQL, claimNew and insertDone report what they inserted as the
	// last insert ID instead (see insertedID).
	claimNewReturns bool
	// isolation is the probe of a MySQL session's isolation level.
	isolation []string
}

// stmtText is a statement and the names of its "?" arguments in order.
type stmtText struct {
	sql   string
	names []string
}

// nowMarker stands for the database clock (plus the test skew) in the
// statement templates below.
const nowMarker = "{now}"

// newFastQueries builds the statements for d and table t (quoted).
func newFastQueries(d Dialect, t string) fastQueries {
	var clock, cast, concat3, concat5, conflict, returning string
	reported := func(v string) string { return v }
	switch d {
	case Postgres:
		// statement_timestamp: one value for the whole statement.
		clock = "(floor(extract(epoch from statement_timestamp()) * 1000))::bigint"
		cast = "::"
		concat3 = "?:h0::text || c.n::text || ?:h1::text"
		concat5 = "?:h0::text || c.n::text || ?:h1::text || c.n::text || ?:h2::text"
		conflict = " ON CONFLICT (namespace, op_key) DO NOTHING"
		returning = " RETURNING lease_until_ms"
	case MySQL:
		// UTC_TIMESTAMP: one value for the whole statement.
		clock = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
		concat3 = "CONCAT(?:h0, c.n, ?:h1)"
		concat5 = "CONCAT(?:h0, c.n, ?:h1, c.n, ?:h2)"
		// No RETURNING: the inserted row's lease expiry (claimNew) or
		// retention end (insertDone) goes to the client as the statement's
		// last insert ID (LAST_INSERT_ID(expr)), and a duplicate key sets
		// it to 0. ON DUPLICATE KEY UPDATE, not INSERT IGNORE: it locks an
		// existing row exclusively (see the package doc). The row's values
		// are kept, so the affected-row count would not tell a duplicate
		// when the driver counts found rows (clientFoundRows).
		reported = func(v string) string { return "LAST_INSERT_ID(" + v + ")" }
		conflict = " ON DUPLICATE KEY UPDATE namespace = IF(LAST_INSERT_ID(0) = 0, namespace, namespace)"
	case SQLite:
		// julianday('now'): one value for the whole statement.
		clock = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
		concat3 = "?:h0 || c.n || ?:h1"
		concat5 = "?:h0 || c.n || ?:h1 || c.n || ?:h2"
		// The WHERE resolves the parsing ambiguity of INSERT ... SELECT ... ON CONFLICT.
		conflict = " WHERE 1 = 1 ON CONFLICT (namespace, op_key) DO NOTHING"
		returning = " RETURNING lease_until_ms"
	}
	// "?:name" is an argument; "?:name::type" casts it on PostgreSQL only.
	// c.n is the clock, read once per statement; h0, h1, h2 are the pieces
	// of a history between which it goes (histPieces).
	typed := func(s string) string {
		if cast == "" {
			for _, ty := range []string{"::text", "::bigint", "::int"} {
				s = strings.ReplaceAll(s, ty, "")
			}
		}
		return s
	}
	from := " FROM (SELECT " + clock + " + ?:skew::bigint AS n) c"
	fromNow := clock + " + ?:skew::bigint"
	cols := "(namespace, op_key, " + columns + ", created_at_ms)"

	var q fastQueries
	q.claimNew = bind(d, typed("INSERT INTO "+t+" "+cols+
		" SELECT ?:ns::text, ?:key::text, 'in_progress', ?:fp::text, ?:token::text, ?:attempts::int, 0,"+
		" "+reported("c.n + ?:lease::bigint")+", c.n + ?:expires::bigint, c.n, NULL, "+concat3+", ?:reopen::text, 0, 0, c.n"+from+conflict+returning))
	q.claimNewAsync = q.claimNew
	if d == Postgres {
		// The claim of an inbox that commits it before the effect: its
		// commit need not wait for the WAL flush (see the package doc).
		q.claimNewAsync = bind(d, strings.Replace(q.claimNew.raw(), " AS n) c", " AS n, set_config('synchronous_commit', 'off', true) AS sc) c", 1))
	}
	q.claimNewReturns = returning != ""
	q.insertDone = bind(d, typed("INSERT INTO "+t+" "+cols+
		" SELECT ?:ns::text, ?:key::text, 'done', ?:fp::text, ?:token::text, ?:attempts::int, 0,"+
		" 0, "+reported("c.n + ?:retention::bigint")+", c.n, NULL, "+concat5+", '', 0, 0, c.n"+from+conflict))
	q.fencedDone = bind(d, typed(strings.ReplaceAll("UPDATE "+t+" SET state = 'done', lease_until_ms = 0,"+
		" expires_at_ms = "+nowMarker+" + ?:retention::bigint, updated_at_ms = "+nowMarker+", outcome = NULL,"+
		" history = "+strings.ReplaceAll(strings.ReplaceAll(concat3, "c.n::text", "("+nowMarker+")::text"), "c.n", nowMarker)+
		" WHERE namespace = ?:ns::text AND op_key = ?:key::text AND token = ?:token::text AND state = 'in_progress'"+
		" AND expires_at_ms > "+nowMarker, nowMarker, "("+fromNow+")")))
	// The lease-mode writes: one UPDATE each, fenced on the lease (this
	// token, in progress, not past its retention), the clock read inside.
	// The open attempt is the history's one entry with "result":
	// "in_progress" (claims end any earlier one), which replace() closes:
	// ?:c0 || now || ?:c1 stand in for its "result" member (closePieces).
	nowText := "(" + nowMarker + ")::text"
	closeAttempt := "replace(history, '\"result\":\"in_progress\"', " +
		strings.NewReplacer("?:h0", "?:c0", "?:h1", "?:c1", "c.n::text", nowText, "c.n", nowMarker).Replace(concat3) + ")"
	fence := " WHERE namespace = ?:ns::text AND op_key = ?:key::text AND token = ?:token::text AND state = 'in_progress'" +
		" AND expires_at_ms > " + nowMarker
	fenced := func(set, tail string) stmtText {
		return bind(d, typed(strings.ReplaceAll("UPDATE "+t+" SET "+set+fence+tail, nowMarker, "("+fromNow+")")))
	}
	q.complete = fenced("state = 'done', outcome = ?:outcome::text, lease_until_ms = 0,"+
		" expires_at_ms = "+nowMarker+" + ?:retention::bigint, updated_at_ms = "+nowMarker+", history = "+closeAttempt, "")
	q.release = fenced("state = ?:state::text, canceled = canceled + ?:canceled::int, lease_until_ms = 0,"+
		" not_before_ms = CASE WHEN ?:delay::bigint > 0 THEN "+nowMarker+" + ?:delay::bigint ELSE 0 END,"+
		" expires_at_ms = "+nowMarker+" + ?:delay::bigint + ?:retention::bigint, updated_at_ms = "+nowMarker+", history = "+closeAttempt, "")
	q.extend = fenced("lease_until_ms = "+nowMarker+" + ?:ext::bigint, expires_at_ms = "+nowMarker+" + ?:ext::bigint + ?:retention::bigint,"+
		" updated_at_ms = "+nowMarker, returning)
	q.extendReturns = returning != ""
	if !q.extendReturns {
		q.extendCheck = bind(d, typed(strings.ReplaceAll("SELECT lease_until_ms FROM "+t+fence, nowMarker, "("+fromNow+")")))
	}
	q.setOutcome = bind(d, typed("UPDATE "+t+" SET outcome = ?:outcome::text WHERE namespace = ?:ns::text AND op_key = ?:key::text AND token = ?:token::text"))
	if d == MySQL {
		q.isolation = []string{"SELECT @@SESSION.transaction_isolation", "SELECT @@SESSION.tx_isolation"}
	}
	return q
}

// bind turns the "?:name" (and "?:name::type") arguments of s into the
// dialect's placeholders, keeping the names in order.
func bind(d Dialect, s string) stmtText {
	var (
		b     strings.Builder
		names []string
	)
	for {
		i := strings.Index(s, "?:")
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i+1])
		s = s[i+2:]
		j := strings.IndexFunc(s, func(r rune) bool { return r != '_' && (r < 'a' || r > 'z') && (r < '0' || r > '9') })
		if j < 0 {
			j = len(s)
		}
		names = append(names, s[:j])
		s = s[j:]
	}
	out := b.String()
	if d == Postgres {
		out = sqldialect.Rebind(out)
	}
	return stmtText{sql: out, names: names}
}

// raw is the statement with its named arguments back in place (for
// deriving a variant of it). Only PostgreSQL statements are rebound.
func (st stmtText) raw() string {
	s := st.sql
	for i := len(st.names); i >= 1; i-- {
		s = strings.Replace(s, "$"+strconv.Itoa(i), "?:"+st.names[i-1], 1)
	}
	return s
}

// argv returns the arguments of st from named values.
func (st stmtText) argv(v map[string]any) []any {
	out := make([]any, len(st.names))
	for i, n := range st.names {
		a, ok := v[n]
		if !ok {
			panic("sqlstore: statement argument " + n + " missing")
		}
		out[i] = a
	}
	return out
}

// prepared holds the store's statements prepared on its *sql.DB, so that
// each connection parses them once. Each path prepares the statements it
// is about to run, before its transaction begins (a pool of one connection
// would otherwise wait for itself), so that a first call prepares no more
// than it needs within its deadline; a statement that could not be
// prepared yet runs unprepared.
type prepared struct {
	mu sync.Mutex
	// stmts maps a statement's text to it, copied on write.
	stmts atomic.Pointer[map[string]*sql.Stmt]
	// probed: the MySQL sessions' isolation was read (probeIsolation).
	probed atomic.Bool
}

// prepare prepares those of texts that are not prepared yet. A failure (a
// table not yet migrated, an outage, the deadline) is retried by the next
// call.
func (s *Store) prepare(ctx context.Context, texts ...string) {
	if m := s.prep.stmts.Load(); m != nil && hasAll(*m, texts) && (s.dialect != MySQL || s.prep.probed.Load()) {
		return
	}
	s.prep.mu.Lock()
	defer s.prep.mu.Unlock()
	if s.dialect == MySQL && !s.prep.probed.Load() {
		s.prep.probed.Store(s.probeIsolation(ctx))
	}
	old := map[string]*sql.Stmt{}
	if m := s.prep.stmts.Load(); m != nil {
		old = *m
	}
	if hasAll(old, texts) {
		return
	}
	m := make(map[string]*sql.Stmt, len(old)+len(texts))
	for q, st := range old {
		m[q] = st
	}
	for _, q := range texts {
		if _, ok := m[q]; ok || q == "" {
			continue
		}
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			break
		}
		m[q] = st
	}
	s.prep.stmts.Store(&m)
}

func hasAll(m map[string]*sql.Stmt, texts []string) bool {
	for _, q := range texts {
		if _, ok := m[q]; !ok && q != "" {
			return false
		}
	}
	return true
}

// probeIsolation sets the store's transactions to the driver's default
// options when the sessions are READ COMMITTED already (set in the DSN):
// that saves a SET TRANSACTION statement per transaction. It reports
// whether it could read the level.
func (s *Store) probeIsolation(ctx context.Context) bool {
	for _, q := range s.fq.isolation {
		var level string
		if err := s.db.QueryRowContext(ctx, q).Scan(&level); err != nil {
			if ctx.Err() != nil {
				return false
			}
			continue
		}
		if strings.EqualFold(level, "READ-COMMITTED") {
			s.txOpts.Store(&sql.TxOptions{})
		}
		return true
	}
	return true
}

// txOptions are the options of the store's transactions.
func (s *Store) txOptions() *sql.TxOptions {
	if o := s.txOpts.Load(); o != nil {
		return o
	}
	return s.q.txOptions
}

// exec runs query in tx, or on its own when tx is nil, prepared when the
// store's statements are.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	st := s.stmt(query)
	switch {
	case tx == nil && st != nil:
		return st.ExecContext(ctx, args...)
	case tx == nil:
		return s.db.ExecContext(ctx, query, args...)
	case st != nil:
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	default:
		return tx.ExecContext(ctx, query, args...)
	}
}

// queryRow reads one row like exec runs a statement.
func (s *Store) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) *sql.Row {
	st := s.stmt(query)
	switch {
	case tx == nil && st != nil:
		return st.QueryRowContext(ctx, args...)
	case tx == nil:
		return s.db.QueryRowContext(ctx, query, args...)
	case st != nil:
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	default:
		return tx.QueryRowContext(ctx, query, args...)
	}
}

func (s *Store) stmt(query string) *sql.Stmt {
	m := s.prep.stmts.Load()
	if m == nil {
		return nil
	}
	return (*m)[query]
}

// histMarker stands for the database clock in a history built in Go and
// completed by a statement (see histPieces). No real time equals it.
const histMarker int64 = -7_777_777_777_777

// histPieces returns the JSON of h split at every histMarker: the pieces
// between which a statement puts its clock.
func histPieces(h []histEntry) ([]string, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode history: %w", err)
	}
	return strings.Split(string(b), strconv.FormatInt(histMarker, 10)), nil
}

// claimFast claims req with one statement when the key has no row: it
// inserts the record IN_PROGRESS. ok is false when a row exists: then
// Store.claim decides. prior, the deliveries the broker reports before
// this one, only makes the previous attempt's outcome unknown (it left no
// record); it is not charged, since a broker also counts the deliveries
// that were nacked without an attempt (in progress elsewhere, a paused
// consumer).
//
// With tx nil the statement commits on its own; otherwise it runs in tx.
func (s *Store) claimFast(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest, prior int, async bool) (res idempotency.ClaimResult, r row, ok bool, err error) {
	token := newToken()
	r = row{
		state: string(idempotency.StateInProgress), fingerprint: req.Fingerprint, token: token,
		attempts: 1, reopenedBy: req.Reopen,
		history: []histEntry{{Attempt: 1, Started: histMarker, Result: idempotency.ResultInProgress,
			TraceID: req.TraceID, SpanID: req.SpanID}},
	}
	h, err := histPieces(r.history)
	if err != nil || len(h) != 2 {
		return res, r, false, err
	}
	q := s.fq.claimNew
	if async {
		q = s.fq.claimNewAsync
	}
	args := q.argv(map[string]any{
		"ns": req.Namespace, "key": req.Key, "fp": req.Fingerprint, "token": token, "attempts": 1,
		"lease": ms(req.Lease), "expires": ms(req.Lease) + ms(s.retention), "h0": h[0], "h1": h[1],
		"reopen": req.Reopen, "skew": s.skew.Load(),
	})
	var until int64
	if s.fq.claimNewReturns {
		if err := s.queryRow(ctx, tx, q.sql, args...).Scan(&until); errors.Is(err, sql.ErrNoRows) {
			return res, r, false, nil
		} else if err != nil {
			return res, r, false, fmt.Errorf("insert: %w", err)
		}
	} else {
		result, err := s.exec(ctx, tx, q.sql, args...)
		if err != nil {
			return res, r, false, fmt.Errorf("insert: %w", err)
		}
		if until, err = insertedID(result); err != nil || until == 0 {
			return res, r, false, err
		}
	}
	r.leaseUntil = until
	r.history[0].Started = until - ms(req.Lease) // the statement's clock
	prev := idempotency.Previous{}
	if prior > 0 {
		prev.Result = idempotency.PreviousUnknown
	}
	return idempotency.ClaimResult{
		Status: idempotency.Acquired,
		Lease: idempotency.Lease{
			Namespace: req.Namespace, Key: req.Key, Token: token, Attempt: 1, Until: fromMs(until),
		},
		Previous: prev,
	}, r, true, nil
}

// claimCommitted claims req and commits the claim: one statement for a key
// without a row, else a transaction of Store.claim. It returns the record
// as written when Acquired.
func (s *Store) claimCommitted(ctx context.Context, req idempotency.ClaimRequest, prior int, async bool) (idempotency.ClaimResult, row, error) {
	if async {
		s.prepare(ctx, s.fq.claimNewAsync.sql)
	} else {
		s.prepare(ctx, s.fq.claimNew.sql)
	}
	for try := 0; try < 3; try++ {
		// A new key: one statement, committed on its own.
		if res, r, ok, err := s.claimFast(ctx, nil, req, prior, async); err != nil || ok {
			return res, r, err
		}
		s.prepare(ctx, s.claimTexts()...)
		// The key has a row. SQLite: the insert goes again into the
		// transaction, as its first statement, which takes the write lock
		// (and claims the key if the row has gone meanwhile).
		var (
			res   idempotency.ClaimResult
			r     row
			found bool
		)
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			if s.dialect == SQLite {
				var err error
				if res, r, found, err = s.claimFast(ctx, tx, req, prior, async); err != nil || found {
					return err
				}
			}
			var err error
			res, r, found, err = s.claim(ctx, tx, req)
			return err
		})
		if err != nil || found {
			return res, r, err
		}
		// The row vanished (a Purge) between the insert and the lock: again.
	}
	return idempotency.ClaimResult{}, row{}, errors.New("the record's row vanished three times during the claim")
}

// closedAttempt is the end of an attempt as the fenced statements write it
// into the open history entry, in place of its "result" member.
type closedAttempt struct {
	Result string `json:"result"`
	Ended  int64  `json:"ended_ms"`
	Error  string `json:"error,omitempty"`
	Type   string `json:"type,omitempty"`
	Reason string `json:"reason,omitempty"`
	Stack  string `json:"stack,omitempty"`
}

// closePieces returns the members of c as JSON, without the braces, split
// where its end time goes: the c0 and c1 arguments of the fenced
// statements, between which they put their clock.
func closePieces(c closedAttempt) (c0, c1 string, err error) {
	c.Ended = histMarker
	b, err := json.Marshal(c)
	if err != nil {
		return "", "", fmt.Errorf("encode history: %w", err)
	}
	// The first occurrence is the end time: it comes before the strings,
	// which could hold the same digits.
	c0, c1, _ = strings.Cut(string(b[1:len(b)-1]), strconv.FormatInt(histMarker, 10))
	return c0, c1, nil
}

// fenced runs q, one of the fenced statements, on its own (its own
// commit), or in tx when tx is not nil, and reports whether it changed the
// record: false when the lease is no longer the record's current, open one.
// Each of them changes the state or the lease expiry of the row it
// matches (updated_at_ms too), so the count of changed rows is that of
// matched rows, whether or not the driver counts found rows (MySQL's
// clientFoundRows); Extend within the same millisecond is the exception,
// which extendLease reads back.
func (s *Store) fenced(ctx context.Context, tx *sql.Tx, q stmtText, v map[string]any) (bool, error) {
	v["skew"] = s.skew.Load()
	res, err := s.exec(ctx, tx, q.sql, q.argv(v)...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// completeIn marks the record of lease DONE with outcome out (nil for
// none) with one fenced statement, on its own when tx is nil.
func (s *Store) completeIn(ctx context.Context, tx *sql.Tx, lease idempotency.Lease, out []byte) (bool, error) {
	c0, c1, err := closePieces(closedAttempt{Result: idempotency.ResultDone})
	if err != nil {
		return false, err
	}
	var outcome any
	if out != nil {
		outcome = string(out)
	}
	return s.fenced(ctx, tx, s.fq.complete, map[string]any{
		"outcome": outcome, "retention": ms(s.retention), "c0": c0, "c1": c1,
		"ns": lease.Namespace, "key": lease.Key, "token": lease.Token,
	})
}

// extendLease moves the lease expiry of lease to the database clock plus
// d with one fenced statement (on MySQL, and then a read of the expiry)
// and returns it; ok is false when the lease is lost.
func (s *Store) extendLease(ctx context.Context, lease idempotency.Lease, d time.Duration) (until int64, ok bool, err error) {
	q := s.fq.extend
	v := map[string]any{
		"ext": ms(d), "retention": ms(s.retention),
		"ns": lease.Namespace, "key": lease.Key, "token": lease.Token, "skew": s.skew.Load(),
	}
	if s.fq.extendReturns {
		err := s.queryRow(ctx, nil, q.sql, q.argv(v)...).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return until, err == nil, err
	}
	if _, err := s.exec(ctx, nil, q.sql, q.argv(v)...); err != nil {
		return 0, false, err
	}
	// MySQL counts a row set to the values it had (an extension within
	// the millisecond of the previous one) as unchanged: whether the
	// lease is still open tells instead. The extension made it open for
	// d plus the retention; had the update not matched, the record would
	// still be past its retention, or no longer this lease's.
	c := s.fq.extendCheck
	err = s.queryRow(ctx, nil, c.sql, c.argv(v)...).Scan(&until)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return until, err == nil, err
}

// insertedID is what a MySQL claimNew or insertDone reports as its last
// insert ID: the value it wrapped in LAST_INSERT_ID(), a time after 1970
// when it inserted its row; 0 when the key had a row.
func insertedID(res sql.Result) (int64, error) {
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("insert: %w", err)
	}
	return id, nil
}

// claimTexts are the statements of Store.claim, the claim of a key with
// a row.
func (s *Store) claimTexts() []string {
	texts := []string{s.q.selectRow, s.q.save}
	if !s.q.selectNow {
		texts = append(texts, s.q.now)
	}
	return texts
}
