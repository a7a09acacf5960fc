package sqlarchive

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/surely-dev/surely/dlq"
	"github.com/surely-dev/surely/dlq/archive"
	"github.com/surely-dev/surely/idempotency/sqlstore"
	"github.com/surely-dev/surely/internal/archivekit"
	"github.com/surely-dev/surely/internal/envelope"
	"github.com/surely-dev/surely/internal/idem"
	"github.com/surely-dev/surely/internal/options"
)

// defaultPrefix is the table name prefix unless archive.WithPrefix is given: the
// tables are surely_dlq_entries, surely_dlq_replayed and surely_dlq_runs.
const defaultPrefix = "surely_dlq"

// batch bounds the IDs of one IN list (Delete, ReplayedBy lookups).
const batch = 500

// maxSite bounds the call site column (MySQL's is VARCHAR(512)); the
// envelope's is at most 256 bytes.
const maxSite = 512

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Archive is an archive.Archive on a SQL database. It is safe for concurrent use.
type Archive struct {
	db        *sql.DB
	dialect   dialect
	prefix    string
	entries   string // quoted table names
	replayed  string
	runs      string
	seqLock   string
	counts    string
	now       func() time.Time
	log       *slog.Logger
	retention time.Duration
}

var _ archive.Archive = (*Archive)(nil)

// New returns an archive on db, a database of the given dialect. It
// neither connects nor touches the schema: call Migrate first. It never
// closes db. It takes archive.WithPrefix (the prefix of the table names,
// default "surely_dlq"; it must match [a-z_][a-z0-9_]{0,39}: lower case,
// so it means the same quoted and unquoted in every dialect, and short
// enough for index names), dlq.WithRetention (default: keep
// everything, Prune deletes nothing), dlq.WithClock (stamps ArchivedAt and
// the age Prune measures; default time.Now) and dlq.WithLogger (Prune's
// reports; default: discard).
func New(db *sql.DB, d sqlstore.Dialect, opts ...dlq.Option) (*Archive, error) {
	dl := dialect(d)
	if db == nil {
		return nil, fmt.Errorf("%w: sqlarchive: nil *sql.DB", dlq.ErrInvalidOption)
	}
	if !dl.valid() {
		return nil, fmt.Errorf("%w: sqlarchive: unknown dialect %d (want sqlstore.Postgres, MySQL or SQLite)", dlq.ErrInvalidOption, d)
	}
	s, err := options.Apply(dlq.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := s.Check(dlq.ErrInvalidOption, "sqlarchive.New", archivekit.PrefixOption,
		options.Retention, options.Clock, options.Logger); err != nil {
		return nil, err
	}
	prefix := options.Get(s, archivekit.PrefixOption, defaultPrefix)
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("%w: sqlarchive: table prefix %q must match [a-z_][a-z0-9_]{0,39}", dlq.ErrInvalidOption, prefix)
	}
	a := &Archive{
		db: db, dialect: dl,
		prefix:    prefix,
		now:       options.Get(s, options.Clock, time.Now),
		log:       options.Get(s, options.Logger, slog.New(slog.DiscardHandler)),
		retention: options.Get(s, options.Retention, time.Duration(0)),
	}
	a.entries = dl.quote(a.prefix + "_entries")
	a.replayed = dl.quote(a.prefix + "_replayed")
	a.runs = dl.quote(a.prefix + "_runs")
	a.seqLock = dl.quote(a.prefix + "_seqlock")
	a.counts = dl.quote(a.prefix + "_counts")
	return a, nil
}

