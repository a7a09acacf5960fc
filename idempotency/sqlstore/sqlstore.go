package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/options"
)

// Defaults of the options.
const (
	DefaultTable     = "surely_inbox"
	DefaultRetention = 24 * time.Hour
)

// MaxFingerprintLen is the longest payload fingerprint a Claim accepts, in
// bytes (the MySQL column is VARBINARY(255)). The fingerprints surely
// computes are 64 hex digits (SHA-256).
const MaxFingerprintLen = 255

// Store is an idempotency.Store on a SQL database (PostgreSQL, MySQL or
// MariaDB, SQLite), and the transactional inbox (see Inbox). It is safe for
// concurrent use, by many processes sharing the database; it keeps no state
// of its own besides its configuration and starts no goroutine.
//
// It never closes the *sql.DB it was given: the caller owns it and closes it
// after the last call to the store.
type Store struct {
	db        *sql.DB
	dialect   Dialect
	table     string
	retention time.Duration
	logger    *slog.Logger
	q         queries
	fq        fastQueries
	prep      prepared
	// txOpts replaces q.txOptions once a probe found that the sessions'
	// own isolation is the one the store needs (MySQL).
	txOpts atomic.Pointer[sql.TxOptions]
	// inTxClaims: the inbox may take the dedup step's claim into its own
	// transaction (WithInTxClaims).
	inTxClaims bool
	// skew is added to the database clock, in milliseconds. Only this
	// package's tests set it (to move a store's clock without sleeping).
	skew atomic.Int64
}

// Names of the store's own options.
const (
	optTable      = "WithTable"
	optInTxClaims = "WithInTxClaims"
)

var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// addColumnRE matches the ADD COLUMN statements of the schema files:
// the quoted table and the column.
var addColumnRE = regexp.MustCompile("^ALTER TABLE ([\"`][a-z0-9_]+[\"`]) ADD COLUMN ([a-z_]+) ")

// WithTable sets the table of the records (default "surely_inbox"). The name
// must match [a-z_][a-z0-9_]{0,47}: lower case, so that it means the same
// quoted and unquoted in every dialect, and short enough for its index names
// (name + "_created_idx", name + "_expires_idx") to fit every dialect's
// identifier limit. It is
// quoted in every statement. To use another PostgreSQL schema, set the
// connection's search_path.
func WithTable(name string) idempotency.Option {
	return func(s *options.Set) error {
		if !tableRE.MatchString(name) {
			return fmt.Errorf("%w: sqlstore: table name %q must match [a-z_][a-z0-9_]{0,47}", idempotency.ErrInvalidOption, name)
		}
		s.Put(optTable, name)
		return nil
	}
}

// WithInTxClaims lets the transactional inbox make the dedup step's claim
// inside its own transaction: for a first delivery from a broker that
// counts deliveries, one transaction (BEGIN, one INSERT of the DONE record,
// the handler's statements, COMMIT); for any other delivery the claim
// commits on its own first (one INSERT) and the effect's transaction
// begins with a fenced DONE update. See "Transactional inbox" in the
// package doc for the crash analysis.
//
// Use it only when the handler of the chain is the Inbox handler itself,
// with nothing before or beside it: once the inbox has accepted, the dedup
// step no longer claims before the handler runs, so code outside the
// inbox's transaction would run for a duplicate too. Without it (the
// default) the dedup step claims first, in a commit of its own, and the
// inbox marks DONE in the effect's transaction.
func WithInTxClaims() idempotency.Option {
	return func(s *options.Set) error {
		s.Put(optInTxClaims, true)
		return nil
	}
}

