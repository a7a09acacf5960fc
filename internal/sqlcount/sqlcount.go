// Package sqlcount counts what a database/sql client sends: transactions,
// statements and network round trips. It wraps a driver.Connector (calls
// into the driver) and, for drivers that accept a dial function, the
// connections' net.Conn (round trips), and changes nothing of what goes
// through. It is test-only: the benchmarks of package bench use it to
// report statements and commits per message.
//
// Counted at the driver:
//
//   - Begins, Commits, Rollbacks: driver.Tx calls (a BEGIN, COMMIT or
//     ROLLBACK sent by the driver; database/sql's Rollback after a Commit
//     never reaches the driver and is not counted).
//   - Execs, Queries: statements executed, on the connection or on a
//     prepared statement. A connection-level Exec or Query that the driver
//     declines (driver.ErrSkip, e.g. go-sql-driver/mysql without
//     interpolateParams) is not counted: database/sql then prepares the
//     statement and executes it, and that execution is.
//   - Prepares: statements prepared.
//   - Autocommits: Execs and Queries run outside a transaction, each of
//     which the database commits on its own.
//
// Counted on the network (Dial): RoundTrips, the number of times a
// connection reads after having written, i.e. the client waited for the
// server's answer to what it had sent.
package sqlcount

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"sync/atomic"
)

// Counts is a snapshot of a Counter.
type Counts struct {
	Begins, Commits, Rollbacks int64
	Execs, Queries, Prepares   int64
	Autocommits                int64
	RoundTrips                 int64
}

// Sub returns c minus o, field by field: what happened between two
// snapshots.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		Begins: c.Begins - o.Begins, Commits: c.Commits - o.Commits, Rollbacks: c.Rollbacks - o.Rollbacks,
		Execs: c.Execs - o.Execs, Queries: c.Queries - o.Queries, Prepares: c.Prepares - o.Prepares,
		Autocommits: c.Autocommits - o.Autocommits, RoundTrips: c.RoundTrips - o.RoundTrips,
	}
}

// Statements is the number of statements sent: BEGIN, COMMIT and ROLLBACK
// included, prepares excluded.
func (c Counts) Statements() int64 {
	return c.Begins + c.Commits + c.Rollbacks + c.Execs + c.Queries
}

// Transactions is the number of commits the database made: explicit
// COMMITs plus autocommitted statements.
func (c Counts) Transactions() int64 { return c.Commits + c.Autocommits }

// Counter counts the calls of every connection opened through its
// Connector and Dial. The zero value is ready to use; it is safe for
// concurrent use.
type Counter struct {
	begins, commits, rollbacks atomic.Int64
	execs, queries, prepares   atomic.Int64
	autocommits, roundTrips    atomic.Int64
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() Counts {
	return Counts{
		Begins: c.begins.Load(), Commits: c.commits.Load(), Rollbacks: c.rollbacks.Load(),
		Execs: c.execs.Load(), Queries: c.queries.Load(), Prepares: c.prepares.Load(),
		Autocommits: c.autocommits.Load(), RoundTrips: c.roundTrips.Load(),
	}
}

// DialFunc is the dial function of pgx (pgconn.Config.DialFunc) and of
// go-sql-driver/mysql (Config.DialFunc).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial wraps dial (a net.Dialer's DialContext when nil) so that the
// connections it makes count round trips.
func (c *Counter) Dial(dial DialFunc) DialFunc {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &netConn{Conn: nc, c: c}, nil
	}
}

type netConn struct {
	net.Conn
	c     *Counter
	wrote atomic.Bool
}

func (n *netConn) Write(p []byte) (int, error) {
	n.wrote.Store(true)
	return n.Conn.Write(p)
}

func (n *netConn) Read(p []byte) (int, error) {
	if n.wrote.Swap(false) {
		n.c.roundTrips.Add(1)
	}
	return n.Conn.Read(p)
}

// Connector wraps a driver.Connector so that its connections count their
// calls.
func (c *Counter) Connector(inner driver.Connector) driver.Connector {
	return &connector{inner: inner, c: c}
}

// DriverConnector is a driver.Connector for a driver and a data source
// name, as sql.Open makes one: through driver.DriverContext when the driver
// has it.
func DriverConnector(d driver.Driver, dsn string) (driver.Connector, error) {
	if dc, ok := d.(driver.DriverContext); ok {
		return dc.OpenConnector(dsn)
	}
	return dsnConnector{d: d, dsn: dsn}, nil
}

type dsnConnector struct {
	d   driver.Driver
	dsn string
}