// Migrate creates the tables and indexes unless they exist (CREATE ... IF
// NOT EXISTS), and adds the lifecycle columns (state, state_at, note,
// failed_again_as) and their index to an entries table created before
// them: its entries are then open. On MySQL it turns the text columns of
// tables of earlier versions into binary ones (see the package doc's
// Upgrades). It then counts the entries again. It is idempotent and keeps
// every row.
// Run it from one process at a time (a deploy step).
func (a *Archive) Migrate(ctx context.Context) error {
	for _, stmt := range a.dialect.ddl(a.prefix) {
		if _, err := a.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlarchive: migrate %s: %w", a.prefix, err)
		}
	}
	for _, col := range a.dialect.lifecycleColumns() {
		if a.hasColumn(ctx, col[0]) {
			continue
		}
		stmt := "ALTER TABLE " + a.entries + " ADD COLUMN " + strings.ReplaceAll(col[1], "{p}", a.prefix)
		if _, err := a.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlarchive: migrate %s: add column %s: %w", a.prefix, col[0], err)
		}
	}
	if stmt := a.dialect.stateIndex(a.prefix); stmt != "" {
		if _, err := a.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlarchive: migrate %s: %w", a.prefix, err)
		}
	}
	if err := a.stateTimeIndex(ctx); err != nil {
		return err
	}
	if err := a.upgradeColumns(ctx); err != nil {
		return err
	}
	// After the upgrades: counts kept on columns that merged values are
	// counted again, per exact value.
	return a.recount(ctx)
}

// hasColumn reports whether the entries table has column col: a query
// that names it succeeds.
func (a *Archive) hasColumn(ctx context.Context, col string) bool {
	rows, err := a.db.QueryContext(ctx, "SELECT "+col+" FROM "+a.entries+" WHERE 1 = 0")
	if err != nil {
		return false
	}
	_ = rows.Close()
	return rows.Err() == nil
}

// tables returns the names of the archive's tables (see the package doc).
func (a *Archive) tables() []string {
	tables := []string{a.prefix + "_entries", a.prefix + "_replayed", a.prefix + "_runs", a.prefix + "_counts"}
	if a.dialect == dMySQL {
		tables = append(tables, a.prefix+"_seqlock")
	}
	return tables
}

func (a *Archive) q(s string) string { return a.dialect.rebind(s) }

// text makes a value storable in a text column of every dialect (valid
// UTF-8, no NUL). The exact value stays in the metadata blob; the columns
// only serve filtering and stats.
func text(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Publish stores the messages as entries in one transaction; the topic is
// ignored. A message whose UUID is already archived increments that
// entry's Copies. The statements use the first message's context. A
// message without a UUID fails the whole call with archive.ErrNoID before
// anything is stored.
func (a *Archive) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m == nil || m.UUID == "" {
			return fmt.Errorf("sqlarchive: publish: %w", archive.ErrNoID)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	ctx := msgs[0].Context()
	cols := "(id, payload, metadata, copies, archived_at, reason, original_topic, handler, op_key, error, error_type, dead_lettered_at, replay_id, error_site, state, state_at, note, failed_again_as)"
	vals := " VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', 0, '', '')"
	var stmt string
	switch a.dialect {
	case dMySQL:
		stmt = "INSERT INTO " + a.entries + " " + cols + vals + " ON DUPLICATE KEY UPDATE copies = copies + 1"
	default:
		stmt = a.q("INSERT INTO " + a.entries + " AS e " + cols + vals + " ON CONFLICT (id) DO UPDATE SET copies = e.copies + 1 RETURNING copies")
	}
	return a.inTx(ctx, func(tx *sql.Tx) error {
		if err := a.lock(ctx, tx); err != nil {
			return err
		}
		d := deltas{}
		for _, m := range msgs {
			now := a.now()
			e := archivekit.Entry(m, now)
			payload := []byte(m.Payload)
			if payload == nil {
				payload = []byte{}
			}
			g := group{text(string(e.Reason)), text(e.OriginalTopic), text(e.Handler), text(envelope.RootErrorType(e.ErrorTypes)),
				text(idem.Truncate(e.ErrorSite, maxSite)), string(archive.StateOpen)}
			args := []any{m.UUID, payload, encodeMetadata(m.Metadata), now.UnixNano(),
				g.reason, g.topic, g.handler, text(e.OperationKey), text(e.Error),
				g.etype, e.DeadLetteredAt.UnixNano(), text(m.Metadata.Get(dlq.KeyReplayID)), g.site}
			first, err := a.insert(ctx, tx, stmt, args)
			if err != nil {
				return fmt.Errorf("sqlarchive: publish %q: %w", m.UUID, err)
			}
			if !first {
				continue // a copy: counted once, linked once
			}
			d[g]++
			if err := a.linkFailedAgain(ctx, tx, m); err != nil {
				return err
			}
		}
		// The counts last: every transaction that changes them takes
		// the entries' rows before the counts' (see lock).
		return a.applyCounts(ctx, tx, d)
	})
}

// insert runs the upsert of one entry and reports whether it stored a
// new entry (not a copy of an archived one).
func (a *Archive) insert(ctx context.Context, tx *sql.Tx, stmt string, args []any) (bool, error) {
	if a.dialect == dMySQL {
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return false, err
		}
		// 1 for an insert, 2 for an update of the copies.
		n, err := res.RowsAffected()
		return n == 1, err
	}
	var copies int
	err := tx.QueryRowContext(ctx, stmt, args...).Scan(&copies)
	return copies == 1, err
}