// New returns a store on db, a database of the given dialect. It neither
// connects nor touches the schema: call Migrate (or apply the schema files)
// before the first claim.
//
// Options: WithTable, WithInTxClaims, and of the common ones
// idempotency.WithRetention (default DefaultRetention, at least 1ms; an
// expired record reads as absent at once, Purge deletes expired rows) and
// idempotency.WithLogger (default: discard; the store logs Migrate's
// warnings about the SQLite configuration and what Purge deleted). Any
// other option (idempotency.WithClock: the store's times come from the
// database's clock) is an error wrapping idempotency.ErrInvalidOption.
//
// The store never closes db: the caller owns it and closes it after the last
// call to the store.
func New(db *sql.DB, dialect Dialect, opts ...idempotency.Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlstore: nil *sql.DB", idempotency.ErrInvalidOption)
	}
	if dialect.schemaFile() == "" {
		return nil, fmt.Errorf("%w: sqlstore: unknown dialect %v", idempotency.ErrInvalidOption, dialect)
	}
	set, err := options.Apply(idempotency.ErrInvalidOption, opts)
	if err != nil {
		return nil, err
	}
	if err := set.Check(idempotency.ErrInvalidOption, "sqlstore.New",
		optTable, options.Retention, options.Logger, optInTxClaims); err != nil {
		return nil, err
	}
	s := &Store{
		db:         db,
		dialect:    dialect,
		table:      options.Get(set, optTable, DefaultTable),
		retention:  options.Get(set, options.Retention, DefaultRetention),
		logger:     options.Get(set, options.Logger, slog.New(slog.DiscardHandler)),
		inTxClaims: options.Get(set, optInTxClaims, false),
	}
	if s.retention < time.Millisecond {
		return nil, fmt.Errorf("%w: sqlstore: retention must be at least 1ms, got %v", idempotency.ErrInvalidOption, s.retention)
	}
	s.q = newQueries(dialect, s.table)
	s.fq = newFastQueries(dialect, quoteTable(dialect, s.table))
	return s, nil
}

var _ idempotency.Store = (*Store)(nil)

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// Migrate creates the table and its index unless they exist (CREATE ... IF
// NOT EXISTS) and adds the columns that later versions introduced to a
// table that lacks them (ALTER TABLE ... ADD COLUMN, run only when a probe
// of the column fails), running exactly the statements of the dialect's
// schema file (schema/<dialect>.sql in the module). It is idempotent, keeps
// every row, and is the only call that changes the schema. Run it from one process at a time (a deploy
// step): two concurrent first creations can collide in PostgreSQL's catalog.
//
// On SQLite it also warns (through the logger) when the connection it used
// has no busy timeout.
func (s *Store) Migrate(ctx context.Context) error {
	for _, stmt := range s.dialect.ddl(s.table) {
		if m := addColumnRE.FindStringSubmatch(stmt); m != nil {
			// Not every dialect has ADD COLUMN IF NOT EXISTS: probe the column.
			probe := "SELECT " + m[2] + " FROM " + m[1] + " WHERE 1 = 0"
			if rows, err := s.db.QueryContext(ctx, probe); err == nil {
				_ = rows.Close()
				continue
			}
		}
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("sqlstore: migrate %s: %w", s.table, err)
		}
	}
	if s.dialect == SQLite {
		var ms int64
		if err := s.db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err == nil && ms == 0 {
			s.logger.LogAttrs(ctx, slog.LevelWarn, "sqlstore: SQLite connection without a busy timeout: concurrent claims fail with SQLITE_BUSY; add _pragma=busy_timeout(5000) to the DSN")
		}
	}
	return nil
}

// Purge deletes the records whose retention has passed (they already read
// as absent), in batches of 1000 rows, each its own transaction, until none
// is left or ctx ends. It returns how many rows it deleted. Call it
// periodically (e.g. hourly) from one process; rows a claim holds are
// skipped (PostgreSQL) or waited for.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int64
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			cutoff, err := s.now(ctx, tx)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, s.q.purge, s.purgeArgs(cutoff)...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, fmt.Errorf("sqlstore: purge %s: %w", s.table, err)
		}
		total += n
		if n < purgeBatch {
			s.logger.LogAttrs(ctx, slog.LevelDebug, "sqlstore: purged expired records",
				slog.String("table", s.table), slog.Int64("deleted", total))
			return total, nil
		}
	}
}

// purgeArgs are the arguments of the purge statement at cutoff. On
// PostgreSQL and SQLite it finds its rows by the index on created_at_ms:
// a row expires a retention after its insert at the earliest (every write
// sets expires_at_ms to its clock plus at least the retention), so every
// row expired at cutoff was inserted at cutoff minus the retention or
// before, and expires_at_ms decides. With a retention longer than the
// writers', rows are deleted that much later (they read as absent anyway).
func (s *Store) purgeArgs(cutoff int64) []any {
	switch s.dialect {
	case Postgres:
		return []any{cutoff - ms(s.retention), cutoff, cutoff}
	case SQLite:
		return []any{cutoff - ms(s.retention), cutoff}
	default:
		return []any{cutoff}
	}
}

