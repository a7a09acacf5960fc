package sqlstore

import (
	"database/sql"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/surely-dev/surely/idempotency"
	"github.com/surely-dev/surely/internal/defaults"
	"github.com/surely-dev/surely/internal/options"
)

// defaultTable is the table of the records unless WithTable names
// another; the schema files are written for it.
const defaultTable = "surely_inbox"

// maxFingerprintLen is the longest payload fingerprint a Claim accepts, in
// bytes (the MySQL column is VARBINARY(255)). The fingerprints surely
// computes are 64 hex digits (SHA-256).
const maxFingerprintLen = 255

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

// WithTable sets the table of the records (default "surely_inbox"). The name
// must match [a-z_][a-z0-9_]{0,47}: lower case, so that it means the same
// quoted and unquoted in every dialect, and short enough for its index names
// (name + "_created_idx", name + "_expires_idx") to fit every dialect's
// identifier limit. It is
// quoted in every statement. To use another PostgreSQL schema, set the
// connection's search_path.
func WithTable(name string) idempotency.Option {
	return options.Func[options.Idempotency](func(s *options.Set) error {
		if !tableRE.MatchString(name) {
			return fmt.Errorf("%w: sqlstore: table name %q must match [a-z_][a-z0-9_]{0,47}", idempotency.ErrInvalidOption, name)
		}
		s.Put(optTable, name)
		return nil
	})
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
	return options.Func[options.Idempotency](func(s *options.Set) error {
		s.Put(optInTxClaims, true)
		return nil
	})
}

// New returns a store on db, a database of the given dialect. It neither
// connects nor touches the schema: call Migrate (or apply the schema files)
// before the first claim.
//
// Options: WithTable, WithInTxClaims, and of the common ones
// idempotency.WithRetention (default 24h, at least 1ms; an
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
		table:      options.Get(set, optTable, defaultTable),
		retention:  options.Get(set, options.Retention, defaults.Retention),
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

// Retention is how long DONE, FAILED and EXHAUSTED records are kept
// (idempotency.RetentionReporter).
func (s *Store) Retention() time.Duration { return s.retention }