// linkFailedAgain makes the entry that m's replayed message came from
// (dlq.KeyReplayOf) name m as its FailedAgainAs; m was just stored
// as a new entry (its first copy): m is the dead letter of a replay that
// failed again.
func (a *Archive) linkFailedAgain(ctx context.Context, tx *sql.Tx, m *message.Message) error {
	of := m.Metadata.Get(dlq.KeyReplayOf)
	if of == "" || of == m.UUID {
		return nil
	}
	if _, err := tx.ExecContext(ctx, a.q("UPDATE "+a.entries+" SET failed_again_as = ? WHERE id = ?"), m.UUID, of); err != nil {
		return fmt.Errorf("sqlarchive: publish %q: link %q: %w", m.UUID, of, err)
	}
	return nil
}

// lock takes the archive's write lock, held until tx ends. Every
// transaction that adds, changes or removes entries takes it first:
//
//   - Publish, so that publishes take their Seqs (the auto-increment of
//     the entries table) one transaction at a time: Seq order is then
//     commit order, and a cursor never passes an entry that commits later;
//   - every writer, so that the counts table (Stats) changes with the
//     entries it counts, without a count read between another
//     transaction's read and write.
//
// PostgreSQL: a transaction-level advisory lock keyed by the entries
// table's name (in memory; a row lock writes the row and wakes every
// waiter). MySQL: the row lock of the seqlock table. SQLite runs one write
// transaction at a time: a write that changes nothing takes its lock
// before the transaction reads anything (a SQLite transaction that read
// first would have to upgrade its lock, and fail busy under concurrency).
func (a *Archive) lock(ctx context.Context, tx *sql.Tx) error {
	var err error
	switch a.dialect {
	case dPostgres:
		// The key names the table in the statement's text, so that
		// pg_stat_activity shows whose lock a writer waits for.
		_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('surely_dlq_seq:"+a.prefix+"', 0))")
	case dMySQL:
		var id int
		err = tx.QueryRowContext(ctx, "SELECT id FROM "+a.seqLock+" WHERE id = 1 FOR UPDATE").Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			err = errors.New(a.seqLock + " has no row: run Migrate")
		}
	default:
		_, err = tx.ExecContext(ctx, "UPDATE "+a.counts+" SET n = n WHERE 1 = 0")
	}
	if err != nil {
		return fmt.Errorf("sqlarchive: take the write lock: %w", err)
	}
	return nil
}

func (a *Archive) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlarchive: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlarchive: commit: %w", err)
	}
	return nil
}

// Close does nothing; the caller's *sql.DB stays open.
func (a *Archive) Close() error { return nil }