func (d dsnConnector) Connect(context.Context) (driver.Conn, error) { return d.d.Open(d.dsn) }
func (d dsnConnector) Driver() driver.Driver                        { return d.d }

type connector struct {
	inner driver.Connector
	c     *Counter
}

func (k *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := k.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{inner: dc, c: k.c}, nil
}

func (k *connector) Driver() driver.Driver { return k.inner.Driver() }

// conn is used by one goroutine at a time (database/sql's contract), so
// inTx needs no lock.
type conn struct {
	inner driver.Conn
	c     *Counter
	inTx  bool
}

var (
	_ driver.Conn               = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

func (k *conn) Close() error { return k.inner.Close() }

func (k *conn) Prepare(query string) (driver.Stmt, error) {
	return k.PrepareContext(context.Background(), query)
}

func (k *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var (
		s   driver.Stmt
		err error
	)
	if p, ok := k.inner.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, query)
	} else {
		s, err = k.inner.Prepare(query)
	}
	if err != nil {
		return nil, err
	}
	k.c.prepares.Add(1)
	return &stmt{inner: s, conn: k}, nil
}

func (k *conn) Begin() (driver.Tx, error) {
	return k.BeginTx(context.Background(), driver.TxOptions{})
}

func (k *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		dtx driver.Tx
		err error
	)
	if b, ok := k.inner.(driver.ConnBeginTx); ok {
		dtx, err = b.BeginTx(ctx, opts)
	} else {
		//nolint:staticcheck // the fallback database/sql itself uses for drivers without BeginTx
		dtx, err = k.inner.Begin()
	}
	k.c.begins.Add(1)
	if err != nil {
		return nil, err
	}
	k.inTx = true
	return &tx{inner: dtx, conn: k}, nil
}

// statement counts one executed statement.
func (k *conn) statement(n *atomic.Int64) {
	n.Add(1)
	if !k.inTx {
		k.c.autocommits.Add(1)
	}
}

func (k *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := k.inner.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := e.ExecContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		k.statement(&k.c.execs)
	}
	return r, err
}

func (k *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := k.inner.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	r, err := q.QueryContext(ctx, query, args)
	if !errors.Is(err, driver.ErrSkip) {
		k.statement(&k.c.queries)
	}
	return r, err
}

func (k *conn) Ping(ctx context.Context) error {
	if p, ok := k.inner.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (k *conn) ResetSession(ctx context.Context) error {
	if r, ok := k.inner.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (k *conn) IsValid() bool {
	if v, ok := k.inner.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (k *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := k.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type tx struct {
	inner driver.Tx
	conn  *conn
}

func (t *tx) Commit() error {
	t.conn.inTx = false
	t.conn.c.commits.Add(1)
	return t.inner.Commit()
}

func (t *tx) Rollback() error {
	t.conn.inTx = false
	t.conn.c.rollbacks.Add(1)
	return t.inner.Rollback()
}

type stmt struct {
	inner driver.Stmt
	conn  *conn
}

var (
	_ driver.StmtExecContext   = (*stmt)(nil)
	_ driver.StmtQueryContext  = (*stmt)(nil)
	_ driver.NamedValueChecker = (*stmt)(nil)
)

func (s *stmt) Close() error  { return s.inner.Close() }
func (s *stmt) NumInput() int { return s.inner.NumInput() }

func (s *stmt) Exec(args []driver.Value) (driver.Result, error) {
	s.conn.statement(&s.conn.c.execs)
	//nolint:staticcheck // forwarding the deprecated call database/sql made
	return s.inner.Exec(args)
}

func (s *stmt) Query(args []driver.Value) (driver.Rows, error) {
	s.conn.statement(&s.conn.c.queries)
	//nolint:staticcheck // forwarding the deprecated call database/sql made
	return s.inner.Query(args)
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	e, ok := s.inner.(driver.StmtExecContext)
	if !ok {
		return s.Exec(values(args))
	}
	s.conn.statement(&s.conn.c.execs)
	return e.ExecContext(ctx, args)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.inner.(driver.StmtQueryContext)
	if !ok {
		return s.Query(values(args))
	}
	s.conn.statement(&s.conn.c.queries)
	return q.QueryContext(ctx, args)
}

func (s *stmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.inner.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return s.conn.CheckNamedValue(nv)
}

func values(args []driver.NamedValue) []driver.Value {
	v := make([]driver.Value, len(args))
	for i, a := range args {
		v[i] = a.Value
	}
	return v
}
