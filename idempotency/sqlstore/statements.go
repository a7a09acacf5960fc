package sqlstore

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

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

// histMarker stands for the database clock in a history built in Go and
// completed by a statement (see histPieces). No real time equals it.
const histMarker int64 = -7_777_777_777_777

// histPieces returns the JSON of h split at every histMarker: the pieces
// between which a statement puts its clock. Only a time member's value is
// a split point (`_ms":` then the marker), never the same digits inside a
// text (an error, an owner): in a JSON string a quote is escaped.
func histPieces(h []histEntry) ([]string, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode history: %w", err)
	}
	const member = `_ms":`
	pieces := strings.Split(string(b), member+strconv.FormatInt(histMarker, 10))
	for i := range len(pieces) - 1 {
		pieces[i] += member
	}
	return pieces, nil
}
