package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

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

// runner is what runs a statement: the store's *sql.DB, a transaction,
// or a prepared statement (preparedStmt).
type runner interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// preparedStmt runs its statement, whatever the query text it is given.
type preparedStmt struct{ st *sql.Stmt }

func (p preparedStmt) ExecContext(ctx context.Context, _ string, args ...any) (sql.Result, error) {
	return p.st.ExecContext(ctx, args...)
}

func (p preparedStmt) QueryRowContext(ctx context.Context, _ string, args ...any) *sql.Row {
	return p.st.QueryRowContext(ctx, args...)
}

// on returns what runs query: in tx, or on its own when tx is nil,
// prepared when the store's statements are.
func (s *Store) on(ctx context.Context, tx *sql.Tx, query string) runner {
	st := s.stmt(query)
	switch {
	case tx == nil && st != nil:
		return preparedStmt{st}
	case tx == nil:
		return s.db
	case st != nil:
		return preparedStmt{tx.StmtContext(ctx, st)}
	default:
		return tx
	}
}

// exec runs query in tx, or on its own when tx is nil (see on).
func (s *Store) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	return s.on(ctx, tx, query).ExecContext(ctx, query, args...)
}

// queryRow reads one row like exec runs a statement.
func (s *Store) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) *sql.Row {
	return s.on(ctx, tx, query).QueryRowContext(ctx, query, args...)
}

func (s *Store) stmt(query string) *sql.Stmt {
	m := s.prep.stmts.Load()
	if m == nil {
		return nil
	}
	return (*m)[query]
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