// where renders f as a WHERE clause (with leading " WHERE", or "") and its
// arguments, after the seq bound.
func (a *Archive) where(f archive.Filter, after int64) (string, []any) {
	conds := []string{"e.seq > ?"}
	args := []any{after}
	if len(f.IDs) > 0 {
		ph := strings.TrimSuffix(strings.Repeat("?, ", len(f.IDs)), ", ")
		conds = append(conds, "e.id IN ("+ph+")")
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	gc, ga := a.groupConds(f, "e.")
	conds, args = append(conds, gc...), append(args, ga...)
	eq := func(col, v string) {
		if v != "" {
			conds = append(conds, col+" = ?")
			args = append(args, text(v))
		}
	}
	eq("e.op_key", f.Key)
	eq("e.replay_id", f.ReplayID)
	if f.ErrorContains != "" {
		conds = append(conds, a.contains("e.error"))
		args = append(args, text(f.ErrorContains))
	}
	if f.Search != "" {
		conds = append(conds, "("+a.contains("e.op_key")+" OR "+a.contains("e.error")+")")
		args = append(args, text(f.Search), text(f.Search))
	}
	if !f.DeadLetteredAfter.IsZero() {
		conds = append(conds, "e.dead_lettered_at > ?")
		args = append(args, f.DeadLetteredAfter.UnixNano())
	}
	if !f.DeadLetteredBefore.IsZero() {
		conds = append(conds, "e.dead_lettered_at < ?")
		args = append(args, f.DeadLetteredBefore.UnixNano())
	}
	if f.NotReplayedBy != "" {
		conds = append(conds, "NOT EXISTS (SELECT 1 FROM "+a.replayed+" r WHERE r.entry_id = e.id AND r.replay_id = ?)")
		args = append(args, f.NotReplayedBy)
	}
	if f.ReplayedBy != "" {
		conds = append(conds, "EXISTS (SELECT 1 FROM "+a.replayed+" r WHERE r.entry_id = e.id AND r.replay_id = ?)")
		args = append(args, f.ReplayedBy)
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// contains is the condition that col contains the argument, literally
// (no LIKE wildcards).
func (a *Archive) contains(col string) string {
	switch a.dialect {
	case dPostgres:
		return "strpos(" + col + ", ?) > 0"
	case dMySQL:
		return "LOCATE(?, " + col + ") > 0"
	}
	return "instr(" + col + ", ?) > 0"
}

const (
	entryCols = "e.seq, e.id, e.payload, e.metadata, e.copies, e.archived_at, e.state, e.state_at, e.note, e.failed_again_as"
	// bareCols are entryCols without the payload (Page.OmitPayload).
	bareCols = "e.seq, e.id, e.metadata, e.copies, e.archived_at, e.state, e.state_at, e.note, e.failed_again_as"
)

// placeholders returns n comma-separated "?".
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Get returns one entry, or archive.ErrNotFound.
func (a *Archive) Get(ctx context.Context, id string) (archive.Entry, error) {
	out, err := a.List(ctx, archive.Filter{IDs: []string{id}}, archive.Page{Limit: 1})
	if err != nil {
		return archive.Entry{}, err
	}
	if len(out) == 0 {
		return archive.Entry{}, fmt.Errorf("sqlarchive: %q: %w", id, archive.ErrNotFound)
	}
	return out[0], nil
}

// List returns one page of the entries f selects, in Seq order: one
// query with the filter in SQL, one for the page's replay marks. With
// p.OmitPayload the query does not select the payload column.
func (a *Archive) List(ctx context.Context, f archive.Filter, p archive.Page) ([]archive.Entry, error) {
	w, args := a.where(f, p.After)
	cols := entryCols
	if p.OmitPayload {
		cols = bareCols
	}
	rows, err := a.db.QueryContext(ctx, a.q("SELECT "+cols+" FROM "+a.entries+" e"+w+" ORDER BY e.seq LIMIT ?"),
		append(args, archivekit.PageLimit(p))...)
	if err != nil {
		return nil, fmt.Errorf("sqlarchive: list: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []archive.Entry
	for rows.Next() {
		var (
			seq, at, stateAt          int64
			id, state, note, failedAs string
			payload, meta             []byte
			copies                    int
		)
		dest := []any{&seq, &id, &payload, &meta, &copies, &at, &state, &stateAt, &note, &failedAs}
		if p.OmitPayload {
			dest = slices.Delete(dest, 2, 3)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("sqlarchive: list: %w", err)
		}
		md, err := decodeMetadata(meta)
		if err != nil {
			return nil, fmt.Errorf("sqlarchive: entry %q is corrupt: %w", id, err)
		}
		msg := message.NewMessage(id, payload)
		msg.Metadata = md
		e := archivekit.Entry(msg, time.Unix(0, at).UTC())
		e.Message = msg
		e.Seq, e.Copies = seq, copies
		e.State, e.Note, e.FailedAgainAs = archive.State(state), note, failedAs
		if stateAt != 0 {
			e.StateAt = time.Unix(0, stateAt).UTC()
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlarchive: list: %w", err)
	}
	_ = rows.Close()
	if err := a.fillReplayedBy(ctx, out); err != nil {
		return nil, err
	}
	return out, nil
}

// fillReplayedBy reads the replay marks of entries, oldest first.
func (a *Archive) fillReplayedBy(ctx context.Context, entries []archive.Entry) error {
	index := make(map[string]int, len(entries))
	ids := make([]string, 0, len(entries))
	for i, e := range entries {
		index[e.ID] = i
		ids = append(ids, e.ID)
	}
	for chunk := range slices.Chunk(ids, batch) {
		ph := strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := a.db.QueryContext(ctx, a.q("SELECT entry_id, replay_id FROM "+a.replayed+" WHERE entry_id IN ("+ph+") ORDER BY ord"), args...)
		if err != nil {
			return fmt.Errorf("sqlarchive: read replay marks: %w", err)
		}
		for rows.Next() {
			var id, run string
			if err := rows.Scan(&id, &run); err != nil {
				_ = rows.Close()
				return fmt.Errorf("sqlarchive: read replay marks: %w", err)
			}
			if i, ok := index[id]; ok {
				entries[i].ReplayedBy = append(entries[i].ReplayedBy, run)
			}
		}
		err = rows.Err()
		_ = rows.Close()
		if err != nil {
			return fmt.Errorf("sqlarchive: read replay marks: %w", err)
		}
	}
	return nil
}

// Stats summarises the entries f selects. A filter of grouped columns
// only (Reason, Topic, Handler, ErrorType, States) reads the counts table
// and two index lookups; any other filter is one GROUP BY query over the
// entries it selects.
func (a *Archive) Stats(ctx context.Context, f archive.Filter) (archive.Stats, error) {
	if countable(f) {
		return a.countedStats(ctx, f)
	}
	w, args := a.where(f, 0)
	rows, err := a.db.QueryContext(ctx, a.q("SELECT "+groupCols+", COUNT(*), MIN(e.dead_lettered_at), MAX(e.dead_lettered_at) FROM "+
		a.entries+" e"+w+" GROUP BY "+groupCols), args...)
	if err != nil {
		return archive.Stats{}, fmt.Errorf("sqlarchive: stats: %w", err)
	}
	defer func() { _ = rows.Close() }()
	s := archivekit.NewStats()
	var oldest, newest int64
	for rows.Next() {
		var g group
		var n int
		var lo, hi int64
		if err := rows.Scan(&g.reason, &g.topic, &g.handler, &g.etype, &g.site, &g.state, &n, &lo, &hi); err != nil {
			return archive.Stats{}, fmt.Errorf("sqlarchive: stats: %w", err)
		}
		if s.Total == 0 || lo < oldest {
			oldest = lo
		}
		if s.Total == 0 || hi > newest {
			newest = hi
		}
		g.add(&s, n)
	}
	if err := rows.Err(); err != nil {
		return archive.Stats{}, fmt.Errorf("sqlarchive: stats: %w", err)
	}
	if s.Total > 0 {
		s.Oldest, s.Newest = time.Unix(0, oldest).UTC(), time.Unix(0, newest).UTC()
	}
	return s, nil
}

// Delete removes entries (and their replay marks) by ID and returns how
// many existed, in one transaction.
func (a *Archive) Delete(ctx context.Context, ids ...string) (int, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	n := 0
	err := a.inTx(ctx, func(tx *sql.Tx) error {
		if err := a.lock(ctx, tx); err != nil {
			return err
		}
		d := deltas{}
		for chunk := range slices.Chunk(ids, batch) {
			args := anys(chunk)
			ph := placeholders(len(chunk))
			if err := readGroups(ctx, tx, d, -1, a.groupsOf("WHERE e.id IN ("+ph+")"), args...); err != nil {
				return fmt.Errorf("sqlarchive: delete: %w", err)
			}
			if _, err := tx.ExecContext(ctx, a.q("DELETE FROM "+a.replayed+" WHERE entry_id IN ("+ph+")"), args...); err != nil {
				return fmt.Errorf("sqlarchive: delete: %w", err)
			}
			res, err := tx.ExecContext(ctx, a.q("DELETE FROM "+a.entries+" WHERE id IN ("+ph+")"), args...)
			if err != nil {
				return fmt.Errorf("sqlarchive: delete: %w", err)
			}
			k, err := res.RowsAffected()
			if err != nil {
				return fmt.Errorf("sqlarchive: delete: %w", err)
			}
			n += int(k)
		}
		return a.applyCounts(ctx, tx, d)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// anys returns ids as query arguments.
func anys(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

// Mark moves the entries to m.To and returns how many exist, in one
// transaction. A replayed mark also records the run (the replayed table).
func (a *Archive) Mark(ctx context.Context, m archive.Mark, ids ...string) (int, error) {
	if err := archivekit.CheckMark(m); err != nil {
		return 0, err
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	now := a.now().UnixNano()
	set := "state = ?, state_at = ?, note = ?"
	n := 0
	err := a.inTx(ctx, func(tx *sql.Tx) error {
		if err := a.lock(ctx, tx); err != nil {
			return err
		}
		d := deltas{}
		for chunk := range slices.Chunk(ids, batch) {
			args := anys(chunk)
			in := " WHERE id IN (" + placeholders(len(chunk)) + ")"
			// The entries that change state leave their group for the
			// same group in the new state.
			moved := deltas{}
			if err := readGroups(ctx, tx, moved, 1, a.groupsOf("WHERE e.id IN ("+placeholders(len(chunk))+") AND e.state <> ?"),
				append(slices.Clone(args), string(m.To))...); err != nil {
				return fmt.Errorf("sqlarchive: mark: %w", err)
			}
			for g, k := range moved {
				d[g] -= k
				g.state = string(m.To)
				d[g] += k
			}
			if _, err := tx.ExecContext(ctx, a.q("UPDATE "+a.entries+" SET "+set+in),
				append([]any{string(m.To), now, text(m.Note)}, args...)...); err != nil {
				return fmt.Errorf("sqlarchive: mark: %w", err)
			}
			if m.To == archive.StateReplayed {
				if err := a.addReplayMarks(ctx, tx, chunk, m.Run); err != nil {
					return err
				}
			}
			var k int
			if err := tx.QueryRowContext(ctx, a.q("SELECT COUNT(*) FROM "+a.entries+in), args...).Scan(&k); err != nil {
				return fmt.Errorf("sqlarchive: mark: %w", err)
			}
			n += k
		}
		return a.applyCounts(ctx, tx, d)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// addReplayMarks records that run republished the entries ids (once per
// run; the IDs that exist).
func (a *Archive) addReplayMarks(ctx context.Context, tx *sql.Tx, ids []string, run string) error {
	sel := " SELECT ?, ? WHERE EXISTS (SELECT 1 FROM " + a.entries + " WHERE id = ?)"
	if a.dialect == dPostgres {
		sel = " SELECT CAST(? AS TEXT), CAST(? AS TEXT) WHERE EXISTS (SELECT 1 FROM " + a.entries + " WHERE id = ?)"
	}
	var stmt string
	switch a.dialect {
	case dMySQL:
		stmt = "INSERT IGNORE INTO " + a.replayed + " (entry_id, replay_id)" + sel
	default:
		stmt = a.q("INSERT INTO " + a.replayed + " (entry_id, replay_id)" + sel + " ON CONFLICT DO NOTHING")
	}
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, stmt, id, run, id); err != nil {
			return fmt.Errorf("sqlarchive: mark %q replayed: %w", id, err)
		}
	}
	return nil
}

// SaveReplay stores (creates or updates) a replay run, as JSON.
func (a *Archive) SaveReplay(ctx context.Context, run archive.ReplayRun) error {
	if run.ID == "" {
		return fmt.Errorf("%w: sqlarchive: replay run without ID", dlq.ErrInvalidOption)
	}
	b, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("sqlarchive: encode replay %q: %w", run.ID, err)
	}
	var stmt string
	switch a.dialect {
	case dMySQL:
		stmt = "INSERT INTO " + a.runs + " (id, body) VALUES (?, ?) ON DUPLICATE KEY UPDATE body = VALUES(body)"
	default:
		stmt = a.q("INSERT INTO " + a.runs + " (id, body) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body")
	}
	if _, err := a.db.ExecContext(ctx, stmt, run.ID, string(b)); err != nil {
		return fmt.Errorf("sqlarchive: save replay %q: %w", run.ID, err)
	}
	return nil
}

// LoadReplay reads a replay run back, or returns archive.ErrNotFound.
func (a *Archive) LoadReplay(ctx context.Context, id string) (archive.ReplayRun, error) {
	var body string
	err := a.db.QueryRowContext(ctx, a.q("SELECT body FROM "+a.runs+" WHERE id = ?"), id).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return archive.ReplayRun{}, fmt.Errorf("sqlarchive: replay %q: %w", id, archive.ErrNotFound)
	}
	if err != nil {
		return archive.ReplayRun{}, fmt.Errorf("sqlarchive: load replay %q: %w", id, err)
	}
	var run archive.ReplayRun
	if err := json.Unmarshal([]byte(body), &run); err != nil {
		return archive.ReplayRun{}, fmt.Errorf("sqlarchive: replay %q is corrupt: %w", id, err)
	}
	return run, nil
}

// ListReplays returns every replay run, the most recently started first.
func (a *Archive) ListReplays(ctx context.Context) ([]archive.ReplayRun, error) {
	rows, err := a.db.QueryContext(ctx, "SELECT id, body FROM "+a.runs)
	if err != nil {
		return nil, fmt.Errorf("sqlarchive: list replays: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []archive.ReplayRun
	for rows.Next() {
		var id, body string
		if err := rows.Scan(&id, &body); err != nil {
			return nil, fmt.Errorf("sqlarchive: list replays: %w", err)
		}
		var run archive.ReplayRun
		if err := json.Unmarshal([]byte(body), &run); err != nil {
			return nil, fmt.Errorf("sqlarchive: replay %q is corrupt: %w", id, err)
		}
		out = append(out, run)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlarchive: list replays: %w", err)
	}
	archivekit.SortRuns(out)
	return out, nil
}

// Prune deletes the entries dead-lettered longer ago than the retention
// (dlq.WithRetention) with their replay marks, in one transaction, logs how
// many, and returns the count. Without a retention it deletes nothing.
func (a *Archive) Prune(ctx context.Context) (int, error) {
	if a.retention == 0 {
		return 0, nil
	}
	cutoff := a.now().Add(-a.retention)
	var n int64
	err := a.inTx(ctx, func(tx *sql.Tx) error {
		if err := a.lock(ctx, tx); err != nil {
			return err
		}
		d := deltas{}
		if err := readGroups(ctx, tx, d, -1, a.groupsOf("WHERE e.dead_lettered_at < ?"), cutoff.UnixNano()); err != nil {
			return fmt.Errorf("sqlarchive: prune: %w", err)
		}
		old := "SELECT id FROM " + a.entries + " WHERE dead_lettered_at < ?"
		if a.dialect == dMySQL {
			// A derived table, so MySQL materialises the subquery first.
			old = "SELECT id FROM (" + old + ") o"
		}
		if _, err := tx.ExecContext(ctx, a.q("DELETE FROM "+a.replayed+" WHERE entry_id IN ("+old+")"), cutoff.UnixNano()); err != nil {
			return fmt.Errorf("sqlarchive: prune: %w", err)
		}
		res, err := tx.ExecContext(ctx, a.q("DELETE FROM "+a.entries+" WHERE dead_lettered_at < ?"), cutoff.UnixNano())
		if err != nil {
			return fmt.Errorf("sqlarchive: prune: %w", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return a.applyCounts(ctx, tx, d)
	})
	if err != nil {
		return 0, err
	}
	level := slog.LevelInfo
	if n == 0 {
		level = slog.LevelDebug
	}
	a.log.Log(ctx, level, "dead-letter archive pruned", "deleted", n, "retention", a.retention.String(), "cutoff", cutoff, "tables", a.prefix)
	return int(n), nil
}

// encodeMetadata writes metadata byte for byte: a count, then each key and
// value with its length (unsigned varints), keys sorted.
func encodeMetadata(md message.Metadata) []byte {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range md {
			if !yield(k) {
				return
			}
		}
	})
	b := binary.AppendUvarint(nil, uint64(len(keys)))
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		v := md[k]
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

var errCorrupt = errors.New("malformed metadata")

func decodeMetadata(b []byte) (message.Metadata, error) {
	next := func() (string, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return "", errCorrupt
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, nil
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) {
		return nil, errCorrupt
	}
	b = b[k:]
	md := make(message.Metadata, count)
	for range count {
		key, err := next()
		if err != nil {
			return nil, err
		}
		v, err := next()
		if err != nil {
			return nil, err
		}
		md[key] = v
	}
	if len(b) != 0 {
		return nil, errCorrupt
	}
	return md, nil
}