// inTx runs fn in a transaction of the store's isolation and commits it, or
// rolls it back when fn fails.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, s.txOptions())
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// now reads the database clock in tx, in Unix milliseconds.
func (s *Store) now(ctx context.Context, tx *sql.Tx) (int64, error) {
	var now int64
	if err := s.queryRow(ctx, tx, s.q.now).Scan(&now); err != nil {
		return 0, fmt.Errorf("read the database clock: %w", err)
	}
	return now + s.skew.Load(), nil
}

// row is a record as stored.
type row struct {
	state       string
	fingerprint string
	token       string
	attempts    int
	canceled    int
	leaseUntil  int64
	expiresAt   int64
	updatedAt   int64
	outcome     []byte // JSON of idempotency.Outcome; nil unless done
	history     []histEntry
	reopenedBy  string
	budgetBase  int
	notBefore   int64 // a FAILED record's retry-after time; 0 if none
}

// histEntry is one attempt as stored in the history column (a JSON array,
// the same shape as redisstore's). Times are milliseconds of the database
// clock.
type histEntry struct {
	Attempt int    `json:"attempt"`
	Started int64  `json:"started_ms"`
	Ended   int64  `json:"ended_ms,omitempty"`
	Result  string `json:"result"`
	Error   string `json:"error,omitempty"`
	Type    string `json:"type,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Stack   string `json:"stack,omitempty"`
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
}

// scanRow reads the columns of a record (see the columns constant) after
// the leading dest values.
func scanRow(sc interface{ Scan(...any) error }, lead ...any) (row, error) {
	var (
		r       row
		history []byte
	)
	dest := append(lead, &r.state, &r.fingerprint, &r.token, &r.attempts, &r.canceled,
		&r.leaseUntil, &r.expiresAt, &r.updatedAt, &r.outcome, &history, &r.reopenedBy, &r.budgetBase, &r.notBefore)
	if err := sc.Scan(dest...); err != nil {
		return row{}, err
	}
	if len(history) > 0 {
		if err := json.Unmarshal(history, &r.history); err != nil {
			return row{}, fmt.Errorf("decode history: %w", err)
		}
	}
	return r, nil
}

// lockRow reads the record of (namespace, key) in tx, locks it until tx
// ends and reads the database clock after the lock, in Unix milliseconds
// (in the same statement on PostgreSQL and SQLite). found is false when
// there is no row. On SQLite, whose locks are the database's, tx must
// have begun with a write (it then holds the write lock).
func (s *Store) lockRow(ctx context.Context, tx *sql.Tx, namespace, key string) (r row, now int64, found bool, err error) {
	var lead []any
	if s.q.selectNow {
		lead = append(lead, &now)
	}
	r, err = scanRow(s.queryRow(ctx, tx, s.q.selectRow, namespace, key), lead...)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, 0, false, nil
	}
	if err != nil {
		return row{}, 0, false, fmt.Errorf("select: %w", err)
	}
	if !s.q.selectNow {
		now, err = s.now(ctx, tx)
		return r, now, err == nil, err
	}
	return r, now + s.skew.Load(), true, nil
}

// save writes every column of r.
func (s *Store) save(ctx context.Context, tx *sql.Tx, namespace, key string, r row) error {
	h := r.history
	if h == nil {
		h = []histEntry{}
	}
	history, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	var outcome any
	if r.outcome != nil {
		outcome = string(r.outcome)
	}
	if _, err := s.exec(ctx, tx, s.q.save, r.state, r.fingerprint, r.token, r.attempts, r.canceled,
		r.leaseUntil, r.expiresAt, r.updatedAt, outcome, string(history), r.reopenedBy, r.budgetBase, r.notBefore, namespace, key); err != nil {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}

// newToken returns 16 random bytes in hex: a lease token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// ms rounds d up to whole milliseconds, the store's resolution.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func fromMs(v int64) time.Time {
	if v <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// Claim implements idempotency.Store. A key without a row is claimed with
// one INSERT of the whole record, which reads the database clock itself;
// a key with a row in one transaction that locks the row, reads the
// database clock and applies the state machine (on SQLite it begins with
// the INSERT again, which takes the write lock).
func (s *Store) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	if err := req.Validate(); err != nil {
		return idempotency.ClaimResult{}, err
	}
	if len(req.Fingerprint) > MaxFingerprintLen {
		return idempotency.ClaimResult{}, fmt.Errorf("%w: fingerprint of %d bytes, the limit is %d",
			idempotency.ErrInvalidRequest, len(req.Fingerprint), MaxFingerprintLen)
	}
	res, _, err := s.claimCommitted(ctx, req, 0, false)
	if err != nil {
		return idempotency.ClaimResult{}, fmt.Errorf("sqlstore: claim: %w", err)
	}
	return res, nil
}

// claim applies the state machine to the record of req, which has a row,
// in tx: it locks the row, reads the database clock (after the lock, so
// that a wait for the lock does not shorten the lease), decides and writes
// the row back. found is false when the row has gone (a Purge deleted it
// since an insert found it): nothing was written then.
//
// On SQLite tx must have begun with a write (it holds the write lock).
// It returns the record as written.
func (s *Store) claim(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest) (idempotency.ClaimResult, row, bool, error) {
	token := newToken()
	r, now, found, err := s.lockRow(ctx, tx, req.Namespace, req.Key)
	if err != nil || !found {
		return idempotency.ClaimResult{}, row{}, false, err
	}
	res, err := s.decide(ctx, tx, req, token, &r, now)
	return res, r, true, err
}

// decide is claim's state machine on the locked record r.
func (s *Store) decide(ctx context.Context, tx *sql.Tx, req idempotency.ClaimRequest, token string, rp *row, now int64) (idempotency.ClaimResult, error) {
	r := *rp
	defer func() { *rp = r }()

	prev := idempotency.Previous{}
	if r.expiresAt <= now {
		// No record: our own placeholder, or a record past its retention,
		// which is forgotten (overwritten here). A replayed message that
		// creates the record spends its run's reopen on it.
		r = row{fingerprint: req.Fingerprint, reopenedBy: req.Reopen}
	} else {
		// A different payload under the same key is a conflict whatever the state.
		if r.fingerprint != req.Fingerprint {
			return idempotency.ClaimResult{Status: idempotency.Conflict, StoredFingerprint: r.fingerprint}, nil
		}
		n := len(r.history)
		switch idempotency.State(r.state) {
		case idempotency.StateDone:
			o, err := decodeOutcome(r.outcome)
			if err != nil {
				return idempotency.ClaimResult{}, err
			}
			return idempotency.ClaimResult{Status: idempotency.Completed, Outcome: o}, nil
		case idempotency.StateExhausted:
			if !reopens(req, r) {
				return exhausted(r), nil
			}
			prev = previousOf(r.history)
		case idempotency.StateInProgress:
			if now < r.leaseUntil {
				return waiting(r.leaseUntil, now), nil
			}
			// The owner's lease expired without Complete or Release: it died
			// or hung, so its effect may or may not have happened.
			if n > 0 && r.history[n-1].Result == idempotency.ResultInProgress {
				r.history[n-1].Result = idempotency.ResultUnknown
				r.history[n-1].Ended = r.leaseUntil
			}
			prev = idempotency.Previous{Result: idempotency.PreviousUnknown}
		case idempotency.StateFailed:
			if now < r.notBefore {
				// The last attempt asked for a delay: not charged.
				return waiting(r.notBefore, now), nil
			}
			prev = previousOf(r.history)
		}
		if reopens(req, r) {
			// A replay run gives the record a fresh budget, once per run.
			r.reopenedBy = req.Reopen
			r.budgetBase = r.attempts - r.canceled
		}
	}
	if r.attempts-r.canceled-r.budgetBase >= req.MaxAttempts {
		r.state = string(idempotency.StateExhausted)
		r.leaseUntil, r.notBefore = 0, 0
		r.expiresAt = now + ms(s.retention)
		r.updatedAt = now
		if err := s.save(ctx, tx, req.Namespace, req.Key, r); err != nil {
			return idempotency.ClaimResult{}, err
		}
		return exhausted(r), nil
	}

	r.attempts++
	r.state = string(idempotency.StateInProgress)
	r.token = token
	r.notBefore = 0
	r.leaseUntil = now + ms(req.Lease)
	// Never forgotten while leased; an owner that dies leaves a failure of
	// unknown outcome, forgotten a retention after its lease expires.
	r.expiresAt = r.leaseUntil + ms(s.retention)
	r.updatedAt = now
	r.outcome = nil
	r.history = append(r.history, histEntry{
		Attempt: r.attempts, Started: now, Result: idempotency.ResultInProgress,
		TraceID: req.TraceID, SpanID: req.SpanID,
	})
	if n := len(r.history); n > idempotency.MaxHistory {
		r.history = r.history[n-idempotency.MaxHistory:]
	}
	if err := s.save(ctx, tx, req.Namespace, req.Key, r); err != nil {
		return idempotency.ClaimResult{}, err
	}
	return idempotency.ClaimResult{
		Status: idempotency.Acquired,
		Lease: idempotency.Lease{
			Namespace: req.Namespace, Key: req.Key, Token: token,
			Attempt: r.attempts, Until: fromMs(r.leaseUntil),
		},
		Previous: prev,
	}, nil
}

// reopens reports whether req reopens r: a replay ID that has not reopened
// it yet, on a FAILED or EXHAUSTED record. The state of an expired lease
// is still in_progress here: it has just been found to be a failure.
func reopens(req idempotency.ClaimRequest, r row) bool {
	return req.Reopen != "" && req.Reopen != r.reopenedBy && r.state != string(idempotency.StateDone)
}

// previousOf tells how the last attempt of a FAILED or EXHAUSTED record ended.
func previousOf(h []histEntry) idempotency.Previous {
	n := len(h)
	if n == 0 {
		return idempotency.Previous{}
	}
	switch last := h[n-1]; last.Result {
	case idempotency.ResultCanceled:
		return idempotency.Previous{Result: idempotency.PreviousCanceled}
	case idempotency.ResultUnknown:
		return idempotency.Previous{Result: idempotency.PreviousUnknown}
	default:
		return idempotency.Previous{Result: idempotency.PreviousFailed, Error: last.Error}
	}
}

// waiting is the InProgress result of a claim at now refused until until
// (a live lease or a retry-after delay), with the wait measured here.
func waiting(until, now int64) idempotency.ClaimResult {
	return idempotency.ClaimResult{Status: idempotency.InProgress, Until: fromMs(until), Wait: time.Duration(until-now) * time.Millisecond}
}

func exhausted(r row) idempotency.ClaimResult {
	return idempotency.ClaimResult{Status: idempotency.Exhausted, Attempts: r.attempts, History: toAttempts(r.history)}
}

func toAttempts(hs []histEntry) []idempotency.AttemptRecord {
	if len(hs) == 0 {
		return nil
	}
	out := make([]idempotency.AttemptRecord, len(hs))
	for i, h := range hs {
		out[i] = idempotency.AttemptRecord{
			Attempt: h.Attempt,
			Started: fromMs(h.Started),
			Ended:   fromMs(h.Ended),
			Result:  h.Result,
			Error:   h.Error,
			Type:    h.Type,
			Reason:  h.Reason,
			Stack:   h.Stack,
			TraceID: h.TraceID,
			SpanID:  h.SpanID,
		}
	}
	return out
}

func decodeOutcome(b []byte) (*idempotency.Outcome, error) {
	o := &idempotency.Outcome{}
	if len(b) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(b, o); err != nil {
		return nil, fmt.Errorf("decode outcome: %w", err)
	}
	return o, nil
}

// owns reports whether lease can name a record: an empty token, or a
// namespace or key that Claim would refuse, never matches one.
func owns(lease idempotency.Lease) bool {
	return lease.Token != "" && idempotency.ValidateNamespace(lease.Namespace) == nil &&
		idempotency.ValidateKey(lease.Key) == nil
}

// Complete implements idempotency.Store with one statement, committed on
// its own: an UPDATE fenced on the lease (this token, in progress, not
// past its retention) that reads the database clock itself.
//
// A Complete after the lease expired still succeeds while nobody else has
// claimed the key (the token is still current): the effect did commit.
//
// A Complete re-sent with the lease that completed the record (its commit
// went through but the reply was lost) succeeds and changes nothing; telling
// it apart from a lost lease costs one more statement, only then.
func (s *Store) Complete(ctx context.Context, lease idempotency.Lease, outcome idempotency.Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !owns(lease) {
		return idempotency.ErrLeaseLost
	}
	out, err := json.Marshal(outcome)
	if err != nil {
		return fmt.Errorf("sqlstore: encode outcome: %w", err)
	}
	s.prepare(ctx, s.fq.complete.sql)
	ok, err := s.completeIn(ctx, nil, lease, out)
	if err != nil {
		return fmt.Errorf("sqlstore: complete: %w", err)
	}
	if ok {
		return nil
	}
	// A DONE record never changes again: no race with this read.
	rec, gerr := s.Get(ctx, lease.Namespace, lease.Key)
	switch {
	case gerr == nil && rec.State == idempotency.StateDone && rec.Token == lease.Token:
		return nil
	case gerr != nil && !errors.Is(gerr, idempotency.ErrNotFound):
		return lostOr("complete", gerr)
	}
	return idempotency.ErrLeaseLost
}

// lostOr returns ErrLeaseLost as it is and wraps any other error.
func lostOr(op string, err error) error {
	if err == nil || errors.Is(err, idempotency.ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("sqlstore: %s: %w", op, err)
}

// Release implements idempotency.Store with one fenced statement, as
// Complete.
func (s *Store) Release(ctx context.Context, lease idempotency.Lease, f idempotency.Failure) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !owns(lease) {
		return idempotency.ErrLeaseLost
	}
	state, result, canceled, delay := idempotency.StateFailed, idempotency.ResultFailed, 0, int64(0)
	switch {
	case f.Canceled:
		// Interrupted by shutdown: not charged to the budget, Final ignored.
		canceled, result = 1, idempotency.ResultCanceled
	case f.Final:
		state = idempotency.StateExhausted
	case f.RetryAfter > 0:
		delay = ms(f.RetryAfter)
	}
	c0, c1, err := closePieces(closedAttempt{
		Result: result,
		Error:  idempotency.Truncate(f.Error, idempotency.MaxErrorLen),
		Type:   f.ErrorType, Reason: f.Reason,
		Stack: idempotency.Truncate(f.Stack, idempotency.MaxStackLen),
	})
	if err != nil {
		return fmt.Errorf("sqlstore: release: %w", err)
	}
	s.prepare(ctx, s.fq.release.sql)
	ok, err := s.fenced(ctx, nil, s.fq.release, map[string]any{
		"state": string(state), "canceled": canceled, "delay": delay, "retention": ms(s.retention),
		"c0": c0, "c1": c1, "ns": lease.Namespace, "key": lease.Key, "token": lease.Token,
	})
	if err != nil {
		return fmt.Errorf("sqlstore: release: %w", err)
	}
	if !ok {
		return idempotency.ErrLeaseLost
	}
	return nil
}

// Extend implements idempotency.Store with one fenced statement, as
// Complete (on MySQL, and a read of the new expiry).
func (s *Store) Extend(ctx context.Context, lease idempotency.Lease, d time.Duration) (idempotency.Lease, error) {
	if err := ctx.Err(); err != nil {
		return lease, err
	}
	if d <= 0 {
		return lease, fmt.Errorf("%w: extension must be positive, got %v", idempotency.ErrInvalidRequest, d)
	}
	if !owns(lease) {
		return lease, idempotency.ErrLeaseLost
	}
	s.prepare(ctx, s.fq.extend.sql, s.fq.extendCheck.sql)
	until, ok, err := s.extendLease(ctx, lease, d)
	if err != nil {
		return lease, fmt.Errorf("sqlstore: extend: %w", err)
	}
	if !ok {
		return lease, idempotency.ErrLeaseLost
	}
	lease.Until = fromMs(until)
	return lease, nil
}

// Get implements idempotency.Store with one statement (no transaction).
// ExpiresAt is when the record's retention ends (it reads as absent from
// then on, until Purge deletes it).
func (s *Store) Get(ctx context.Context, namespace, key string) (idempotency.Record, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.Record{}, err
	}
	if idempotency.ValidateNamespace(namespace) != nil || idempotency.ValidateKey(key) != nil {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	s.prepare(ctx, s.q.getRow)
	var now int64
	r, err := scanRow(s.queryRow(ctx, nil, s.q.getRow, namespace, key), &now)
	if errors.Is(err, sql.ErrNoRows) {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	if err != nil {
		return idempotency.Record{}, fmt.Errorf("sqlstore: get: %w", err)
	}
	if r.expiresAt <= now+s.skew.Load() {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	rec := idempotency.Record{
		Namespace:   namespace,
		Key:         key,
		State:       idempotency.State(r.state),
		Fingerprint: r.fingerprint,
		Token:       r.token,
		Attempts:    r.attempts,
		Canceled:    r.canceled,
		LeaseUntil:  fromMs(r.leaseUntil),
		History:     toAttempts(r.history),
		ExpiresAt:   fromMs(r.expiresAt),
		ReopenedBy:  r.reopenedBy,
		BudgetBase:  r.budgetBase,
		NotBefore:   fromMs(r.notBefore),
	}
	if rec.State == idempotency.StateDone {
		if rec.Outcome, err = decodeOutcome(r.outcome); err != nil {
			return idempotency.Record{}, fmt.Errorf("sqlstore: get: %w", err)
		}
	}
	return rec, nil
}

// Retention is how long DONE, FAILED and EXHAUSTED records are kept
// (idempotency.RetentionReporter).
func (s *Store) Retention() time.Duration { return s.retention }
